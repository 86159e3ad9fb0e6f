#pragma once
// The arithmetic of the grid paths, written once for every compiler. The CPU backends (reference
// scan, batched lanes, parallel power) and the device backends (engine/device/: nvcc for CUDA,
// g++ for Thrust's OpenMP system) all call these functions on the same inputs:
//   - the affine step y = K x + b and the composition of affine maps;
//   - a breakpoint's inputs c (every step) and f (its first step) from the transition's G and
//     partial-step matrices;
//   - the power table P_j = K^(2^j), Q_j = sum_{i < 2^j} K^i, jumps of m steps by the table and
//     runs of identical breakpoints by squaring (the parallel-power path);
//   - the finiteness check of a subject's output.
// Everything here is plain data and PKSCAN_HD functions: no Eigen, no std::vector, no
// exceptions, so nvcc can compile it for the device and g++ for the host.
//
// Rounding and contraction rule: nothing here is ever contracted into FMA. Every host target that
// compiles engine code builds with -ffp-contract=off (CMakeLists.txt, pkscan_exact_arithmetic),
// and nvcc with --fmad=false, so the host, Thrust's host systems and CUDA add the same rounded
// numbers. Per function:
//   - breakpoint_inputs: double, in the order of Eigen 3.4's fixed-size row-major matrix-vector
//     product with SSE2 packets (dot_eigen_order; checked against Eigen for N = 1..6 by
//     tests/kernels/grid_math_test.cpp); mul_rn/add_rn are __dmul_rn/__dadd_rn on the device and
//     plain operators on the host. Then rounded to Real once.
//   - affine_step, affine_compose, jump: Real, fixed summation order (acc = a_0 b_0, then
//     acc += a_j b_j for j = 1..N-1).
//   - build_power_table: double, the same order as affine_step, rounded to Real when stored.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/hd.hpp"

