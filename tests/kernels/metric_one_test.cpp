// The device summary's metrics (MetricOne, kernels/summary.hpp: one subject, the operations
// of the CPU's lane kernel) against the lane kernel itself (MetricLanes, summary/metric_lanes.hpp:
// eight subjects, one per lane), bit for bit, on values chosen to reach every branch: slow and
// steep declines (the series below x = 1/16 and the logarithm above, ratios past DBL_MAX),
// rises, plateaus, zeros, negative rounding noise, subnormals, infinities and NaN, and a last
// dosing interval that starts anywhere. This file is compiled with -ffp-contract=off, as every
// host file that holds this arithmetic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kernels/summary.hpp"
#include "summary/metric_lanes.hpp"

namespace pkscan::detail {
namespace {

// The next value of a lane's series after `prev`.
double next_value(std::mt19937& rng, double prev) {
  std::uniform_int_distribution<int> kind(0, 15);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double inf = std::numeric_limits<double>::infinity();
  const double base = prev > 0.0 && std::isfinite(prev) ? prev : 1.0;
  switch (kind(rng)) {
    case 0:
      return base * (1.0 - 0.0625 * u(rng) * 0.999);  // just below the series' edge
    case 1:
      return base / (1.0625 * (1.0 + 1e-15 * u(rng)));  // around x = 1/16
    case 2:
      return base * 1e-300;  // a ratio past DBL_MAX when prev is large
    case 3:
      return base * (1.0 + u(rng));  // a rise
    case 4:
      return base;  // a plateau
    case 5:
      return u(rng) < 0.5 ? 0.0 : -1e-18 * u(rng);  // zero and negative noise
    case 6:
      return 4.9e-324 * (1.0 + 10.0 * u(rng));  // subnormal
    case 7:
      return u(rng) < 0.05 ? (u(rng) < 0.5 ? inf : std::nan("")) : base * 0.5;
    case 8:
      return 1e300 * u(rng);
    default:
      return base * std::exp(-3.0 * u(rng));  // an ordinary decline
  }
}

TEST(MetricOne, GivesTheLaneKernelsBitsForEveryBranch) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int compared = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int times = 1 + static_cast<int>(u(rng) * 40);
    const std::int64_t i0 = static_cast<std::int64_t>(u(rng) * (times + 1));
    std::vector<double> t(static_cast<std::size_t>(times));
    double at = u(rng) < 0.5 ? 0.0 : 3.7 * u(rng);
    for (double& ti : t) {
      ti = at;
      at += u(rng) < 0.1 ? 1e-9 : 0.1 + 5.0 * u(rng);
    }
    std::vector<double> c(static_cast<std::size_t>(times) * 8);
    for (int l = 0; l < 8; ++l) {
      double prev = 10.0 * u(rng);
      for (int k = 0; k < times; ++k) {
        prev = k == 0 ? prev : next_value(rng, prev);
        c[static_cast<std::size_t>(k * 8 + l)] = prev;
      }
    }
    MetricLanes lanes;
    v8d v;
    std::memcpy(&v, c.data(), sizeof v);
    metric_first(v, t[0], 0 >= i0, lanes);
    for (int k = 1; k < times; ++k) {
      std::memcpy(&v, c.data() + k * 8, sizeof v);
      const double tk = t[static_cast<std::size_t>(k)];
      metric_next(v, tk, tk - t[static_cast<std::size_t>(k - 1)], k >= i0, lanes);
    }
    for (int l = 0; l < 8; ++l) {
      const bool ok = (trial + l) % 9 != 0;  // some subjects with a status that is not Ok
      MetricOne one;
      one.first(c[static_cast<std::size_t>(l)], t[0], 0 >= i0);
      for (int k = 1; k < times; ++k) {
        const double tk = t[static_cast<std::size_t>(k)];
        one.next(c[static_cast<std::size_t>(k * 8 + l)], tk,
                 tk - t[static_cast<std::size_t>(k - 1)], k >= i0);
      }
      double want[4], got[4];
      metric_out(lanes, l, ok, want);
      one.out(ok, got);
      ASSERT_EQ(std::memcmp(want, got, sizeof want), 0)
          << "trial " << trial << " lane " << l << ": cmax " << want[0] << "/" << got[0] << " tmax "
          << want[1] << "/" << got[1] << " auc " << want[2] << "/" << got[2] << " cmin " << want[3]
          << "/" << got[3];
      ++compared;
    }
  }
  EXPECT_EQ(compared, 3000 * 8);
}

// log_ge1_one is the lane logarithm for one value, on [1, DBL_MAX], within 2 ulp of the
// library's.
TEST(MetricOne, LogarithmMatchesTheLaneKernelAndTheLibrary) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> e(0.0, 1023.0);
  for (int i = 0; i < 20000; ++i) {
    double x[8];
    for (double& xi : x) xi = std::exp2(e(rng));
    if (i == 0) {  // both ends of the range
      x[0] = 1.0;
      x[1] = kDblMax;
    }
    v8d v;
    std::memcpy(&v, x, sizeof v);
    const v8d lv = log_ge1(v);
    for (int l = 0; l < 8; ++l) {
      const double one = log_ge1_one(x[l]);
      const double lane = lv[l];
      ASSERT_EQ(std::memcmp(&one, &lane, sizeof one), 0) << x[l];
      ASSERT_NEAR(one, std::log(x[l]), 2.5e-16 * std::max(1.0, std::fabs(std::log(x[l])))) << x[l];
    }
  }
}

}  // namespace
}  // namespace pkscan::detail
