#pragma once
// The device paths of methods `batched` and `power`, one subject per call: PKSCAN_HD functors
// that Thrust runs over a chunk's subjects (thrust::for_each on a counting iterator), on whatever
// system it is built for: CUDA with nvcc (cuda/launch_cuda.cu) or OpenMP with g++
// (runtime_host.cpp). Every number comes from kernels/grid.hpp, the functions the CPU paths call,
// so the host system's results are the CPU's bits (batched: the reference scan's; power: the CPU
// power path's), and so are the CUDA build's (cuda/launch_cuda.cu is built with --fmad=false).
//
// Layouts (every pointer is in the system's memory; a chunk holds `subjects` subjects):
//   k[e * subjects + j], g[e * subjects + j]    K(r, c) and G(r, c) of chunk subject j,
//                                               e = r N + c, double (as build_transition made them)
//   partial[l * N^2 * subjects + e * subjects + j]
//                                               partial-step matrix l, double
//   table[(lv 2N^2 + e) * subjects + j]         power table of subject j (kernels/grid.hpp), Real
//   out[(j * n_out + row) * N + c]              amounts, subject-major: the host result layout;
//   out[(row * N + c) * subjects + j]           or time-major (time_major: output that stays on
//                                               the device, for the device summary): a warp's
//                                               threads write neighbouring addresses
//   status[j]                                   0 Ok, 1 NonFinite (SubjectStatus values)
// Deterministic: one call owns one subject, no atomics, no reductions across subjects; a
// subject's bits do not depend on its chunk or on the thread that runs it.
#include <cstdint>

#include "kernels/grid.hpp"

namespace pkscan::device {

inline constexpr int kMinCompartments = 2;  // the functors are compiled for N = 2, 3 and 4
inline constexpr int kMaxCompartments = 4;

enum class Kernel { Batched, PowerSparse };

// The schedule shared by every subject, in the system's memory.
struct DeviceSchedule {
  detail::ScheduleView s;
  std::int64_t n_out = 0;                   // output rows per subject (>= 1)
  const std::int64_t* out_steps = nullptr;  // n_out sorted grid indices; null when dense
  int levels = 0;                           // power table levels (power kernel only)
  // out_steps[i] == i, n_out == steps + 1.
  PKSCAN_HD bool dense() const { return out_steps == nullptr; }
};

// One chunk of subjects.
template <class Real>
struct DeviceChunk {
  std::int64_t subjects = 0;        // the structure-of-arrays stride
  const double* k = nullptr;        // N^2 * subjects
  const double* g = nullptr;        // N^2 * subjects
  const double* partial = nullptr;  // partial_lengths * N^2 * subjects (null when none)
  Real* table = nullptr;            // levels * 2N^2 * subjects (power kernel only)
  Real* out = nullptr;              // subjects * n_out * N
  std::uint8_t* status = nullptr;   // subjects
  bool time_major = false;          // out's layout (above)
};

template <int N, class Real>
PKSCAN_HD inline detail::TransitionView subject_transition(const DeviceChunk<Real>& ch,
                                                           std::int64_t j) {
  detail::TransitionView tr;
  tr.k = ch.k + j;
  tr.g = ch.g + j;
  tr.partial = ch.partial ? ch.partial + j : nullptr;
  tr.stride = ch.subjects;
  tr.matrix_step = static_cast<std::int64_t>(N) * N * ch.subjects;
  return tr;
}

// Writes output rows of one subject and keeps its finiteness.
template <int N, class Real>
struct RowWriter {
  Real* out;            // the subject's first value
  std::int64_t stride;  // between its values: 1 (subject-major) or the chunk's subjects
  std::int64_t row = 0;
  bool finite = true;
  PKSCAN_HD void record(const Real* x) {
    finite = finite && detail::all_finite(x, N);
    for (int r = 0; r < N; ++r) out[(row * N + r) * stride] = x[r];
    ++row;
  }
};

// One subject of a chunk: its transition, K rounded to Real and the doses at 0 (as every grid
// path begins), then the kernel's loop, then its status.
template <int N, class Real, Kernel K>
struct SubjectKernel {
  DeviceSchedule sched;
  DeviceChunk<Real> ch;

  PKSCAN_HD void operator()(std::int64_t j) const {
    const detail::TransitionView tr = subject_transition<N>(ch, j);
    RowWriter<N, Real> w = ch.time_major ? RowWriter<N, Real>{ch.out + j, ch.subjects}
                                         : RowWriter<N, Real>{ch.out + j * sched.n_out * N, 1};
    Real k[N * N], x[N];
    detail::subject_start<N, Real>(sched.s, tr, k, x);
    if constexpr (K == Kernel::PowerSparse)
      power_sparse(j, tr, k, x, w);
    else
      batched(tr, k, x, w);
    ch.status[j] = w.finite ? 0 : 1;
  }

  // Batched: every step of the horizon, x <- K x + b, recording the output steps (the reference
  // scan's loop: affine_step with the breakpoint inputs of kernels/grid.hpp).
  PKSCAN_HD void batched(const detail::TransitionView& tr, const Real* k, Real* x,
                         RowWriter<N, Real>& w) const {
    const detail::ScheduleView& s = sched.s;
    const bool dense = sched.dense();
    std::int64_t next = 0;  // next output row
    const std::int64_t last = dense ? s.steps : sched.out_steps[sched.n_out - 1];
    if (dense || sched.out_steps[0] == 0) {
      w.record(x);
      next = 1;
    }
    for (std::int64_t bp = 0; bp < s.breakpoints && next < sched.n_out; ++bp) {
      const std::int64_t first = s.bp_step[bp];
      const std::int64_t bp_last = s.bp_last(bp);
      const std::int64_t end = bp_last < last ? bp_last : last;
      Real c[N], f[N];
      detail::breakpoint_inputs<N, Real>(s, tr, bp, c, f);
      for (std::int64_t i = first; i <= end; ++i) {
        detail::affine_step_in_place<N, Real>(k, x, i == first ? f : c);
        if (dense || i == sched.out_steps[next]) {
          w.record(x);
          ++next;
        }
      }
    }
  }

  // Power, sparse output: the subject's table of powers, then jumps from one output step to the
  // next (detail::advance, the CPU power path's function).
  PKSCAN_HD void power_sparse(std::int64_t j, const detail::TransitionView& tr, const Real* k,
                              Real* x, RowWriter<N, Real>& w) const {
    const detail::PowerSubjectView<N, Real> ps{tr, k, {ch.table + j, ch.subjects, sched.levels}};
    detail::build_power_table<N, Real>(tr.k, tr.stride, ps.table);
    std::int64_t at = 0;
    for (std::int64_t o = 0; o < sched.n_out; ++o) {
      detail::advance<N, Real>(sched.s, ps, x, at, sched.out_steps[o]);
      at = sched.out_steps[o];
      w.record(x);
    }
  }
};

}  // namespace pkscan::device