namespace pkscan::detail {

// ---- Rounding helpers ---------------------------------------------------------------------

// a * b and a + b, each rounded once, never fused with a neighbour.
PKSCAN_HD inline double mul_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
PKSCAN_HD inline double add_rn(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// ---- The affine step ----------------------------------------------------------------------

// y = K x + b for N compartments, K row-major.
template <int N, class Real>
PKSCAN_HD inline void affine_step(const Real* k, const Real* x, const Real* b, Real* y) {
  for (int r = 0; r < N; ++r) {
    Real acc = k[r * N] * x[0];
    for (int j = 1; j < N; ++j) acc += k[r * N + j] * x[j];
    y[r] = acc + b[r];
  }
}

// x <- K x + b.
template <int N, class Real>
PKSCAN_HD inline void affine_step_in_place(const Real* k, Real* x, const Real* b) {
  Real y[N];
  affine_step<N, Real>(k, x, b, y);
  for (int r = 0; r < N; ++r) x[r] = y[r];
}

// Composition of affine maps: (K2, b2) o (K1, b1) = (K2 K1, K2 b1 + b2).
template <int N, class Real>
PKSCAN_HD inline void affine_compose(const Real* k2, const Real* b2, const Real* k1, const Real* b1,
                                     Real* k_out, Real* b_out) {
  for (int r = 0; r < N; ++r) {
    for (int c = 0; c < N; ++c) {
      Real acc = k2[r * N] * k1[c];
      for (int j = 1; j < N; ++j) acc += k2[r * N + j] * k1[j * N + c];
      k_out[r * N + c] = acc;
    }
    Real acc = k2[r * N] * b1[0];
    for (int j = 1; j < N; ++j) acc += k2[r * N + j] * b1[j];
    b_out[r] = acc + b2[r];
  }
}

// ---- Views of the schedule and of one subject's transition ---------------------------------

// A partial-step infusion (grid/schedule.hpp); plain data, uploaded to a device as it is.
struct PartialInfusion {
  int compartment;
  double rate;
  int length_index;  // into Schedule::partial_lengths
};

// A Schedule (grid/schedule.hpp) as pointers, for host or device memory alike.
struct ScheduleView {
  int n = 0;
  std::int64_t steps = 0;
  std::int64_t breakpoints = 0;
  const double* initial = nullptr;                 // n
  const std::int64_t* bp_step = nullptr;           // breakpoints
  const double* bp_rate = nullptr;                 // n per breakpoint
  const double* bp_bolus = nullptr;                // n per breakpoint
  const std::int64_t* bp_partial_begin = nullptr;  // breakpoints + 1
  const PartialInfusion* partials = nullptr;
  const std::int64_t* bp_run = nullptr;  // breakpoints

  // Last step covered by breakpoint k.
  PKSCAN_HD std::int64_t bp_last(std::int64_t k) const {
    return k + 1 < breakpoints ? bp_step[k + 1] - 1 : steps;
  }
  // Index of the breakpoint that covers `step` (>= 1): the last k with bp_step[k] <= step.
  PKSCAN_HD std::int64_t breakpoint_of(std::int64_t step) const {
    std::int64_t lo = 0, hi = breakpoints;  // bp_step[0] = 1 <= step
    while (hi - lo > 1) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (bp_step[mid] <= step)
        lo = mid;
      else
        hi = mid;
    }
    return lo;
  }
};

// One subject's transition in double: element e = r * N + c of K lies at k[e * stride], of G at
// g[e * stride], of partial-step matrix l at partial[l * matrix_step + e * stride]. On the host a
// subject's Transition<N> (stride 1, matrix_step N*N); on a device one column of the chunk's
// structure-of-arrays buffers (stride = subjects in the chunk).
struct TransitionView {
  const double* k = nullptr;
  const double* g = nullptr;
  const double* partial = nullptr;
  std::int64_t stride = 1;
  std::int64_t matrix_step = 0;
};

// sum_i a[i * stride] * v[i] in the order of Eigen 3.4's fixed-size row-major product with SSE2
// packets of two: left to right for N <= 3, lane sums then their sum for N = 4, 5 and 6.
template <int N>
PKSCAN_HD inline double dot_eigen_order(const double* a, std::int64_t stride, const double* v) {
  double t[N];
  for (int i = 0; i < N; ++i) t[i] = mul_rn(a[i * stride], v[i]);
  if constexpr (N <= 3) {
    double acc = t[0];
    for (int i = 1; i < N; ++i) acc = add_rn(acc, t[i]);
    return acc;
  } else if constexpr (N == 4) {
    return add_rn(add_rn(t[0], t[2]), add_rn(t[1], t[3]));
  } else if constexpr (N == 5) {
    return add_rn(add_rn(add_rn(t[0], t[2]), add_rn(t[1], t[3])), t[4]);
  } else {
    static_assert(N == 6, "dot_eigen_order is defined for N = 1..6");
    return add_rn(add_rn(t[0], add_rn(t[2], t[4])), add_rn(t[1], add_rn(t[3], t[5])));
  }
}

// Inputs of breakpoint `k` for one subject, rounded to Real: c = G rate (every step of the
// breakpoint; 0 when the rate vector is zero) and f = c + bolus + sum of the partial infusions'
// columns times their rates (its first step).
template <int N, class Real>
PKSCAN_HD inline void breakpoint_inputs(const ScheduleView& s, const TransitionView& tr,
                                        std::int64_t k, Real* c, Real* f) {
  const double* rate = s.bp_rate + k * N;
  bool zero = true;
  for (int i = 0; i < N; ++i) zero = zero && rate[i] == 0.0;
  double cc[N];
  for (int r = 0; r < N; ++r)
    cc[r] = zero ? 0.0 : dot_eigen_order<N>(tr.g + r * N * tr.stride, tr.stride, rate);
  double ff[N];
  for (int r = 0; r < N; ++r) ff[r] = add_rn(cc[r], s.bp_bolus[k * N + r]);
  for (std::int64_t p = s.bp_partial_begin[k]; p < s.bp_partial_begin[k + 1]; ++p) {
    const PartialInfusion& pi = s.partials[p];
    // Column pi.compartment of partial matrix pi.length_index: element (r, c) is e = r N + c.
    const double* m = tr.partial + pi.length_index * tr.matrix_step + pi.compartment * tr.stride;
    for (int r = 0; r < N; ++r) ff[r] = add_rn(ff[r], mul_rn(m[r * N * tr.stride], pi.rate));
  }
  for (int r = 0; r < N; ++r) {
    c[r] = static_cast<Real>(cc[r]);
    f[r] = static_cast<Real>(ff[r]);
  }
}

// A subject's start: K rounded to Real once (element e at tr.k[e * tr.stride]) and the state at
// t = 0 (the schedule's doses at 0), as every grid path begins.
template <int N, class Real>
PKSCAN_HD inline void subject_start(const ScheduleView& s, const TransitionView& tr, Real* k,
                                    Real* x) {
  for (int e = 0; e < N * N; ++e) k[e] = static_cast<Real>(tr.k[e * tr.stride]);
  for (int r = 0; r < N; ++r) x[r] = static_cast<Real>(s.initial[r]);
}

// ---- The power table and jumps (parallel-power path) --------------------------------------

// Levels of the power table for a horizon: the smallest L >= 1 with 2^L > steps.
PKSCAN_HD inline int power_levels(std::int64_t steps) {
  int levels = 1;
  while (levels < 62 && (std::int64_t{1} << levels) <= steps) ++levels;
  return levels;
}

// A subject's power table: P_j = K^(2^j) (element e at data[(j 2N^2 + e) stride]) and
// Q_j = sum_{i < 2^j} K^i (at data[(j 2N^2 + N^2 + e) stride]), j < levels. kStride > 0 fixes
// the stride at compile time (the host's contiguous tables: 1); 0 takes runtime_stride (a
// device chunk's structure of arrays).
template <class Real, int kStride = 0>
struct PowerTable {
  Real* data = nullptr;
  std::int64_t runtime_stride = 1;
  int levels = 0;
  PKSCAN_HD std::int64_t stride() const {
    if constexpr (kStride > 0)
      return kStride;
    else
      return runtime_stride;
  }
};

// N x N row-major product in double, out = a b, in affine_step's order.
template <int N>
PKSCAN_HD inline void matmul(const double* a, const double* b, double* out) {
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < N; ++c) {
      double acc = a[r * N] * b[c];
      for (int i = 1; i < N; ++i) acc += a[r * N + i] * b[i * N + c];
      out[r * N + c] = acc;
    }
}

