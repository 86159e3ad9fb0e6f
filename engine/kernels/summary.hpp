#pragma once
// The per-value arithmetic of the population summaries as PKSCAN_HD functions, for the CPU
// files (sketch.hpp, summary_state.hpp, metric_lanes.hpp) and the device summary
// (device/summary_kernels.hpp, built by nvcc and by g++ for Thrust's host system):
//  - the sketch's keys (summary/sketch.hpp);
//  - the fixed tree that combines a block's 8 lane sums (summary/summary_state.hpp);
//  - the exposure metrics of one subject (summary/metric_lanes.hpp runs the same operations on
//    8 subjects at once, one per lane, and each lane's result depends on its own values only,
//    so one subject here gets the lane's bits).
// No standard-library maths: every operation is an IEEE basic operation or a fused
// multiply-add, correctly rounded on the CPU and on CUDA, so with no contraction (the CPU files
// build with -ffp-contract=off, cuda/launch_cuda.cu with --fmad=false) both give the same bits.
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/hd.hpp"

namespace pkscan::detail {

constexpr std::uint64_t kPosFiniteMax = 0x7FEFFFFFFFFFFFFFull;  // bits of DBL_MAX
constexpr std::uint64_t kAbsMask = 0x7FFFFFFFFFFFFFFFull;
constexpr std::uint64_t kInfBits = 0x7FF0000000000000ull;
constexpr int kKeyShift = 45;  // a key is the exponent and the top 7 mantissa bits
constexpr double kDblMax = 1.7976931348623157e308;

PKSCAN_HD inline std::uint64_t hd_bits(double x) {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
PKSCAN_HD inline double hd_from_bits(std::uint64_t b) {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// The 8 lane sums of one row (lane l at p[l * k]), combined in a fixed tree.
PKSCAN_HD inline double lane_tree8(const double* p, std::int64_t k) {
  return ((p[0] + p[k]) + (p[2 * k] + p[3 * k])) + ((p[4 * k] + p[5 * k]) + (p[6 * k] + p[7 * k]));
}

// ---- Exposure metrics -------------------------------------------------------------------------

// ln(x) for x in [1, DBL_MAX] (metric_lanes.hpp's log_ge1 and log_ge1_one below): c_j = 1 + (j +
// 1/2)/16, its reciprocal RN(1/c_j) and -ln RN(1/c_j), correctly rounded. Listed once, as macros:
// the host keeps them in one table, device code needs its own copy (a namespace-scope array is
// not device memory).
#define PKSCAN_LOG_INV_C                                                              \
  0.9696969696969697, 0.9142857142857143, 0.8648648648648649, 0.8205128205128205,     \
      0.7804878048780488, 0.7441860465116279, 0.7111111111111111, 0.6808510638297872, \
      0.6530612244897959, 0.6274509803921569, 0.6037735849056604, 0.5818181818181818, \
      0.5614035087719298, 0.5423728813559322, 0.5245901639344263, 0.5079365079365079
#define PKSCAN_LOG_C                                                                    \
  0.03077165866675366, 0.08961215868968717, 0.14518200984449783, 0.19782574332991992,   \
      0.2478361639045812, 0.2954642128938359, 0.3409265869705932, 0.38441169891033206,  \
      0.42608439531090014, 0.46608972992459924, 0.5045560107523953, 0.5415972824327444, \
      0.5773153650348236, 0.6118015411059929, 0.6451379613735847, 0.6773988235918061
inline constexpr double kLogInvC[16] = {PKSCAN_LOG_INV_C};
inline constexpr double kLogC[16] = {PKSCAN_LOG_C};

// log1p(u) for |u| < 0.031 by its Taylor series to u^10 (Horner), for a double or a vector.
template <class V>
PKSCAN_HD_FORCEINLINE V log1p_series(V u) {
  return u * (1.0 +
              u * (-1.0 / 2 +
                   u * (1.0 / 3 +
                        u * (-1.0 / 4 +
                             u * (1.0 / 5 +
                                  u * (-1.0 / 6 +
                                       u * (1.0 / 7 +
                                            u * (-1.0 / 8 + u * (1.0 / 9 + u * (-1.0 / 10))))))))));
}

constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2 with 21 trailing zero bits
constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi

// One value of metric_lanes.hpp's log_ge1.
PKSCAN_HD inline double log_ge1_one(double x) {
#if defined(__CUDA_ARCH__)
  const double inv_c[16] = {PKSCAN_LOG_INV_C};
  const double log_c[16] = {PKSCAN_LOG_C};
#else
  const double* inv_c = kLogInvC;
  const double* log_c = kLogC;
#endif
  const std::uint64_t b = hd_bits(x);
  // Exponent as a double, exactly: 2^52 + (b >> 52) minus 2^52 + 1023.
  const double e = hd_from_bits((b >> 52) | 0x4330000000000000ull) - 4503599627371519.0;
  const double m = hd_from_bits((b & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
  const int j = static_cast<int>((b >> 48) & 15);
  const double u = m * inv_c[j] - 1.0;
  const double p = log1p_series(u);
  return e * kLn2Hi + (log_c[j] + (p + e * kLn2Lo));
}

// Gregory's coefficients: x / ln(1 + x) = 1 + G_1 x + G_2 x^2 + ... (G_1 = 1/2, G_2 = -1/12, ...),
// each the double nearest to the exact fraction. A macro for the same reason as the logarithm's
// tables.
#define PKSCAN_GREGORY                                                                       \
  0.5, -0.08333333333333333, 0.041666666666666664, -0.02638888888888889, 0.01875,            \
      -0.014269179894179895, 0.01136739417989418, -0.00935653659611993, 0.00789255401234568, \
      -0.006785849984634707, 0.005924056412337663, -0.005236693257950285
inline constexpr double kGregory[12] = {PKSCAN_GREGORY};
// Below this x = c1 / c2 - 1 the series is used: its terms after G_12 x^12 add up to less
// than 1.1e-18 relative.
constexpr double kSeriesMax = 0.0625;

PKSCAN_HD inline double hd_fma(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return fma(a, b, c);
#else
  return __builtin_fma(a, b, c);
#endif
}

// One subject's piece of metric_lanes.hpp's auc_piece (its comment gives the method).
PKSCAN_HD inline double auc_piece_one(double c1, double c2) {
  const double d = c1 - c2;
  const double q = (c2 < d) ? c2 : d;
  if (!(q > 0.0)) return 0.5 * (c1 + c2);
  const double x = d / c2;
  if (x < kSeriesMax) {
#if defined(__CUDA_ARCH__)
    const double kGregory[12] = {PKSCAN_GREGORY};
#endif
    const double x2 = x * x;
    const double x4 = x2 * x2;
    const double x8 = x4 * x4;
    const double p0 = hd_fma(kGregory[1], x, kGregory[0]);
    const double p1 = hd_fma(kGregory[3], x, kGregory[2]);
    const double p2 = hd_fma(kGregory[5], x, kGregory[4]);
    const double p3 = hd_fma(kGregory[7], x, kGregory[6]);
    const double p4 = hd_fma(kGregory[9], x, kGregory[8]);
    const double p5 = hd_fma(kGregory[11], x, kGregory[10]);
    const double h =
        hd_fma(hd_fma(p5, x2, p4), x8, hd_fma(hd_fma(p3, x2, p2), x4, hd_fma(p1, x2, p0)));
    return hd_fma(d, h, c2);
  }
  double r = c1 / c2;
  r = (r < kDblMax) ? r : kDblMax;
  return d / log_ge1_one(r);
}

// One subject's metrics (metric_lanes.hpp's MetricLanes, one lane).
struct MetricOne {
  double prev = 0.0;
  double cmax = 0.0, tmax = 0.0, cmin = 0.0, auc = 0.0;
  double nonfinite = 0.0;  // 0 while every value seen is finite, NaN after

  // Output index 0 (value c at time t).
  PKSCAN_HD void first(double c, double t, bool in_last) {
    const double inf = hd_from_bits(kInfBits);
    cmax = -inf;
    tmax = inf;
    cmin = inf;
    auc = 0.0;
    nonfinite = c * 0.0;  // inf * 0 and NaN * 0 are NaN
    next_extremes(c, t, in_last);
  }
  // Output index k >= 1: value c2 at time t, dt = t_k - t_{k-1}.
  PKSCAN_HD void next(double c2, double t, double dt, bool in_last) {
    auc = auc + dt * auc_piece_one(prev, c2);
    next_extremes(c2, t, in_last);
    nonfinite = nonfinite + c2 * 0.0;
  }
  // {cmax, tmax, auc, cmin}, NaN when not ok (metric_lanes.hpp's metric_out).
  PKSCAN_HD void out(bool ok, double* o) const {
    const double nan = hd_from_bits(0x7FF8000000000000ull);
    ok = ok && nonfinite == 0.0;
    o[0] = ok ? cmax : nan;
    o[1] = ok ? tmax : nan;
    o[2] = ok ? auc : nan;
    o[3] = ok && cmin != hd_from_bits(kInfBits) ? cmin : nan;
  }

 private:
  PKSCAN_HD void next_extremes(double c, double t, bool in_last) {
    // Maximum (first time reached): the time changes only when the maximum strictly grows.
    const double m = (c > cmax) ? c : cmax;
    tmax = (m != cmax) ? t : tmax;
    cmax = m;
    if (in_last) cmin = (c < cmin) ? c : cmin;  // minimum over the last dosing interval
    prev = c;
  }
};

// The first output index at or after the last dose (0 when there is no dose: last_dose NaN):
// where Cmin's interval starts.
inline std::int64_t first_index_at_or_after(const std::vector<double>& t,
                                            double last_dose) noexcept {
  if (last_dose != last_dose) return 0;
  std::int64_t i = 0;
  while (i < static_cast<std::int64_t>(t.size()) && t[static_cast<std::size_t>(i)] < last_dose) ++i;
  return i;
}

}  // namespace pkscan::detail
