#pragma once
// The exposure-metric kernels (Cmax, Tmax, AUC by the linear-up / log-down trapezoid, Cmin; the
// user-facing rules are in pkscan/summary.hpp): eight subjects at a time, one per lane, the
// output times in order. The standalone subject_metrics (exposure_metrics.cpp) and the fused
// summary (fused_summary.cpp) run these same inline functions, both compiled with
// -ffp-contract=off, so a subject's metrics do not depend on the path, its lane or its chunk.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/simd.hpp"
#include "kernels/summary.hpp"

namespace pkscan::detail {

// ln(x) for x in [1, DBL_MAX]. x = 2^e m, m in [1, 2); j = the top 4 bits of m's fraction,
// c_j = 1 + (j + 1/2)/16, ic_j = RN(1/c_j): ln m = -ln(ic_j) + log1p(u) with u = m ic_j - 1
// (|u| < 0.031), -ln(ic_j) tabulated correctly rounded, log1p(u) by its Taylor series to u^10
// (truncation < 2e-18). No division; about 1 ulp.
PKSCAN_INLINE v8d log_ge1(v8d x) noexcept {
  const v8u b = vcast<v8u>(x);
  // Exponent as a double, exactly: 2^52 + (b >> 52) minus 2^52 + 1023.
  const v8d e = vcast<v8d>((b >> 52) | 0x4330000000000000ull) - 4503599627371519.0;
  const v8d m = vcast<v8d>((b & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
  const v8i j = vcast<v8i>((b >> 48) & 15);
#if defined(__GNUC__) && !defined(__clang__)
  // 16-entry table lookups as two-register permutes (vpermt2pd with AVX-512).
  const v8d ic = __builtin_shuffle(load8(kLogInvC), load8(kLogInvC + 8), j);
  const v8d lc = __builtin_shuffle(load8(kLogC), load8(kLogC + 8), j);
#else
  v8d ic, lc;
  for (int l = 0; l < 8; ++l) {
    ic[l] = kLogInvC[j[l]];
    lc[l] = kLogC[j[l]];
  }
#endif
  const v8d u = m * ic - 1.0;
  const v8d p = log1p_series(u);
  return e * kLn2Hi + (lc + (p + e * kLn2Lo));
}

// Metrics of 8 subjects at once, one subject per lane, the output times in order. Every path
// (the standalone subject_metrics and the fused simulate-and-summarise kernel) runs these same
// inline functions, so a subject's metrics do not depend on the path, its lane or its chunk.
struct MetricLanes {
  v8d prev{};  // concentration at the previous output time
  v8d cmax{}, tmax{}, cmin{}, auc{};
  v8d nonfinite{};  // 0 while every value seen is finite, NaN after
};

// Output index 0 (value c at time t).
PKSCAN_INLINE void metric_first(v8d c, double t, bool in_last, MetricLanes& L) noexcept {
  const double inf = std::numeric_limits<double>::infinity();
  L.cmax = splat(-inf);
  L.tmax = splat(inf);
  L.cmin = splat(inf);
  L.auc = splat(0.0);
  L.nonfinite = c * 0.0;  // inf * 0 and NaN * 0 are NaN
  const v8d cmax = (c > L.cmax) ? c : L.cmax;
  L.tmax = (cmax != L.cmax) ? splat(t) : L.tmax;
  L.cmax = cmax;
  if (in_last) L.cmin = (c < L.cmin) ? c : L.cmin;
  L.prev = c;
}

// Lane-wise a b + c rounded once (IEEE fusedMultiplyAdd: the same bits on every CPU; one
// instruction where the clone's ISA has FMA).
PKSCAN_INLINE v8d fma8(v8d a, v8d b, v8d c) noexcept {
  v8d r;
  for (int l = 0; l < 8; ++l) r[l] = __builtin_fma(a[l], b[l], c[l]);
  return r;
}

// Lane-wise a > b ? a : b (b where either is NaN).
PKSCAN_INLINE v8d vmax(v8d a, v8d b) noexcept { return (a > b) ? a : b; }

// The linear-up / log-down area of [t_{k-1}, t_k] divided by dt, from the values c1 at
// t_{k-1} and c2 at t_k: 0.5 (c1 + c2), or, when c1 > c2 > 0 (q = min(c2, c1 - c2) > 0),
// d / ln(c1 / c2) with d = c1 - c2 and x = d / c2:
//  - x < 1/16: c2 x / ln(1 + x) = c2 + d (G_1 + G_2 x + ... + G_12 x^11) (no cancellation;
//    within about 2 ulp);
//  - otherwise d / ln(r) with r = c1 / c2 (correctly rounded, clamped to DBL_MAX): ln r >=
//    0.0606, so r's rounding moves it by at most 1.9e-15 relative (about 1 ulp for larger
//    ratios).
// The logarithm is computed only for vectors in which some lane needs it; each lane's result
// depends on its own values only.
//
// Written for GCC 12's vector lowering: a comparison that feeds one select becomes a mask
// blend, but one whose result is reused (or combined with &) is scalarised. So every
// comparison below is used once; lanes whose piece is linear compute a harmless garbage
// log-down piece that the last select drops (no floating-point traps are enabled).
PKSCAN_INLINE v8d auc_piece(v8d c1, v8d c2) noexcept {
  const v8d d = c1 - c2;
  const v8d q = (c2 < d) ? c2 : d;
  const v8d x = d / c2;
  // h = G_1 + G_2 x + ... + G_12 x^11 by Estrin's scheme (a short dependency chain), with
  // fused multiply-adds.
  const v8d x2 = x * x;
  const v8d x4 = x2 * x2;
  const v8d x8 = x4 * x4;
  const v8d p0 = fma8(splat(kGregory[1]), x, splat(kGregory[0]));
  const v8d p1 = fma8(splat(kGregory[3]), x, splat(kGregory[2]));
  const v8d p2 = fma8(splat(kGregory[5]), x, splat(kGregory[4]));
  const v8d p3 = fma8(splat(kGregory[7]), x, splat(kGregory[6]));
  const v8d p4 = fma8(splat(kGregory[9]), x, splat(kGregory[8]));
  const v8d p5 = fma8(splat(kGregory[11]), x, splat(kGregory[10]));
  const v8d h = fma8(fma8(p5, x2, p4), x8, fma8(fma8(p3, x2, p2), x4, fma8(p1, x2, p0)));
  const v8d series = fma8(d, h, c2);
  // The largest x of the log-down lanes (NaN and linear lanes count as 0).
  v8d xl = (q > 0.0) ? x : splat(0.0);
#if defined(__clang__)
  xl = vmax(xl, __builtin_shufflevector(xl, xl, 4, 5, 6, 7, 0, 1, 2, 3));
  xl = vmax(xl, __builtin_shufflevector(xl, xl, 2, 3, 0, 1, 6, 7, 4, 5));
  xl = vmax(xl, __builtin_shufflevector(xl, xl, 1, 0, 3, 2, 5, 4, 7, 6));
#else
  xl = vmax(xl, __builtin_shuffle(xl, v8i{4, 5, 6, 7, 0, 1, 2, 3}));
  xl = vmax(xl, __builtin_shuffle(xl, v8i{2, 3, 0, 1, 6, 7, 4, 5}));
  xl = vmax(xl, __builtin_shuffle(xl, v8i{1, 0, 3, 2, 5, 4, 7, 6}));
#endif
  const double big = xl[0];
  v8d piece = series;
  if (!(big < kSeriesMax)) {
    v8d r = c1 / c2;
    r = (r < kDblMax) ? r : splat(kDblMax);
    const v8d logp = d / log_ge1(r);
    piece = (x < kSeriesMax) ? series : logp;
  }
  return (q > 0.0) ? piece : 0.5 * (c1 + c2);
}

// Output index k >= 1 given the piece of its interval (auc_piece of the previous value and c2).
PKSCAN_INLINE void metric_update(v8d c2, v8d piece, double t, double dt, bool in_last,
                                 MetricLanes& L) noexcept {
  L.auc = L.auc + dt * piece;
  // Maximum (first time reached): the time changes only when the maximum strictly grows.
  const v8d cmax = (c2 > L.cmax) ? c2 : L.cmax;
  L.tmax = (cmax != L.cmax) ? splat(t) : L.tmax;
  L.cmax = cmax;
  // Minimum over the last dosing interval.
  if (in_last) L.cmin = (c2 < L.cmin) ? c2 : L.cmin;
  L.nonfinite = L.nonfinite + c2 * 0.0;
  L.prev = c2;
}

// Output index k >= 1: value c2 at time t, dt = t_k - t_{k-1}.
PKSCAN_INLINE void metric_next(v8d c2, double t, double dt, bool in_last, MetricLanes& L) noexcept {
  metric_update(c2, auc_piece(L.prev, c2), t, dt, in_last, L);
}

// Lane l's {cmax, tmax, auc, cmin} (NaN when not ok).
inline void metric_out(const MetricLanes& L, int l, bool ok, double* out) noexcept {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ok = ok && L.nonfinite[l] == 0.0;
  out[0] = ok ? L.cmax[l] : nan;
  out[1] = ok ? L.tmax[l] : nan;
  out[2] = ok ? L.auc[l] : nan;
  out[3] = ok && L.cmin[l] != std::numeric_limits<double>::infinity() ? L.cmin[l] : nan;
}

}  // namespace pkscan::detail
