// The exact discretization's transition matrices (engine/grid/transition.cpp) against Eigen's
// MatrixFunctions exponential of the augmented matrix [[A, I], [0, 0]] h (Higham's Pade scaling
// and squaring) in long double for random Metzler rate matrices of linear PK models from mild to
// moderately stiff, and against closed forms and limits for rate constants from 1e-300 to 1e300.
#include "grid/transition.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "support/augmented_exponential.hpp"

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
  int compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const double hi = trial % 3 == 0 ? 1.0 : trial % 3 == 1 ? 30.0 : 1000.0;
    const Mat<N> a = random_rates<N>(g, 1e-3, hi);
    for (double h : {0.01, 0.1, 1.0, 24.0}) {
      // In long double (test::augmented_exponential): Pade's squarings cost it 2^s of its
      // 2^-64, which stays below 1e-15 at these norms; in double they would cost 2^s of 2^-53.
      Eigen::MatrixXd ek, eg;
      test::augmented_exponential(a, h, ek, eg);
      Mat<N> k, gm;
      exact_transition<N>(a, h, k, gm);
      // Norm-wise, as scaling and squaring is accurate (Higham 2005): the columns of K of a
      // Metzler matrix with nonpositive column sums sum to at most 1, those of G to at most h.
      // (Entries far below that carry the relative error of the squarings, 2^s ulp, in both.)
      const double dk = (k - Mat<N>(ek)).cwiseAbs().maxCoeff();
      const double dg = (gm - Mat<N>(eg)).cwiseAbs().maxCoeff() / h;
      // Beyond ||A h||_1 = 16 (the stiff path) the reference's own error, 2^s of 2^-64 for
      // its s squarings (s up to 20 here; measured up to 5e-13), is above the path's: there
      // the mpmath cases below are the reference.
      const double norm = (a * h).cwiseAbs().colwise().sum().maxCoeff();
      if (norm > 16.0) continue;
      EXPECT_LT(dk, 1e-14) << "K, trial " << trial << ", h " << h << "\n" << a;
      EXPECT_LT(dg, 1e-14) << "G, trial " << trial << ", h " << h << "\n" << a;
      ++compared;
      worst = std::max({worst, dk, dg});
    }
  }
  EXPECT_GE(compared, 300);
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

// The stiff path against mpmath's exponentials at 80 digits (tests/data/reference/
// expm_stiff.txt, expm_sweep.txt), norm-wise (columns of K sum to at most 1, of G to at most
// h) and entrywise for entries above 1e-100 (K; 1e-100 h for G). Below that an entry can start
// the doublings below the range of double and lose its relative accuracy (rates 1e160 apart:
// an entry of 1e-181 whose value after the first of 600 doublings is 1e-361); it is still right
// to 1e-14 norm-wise. The tolerance is what the data allow: a diagonal
// entry a_jj of A is -(sum of the flows out of j) rounded, so A's column sums hold residues of up
// to a few u |a_jj| (u = 2^-53), an elimination or creation of that size that mpmath takes as
// exact and the path as none (it cannot tell them from rounding); it moves the result by up to
// that times the time the mass spends in j (row j of G). Most cases have no such residue that
// matters: they must agree to 1e-14.
template <int N>
void expect_matches_reference(const std::vector<double>& v, int line, double& worst_norm,
                              double& worst_entry, int& sharp) {
  const double h = v[1];
  Mat<N> a, want_k, want_g;
  for (int e = 0; e < N * N; ++e) {
    a.data()[e] = v[static_cast<std::size_t>(2 + e)];
    want_k.data()[e] = v[static_cast<std::size_t>(2 + N * N + e)];
    want_g.data()[e] = v[static_cast<std::size_t>(2 + 2 * N * N + e)];
  }
  Mat<N> k, g;
  exact_transition<N>(a, h, k, g);
  // Compartment j's residue, up to 4 u |a_jj| (a few outflows summed), acts on the mass while
  // it is in j: at most row j of G (the time spent in j) for K, h times that for G.
  double residues = 0.0;
  for (int j = 0; j < N; ++j)
    residues = std::max(residues,
                        4.0 * 0x1.0p-53 * std::fabs(a(j, j)) * want_g.row(j).cwiseAbs().maxCoeff());
  const double dn =
      std::max((k - want_k).cwiseAbs().maxCoeff(), (g - want_g).cwiseAbs().maxCoeff() / h);
  EXPECT_LT(dn, 1e-14 + residues) << "line " << line << "\n" << a;
  sharp += dn < 1e-14;
  double de = 0.0;
  for (const auto& [got, want, unit] :
       {std::tuple<const Mat<N>&, const Mat<N>&, double>{k, want_k, 1.0},
        std::tuple<const Mat<N>&, const Mat<N>&, double>{g, want_g, h}})
    for (int j = 0; j < N; ++j) {
      for (int i = 0; i < N; ++i)
        if (std::fabs(want(i, j)) > 1e-100 * unit)
          de = std::max(de, std::fabs(got(i, j) - want(i, j)) / std::fabs(want(i, j)));
    }
  EXPECT_LT(de, 1e-12 + 2.0 * residues) << "line " << line << "\n" << a;
  worst_norm = std::max(worst_norm, dn);
  worst_entry = std::max(worst_entry, de);
}

