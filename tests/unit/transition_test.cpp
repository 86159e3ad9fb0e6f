// The exact discretization's transition matrices (engine/grid/transition.cpp) against Eigen's
// MatrixFunctions exponential of the augmented matrix [[A, I], [0, 0]] h (Higham's Pade scaling
// and squaring), for random Metzler rate matrices of linear PK models from mild to stiff.
#include "grid/transition.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <unsupported/Eigen/MatrixFunctions>

namespace pkscan::detail {
namespace {

// A random rate matrix of a linear compartment model: flows k_ij >= 0 from j to i, outflows
// >= 0 from each compartment, rates log-uniform in [lo, hi].
template <int N>
Mat<N> random_rates(std::mt19937_64& g, double lo, double hi) {
  std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
  std::bernoulli_distribution some(0.6);
  Mat<N> a = Mat<N>::Zero();
  for (int j = 0; j < N; ++j) {
    for (int i = 0; i < N; ++i) {
      if (i == j || !some(g)) continue;
      const double k = std::exp(u(g));
      a(i, j) += k;
      a(j, j) -= k;
    }
    if (some(g)) a(j, j) -= std::exp(u(g));  // elimination
  }
  return a;
}

template <int N>
void expect_matches_augmented_exponential(std::uint64_t seed) {
  std::mt19937_64 g(seed);
  double worst = 0.0;
  for (int trial = 0; trial < 300; ++trial) {
    const double hi = trial % 3 == 0 ? 1.0 : trial % 3 == 1 ? 30.0 : 1000.0;
    const Mat<N> a = random_rates<N>(g, 1e-3, hi);
    for (double h : {0.01, 0.1, 1.0, 24.0}) {
      Eigen::Matrix<double, 2 * N, 2 * N> aug = Eigen::Matrix<double, 2 * N, 2 * N>::Zero();
      aug.template topLeftCorner<N, N>() = a * h;
      aug.template topRightCorner<N, N>() = Eigen::Matrix<double, N, N>::Identity() * h;
      const Eigen::Matrix<double, 2 * N, 2 * N> e = aug.exp();
      Mat<N> k, gm;
      exact_transition<N>(a, h, k, gm);
      // Norm-wise, as scaling and squaring is accurate (Higham 2005): the columns of K of a
      // Metzler matrix with nonpositive column sums sum to at most 1, those of G to at most h.
      // (Entries far below that carry the relative error of the squarings, 2^s ulp, in both.)
      const double dk = (k - Mat<N>(e.template topLeftCorner<N, N>())).cwiseAbs().maxCoeff();
      const double dg = (gm - Mat<N>(e.template topRightCorner<N, N>())).cwiseAbs().maxCoeff() / h;
      EXPECT_LT(dk, 1e-14) << "K, trial " << trial << ", h " << h << "\n" << a;
      EXPECT_LT(dg, 1e-14) << "G, trial " << trial << ", h " << h << "\n" << a;
      worst = std::max({worst, dk, dg});
    }
  }
  ::testing::Test::RecordProperty("worst_relative_difference", std::to_string(worst));
}

TEST(ExactTransition, MatchesAugmentedExponential1To6Compartments) {
  expect_matches_augmented_exponential<1>(1);
  expect_matches_augmented_exponential<2>(2);
  expect_matches_augmented_exponential<3>(3);
  expect_matches_augmented_exponential<4>(4);
  expect_matches_augmented_exponential<6>(6);
}

TEST(ExactTransition, ClosedFormOfOneCompartment) {
  // dx/dt = -k x: K = exp(-k h), G = (1 - exp(-k h)) / k; k = 0: K = 1, G = h. Norm-wise (K
  // <= 1, G <= h), through the Taylor path (k h <= 16) and the stiff one.
  for (double k : {0.0, 1e-9, 0.3, 7.0, 300.0})
    for (double h : {0.05, 1.0, 12.0}) {
      Mat<1> a, km, gm;
      a(0, 0) = -k;
      exact_transition<1>(a, h, km, gm);
      const double want_k = std::exp(-k * h);
      const double want_g = k == 0.0 ? h : -std::expm1(-k * h) / k;
      EXPECT_NEAR(km(0, 0), want_k, 4e-15) << k << " " << h;
      EXPECT_NEAR(gm(0, 0), want_g, 4e-15 * h) << k << " " << h;
      if (k * h <= 16.0) {  // Taylor path: relative accuracy too
        EXPECT_NEAR(km(0, 0), want_k, 1e-14 * want_k) << k << " " << h;
        EXPECT_NEAR(gm(0, 0), want_g, 1e-14 * want_g) << k << " " << h;
      }
    }
}

TEST(ExactTransition, NonFiniteRatesGiveNaN) {
  Mat<2> a;
  a << -1e308, 0.0, 1e308, -1.0;
  Mat<2> k, g;
  exact_transition<2>(a, 1e10, k, g);  // A h overflows
  EXPECT_TRUE(k.array().isNaN().all());
  EXPECT_TRUE(g.array().isNaN().all());
}

}  // namespace
}  // namespace pkscan::detail
