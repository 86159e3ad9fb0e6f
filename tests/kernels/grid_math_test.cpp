// kernels/grid.hpp, the arithmetic every grid path (CPU and device) shares, checked on its own:
// - dot_eigen_order against Eigen's own fixed-size matrix-vector product (bit for bit, N = 1..6):
//   the breakpoint inputs of every path must be the numbers the host computed with Eigen before;
// - affine_compose is associative (what a parallel scan over time regroups): random triples
//   composed both ways agree to rounding, and exactly where every product is exact;
// - the power table and jumps against repeated single steps.
// This file is compiled with -ffp-contract=off, as every host file that includes kernels/grid.hpp.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/grid.hpp"

namespace pkscan::detail {
namespace {

template <int N>
using RowMat = Eigen::Matrix<double, N, N, Eigen::RowMajor>;

template <int N>
void expect_eigen_order(std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int mismatches = 0;
  for (int trial = 0; trial < 4000; ++trial) {
    RowMat<N> a;
    Eigen::Matrix<double, N, 1> v;
    for (int i = 0; i < N * N; ++i)
      a.data()[i] = u(rng) * std::pow(10.0, static_cast<int>(u(rng) * 6) - 3);
    for (int i = 0; i < N; ++i) v(i) = u(rng) * 100.0;
    Eigen::Matrix<double, N, 1> want;
    want.noalias() = a * v;
    for (int r = 0; r < N; ++r) {
      const double got = dot_eigen_order<N>(a.data() + r * N, 1, v.data());
      if (std::memcmp(&got, &want(r), sizeof(double)) != 0) ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << "N = " << N;
}

TEST(GridMath, DotHasEigensOrderBitForBit) {
  std::mt19937 rng(3);
  expect_eigen_order<1>(rng);
  expect_eigen_order<2>(rng);
  expect_eigen_order<3>(rng);
  expect_eigen_order<4>(rng);
  expect_eigen_order<5>(rng);
  expect_eigen_order<6>(rng);
}

TEST(GridMath, DotReadsAStridedRow) {
  // Row r of a structure-of-arrays buffer: element i at a[i * stride].
  const double a[] = {1.0, -7.0, 2.0, -7.0, 3.0, -7.0};
  const double v[] = {4.0, 5.0, 6.0};
  EXPECT_EQ(dot_eigen_order<3>(a, 2, v), 4.0 + 10.0 + 18.0);
}

template <int N>
struct Affine {
  double k[N * N];
  double b[N];
};

template <int N>
Affine<N> compose(const Affine<N>& second, const Affine<N>& first) {
  Affine<N> out;
  affine_compose<N, double>(second.k, second.b, first.k, first.b, out.k, out.b);
  return out;
}

template <int N>
Affine<N> random_affine(std::mt19937& rng, bool dyadic) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Affine<N> m;
  for (double& x : m.k) x = dyadic ? std::floor(u(rng) * 8.0) / 8.0 : u(rng) / N;
  for (double& x : m.b) x = dyadic ? std::floor(u(rng) * 16.0) : u(rng) * 10.0;
  return m;
}

TEST(GridMath, AffineCompositionIsAssociativeOnRandomTriples) {
  std::mt19937 rng(11);
  double worst = 0.0;
  for (int trial = 0; trial < 2000; ++trial) {
    const Affine<3> a = random_affine<3>(rng, false), b = random_affine<3>(rng, false),
                    c = random_affine<3>(rng, false);
    const Affine<3> left = compose(compose(c, b), a);   // (c o b) o a
    const Affine<3> right = compose(c, compose(b, a));  // c o (b o a)
    for (int i = 0; i < 9; ++i)
      worst = std::max(worst, std::fabs(left.k[i] - right.k[i]) / std::fabs(right.k[i]));
    for (int i = 0; i < 3; ++i)
      worst = std::max(worst, std::fabs(left.b[i] - right.b[i]) / std::fabs(right.b[i]));
  }
  EXPECT_LT(worst, 1e-14);
  EXPECT_GT(worst, 0.0) << "regrouping changes roundings: the check compares two groupings";
}

TEST(GridMath, AffineCompositionIsExactlyAssociativeWhenNothingRounds) {
  // Eighths and small integers: every product and sum is exact, so both groupings give the same
  // bits, and so must the operator (a wrong operator, e.g. b2 + K1 b1, fails here).
  std::mt19937 rng(5);
  for (int trial = 0; trial < 500; ++trial) {
    const Affine<4> a = random_affine<4>(rng, true), b = random_affine<4>(rng, true),
                    c = random_affine<4>(rng, true);
    const Affine<4> left = compose(compose(c, b), a);
    const Affine<4> right = compose(c, compose(b, a));
    ASSERT_EQ(std::memcmp(&left, &right, sizeof(left)), 0) << "trial " << trial;
    // And the composition is the map applied twice: c(b(a(x))) for x = 0 is the offset.
    double x[4] = {0, 0, 0, 0}, y[4];
    affine_step<4, double>(a.k, x, a.b, y);
    affine_step<4, double>(b.k, y, b.b, x);
    affine_step<4, double>(c.k, x, c.b, y);
    for (int r = 0; r < 4; ++r) EXPECT_EQ(y[r], left.b[r]);
  }
}

TEST(GridMath, PowerTableJumpsEqualRepeatedSteps) {
  constexpr int N = 3;
  const double k[N * N] = {0.9, 0.0, 0.0, 0.08, 0.85, 0.05, 0.0, 0.1, 0.94};
  const double c[N] = {0.0, 1.5, 0.0};
  const std::int64_t steps = 1000;
  const int levels = power_levels(steps);
  EXPECT_EQ(levels, 10);  // 2^10 = 1024 > 1000 >= 2^9
  std::vector<double> storage(static_cast<std::size_t>(levels) * 2 * N * N);
  const PowerTable<double> table{storage.data(), 1, levels};
  build_power_table<N, double>(k, 1, table);
  for (std::int64_t m : {1, 2, 7, 64, 999}) {
    double jumped[N] = {100.0, 0.0, 0.0}, stepped[N] = {100.0, 0.0, 0.0};
    jump<N, double>(table, jumped, c, false, m);
    for (std::int64_t i = 0; i < m; ++i) affine_step_in_place<N, double>(k, stepped, c);
    for (int r = 0; r < N; ++r) EXPECT_NEAR(jumped[r], stepped[r], 1e-12 * (1.0 + stepped[r]));
  }
}

TEST(GridMath, AllFiniteSeesNanAndInfinity) {
  double v[3] = {1.0, 2.0, 3.0};
  EXPECT_TRUE(all_finite(v, 3));
  v[1] = std::nan("");
  EXPECT_FALSE(all_finite(v, 3));
  v[1] = INFINITY;
  EXPECT_FALSE(all_finite(v, 3));
  EXPECT_TRUE(all_finite(v, 1));
}

}  // namespace
}  // namespace pkscan::detail