// Every case of one of the mpmath files; returns {cases, stiff cases, sharp cases}.
std::array<int, 3> expect_matches_file(const std::string& name) {
  std::ifstream in(std::string(PKSCAN_SOURCE_DIR) + "/tests/data/reference/" + name);
  EXPECT_TRUE(in) << name;
  std::string text;
  int line = 0, stiff = 0, sharp = 0;
  double worst_norm = 0.0, worst_entry = 0.0;
  while (std::getline(in, text)) {
    ++line;
    std::istringstream fields(text);
    std::vector<double> v;
    for (double x; fields >> x;) v.push_back(x);
    if (v.size() < 2) {
      ADD_FAILURE() << name << ":" << line;
      continue;
    }
    const int n = static_cast<int>(v[0]);
    if (v.size() != static_cast<std::size_t>(2 + 3 * n * n)) {
      ADD_FAILURE() << name << ":" << line;
      continue;
    }
    Eigen::MatrixXd a(n, n);
    for (int e = 0; e < n * n; ++e) a(e / n, e % n) = v[static_cast<std::size_t>(2 + e)];
    const double norm = (a * v[1]).cwiseAbs().colwise().sum().maxCoeff();
    stiff += !(norm <= 16.0);
    switch (n) {
      case 2:
        expect_matches_reference<2>(v, line, worst_norm, worst_entry, sharp);
        break;
      case 3:
        expect_matches_reference<3>(v, line, worst_norm, worst_entry, sharp);
        break;
      case 4:
        expect_matches_reference<4>(v, line, worst_norm, worst_entry, sharp);
        break;
      case 5:
        expect_matches_reference<5>(v, line, worst_norm, worst_entry, sharp);
        break;
      case 6:
        expect_matches_reference<6>(v, line, worst_norm, worst_entry, sharp);
        break;
      default:
        ADD_FAILURE() << name << ":" << line << ": N = " << n;
    }
  }
  std::ostringstream worst;
  worst << worst_norm << " " << worst_entry;
  ::testing::Test::RecordProperty(name + "_worst_normwise_entrywise", worst.str());
  return {line, stiff, sharp};
}

TEST(ExactTransition, StiffRandomMatricesAgainstMpmath) {
  const std::array<int, 3> got = expect_matches_file("expm_stiff.txt");
  EXPECT_EQ(got[0], 48);
  EXPECT_GE(got[1], 40);  // the cases exercise the stiff path
  EXPECT_GE(got[2], 40);
}

// The rate matrices of three_compartment and four_compartment with each rate constant in turn
// swept over 1e-300 .. 1e300 (every 10^20), the others typical, against mpmath
// (tests/data/reference/expm_sweep.txt).
TEST(ExactTransition, EachRateConstantOfTheBuiltInModelsAcrossTheWholeRange) {
  const std::array<int, 3> got = expect_matches_file("expm_sweep.txt");
  EXPECT_EQ(got[0], (4 + 6) * 31);
  EXPECT_GE(got[1], (4 + 6) * 15);
  EXPECT_GE(got[2], (4 + 6) * 27);
}

