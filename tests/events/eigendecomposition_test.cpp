// The event solver's eigendecomposition of a rate matrix (events/eigendecomposition_impl.hpp,
// through Propagator, which checks it and builds K(d) = expm(A d) and G(d) from it): the closed
// forms of the blocks of one or two compartments against the analytic PK solutions (NONMEM's
// ADVAN2 and ADVAN4 rate constants alpha and beta, in long double), and K and G of random rate
// matrices of every block structure against Eigen's MatrixFunctions exponential of the augmented
// matrix in long double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "events/event_list.hpp"
#include "support/augmented_exponential.hpp"
#include "support/rate_matrices.hpp"

namespace pkscan::detail {
namespace {

// The two-compartment model with first-order absorption (depot, central, peripheral).
Mat<3> two_compartment_oral(double ka, double k12, double k21, double k10) {
  return test::oral_rates(ka, k12, k21, k10);
}

// ADVAN4's alpha and beta: the roots of l^2 + (k12 + k21 + k10) l + k21 k10 = 0, in long double,
// the smaller one as the product over the larger (no cancellation).
void alpha_beta(double k12, double k21, double k10, long double& alpha, long double& beta) {
  const long double s = static_cast<long double>(k12) + k21 + k10;
  const long double p = static_cast<long double>(k21) * k10;
  alpha = (s + std::sqrt(s * s - 4.0L * p)) / 2.0L;
  beta = p / alpha;
}

TEST(Eigendecomposition, TwoCompartmentOralGivesAdvan4AlphaBetaAndExactZerosUpstream) {
  // A range of rates as a user may fit them: a fast and a slow absorption, a deep peripheral, a
  // slow elimination (beta eight digits below alpha).
  const double cases[][4] = {{1.0, 0.3, 0.1, 0.15}, {0.05, 2.0, 0.5, 0.3}, {12.0, 0.04, 0.02, 1.0},
                             {1.5, 0.7, 0.7, 2e-3}, {0.9, 5.0, 3.0, 1e-3}, {1e3, 1.0, 2.0, 3.0}};
  for (const auto& c : cases) {
    const double ka = c[0], k12 = c[1], k21 = c[2], k10 = c[3];
    Propagator<3> p;
    p.reset(two_compartment_oral(ka, k12, k21, k10));
    ASSERT_TRUE(p.fast()) << ka << " " << k12 << " " << k21 << " " << k10;
    long double alpha = 0, beta = 0;
    alpha_beta(k12, k21, k10, alpha, beta);
    std::vector<double> want = {-ka, -static_cast<double>(alpha), -static_cast<double>(beta)};
    std::vector<double> got(p.lambda().data(), p.lambda().data() + 3);
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    // The eigenvalues of a backward-stable solution are within a few u ||A|| of the truth; the
    // closed form's are within 4 u ||A|| (u = 2^-53: the rounding of A's entries and of the
    // quadratic's terms).
    const double norm = std::max({ka, k12 + k10, k21});
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(got[static_cast<std::size_t>(i)], want[static_cast<std::size_t>(i)],
                  4.0 * 0x1.0p-53 * norm)
          << "eigenvalue " << i << " of ka " << ka << ", k12 " << k12 << ", k21 " << k21 << ", k10 "
          << k10;
    // The central and peripheral eigenvectors leave the depot exactly alone.
    for (int col = 0; col < 3; ++col)
      if (p.lambda()(col) != -ka) {
        EXPECT_EQ(p.v()(0, col), 0.0) << "column " << col;
      }
  }
}

TEST(Eigendecomposition, OneCompartmentOralGivesAdvan2) {
  // ADVAN2: eigenvalues -ka and -k; the depot's eigenvector (1, ka / (k - ka)).
  for (double ka : {0.2, 1.0, 30.0})
    for (double k : {0.01, 0.5, 3.0}) {
      Mat<2> a = Mat<2>::Zero();
      a(0, 0) = -ka;
      a(1, 0) = ka;
      a(1, 1) = -k;
      Propagator<2> p;
      p.reset(a);
      ASSERT_TRUE(p.fast()) << ka << " " << k;
      for (int col = 0; col < 2; ++col) {
        const double l = p.lambda()(col);
        if (l == -ka) {
          EXPECT_NEAR(p.v()(1, col) / p.v()(0, col), ka / (k - ka),
                      4.0 * 0x1.0p-53 * std::fabs(ka / (k - ka)));
        } else {
          EXPECT_EQ(l, -k);
          EXPECT_EQ(p.v()(0, col), 0.0);
        }
      }
    }
}

// A random rate matrix whose compartments form blocks of at most `most` compartments (flows both
// ways inside a block, some flows from earlier blocks to later ones, some eliminations), its
// compartments shuffled: rates log-uniform in [lo, hi].
template <int N>
Mat<N> random_blocks(std::mt19937_64& g, int most, double lo, double hi) {
  std::uniform_real_distribution<double> u(std::log(lo), std::log(hi));
  std::bernoulli_distribution some(0.6);
  std::vector<int> block(N);
  for (int i = 0, b = 0; i < N; ++b) {
    const int size = std::min<int>(N - i, 1 + static_cast<int>(g() % static_cast<unsigned>(most)));
    for (int k = 0; k < size; ++k) block[static_cast<std::size_t>(i++)] = b;
  }
  std::vector<int> at(N);
  for (int i = 0; i < N; ++i) at[static_cast<std::size_t>(i)] = i;
  std::shuffle(at.begin(), at.end(), g);
  Mat<N> a = Mat<N>::Zero();
  const auto flow = [&](int from, int to) {
    const double k = std::exp(u(g));
    a(at[static_cast<std::size_t>(to)], at[static_cast<std::size_t>(from)]) += k;
    a(at[static_cast<std::size_t>(from)], at[static_cast<std::size_t>(from)]) -= k;
  };
  for (int j = 0; j < N; ++j) {
    for (int i = 0; i < N; ++i) {
      const int bi = block[static_cast<std::size_t>(i)], bj = block[static_cast<std::size_t>(j)];
      if (i != j && (bi == bj || (bi > bj && some(g)))) flow(j, i);
    }
    if (some(g)) {
      const double k = std::exp(u(g));
      a(at[static_cast<std::size_t>(j)], at[static_cast<std::size_t>(j)]) -= k;
    }
  }
  return a;
}

// K(h) and G(h) of every random matrix that Propagator takes the eigendecomposition for, against
// the exponential of [[A, I], [0, 0]] h in long double, norm-wise (K's columns sum to at most 1,
// G's to at most h), within the bounds of the arithmetic (u = 2^-53): an eigenvalue off by
// u ||A|| (a backward-stable solution) moves exp(l h) by u ||A h|| relatively; V diag(w) V^-1
// adds about 2N u, and the eigenvector matrix's condition (Propagator accepts below 1e4)
// multiplies both. G's terms (exp(l h) - 1) / l are formed by subtraction above |l h| = 0.01
// (expm1 below: kernels/event_step.hpp), which costs up to 1 / 0.01 = 100 u more.
template <int N>
void expect_propagator_matches_exponential(std::uint64_t seed, int most, int& fast, double& worst) {
  std::mt19937_64 g(seed);
  for (int trial = 0; trial < 200; ++trial) {
    const Mat<N> a = random_blocks<N>(g, most, 1e-2, trial % 2 == 0 ? 1.0 : 10.0);
    Propagator<N> p;
    p.reset(a);
    if (!p.fast()) continue;
    ++fast;
    const double cond = p.v().cwiseAbs().colwise().sum().maxCoeff() *
                        p.vinv().cwiseAbs().colwise().sum().maxCoeff();
    for (double h : {0.1, 1.0, 24.0}) {
      Eigen::MatrixXd ek, eg;
      test::augmented_exponential(a, h, ek, eg);
      Mat<N> k, gm;
      p.step(h, k, gm);
      const double dk = (k - Mat<N>(ek)).cwiseAbs().maxCoeff();
      const double dg = (gm - Mat<N>(eg)).cwiseAbs().maxCoeff() / h;
      const double norm = (a * h).cwiseAbs().colwise().sum().maxCoeff();
      const double tol_k = cond * 0x1.0p-53 * (4.0 * N + 2.0 * norm);
      const double tol_g = cond * 0x1.0p-53 * (4.0 * N + 100.0 + 2.0 * norm);
      worst = std::max({worst, dk / tol_k, dg / tol_g});
      EXPECT_LT(dk, tol_k) << "K, N " << N << ", trial " << trial << ", h " << h << "\n" << a;
      EXPECT_LT(dg, tol_g) << "G, N " << N << ", trial " << trial << ", h " << h << "\n" << a;
    }
  }
}

TEST(Eigendecomposition, RandomBlockStructuresMatchTheExponential) {
  // Blocks of one or two compartments (the closed forms) and of up to N (the general solver).
  double worst = 0.0;  // the largest error over its bound
  for (int most : {1, 2, 6}) {
    int fast = 0;
    expect_propagator_matches_exponential<1>(10 + most, most, fast, worst);
    expect_propagator_matches_exponential<2>(20 + most, most, fast, worst);
    expect_propagator_matches_exponential<3>(30 + most, most, fast, worst);
    expect_propagator_matches_exponential<4>(40 + most, most, fast, worst);
    expect_propagator_matches_exponential<6>(60 + most, most, fast, worst);
    // Most random matrices are well enough conditioned for the eigendecomposition.
    EXPECT_GE(fast, 500) << "blocks of at most " << most;
  }
  ::testing::Test::RecordProperty("worst_error_over_bound", std::to_string(worst));
}

}  // namespace
}  // namespace pkscan::detail
