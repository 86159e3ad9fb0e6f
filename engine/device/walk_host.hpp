#pragma once
// The host's side of the event walk (walk_job.hpp), shared by the Predictor on the device
// (device_events.cpp: every subject's plan uploaded once) and simulate_dataset on the device
// (device_dataset.cpp: chunks of subjects, their plans built per call): the plans as the walk's
// plain arrays, and the parameter rows with their eigendecompositions (the CPU's Propagator).
// Host code only.
#include <Eigen/Dense>
#include <algorithm>
#include <cstdint>
#include <memory>
#include <pkscan/error.hpp>
#include <string>
#include <vector>

#include "core/rate_structure.hpp"
#include "device/device.hpp"
#include "device/runtime.hpp"
#include "device/walk_job.hpp"
#include "events/event_list.hpp"
#include "events/plan.hpp"

namespace pkscan::detail {

// The device 'cuda' runtime, or BackendUnavailable ("<who>: device 'cuda' is not available: ...").
inline std::unique_ptr<device::Runtime> walk_runtime(const std::string& who) {
  std::unique_ptr<device::Runtime> rt = make_device_runtime();
  std::string why = "this build of pkscan has no CUDA support";
  if (!rt || rt->device_count(&why) <= 0)
    throw BackendUnavailable(who + ": device 'cuda' is not available: " + why);
  return rt;
}

// The model's columns the walk reads.
inline device::WalkModel walk_model(const DatasetSetup& setup) {
  const ModelInfo& m = *setup.model;
  device::WalkModel wm;
  wm.np = setup.np;
  for (int c = 0; c < setup.n; ++c) {
    wm.f_col[c] = m.f_parameter[static_cast<std::size_t>(c)];
    wm.lag_col[c] = m.lag_parameter[static_cast<std::size_t>(c)];
    wm.vol_col[c] = m.volume_parameter[static_cast<std::size_t>(c)];
  }
  return wm;
}

// Subjects' plans as the walk's arrays, appended one subject after another; offsets are relative
// to these arrays (a caller that uploads several after one another adds their bases).
struct WalkArrays {
  std::vector<device::WalkSubject> subjects;
  std::vector<device::WalkRecord> records;
  std::vector<std::uint64_t> overridden;  // per parameter row: bit c: from the dataset
  std::vector<std::int64_t> first_row;    // per subject: its first parameter row
  std::int64_t scratch = 0;               // events of the walk's scratch

  void clear() {
    subjects.clear();
    records.clear();
    overridden.clear();
    first_row.clear();
    scratch = 0;
  }
  std::int64_t rows() const { return static_cast<std::int64_t>(overridden.size()); }

  // A subject with plan `plan` (build_plan's or build_records'), its observations written from
  // `out` on.
  void append(const SubjectPlan& plan, std::int64_t out) {
    device::WalkSubject w;
    w.events = plan.event_count;
    w.records = static_cast<std::int64_t>(records.size());
    w.record_count = static_cast<std::int64_t>(plan.records.size());
    w.scratch = scratch;
    w.out = out;
    w.infusion_ids = plan.infusion_ids;
    w.last_obs = plan.last_obs;
    subjects.push_back(w);
    scratch += plan.event_count + static_cast<std::int64_t>(plan.lag_boundaries);
    records.insert(records.end(), plan.records.begin(), plan.records.end());
    first_row.push_back(rows());
    for (const RowTemplate& r : plan.rows) overridden.push_back(r.overridden);
  }
};

// E~_k = V^-1 dA/dp_k V of one row (values pr, dataset columns `overridden`) for the directions
// k < pa that move A (Solver::setup_row: 0 for a column the row takes from the dataset),
// column-major, at `out`. dirs: pa, ps, p, then the p columns.
template <int N>
void walk_eigen_directions(const DatasetSetup& setup, const double* pr, std::uint64_t overridden,
                           const std::int32_t* dirs, const Propagator<N>& prop, double* out) {
  using Square = Eigen::Matrix<double, N, N>;
  Mat<N> da[kMaxColumns];  // dA/dp_c of every column, back to back
  static_assert(sizeof(Mat<N>) == sizeof(double) * N * N, "add_rate_derivatives' layout");
  for (int c = 0; c < setup.np; ++c) da[c].setZero();
  add_rate_derivatives(setup.rates, N, pr, da[0].data());
  for (int k = 0; k < dirs[0]; ++k) {
    const int c = dirs[3 + k];
    if ((overridden >> c) & 1u) da[c].setZero();
    const Square et = prop.vinv() * (da[c] * prop.v());
    std::copy(et.data(), et.data() + N * N, out + k * N * N);
  }
}

// The parameter rows of subject s in walk_job.hpp's layout at `out` (`stride` doubles each;
// with `dirs`, also the E~_k of its directions), checked as the CPU checks them
// (DatasetSetup::fill_rows into `values`); false when a row has no fast eigendecomposition.
// @throws DomainError naming the first record of an invalid row
template <int N>
bool fill_walk_rows(const DatasetSetup& setup, const SubjectPlan& plan, std::int64_t s,
                    const double* params, std::vector<double>& values, Propagator<N>& prop,
                    std::int64_t stride, const std::int32_t* dirs, double* out) {
  setup.fill_rows(plan, s, params, values);
  const std::size_t np = static_cast<std::size_t>(setup.np);
  Mat<N> a;
  for (std::size_t r = 0; r < plan.rows.size(); ++r) {
    const double* row = values.data() + r * np;
    rate_matrix(*setup.model, row, a.data());
    prop.reset(a);
    if (!prop.fast()) return false;
    double* o = out + static_cast<std::int64_t>(r) * stride;
    std::copy(row, row + np, o);
    double* e = o + np;
    std::copy(a.data(), a.data() + N * N, e);
    std::copy(prop.v().data(), prop.v().data() + N * N, e + N * N);
    std::copy(prop.vinv().data(), prop.vinv().data() + N * N, e + 2 * N * N);
    std::copy(prop.mask().data(), prop.mask().data() + N * N, e + 3 * N * N);
    std::copy(prop.lambda().data(), prop.lambda().data() + N, e + 4 * N * N);
    if (dirs != nullptr)
      walk_eigen_directions<N>(setup, row, plan.rows[r].overridden, dirs, prop,
                               o + device::row_stride(N, setup.np));
  }
  return true;
}

}  // namespace pkscan::detail