TEST(ExactTransition, NonFiniteRatesGiveNaN) {
  for (double bad : {std::numeric_limits<double>::infinity(), std::nan("")}) {
    Mat<2> a;
    a << -bad, 0.0, bad, -1.0;
    Mat<2> k, g;
    exact_transition<2>(a, 0.5, k, g);
    EXPECT_TRUE(k.array().isNaN().all());
    EXPECT_TRUE(g.array().isNaN().all());
  }
}

TEST(ExactTransition, OverflowingRateTimesStepGivesTheLimit) {
  // ka h = 1e318 overflows a double; ka -> infinity moves the depot into central at once:
  // K = [[0, 0], [0, e^-(ke h)]] (e^-1e10 = 0), G = [[1/ka, 0], [~1 / ke, (1 - e^-(ke h)) / ke]].
  Mat<2> a;
  a << -1e308, 0.0, 1e308, -1.0;
  Mat<2> k, g;
  exact_transition<2>(a, 1e10, k, g);
  EXPECT_EQ(k(0, 0), 0.0);
  EXPECT_EQ(k(1, 0), 0.0);
  EXPECT_EQ(k(1, 1), 0.0);
  EXPECT_EQ(k(0, 1), 0.0);
  EXPECT_NEAR(g(0, 0), 1e-308, 1e-321);
  EXPECT_NEAR(g(1, 0), 1.0, 1e-14);
  EXPECT_NEAR(g(1, 1), 1.0, 1e-14);
  EXPECT_EQ(g(0, 1), 0.0);
}

// Entrywise relative difference, an entry below 1e-290 of its column's largest compared
// absolutely to that (subnormal closed forms carry no relative accuracy).
template <int N>
double entrywise(const Mat<N>& got, const Mat<N>& want) {
  double worst = 0.0;
  for (int j = 0; j < N; ++j) {
    const double col = want.col(j).cwiseAbs().maxCoeff();
    for (int i = 0; i < N; ++i) {
      const double w = want(i, j);
      const double scale = std::fabs(w) > 1e-290 * col ? std::fabs(w) : col;
      if (scale == 0.0) {
        worst = std::max(worst, got(i, j) == 0.0 ? 0.0 : 1.0);
        continue;
      }
      worst = std::max(worst, std::fabs(got(i, j) - w) / scale);
    }
  }
  return worst;
}

// Each rate constant of the absorption chain depot -> central -> (elimination) swept over
// 1e-300 .. 1e300 (every 10^3) with the other fixed, against the closed forms (Bateman):
// K = [[e^-ka h, 0], [ka (e^-ke h - e^-ka h) / (ka - ke), e^-ke h]], G its integral over
// [0, h]: [[s_a, 0], [ka (s_e - s_a) / (ka - ke), s_e]] with s_x = (1 - e^-(x h)) / x.
// Entrywise to a few ulps times each entry's condition: ka -> infinity is a bolus into central
// (K(1, 0) = e^-ke h) and ka -> 0 leaves the dose in the depot.
TEST(ExactTransition, AbsorptionChainAcrossTheWholeRangeOfRates) {
  int tried = 0;
  double worst = 0.0;
  for (double h : {0.5, 24.0})
    for (int which = 0; which < 2; ++which)
      for (int e10 = -300; e10 <= 300; e10 += 3) {
        const double r = std::pow(10.0, e10);
        const double ka = which == 0 ? r : 1.3;
        const double ke = which == 0 ? 0.25 : r;
        Mat<2> a;
        a << -ka, 0.0, ka, -ke;
        Mat<2> k, g;
        exact_transition<2>(a, h, k, g);
        const auto s = [h](double x) { return -std::expm1(-x * h) / x; };
        const double c = ka / (ka - ke);
        Mat<2> want_k, want_g;
        want_k << std::exp(-ka * h), 0.0, c * (std::exp(-ke * h) - std::exp(-ka * h)),
            std::exp(-ke * h);
        want_g << s(ka), 0.0, c * (s(ke) - s(ka)), s(ke);
        // e^-(x h) moves by x h ulps when x moves by one: the entries' own condition (x h
        // beyond 745 underflows to 0, as the closed form does).
        const double tol = 4e-16 * (64.0 + std::min(ka * h, 800.0) + std::min(ke * h, 800.0));
        const double dk = entrywise<2>(k, want_k), dg = entrywise<2>(g, want_g);
        EXPECT_LT(dk, tol) << "K: ka " << ka << " ke " << ke << " h " << h << "\n" << k;
        EXPECT_LT(dg, tol) << "G: ka " << ka << " ke " << ke << " h " << h << "\n" << g;
        worst = std::max({worst, dk / tol, dg / tol});
        ++tried;
      }
  EXPECT_EQ(tried, 2 * 2 * 201);
  ::testing::Test::RecordProperty("worst_difference_over_tolerance", std::to_string(worst));
}