// Fills the table from K (double, element e at k[e * k_stride]): P_0 = K, Q_0 = I,
// P_{j+1} = P_j P_j, Q_{j+1} = Q_j + P_j Q_j, in double, each rounded to Real when stored.
template <int N, class Real, class Table>
PKSCAN_HD inline void build_power_table(const double* k, std::int64_t k_stride, const Table& t) {
  double p[N * N], q[N * N];
  for (int e = 0; e < N * N; ++e) {
    p[e] = k[e * k_stride];
    q[e] = e % (N + 1) == 0 ? 1.0 : 0.0;
  }
  const std::int64_t st = t.stride();
  for (int lv = 0; lv < t.levels; ++lv) {
    Real* tl = t.data + static_cast<std::int64_t>(lv) * 2 * N * N * st;
    for (int e = 0; e < N * N; ++e) {
      tl[e * st] = static_cast<Real>(p[e]);
      tl[(N * N + e) * st] = static_cast<Real>(q[e]);
    }
    if (lv + 1 == t.levels) break;
    double pq[N * N], pp[N * N];
    matmul<N>(p, q, pq);
    matmul<N>(p, p, pp);
    for (int e = 0; e < N * N; ++e) {
      q[e] = q[e] + pq[e];
      p[e] = pp[e];
    }
  }
}

// m steps of x <- K x + c with a constant input c (m < 2^levels): popcount(m) updates
// x <- P_j x + Q_j c (x <- P_j x when c is zero). Forced inline: it is the power path's
// innermost loop, called from advance() and apply_run().
template <int N, class Real, class Table>
PKSCAN_HD_FORCEINLINE void jump(const Table& t, Real* x, const Real* c, bool zero_input,
                                std::int64_t m) {
  const std::int64_t st = t.stride();
  for (int lv = 0; m > 0 && lv < t.levels; ++lv, m >>= 1) {
    if (!(m & 1)) continue;
    const Real* tl = t.data + static_cast<std::int64_t>(lv) * 2 * N * N * st;
    auto P = [&](int e) { return tl[e * st]; };
    auto Q = [&](int e) { return tl[(N * N + e) * st]; };
    Real y[N];
    if (zero_input) {
      for (int r = 0; r < N; ++r) {
        Real acc = P(r * N) * x[0];
        for (int i = 1; i < N; ++i) acc += P(r * N + i) * x[i];
        y[r] = acc;
      }
    } else {
      // y = P x + (Q c), affine_step's order.
      for (int r = 0; r < N; ++r) {
        Real qc = Q(r * N) * c[0];
        for (int i = 1; i < N; ++i) qc += Q(r * N + i) * c[i];
        Real acc = P(r * N) * x[0];
        for (int i = 1; i < N; ++i) acc += P(r * N + i) * x[i];
        y[r] = acc + qc;
      }
    }
    for (int r = 0; r < N; ++r) x[r] = y[r];
  }
}

