// Parallel-power backend (CPU). Runs of identical dosing periods (a regimen repeated every II)
// are powers of one affine map and are applied by squaring it (schedule.bp_run). Per subject, a
// table of P_j = K^(2^j) and Q_j = sum_{i<2^j} K^i (built in double by repeated squaring: P_{j+1} =
// P_j P_j, Q_{j+1} = Q_j + P_j Q_j) turns m steps with a constant input c into popcount(m) affine
// updates x <- P_j x + Q_j c. That gives (a) sparse output: jump from one output time to the next
// in O(log gap) per breakpoint, and (b) dense output of long horizons: the start state of every
// fixed-length time chunk is
//     reached by jumps, then the chunks are scanned step by step in parallel (parallel over
//     time and subjects; a blocked associative scan whose carry-in comes from the powers).
//
// Numeric contract: jumps reorder the products (K^m formed by squaring), so results differ from
// the reference by O(log2(T)) rounding errors relative to the values; all terms are
// non-negative (K >= 0, inputs >= 0), so there is no cancellation. The agreement suite holds
// float64 to 1e-10 relative. Deterministic: chunk length is fixed (not derived from the thread
// count), so results do not depend on the number of threads.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "detail/backend.hpp"
#include "detail/parallel.hpp"
#include "detail/step.hpp"
#include "detail/transition.hpp"

namespace pkscan::detail {

namespace {

constexpr std::int64_t kChunkSteps = 8192;  // dense mode: steps per parallel chunk

template <int N, class Real>
struct PowerSubject {
  Transition<N> tr;
  Real k[N * N];
  std::vector<Real> p;  // levels * N*N
  std::vector<Real> q;  // levels * N*N
  int levels = 0;

  void build(const PreparedBatch& b, std::int64_t subject) {
    const Problem& pr = *b.problem;
    Mat<N> a;
    rate_matrix(*b.model, pr.parameters.row(subject), a.data());
    build_transition<N>(a, pr.grid.dt, pr.discretization, b.schedule.partial_lengths, tr);
    for (int i = 0; i < N * N; ++i) k[i] = static_cast<Real>(tr.k.data()[i]);
    levels = 1;
    while ((std::int64_t{1} << levels) <= b.schedule.steps) ++levels;
    p.resize(static_cast<std::size_t>(levels * N * N));
    q.resize(static_cast<std::size_t>(levels * N * N));
    Mat<N> pj = tr.k;
    Mat<N> qj = Mat<N>::Identity();
    for (int j = 0; j < levels; ++j) {
      for (int i = 0; i < N * N; ++i) {
        p[static_cast<std::size_t>(j * N * N + i)] = static_cast<Real>(pj.data()[i]);
        q[static_cast<std::size_t>(j * N * N + i)] = static_cast<Real>(qj.data()[i]);
      }
      const Mat<N> next_q = qj + pj * qj;
      pj = (pj * pj).eval();
      qj = next_q;
    }
  }

