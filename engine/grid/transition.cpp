// Transition matrices of the exact discretization: K = expm(A h) and G(h) = h phi1(A h), with
// phi1(X) = sum_j X^j / (j + 1)! = integral_0^1 expm(X u) du.
//  - ||A h||_1 <= 16 (every grid of a usual PK model): scaling and squaring on the N x N matrix
//    (the phi-function form of Sidje's Expokit): X = A h / 2^s with s <= 5 the least integer
//    making ||X||_1 <= 1/2; phi1(X) by its Taylor polynomial in Horner form, of the least
//    degree m <= 15 whose remainder (below ||X||^(m+1) e^||X|| / (m+2)! in norm) is under
//    2^-56 (m = 15 for ||X|| = 1/2: 7e-20), expm(X) = I + X phi1(X); then
//    s doublings G(2u) = (I + expm(A u)) G(u), expm(2 A u) = expm(A u)^2. About an eighth of
//    the work of the augmented 2N x 2N exponential below.
//  - otherwise (stiff) Eigen's MatrixFunctions exponential of the augmented matrix
//    [[A, I], [0, 0]] h = [[expm(A h), G(h)], [0, I]] (Higham 2005's Pade scaling and
//    squaring), which needs fewer squarings (each doubles the relative error of small
//    entries).
// Both are accurate norm-wise to about 1e-14 (K <= 1 and G <= h for the rate matrices of linear
// PK models); tests/unit/transition_test.cpp compares the two.
#include "grid/transition.hpp"

#include <cmath>
#include <limits>
#include <unsupported/Eigen/MatrixFunctions>

namespace pkscan::detail {

// Doublings the Taylor path takes at most (||A h||_1 <= 2^(kMaxDoublings - 1)).
constexpr int kMaxDoublings = 5;

template <int N>
void exact_transition(const Mat<N>& a, double h, Mat<N>& k, Mat<N>& g) {
  // 1 / (j + 1)! for j = 0 .. 15.
  static constexpr double kInvFact[16] = {1.0,
                                          1.0 / 2,
                                          1.0 / 6,
                                          1.0 / 24,
                                          1.0 / 120,
                                          1.0 / 720,
                                          1.0 / 5040,
                                          1.0 / 40320,
                                          1.0 / 362880,
                                          1.0 / 3628800,
                                          1.0 / 39916800,
                                          1.0 / 479001600,
                                          1.0 / 6227020800,
                                          1.0 / 87178291200,
                                          1.0 / 1307674368000,
                                          1.0 / 20922789888000};
  const Mat<N> b = a * h;
  const double norm = b.cwiseAbs().colwise().sum().maxCoeff();
  if (!std::isfinite(norm)) {  // NaN results: the subject is reported non-finite
    k.setConstant(std::numeric_limits<double>::quiet_NaN());
    g.setConstant(std::numeric_limits<double>::quiet_NaN());
    return;
  }
  int s = 0;
  for (double n = norm; n > 0.5; n *= 0.5) ++s;
  if (s > kMaxDoublings) {  // stiff: Eigen's Pade approximant needs fewer squarings
    Eigen::Matrix<double, 2 * N, 2 * N> aug = Eigen::Matrix<double, 2 * N, 2 * N>::Zero();
    aug.template topLeftCorner<N, N>() = b;
    aug.template topRightCorner<N, N>() = Eigen::Matrix<double, N, N>::Identity() * h;
    const Eigen::Matrix<double, 2 * N, 2 * N> e = aug.exp();
    k = e.template topLeftCorner<N, N>();
    g = e.template topRightCorner<N, N>();
    return;
  }
  const double scale = std::ldexp(1.0, -s);
  const Mat<N> x = b * scale;
  // The least degree m <= 15 whose remainder bound nu^(m+1) e^nu / (m+2)! is below 2^-56
  // (nu = ||X||_1 <= 1/2; m = 15 meets it for every such nu).
  const double nu = norm * scale;
  int m = 0;
  for (double rem = nu * std::exp(nu) / 2; m < 15 && rem > 0x1.0p-56; rem *= nu / (m + 2)) ++m;
  Mat<N> phi = Mat<N>::Identity() * kInvFact[m];
  for (int j = m - 1; j >= 0; --j) {
    const Mat<N> t = x * phi;
    phi = t;
    phi.diagonal().array() += kInvFact[j];
  }
  Mat<N> e = x * phi;
  e.diagonal().array() += 1.0;
  Mat<N> gu = phi * (h * scale);
  for (int i = 0; i < s; ++i) {
    const Mat<N> eg = e * gu;
    gu += eg;
    const Mat<N> ee = e * e;
    e = ee;
  }
  k = e;
  g = gu;
}

template <int N>
void build_transition(const Mat<N>& a, double dt, Discretization disc,
                      const std::vector<double>& partial_lengths, Transition<N>& out) {
  out.partial.resize(partial_lengths.size());
  if (disc == Discretization::Euler) {
    out.k = Mat<N>::Identity() + a * dt;
    out.g = Mat<N>::Identity() * dt;
    for (std::size_t i = 0; i < partial_lengths.size(); ++i)
      out.partial[i] = Mat<N>::Identity() * partial_lengths[i];
    return;
  }
  exact_transition<N>(a, dt, out.k, out.g);
  for (std::size_t i = 0; i < partial_lengths.size(); ++i) {
    const double h = partial_lengths[i];
    Mat<N> kh, gh, krest, grest;
    exact_transition<N>(a, h, kh, gh);
    exact_transition<N>(a, dt - h, krest, grest);
    out.partial[i] = krest * gh;
  }
}

#define PKSCAN_INSTANTIATE_TRANSITION(N)                                      \
  template void exact_transition<N>(const Mat<N>&, double, Mat<N>&, Mat<N>&); \
  template void build_transition<N>(const Mat<N>&, double, Discretization,    \
                                    const std::vector<double>&, Transition<N>&);
PKSCAN_INSTANTIATE_TRANSITION(1)
PKSCAN_INSTANTIATE_TRANSITION(2)
PKSCAN_INSTANTIATE_TRANSITION(3)
PKSCAN_INSTANTIATE_TRANSITION(4)
PKSCAN_INSTANTIATE_TRANSITION(5)
PKSCAN_INSTANTIATE_TRANSITION(6)
#undef PKSCAN_INSTANTIATE_TRANSITION

}  // namespace pkscan::detail
