// The affine-composition operator of kernels/grid.hpp (what a parallel scan over time combines) in
// scans that regroup it: tbb::parallel_scan splits the range, pre-scans the pieces another thread
// took and combines their totals, so an element's prefix is composed in another grouping than
// left to right. (The OpenMP system's inclusive_scan in CUDA 13.0's CCCL is serial and never
// regroups, and so, measured here, does the TBB system's inclusive_scan of the same CCCL: it ran
// every combination left to right on one thread; it is checked too. grid_math_test.cpp checks
// associativity on regrouped random triples.) Each element carries the range of steps it
// composes, so the test sees whether a combination was regrouped (it skips, saying so, if TBB ran
// the whole scan on one thread); the prefixes must equal the left-to-right composition:
//   - exactly, for signed permutations with offsets in multiples of 1/2 (every product and sum
//     exact, so grouping cannot change a bit);
//   - to 1e-12 relative, for contracting maps of a grid step (entries in [0, 1), column sums
//     below 1), as the power path composes them.
#include <gtest/gtest.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_scan.h>
#include <thrust/execution_policy.h>
#include <thrust/scan.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/grid.hpp"

namespace pkscan::detail {
namespace {

constexpr int N = 3;

// An affine map x <- K x + b composing steps lo .. hi.
struct Map {
  double k[N * N];
  double b[N];
  std::int64_t lo, hi;
};

std::atomic<std::int64_t> regrouped{0};  // combinations whose left operand does not start at 0

// Step hi's map after step lo's: (later) o (earlier), in scan order (a before b).
struct Compose {
  Map operator()(const Map& a, const Map& b) const {
    Map out;
    affine_compose<N, double>(b.k, b.b, a.k, a.b, out.k, out.b);
    out.lo = a.lo;
    out.hi = b.hi;
    if (a.lo != 0) regrouped.fetch_add(1, std::memory_order_relaxed);
    return out;
  }
};

std::vector<Map> random_maps(std::int64_t n, bool dyadic, std::mt19937_64& rng) {
  std::uniform_int_distribution<int> small(-2, 2), sign(0, 1);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<Map> maps(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    Map& m = maps[static_cast<std::size_t>(i)];
    if (dyadic) {
      // A signed permutation: every product of them is one, and every entry stays exact.
      int perm[N] = {0, 1, 2};
      std::shuffle(perm, perm + N, rng);
      for (int e = 0; e < N * N; ++e) m.k[e] = 0.0;
      for (int r = 0; r < N; ++r) m.k[r * N + perm[r]] = sign(rng) ? 1.0 : -1.0;
    } else {
      for (int c = 0; c < N; ++c) {
        double left = 0.9;  // column sums below 1: a contracting map, as a grid step's K is
        for (int r = 0; r < N; ++r) {
          const double v = u(rng) * left;
          left -= v;
          m.k[r * N + c] = v;
        }
      }
    }
    for (int r = 0; r < N; ++r) m.b[r] = dyadic ? small(rng) * 0.5 : u(rng);
    m.lo = m.hi = i;
  }
  return maps;
}

void expect_prefixes(const std::vector<Map>& got, const std::vector<Map>& want, bool dyadic) {
  int bad = 0;
  for (std::size_t i = 0; i < want.size() && bad < 10; ++i) {
    EXPECT_EQ(got[i].lo, 0);
    EXPECT_EQ(got[i].hi, static_cast<std::int64_t>(i));
    for (int e = 0; e < N * N + N; ++e) {
      const double w = e < N * N ? want[i].k[e] : want[i].b[e - N * N];
      const double g = e < N * N ? got[i].k[e] : got[i].b[e - N * N];
      const bool ok = dyadic ? g == w : std::abs(g - w) <= 1e-12 * std::max(1.0, std::abs(w));
      if (!ok) ++bad;
      EXPECT_TRUE(ok) << "prefix " << i << " entry " << e << ": " << g << " against " << w;
    }
  }
}

void expect_scan_equals_left_to_right(std::int64_t n, bool dyadic) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(n) * 7 + dyadic);
  const std::vector<Map> maps = random_maps(n, dyadic, rng);
  std::vector<Map> want(maps.size());
  want[0] = maps[0];
  for (std::size_t i = 1; i < maps.size(); ++i) want[i] = Compose{}(want[i - 1], maps[i]);

  // Thrust's TBB system (the device code's host systems are Thrust's).
  std::vector<Map> got(maps.size());
  thrust::inclusive_scan(thrust::device, maps.begin(), maps.end(), got.begin(), Compose{});
  expect_prefixes(got, want, dyadic);

  // TBB's parallel scan, which regroups when a piece is taken by another thread. The identity
  // map (K = I, b = 0) starts each piece; composing with it is exact.
  Map identity{};
  for (int r = 0; r < N; ++r) identity.k[r * N + r] = 1.0;
  identity.lo = -1;
  auto compose = [](const Map& a, const Map& b) {
    if (a.lo < 0) return b;
    if (b.lo < 0) return a;
    return Compose{}(a, b);
  };
  // Whether a piece is taken depends on the other thread being free: up to 50 tries.
  std::vector<Map> par(maps.size());
  regrouped = 0;
  for (int attempt = 0; attempt < 50 && regrouped.load() == 0; ++attempt)
    tbb::parallel_scan(
        tbb::blocked_range<std::size_t>(0, maps.size(), 1024), identity,
        [&](const tbb::blocked_range<std::size_t>& r, Map sum, bool is_final) {
          for (std::size_t i = r.begin(); i != r.end(); ++i) {
            sum = compose(sum, maps[i]);
            if (is_final) par[i] = sum;
          }
          return sum;
        },
        compose);
  if (regrouped.load() == 0)
    GTEST_SKIP() << "TBB ran the whole scan on one thread 50 times: nothing regrouped to check";
  expect_prefixes(par, want, dyadic);
}

TEST(AffineScanTbb, DyadicMapsGiveTheSameBitsInAnyGrouping) {
  expect_scan_equals_left_to_right(200000, true);
}

TEST(AffineScanTbb, GridStepMapsAgreeToRounding) {
  expect_scan_equals_left_to_right(200000, false);
}

}  // namespace
}  // namespace pkscan::detail