  // m steps of x <- K x + c (c constant).
  void jump(Real* x, const Real* c, bool zero_input, std::int64_t m) const {
    for (int j = 0; m > 0; ++j, m >>= 1) {
      if (!(m & 1)) continue;
      const Real* pj = p.data() + j * N * N;
      Real y[N];
      if (zero_input) {
        for (int r = 0; r < N; ++r) {
          Real acc = pj[r * N] * x[0];
          for (int i = 1; i < N; ++i) acc += pj[r * N + i] * x[i];
          y[r] = acc;
        }
      } else {
        Real qc[N];
        const Real* qj = q.data() + j * N * N;
        for (int r = 0; r < N; ++r) {
          Real acc = qj[r * N] * c[0];
          for (int i = 1; i < N; ++i) acc += qj[r * N + i] * c[i];
          qc[r] = acc;
        }
        affine_step<N, Real>(pj, x, qc, y);
      }
      for (int r = 0; r < N; ++r) x[r] = y[r];
    }
  }
};

// Index of the breakpoint that covers `step` (>= 1).
std::int64_t breakpoint_of(const Schedule& s, std::int64_t step) {
  auto it = std::upper_bound(s.bp_step.begin(), s.bp_step.end(), step);
  return static_cast<std::int64_t>(it - s.bp_step.begin()) - 1;
}

// Applies `count` repetitions of breakpoint k (a run of identical breakpoints, each `len` steps
// long) to x. One repetition is the affine map F(x) = M x + v with M = K^len and
// v = K^(len-1)-jump of f with input c; F^count is applied by squaring F: O(log count) products.
template <int N, class Real>
void apply_run(const Schedule& s, const PowerSubject<N, Real>& ps, std::int64_t k, std::int64_t len,
               std::int64_t count, Real* x) {
  Real c[N], f[N];
  breakpoint_inputs<N, Real>(s, ps.tr, k, c, f);
  bool zero = true;
  for (int r = 0; r < N; ++r) zero = zero && c[r] == Real(0);
  Real m[N * N], v[N];
  for (int r = 0; r < N; ++r) v[r] = f[r];
  ps.jump(v, c, zero, len - 1);
  for (int j = 0; j < N; ++j) {
    Real col[N];
    for (int r = 0; r < N; ++r) col[r] = ps.k[r * N + j];
    ps.jump(col, c, true, len - 1);
    for (int r = 0; r < N; ++r) m[r * N + j] = col[r];
  }
  while (count > 0) {
    if (count & 1) {
      Real y[N];
      affine_step<N, Real>(m, x, v, y);
      for (int r = 0; r < N; ++r) x[r] = y[r];
    }
    count >>= 1;
    if (count > 0) {
      Real m2[N * N], v2[N];
      affine_compose<N, Real>(m, v, m, v, m2, v2);
      for (int i = 0; i < N * N; ++i) m[i] = m2[i];
      for (int r = 0; r < N; ++r) v[r] = v2[r];
    }
  }
}

// Advances x from the state at step `from` to the state at step `to` (to >= from), by jumps
// within breakpoints and by powers over runs of identical breakpoints.
template <int N, class Real>
void advance(const Schedule& s, const PowerSubject<N, Real>& ps, Real* x, std::int64_t from,
             std::int64_t to) {
  if (to <= from) return;
  std::int64_t k = breakpoint_of(s, from + 1);
  while (k < s.breakpoints()) {
    const std::int64_t bf = s.bp_step[static_cast<std::size_t>(k)];
    if (bf > to) break;
    const std::int64_t bl = s.bp_last(k);
    if (bf > from) {
      const std::int64_t len = bl - bf + 1;
      const std::int64_t fit =
          std::min<std::int64_t>(s.bp_run[static_cast<std::size_t>(k)], (to - bf + 1) / len);
      if (fit >= 2) {
        apply_run<N, Real>(s, ps, k, len, fit, x);
        k += fit;
        continue;
      }
    }
    const std::int64_t s1 = std::min(bl, to);
    std::int64_t s0 = std::max(bf, from + 1);
    Real c[N], f[N];
    breakpoint_inputs<N, Real>(s, ps.tr, k, c, f);
    if (s0 == bf) {
      Real y[N];
      affine_step<N, Real>(ps.k, x, f, y);
      for (int r = 0; r < N; ++r) x[r] = y[r];
      ++s0;
    }
    if (s1 >= s0) {
      bool zero = true;
      for (int r = 0; r < N; ++r) zero = zero && c[r] == Real(0);
      ps.jump(x, c, zero, s1 - s0 + 1);
    }
    ++k;
  }
}

// Steps x from the state at `from` through `to` one step at a time, writing the state at every
// step in (from, to] to out[(step - from - 1) * N ...].
template <int N, class Real>
void scan_dense(const Schedule& s, const PowerSubject<N, Real>& ps, Real* x, std::int64_t from,
                std::int64_t to, Real* out) {
  for (std::int64_t k = breakpoint_of(s, from + 1); k < s.breakpoints(); ++k) {
    const std::int64_t bf = s.bp_step[static_cast<std::size_t>(k)];
    if (bf > to) break;
    const std::int64_t s1 = std::min(s.bp_last(k), to);
    Real c[N], f[N];
    breakpoint_inputs<N, Real>(s, ps.tr, k, c, f);
    for (std::int64_t i = std::max(bf, from + 1); i <= s1; ++i) {
      Real y[N];
      affine_step<N, Real>(ps.k, x, i == bf ? f : c, y);
      for (int r = 0; r < N; ++r) x[r] = y[r], out[(i - from - 1) * N + r] = y[r];
    }
  }
}

template <class Real>
bool all_finite(const Real* v, std::size_t n) {
  bool ok = true;
  for (std::size_t i = 0; i < n; ++i) ok = ok && std::isfinite(v[i]);
  return ok;
}

class PowerCpuBackend final : public Backend {
 public:
  Method method() const noexcept override { return Method::Power; }
  Device device() const noexcept override { return Device::Cpu; }
  std::string unsupported_reason(const PreparedBatch& b) const override {
    if (b.n < 2 || b.n > 4) return "method 'power' is compiled for 2 to 4 compartments";
    return {};
  }
  void run(const PreparedBatch& b, ResultView<double> out) override { dispatch(b, out); }
  void run(const PreparedBatch& b, ResultView<float> out) override { dispatch(b, out); }

