// The event solver's second-order step (engine/events/second_order.hpp): its two exact forms,
// the eigenbasis (second-order Daleckii-Krein with divided differences of exp) and the 5n x 5n
// block exponential, against each other over intervals with and without infusion rates.
#include "events/second_order.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "support/expect_close.hpp"
#include "support/rate_matrices.hpp"

namespace pkscan::detail {
namespace {

// A three-compartment rate matrix: depot ka -> central, central <-> peripheral, elimination.
Mat<3> rates(double ka, double k12, double k21, double ke) {
  return test::oral_rates(ka, k12, k21, ke);
}

// S_pq after two intervals (S non-zero at the second) on one path; fast selects the eigenbasis.
std::vector<double> two_steps(const Mat<3>& a, const Mat<3>* e, const Mat<3>& e01, bool fast,
                              const Vec<3>& x0, const Vec<3>* s0, const Vec<3>& r) {
  Sensitivities<3> sv(3);
  sv.pa_ = 2;
  sv.ps_ = 2;
  sv.p_ = 2;
  sv.dir_of_ = {0, 1, -1};
  sv.prop_.reset(a);
  EXPECT_TRUE(sv.prop_.fast());
  sv.da_[0] = e[0];
  sv.da_[1] = e[1];
  for (int k = 0; k < 2; ++k) sv.s_[k] = s0[k];
  SecondOrder<3> h;
  const int cols[2] = {0, 1};
  h.begin(cols, 2, sv.dir_of_.data(), 2, 2);
  sv.enter_basis();
  if (!fast) {  // the same state on the fallback path
    sv.basis_fast_ = false;
    for (int k = 0; k < 2; ++k) sv.s_[k] = s0[k];
  }
  h.clear_epq();
  h.add_epq(0, 1, e01);
  h.enter_basis(sv);
  Vec<3> x = x0;
  for (double d : {1.7, 0.45}) {
    Mat<3> k, g;
    Vec<3> ev = Vec<3>::Zero(), sg = Vec<3>::Zero();
    sv.prop_.step(d, k, g, ev, sg);
    h.propagate(sv, d, k, x, r, !r.isZero(0.0), ev, sg);
    sv.propagate(d, k, x, r, !r.isZero(0.0), ev, sg);
    x = k * x + g * r;
  }
  std::vector<double> out;
  for (int i = 0; i < 3; ++i)  // pairs (0,0), (0,1), (1,1)
    for (int c = 0; c < 3; ++c) out.push_back(h.component(sv, i, c));
  return out;
}

TEST(SecondOrder, EigenbasisAndBlockExponentialFormsAgree) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.05, 2.0);
  int checked = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const double ka = u(rng), k12 = u(rng), k21 = u(rng), ke = u(rng);
    const Mat<3> a = rates(ka, k12, k21, ke);
    // Directions: d/dka, and d/dV of ke = CL / V (with d2/dka dV = 0 but a non-zero E_pq to
    // exercise that term).
    Mat<3> e[2];
    e[0] = rates(1.0, 0.0, 0.0, 0.0);
    e[1] = rates(0.0, 0.0, 0.0, -ke / 3.0);
    const Mat<3> e01 = rates(0.0, 0.3, -0.2, 0.1);
    const Vec<3> x0(100.0 * u(rng), 10.0 * u(rng), u(rng));
    const Vec<3> s0[2] = {Vec<3>(u(rng), -u(rng), u(rng)), Vec<3>(-u(rng), u(rng), u(rng))};
    for (bool infusion : {false, true}) {
      const Vec<3> r = infusion ? Vec<3>(0.0, 5.0 * u(rng), 0.0) : Vec<3>::Zero();
      const std::vector<double> fast = two_steps(a, e, e01, true, x0, s0, r);
      const std::vector<double> block = two_steps(a, e, e01, false, x0, s0, r);
      double scale = 0.0;
      for (double v : block) scale = std::max(scale, std::fabs(v));
      for (std::size_t i = 0; i < fast.size(); ++i) {
        PKSCAN_EXPECT_CLOSE(block[i], fast[i], 1e-10, 1e-12 * scale,
                            "trial " << trial << " entry " << i << " infusion " << infusion);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 20 * 2 * 9);
}

// Equal and nearly equal eigenvalues (ka = ke): the divided differences' confluent limits.
TEST(SecondOrder, FormsAgreeAtCloseEigenvalues) {
  int ran = 0;
  for (double gap : {1e-3, 1e-7}) {
    const Mat<3> a = rates(0.3 + gap, 0.0, 0.5, 0.3);
    Mat<3> e[2] = {rates(1.0, 0.0, 0.0, 0.0), rates(0.0, 0.0, 0.0, 1.0)};
    const Vec<3> x0(100.0, 0.0, 0.0);
    const Vec<3> s0[2] = {Vec<3>::Zero(), Vec<3>::Zero()};
    const Vec<3> r(0.0, 2.0, 0.0);
    Sensitivities<3> probe(3);
    probe.prop_.reset(a);
    if (!probe.prop_.fast()) continue;  // the eigenbasis declines: only the block form runs
    const std::vector<double> fast = two_steps(a, e, Mat<3>::Zero(), true, x0, s0, r);
    const std::vector<double> block = two_steps(a, e, Mat<3>::Zero(), false, x0, s0, r);
    double scale = 0.0;
    for (double v : block) scale = std::max(scale, std::fabs(v));
    for (std::size_t i = 0; i < fast.size(); ++i)
      PKSCAN_EXPECT_CLOSE(block[i], fast[i], 1e-8, 1e-10 * scale, "gap " << gap << " entry " << i);
    ++ran;
  }
  EXPECT_GE(ran, 1);
}

}  // namespace
}  // namespace pkscan::detail

namespace pkscan::detail {
namespace {

// The divided differences of exp at three points (and with 0) against the exponential of a
// bidiagonal matrix, for equal, close (1e-9 to 1e-2 apart) and spread points (-60 to 0).
TEST(SecondOrder, DividedDifferencesOfExpEqualTheBidiagonalExponential) {
  const double base[] = {-60.0, -7.3, -1.1, -0.2, -1e-3, 0.0};
  const double gaps[] = {0.0, 1e-9, 1e-5, 3e-3, 0.015, 0.3, 2.0};
  int checked = 0;
  for (double a : base)
    for (double g1 : gaps)
      for (double g2 : gaps) {
        const double b = a - g1, c = a + g2;
        double f3, f4, r3, r4;
        exp_divided_differences(a, b, c, f3, f4);
        exp_divided_differences_reference(a, b, c, r3, r4);
        PKSCAN_EXPECT_CLOSE(r3, f3, 1e-12, 1e-300, a << " " << b << " " << c);
        PKSCAN_EXPECT_CLOSE(r4, f4, 1e-12, 1e-300, a << " " << b << " " << c << " 0");
        ++checked;
      }
  EXPECT_EQ(checked, 6 * 7 * 7);
}

}  // namespace
}  // namespace pkscan::detail