// Central <-> peripheral with elimination from central, k10 = k12 = r swept over 1e-300 ..
// 1e300 and k21 = 0.1 (a central volume from 1e300 down to 1e-300 with clearances fixed).
// Norm-wise against the eigenvalue closed form (K = a0 I + a1 A, G = b0 I + b1 A with the
// roots of l^2 + (k10 + k12 + k21) l + k10 k21 formed without cancellation); for r >= 1e14
// entrywise against the limit of an instantaneous central compartment: the peripheral amount
// decays at k21 k10 / (k10 + k12) = 0.05, half of what leaves central goes to the peripheral
// one, and central holds k21 / (k10 + k12) times the peripheral amount (relative error of the
// limit O(k21 / r) = 1e-15).
TEST(ExactTransition, TinyCentralVolumeAcrossTheWholeRange) {
  int tried = 0;
  for (double h : {0.5, 24.0})
    for (int e10 = -300; e10 <= 300; e10 += 3) {
      const double r = std::pow(10.0, e10), k21 = 0.1;
      Mat<2> a;
      a << -(r + r), k21, r, -k21;
      Mat<2> k, g;
      exact_transition<2>(a, h, k, g);
      ++tried;
      const double b = r + r + k21, c = r * k21;
      const double l1 =
          -(b + std::sqrt(b - 2.0 * std::sqrt(c)) * std::sqrt(b + 2.0 * std::sqrt(c))) / 2;
      const double l2 = c / l1;
      if (std::isfinite(b) && l1 != l2) {
        const double e1 = std::exp(l1 * h), e2 = std::exp(l2 * h);
        const double s1 = std::expm1(l1 * h) / l1, s2 = std::expm1(l2 * h) / l2;
        const Mat<2> want_k =
            ((l1 * e2 - l2 * e1) / (l1 - l2)) * Mat<2>::Identity() + ((e1 - e2) / (l1 - l2)) * a;
        const Mat<2> want_g =
            ((l1 * s2 - l2 * s1) / (l1 - l2)) * Mat<2>::Identity() + ((s1 - s2) / (l1 - l2)) * a;
        EXPECT_LT((k - want_k).cwiseAbs().maxCoeff(), 1e-13) << "r " << r << " h " << h << "\n"
                                                             << k;
        EXPECT_LT((g - want_g).cwiseAbs().maxCoeff() / h, 1e-13) << "r " << r << " h " << h;
      }
      if (r >= 1e14) {
        const double slow = std::exp(-0.05 * h), q = k21 / (r + r);
        Mat<2> want;
        want << q * 0.5 * slow, q * slow, 0.5 * slow, slow;
        EXPECT_LT(entrywise<2>(k, want), 1e-12) << "r " << r << " h " << h << "\n" << k;
        const double gs = -std::expm1(-0.05 * h) / 0.05;
        Mat<2> want_g;
        // G(0, 0) also holds the fast transient of central's own amount, 1 / (2 r).
        want_g << 0.5 / r + q * 0.5 * gs, q * gs, 0.5 * gs, gs;
        EXPECT_LT(entrywise<2>(g, want_g), 1e-12) << "r " << r << " h " << h << "\n" << g;
      }
    }
  EXPECT_EQ(tried, 2 * 201);
}

}  // namespace
}  // namespace pkscan::detail