 private:
  template <class Real>
  static void dispatch(const PreparedBatch& b, ResultView<Real> out) {
    with_compartments_2_to_4(b.n, [&](auto n) { run_all<decltype(n)::value, Real>(b, out); });
  }

 private:
  template <int N, class Real>
  static void run_all(const PreparedBatch& b, ResultView<Real> out) {
    const Schedule& s = b.schedule;
    const std::size_t n_out = b.out_steps.size();
    const std::int64_t stride = static_cast<std::int64_t>(n_out) * N;
    const bool dense = n_out == static_cast<std::size_t>(s.steps + 1);
    if (!dense) {
      // Sparse output: jump from output to output, subjects in parallel.
      const int threads = static_cast<int>(std::min<std::int64_t>(b.threads, b.subjects));
      RegionError err;
#pragma omp parallel num_threads(threads) if (threads > 1)
      {
        PowerSubject<N, Real> ps;
#pragma omp for schedule(dynamic, 16)
        for (std::int64_t subj = 0; subj < b.subjects; ++subj)
          err.guard([&] {
            ps.build(b, subj);
            Real x[N];
            for (int r = 0; r < N; ++r)
              x[r] = static_cast<Real>(s.initial[static_cast<std::size_t>(r)]);
            Real* o = out.amounts + subj * stride;
            std::int64_t at = 0;
            for (std::size_t i = 0; i < n_out; ++i) {
              advance<N, Real>(s, ps, x, at, b.out_steps[i]);
              at = b.out_steps[i];
              for (int r = 0; r < N; ++r) o[i * N + static_cast<std::size_t>(r)] = x[r];
            }
            out.status[subj] =
                all_finite(o, n_out * N) ? SubjectStatus::Ok : SubjectStatus::NonFinite;
          });
      }
      err.rethrow();
      return;
    }
    // Dense output: fixed-length chunks of time; each chunk's start state by jumps, then the
    // chunks of all subjects scanned in parallel.
    const std::int64_t chunks = (s.steps + kChunkSteps - 1) / kChunkSteps;
    std::vector<PowerSubject<N, Real>> subjects(static_cast<std::size_t>(b.subjects));
    RegionError err;
#pragma omp parallel for schedule(dynamic, 1) num_threads(b.threads)
    for (std::int64_t subj = 0; subj < b.subjects; ++subj)
      err.guard([&] { subjects[static_cast<std::size_t>(subj)].build(b, subj); });
    err.rethrow();
    const std::int64_t tasks = b.subjects * chunks;
#pragma omp parallel for schedule(dynamic, 1) num_threads(b.threads)
    for (std::int64_t t = 0; t < tasks; ++t) {
      const std::int64_t subj = t / chunks;
      const std::int64_t chunk = t % chunks;
      const PowerSubject<N, Real>& ps = subjects[static_cast<std::size_t>(subj)];
      const std::int64_t from = chunk * kChunkSteps;
      const std::int64_t to = std::min(s.steps, from + kChunkSteps);
      Real x[N];
      for (int r = 0; r < N; ++r) x[r] = static_cast<Real>(s.initial[static_cast<std::size_t>(r)]);
      Real* o = out.amounts + subj * stride;
      advance<N, Real>(s, ps, x, 0, from);
      if (chunk == 0)
        for (int r = 0; r < N; ++r) o[r] = x[r];
      scan_dense<N, Real>(s, ps, x, from, to, o + (from + 1) * N);
    }
    for (std::int64_t subj = 0; subj < b.subjects; ++subj)
      out.status[subj] = all_finite(out.amounts + subj * stride, n_out * N)
                             ? SubjectStatus::Ok
                             : SubjectStatus::NonFinite;
  }
};

}  // namespace

std::unique_ptr<Backend> make_power_cpu_backend() { return std::make_unique<PowerCpuBackend>(); }

}  // namespace pkscan::detail
