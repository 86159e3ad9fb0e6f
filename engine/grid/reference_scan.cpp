// Reference scan: the sequential recurrence, one subject after another.
//
// Numeric contract: x_0 = doses at 0; x_i = K x_{i-1} + b_i in the scan precision, with K and b_i
// built in double and rounded once. Summation order is that of detail::affine_step. No
// reordering, no threads: deterministic and the oracle every other path is tested against.
#include <cmath>
#include <pkscan/error.hpp>
#include <vector>

#include "grid/backend.hpp"
#include "grid/reference.hpp"
#include "grid/transition.hpp"
#include "kernels/grid.hpp"

namespace pkscan::detail {

namespace {

template <int N, class Real>
void scan_subject(const Schedule& s, const Real* k, const Real* c, const Real* f, const Real* x0,
                  const std::vector<std::int64_t>& out_steps, Real* out) {
  Real x[N];
  Real y[N];
  for (int r = 0; r < N; ++r) x[r] = x0[r];
  std::size_t next = 0;
  const std::size_t n_out = out_steps.size();
  if (n_out == 0) return;
  const std::int64_t last = out_steps.back();
  if (out_steps[0] == 0) {
    for (int r = 0; r < N; ++r) out[r] = x[r];
    next = 1;
  }
  for (std::int64_t b = 0; b < s.breakpoints() && next < n_out; ++b) {
    const std::int64_t first = s.bp_step[static_cast<std::size_t>(b)];
    const std::int64_t end = std::min(s.bp_last(b), last);
    const Real* cb = c + b * N;
    const Real* fb = f + b * N;
    for (std::int64_t i = first; i <= end; ++i) {
      affine_step<N, Real>(k, x, i == first ? fb : cb, y);
      for (int r = 0; r < N; ++r) x[r] = y[r];
      if (i == out_steps[next]) {
        Real* o = out + next * N;
        for (int r = 0; r < N; ++r) o[r] = x[r];
        ++next;
      }
    }
  }
}

template <int N, class Real>
void reference_subject_n(const PreparedBatch& batch, std::int64_t subject, Real* out,
                         SubjectStatus* status) {
  const Problem& p = *batch.problem;
  Mat<N> a;
  rate_matrix(*batch.model, p.parameters.row(subject), a.data());  // row-major, as Mat<N>
  *status = reference_scan_matrix<N, Real>(a, p.grid.dt, p.discretization, batch.schedule,
                                           batch.out_steps, out);
}

class ReferenceScanBackend final : public Backend {
 public:
  Method method() const noexcept override { return Method::Scan; }
  Device device() const noexcept override { return Device::Cpu; }
  void run(const PreparedBatch& b, ResultView<double> out) override { run_all(b, out); }
  void run(const PreparedBatch& b, ResultView<float> out) override { run_all(b, out); }

 private:
  template <class Real>
  static void run_all(const PreparedBatch& b, ResultView<Real> out) {
    const std::int64_t stride = static_cast<std::int64_t>(b.out_steps.size()) * b.n;
    for (std::int64_t s = 0; s < b.subjects; ++s)
      reference_subject<Real>(b, s, out.amounts + s * stride, out.status + s);
  }
};

}  // namespace

template <int N, class Real>
SubjectStatus reference_scan_matrix(const Mat<N>& a, double dt, Discretization disc,
                                    const Schedule& s, const std::vector<std::int64_t>& out_steps,
                                    Real* out) {
  Transition<N> tr;
  build_transition<N>(a, dt, disc, s.partial_lengths, tr);
  const std::size_t nbp = static_cast<std::size_t>(s.breakpoints());
  std::vector<Real> c(nbp * N), f(nbp * N);
  subject_inputs<N, Real>(s, tr, c.data(), f.data());
  Real k[N * N], x0[N];
  subject_start<N, Real>(s.view(), view_of(tr), k, x0);
  scan_subject<N, Real>(s, k, c.data(), f.data(), x0, out_steps, out);
  return all_finite(out, static_cast<std::int64_t>(out_steps.size()) * N)
             ? SubjectStatus::Ok
             : SubjectStatus::NonFinite;
}

#define PKSCAN_INSTANTIATE_REFERENCE(N, Real)                                                  \
  template SubjectStatus reference_scan_matrix<N, Real>(const Mat<N>&, double, Discretization, \
                                                        const Schedule&,                       \
                                                        const std::vector<std::int64_t>&, Real*);
PKSCAN_INSTANTIATE_REFERENCE(1, double)
PKSCAN_INSTANTIATE_REFERENCE(1, float)
PKSCAN_INSTANTIATE_REFERENCE(5, double)
PKSCAN_INSTANTIATE_REFERENCE(5, float)
PKSCAN_INSTANTIATE_REFERENCE(6, double)
PKSCAN_INSTANTIATE_REFERENCE(6, float)
PKSCAN_INSTANTIATE_REFERENCE(2, double)
PKSCAN_INSTANTIATE_REFERENCE(2, float)
PKSCAN_INSTANTIATE_REFERENCE(3, double)
PKSCAN_INSTANTIATE_REFERENCE(3, float)
PKSCAN_INSTANTIATE_REFERENCE(4, double)
PKSCAN_INSTANTIATE_REFERENCE(4, float)
#undef PKSCAN_INSTANTIATE_REFERENCE

template <class Real>
void reference_subject(const PreparedBatch& batch, std::int64_t subject, Real* out,
                       SubjectStatus* status) {
  if (!with_compartments_1_to_6(batch.n, [&](auto n) {
        reference_subject_n<decltype(n)::value, Real>(batch, subject, out, status);
      }))
    throw InvalidArgument("simulate: models with " + std::to_string(batch.n) +
                          " compartments are not compiled in");
}
template void reference_subject<double>(const PreparedBatch&, std::int64_t, double*,
                                        SubjectStatus*);
template void reference_subject<float>(const PreparedBatch&, std::int64_t, float*, SubjectStatus*);

std::unique_ptr<Backend> make_reference_scan_backend() {
  return std::make_unique<ReferenceScanBackend>();
}

}  // namespace pkscan::detail