// One subject as the power path sees it: its transition (for the breakpoint inputs), K rounded
// to Real and its power table.
template <int N, class Real, class Table = PowerTable<Real>>
struct PowerSubjectView {
  TransitionView tr;
  const Real* k;  // N*N, row-major, contiguous
  Table table;
};

template <int N, class Real>
PKSCAN_HD inline bool all_zero(const Real* v) {
  bool zero = true;
  for (int r = 0; r < N; ++r) zero = zero && v[r] == Real(0);
  return zero;
}

// Applies `count` repetitions of breakpoint k (a run of identical breakpoints, each `len` steps
// long) to x. One repetition is the affine map F(x) = M x + v with M = K^len and
// v = the (len - 1)-step jump of f with input c; F^count is applied by squaring F.
template <int N, class Real, class Table>
PKSCAN_HD inline void apply_run(const ScheduleView& s, const PowerSubjectView<N, Real, Table>& ps,
                                std::int64_t k, std::int64_t len, std::int64_t count, Real* x) {
  Real c[N], f[N];
  breakpoint_inputs<N, Real>(s, ps.tr, k, c, f);
  const bool zero = all_zero<N, Real>(c);
  Real m[N * N], v[N];
  for (int r = 0; r < N; ++r) v[r] = f[r];
  jump<N, Real>(ps.table, v, c, zero, len - 1);
  for (int j = 0; j < N; ++j) {
    Real col[N];
    for (int r = 0; r < N; ++r) col[r] = ps.k[r * N + j];
    jump<N, Real>(ps.table, col, c, true, len - 1);
    for (int r = 0; r < N; ++r) m[r * N + j] = col[r];
  }
  while (count > 0) {
    if (count & 1) affine_step_in_place<N, Real>(m, x, v);
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
template <int N, class Real, class Table>
PKSCAN_HD inline void advance(const ScheduleView& s, const PowerSubjectView<N, Real, Table>& ps,
                              Real* x, std::int64_t from, std::int64_t to) {
  if (to <= from) return;
  std::int64_t k = s.breakpoint_of(from + 1);
  while (k < s.breakpoints) {
    const std::int64_t bf = s.bp_step[k];
    if (bf > to) break;
    const std::int64_t bl = s.bp_last(k);
    if (bf > from) {
      const std::int64_t len = bl - bf + 1;
      const std::int64_t reps = (to - bf + 1) / len;
      const std::int64_t fit = s.bp_run[k] < reps ? s.bp_run[k] : reps;
      if (fit >= 2) {
        apply_run<N, Real>(s, ps, k, len, fit, x);
        k += fit;
        continue;
      }
    }
    const std::int64_t s1 = bl < to ? bl : to;
    std::int64_t s0 = bf > from + 1 ? bf : from + 1;
    Real c[N], f[N];
    breakpoint_inputs<N, Real>(s, ps.tr, k, c, f);
    if (s0 == bf) {
      affine_step_in_place<N, Real>(ps.k, x, f);
      ++s0;
    }
    if (s1 >= s0) jump<N, Real>(ps.table, x, c, all_zero<N, Real>(c), s1 - s0 + 1);
    ++k;
  }
}

// ---- Checks -------------------------------------------------------------------------------

// True when every one of the `count` values is finite. Branch-free on the exponent bits, so that
// the loop vectorizes: an exponent of all ones (inf, NaN) plus its lowest bit carries into the
// sign bit's place, any other exponent does not.
template <class Real>
PKSCAN_HD inline bool all_finite(const Real* v, std::int64_t count) {
  using Bits = std::conditional_t<sizeof(Real) == 8, std::uint64_t, std::uint32_t>;
  constexpr Bits kExponent = sizeof(Real) == 8 ? Bits(0x7ff0000000000000ull) : Bits(0x7f800000u);
  constexpr Bits kLowest = sizeof(Real) == 8 ? Bits(0x0010000000000000ull) : Bits(0x00800000u);
  constexpr Bits kTop = sizeof(Real) == 8 ? Bits(0x8000000000000000ull) : Bits(0x80000000u);
  Bits carry = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    Bits b;
    std::memcpy(&b, v + i, sizeof b);
    carry |= (b & kExponent) + kLowest;
  }
  return (carry & kTop) == 0;
}

}  // namespace pkscan::detail
