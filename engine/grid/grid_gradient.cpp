// GridGradient: the euler grid recurrence of reference_scan.cpp with forward sensitivities.
//
// Numeric contract: the state x follows scan_subject's loop exactly (detail::affine_step on the
// same K and breakpoint inputs; this file is compiled with -ffp-contract=off like the scan), so
// concentrations equal simulate(Method::Scan)'s bit for bit. Sensitivities s_j = dx/dp_j:
// s_j,i = K s_j,i-1 + dt E_j x_{i-1} with E_j = dA/dp_j (detail::add_rate_derivatives), s_j,0 =
// 0 (boluses and infusion rates do not depend on the parameters on a grid).
#include <algorithm>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/grid_gradient.hpp>
#include <pkscan/models/model.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/rate_structure.hpp"
#include "core/validate.hpp"
#include "grid/schedule.hpp"
#include "grid/transition.hpp"
#include "kernels/grid.hpp"

namespace pkscan {

namespace {

// What a GridGradient holds (immutable after construction).
struct GridPlan {
  std::shared_ptr<const ModelInfo> model;  // shared: keeps a linear model alive
  int n = 0;
  int np = 0;
  double dt = 0.0;
  detail::Schedule schedule;
  std::vector<std::int64_t> out_steps;
  detail::RateStructure rates;
};

constexpr const char* kWhere = "GridGradient";

template <int N>
void evaluate_n(const GridPlan& im, const double* p, double* conc, double* jac) {
  const ModelInfo& m = *im.model;
  const int np = im.np;
  const double dt = im.dt;
  detail::Mat<N> a;
  rate_matrix(m, p, a.data());
  for (int r = 0; r < N; ++r)
    if (1.0 + a(r, r) * dt < 0.0)
      throw DomainError(std::string(kWhere) + ": euler transition K[" +
                        m.compartments[static_cast<std::size_t>(r)] + "][" +
                        m.compartments[static_cast<std::size_t>(r)] +
                        "] = 1 + A*dt is negative (dt is too long for the rates)");
  const detail::Schedule& s = im.schedule;
  detail::Transition<N> tr;
  detail::build_transition<N>(a, dt, Discretization::Euler, s.partial_lengths, tr);
  const std::size_t nbp = static_cast<std::size_t>(s.breakpoints());
  std::vector<double> c(nbp * N), f(nbp * N);
  detail::subject_inputs<N, double>(s, tr, c.data(), f.data());
  const double* k = tr.k.data();

  // Directions: the columns A depends on at this row, with dt * dA/dp (the step's dK/dp).
  std::vector<int> cols;
  std::vector<double> dk;  // per direction N * N
  if (jac != nullptr) {
    std::vector<double> da(static_cast<std::size_t>(np) * N * N, 0.0);
    detail::add_rate_derivatives(im.rates, N, p, da.data());
    for (int j = 0; j < np; ++j) {
      const double* d = da.data() + static_cast<std::size_t>(j) * N * N;
      bool any = false;
      for (int i = 0; i < N * N; ++i) any = any || d[i] != 0.0;
      if (!any) continue;
      cols.push_back(j);
      for (int i = 0; i < N * N; ++i) dk.push_back(d[i] * dt);
    }
  }
  const std::size_t nd = cols.size();
  std::vector<double> sens(nd * N, 0.0), next_sens(nd * N);

  double x[N];
  double y[N];
  for (int r = 0; r < N; ++r) x[r] = s.initial[static_cast<std::size_t>(r)];
  double vol[N];
  int vol_col[N];
  for (int r = 0; r < N; ++r) {
    vol_col[r] = m.volume_parameter[static_cast<std::size_t>(r)];
    vol[r] = p[vol_col[r]];
  }
  auto write = [&](std::size_t t) {
    for (int r = 0; r < N; ++r) conc[t * N + static_cast<std::size_t>(r)] = x[r] / vol[r];
    if (jac == nullptr) return;
    for (int r = 0; r < N; ++r) {
      double* row = jac + (t * N + static_cast<std::size_t>(r)) * static_cast<std::size_t>(np);
      for (int j = 0; j < np; ++j) row[j] = 0.0;
      for (std::size_t d = 0; d < nd; ++d)
        row[cols[d]] = sens[d * N + static_cast<std::size_t>(r)] / vol[r];
      row[vol_col[r]] -= x[r] / (vol[r] * vol[r]);
    }
  };
  // One step: sensitivities from the state before it, then the state (scan_subject's order).
  auto step = [&](const double* b) {
    for (std::size_t d = 0; d < nd; ++d) {
      const double* sd = &sens[d * N];
      const double* e = &dk[d * N * N];
      for (int r = 0; r < N; ++r) {
        double acc = 0.0;
        for (int j = 0; j < N; ++j) acc += k[r * N + j] * sd[j] + e[r * N + j] * x[j];
        next_sens[d * N + static_cast<std::size_t>(r)] = acc;
      }
    }
    sens.swap(next_sens);
    detail::affine_step<N, double>(k, x, b, y);
    for (int r = 0; r < N; ++r) x[r] = y[r];
  };

  const std::vector<std::int64_t>& out = im.out_steps;
  const std::size_t n_out = out.size();
  std::size_t next = 0;
  if (n_out == 0) return;
  const std::int64_t last = out.back();
  if (out[0] == 0) write(next++);
  for (std::int64_t bp = 0; bp < s.breakpoints() && next < n_out; ++bp) {
    const std::int64_t first = s.bp_step[static_cast<std::size_t>(bp)];
    const std::int64_t end = std::min(s.bp_last(bp), last);
    for (std::int64_t i = first; i <= end; ++i) {
      step(i == first ? f.data() + bp * N : c.data() + bp * N);
      if (i == out[next]) write(next++);
    }
  }
}

}  // namespace

struct GridGradient::Impl : GridPlan {};

GridGradient::GridGradient(const Problem& problem) : impl_(std::make_unique<Impl>()) {
  if (problem.discretization != Discretization::Euler)
    throw InvalidArgument(std::string(kWhere) +
                          ": discretization must be euler (for exact, use a Predictor on a "
                          "dataset with the same doses)");
  detail::validate_problem(problem, false);
  Impl& im = *impl_;
  im.model = problem.parameters.info_ptr();
  im.n = static_cast<int>(im.model->compartments.size());
  if (im.n < 1 || im.n > 6)
    throw InvalidArgument(std::string(kWhere) + ": models with " + std::to_string(im.n) +
                          " compartments are not compiled in");
  im.np = static_cast<int>(im.model->parameters.size());
  im.dt = problem.grid.dt;
  im.schedule = detail::compile_schedule(problem.doses, problem.grid, im.n);
  im.out_steps = detail::output_steps(problem.output, problem.grid);
  im.rates = detail::analyse_rates(*im.model);
}

GridGradient::~GridGradient() = default;
GridGradient::GridGradient(GridGradient&&) noexcept = default;
GridGradient& GridGradient::operator=(GridGradient&&) noexcept = default;

int GridGradient::compartments() const noexcept { return impl_->n; }
int GridGradient::parameters() const noexcept { return impl_->np; }
const std::vector<std::int64_t>& GridGradient::output_steps() const noexcept {
  return impl_->out_steps;
}

void GridGradient::evaluate(const double* params, double* conc, double* jac) const {
  if (params == nullptr || conc == nullptr)
    throw InvalidArgument(std::string(kWhere) + "::evaluate: params and conc must not be null");
  const ModelInfo& m = *impl_->model;
  const std::string msg = check_parameters(m, params);
  if (!msg.empty()) throw DomainError(std::string(kWhere) + ": " + msg);
  if (!default_bioavailability_and_lag(m, params))
    throw DomainError(std::string(kWhere) +
                      ": bioavailability and lag must be 1 and 0 on a time grid (every subject "
                      "gets the same doses there)");
  switch (impl_->n) {
    case 1:
      return evaluate_n<1>(*impl_, params, conc, jac);
    case 2:
      return evaluate_n<2>(*impl_, params, conc, jac);
    case 3:
      return evaluate_n<3>(*impl_, params, conc, jac);
    case 4:
      return evaluate_n<4>(*impl_, params, conc, jac);
    case 5:
      return evaluate_n<5>(*impl_, params, conc, jac);
    default:
      return evaluate_n<6>(*impl_, params, conc, jac);
  }
}

}  // namespace pkscan
