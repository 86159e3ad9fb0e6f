// Parallel-power backend (CPU). Runs of identical dosing periods (a regimen repeated every II)
// are powers of one affine map and are applied by squaring it (schedule.bp_run). Per subject, a
// table of P_j = K^(2^j) and Q_j = sum_{i<2^j} K^i (built in double by repeated squaring: P_{j+1} =
// P_j P_j, Q_{j+1} = Q_j + P_j Q_j) turns m steps with a constant input c into popcount(m) affine
// updates x <- P_j x + Q_j c. That gives (a) sparse output: jump from one output time to the next
// in O(log gap) per breakpoint, and (b) dense output of long horizons: the start state of every
// fixed-length time chunk is reached by jumps, then the chunks are scanned step by step in
// parallel (parallel over time and subjects; a blocked associative scan whose carry-in comes from
// the powers). The table, the jumps and the runs are kernels/grid.hpp's (build_power_table, jump,
// advance), the same functions the device backends run, so on Thrust's host system the device
// power path gives these bits.
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

#include "core/parallel.hpp"
#include "grid/backend.hpp"
#include "grid/transition.hpp"
#include "kernels/grid.hpp"

namespace pkscan::detail {

namespace {

constexpr std::int64_t kChunkSteps = 8192;  // dense mode: steps per parallel chunk

// One subject of the power path on the host: its transition, K rounded to Real and its power
// table (kernels/grid.hpp: the same functions as the device backends).
template <int N, class Real>
struct PowerSubject {
  Transition<N> tr;
  Real k[N * N];
  std::vector<Real> table;  // levels * 2 N^2, contiguous (stride 1)
  PowerSubjectView<N, Real, PowerTable<Real, 1>>
      view{};  // points into this object: never copied or moved

  PowerSubject() = default;
  PowerSubject(const PowerSubject&) = delete;
  PowerSubject& operator=(const PowerSubject&) = delete;

  void build(const PreparedBatch& b, std::int64_t subject) {
    const Problem& pr = *b.problem;
    Mat<N> a;
    rate_matrix(*b.model, pr.parameters.row(subject), a.data());
    build_transition<N>(a, pr.grid.dt, pr.discretization, b.schedule.partial_lengths, tr);
    for (int i = 0; i < N * N; ++i) k[i] = static_cast<Real>(tr.k.data()[i]);
    const int levels = power_levels(b.schedule.steps);
    table.resize(static_cast<std::size_t>(levels) * 2 * N * N);
    view.tr = view_of(tr);
    view.k = k;
    view.table = {table.data(), 1, levels};
    build_power_table<N, Real>(tr.k.data(), 1, view.table);
  }
};

// Steps x from the state at `from` through `to` one step at a time, writing the state at every
// step in (from, to] to out[(step - from - 1) * N ...].
template <int N, class Real>
void scan_dense(const Schedule& s, const PowerSubject<N, Real>& ps, Real* x, std::int64_t from,
                std::int64_t to, Real* out) {
  for (std::int64_t k = s.view().breakpoint_of(from + 1); k < s.breakpoints(); ++k) {
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

class PowerCpuBackend final : public CompiledCpuBackend<PowerCpuBackend, Method::Power> {
 public:
  template <int N, class Real>
  static void run_all(const PreparedBatch& b, ResultView<Real> out) {
    const Schedule& s = b.schedule;
    const ScheduleView sv = s.view();
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
              advance<N, Real>(sv, ps.view, x, at, b.out_steps[i]);
              at = b.out_steps[i];
              for (int r = 0; r < N; ++r) o[i * N + static_cast<std::size_t>(r)] = x[r];
            }
            out.status[subj] = all_finite(o, static_cast<std::int64_t>(n_out) * N)
                                   ? SubjectStatus::Ok
                                   : SubjectStatus::NonFinite;
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
      advance<N, Real>(sv, ps.view, x, 0, from);
      if (chunk == 0)
        for (int r = 0; r < N; ++r) o[r] = x[r];
      scan_dense<N, Real>(s, ps, x, from, to, o + (from + 1) * N);
    }
    for (std::int64_t subj = 0; subj < b.subjects; ++subj)
      out.status[subj] = all_finite(out.amounts + subj * stride, stride) ? SubjectStatus::Ok
                                                                         : SubjectStatus::NonFinite;
  }
};

}  // namespace

std::unique_ptr<Backend> make_power_cpu_backend() { return std::make_unique<PowerCpuBackend>(); }

}  // namespace pkscan::detail
