// The block-exponential Frechet derivative of expm (expm_derivative.hpp), in its own file: Eigen's
// MatrixFunctions exponential is one of the library's slowest templates to compile.
#include "events/expm_derivative.hpp"

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <unsupported/Eigen/MatrixFunctions>

namespace pkscan::detail {

// dK and dG of the direction E over tau: blocks of the exponential of
// [[A, 0, I], [E, A, 0], [0, 0, 0]] tau (z = [x; s; r], z' = [A x + r; E x + A s; 0]). One
// instantiation of Eigen's scaling and squaring serves every model size; its matrices are
// bounded (at most 18 x 18), so they live on the stack: no allocation.
// a, e, dk, dg: n x n row-major.
void block_frechet_dynamic(Eigen::Index n, const double* a, const double* e, double tau, double* dk,
                           double* dg) {
  using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Block = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, 0, 18, 18>;
  const Eigen::Map<const RowMajor> am(a, n, n), em(e, n, n);
  Block m = Block::Zero(3 * n, 3 * n);
  m.block(0, 0, n, n) = am * tau;
  m.block(0, 2 * n, n, n).setIdentity();
  m.block(0, 2 * n, n, n) *= tau;
  m.block(n, 0, n, n) = em * tau;
  m.block(n, n, n, n) = am * tau;
  const Block x = m.exp();
  Eigen::Map<RowMajor>(dk, n, n) = x.block(n, 0, n, n);
  Eigen::Map<RowMajor>(dg, n, n) = x.block(n, 2 * n, n, n);
}

// Second derivatives of K(tau) and G(tau) in the directions p, q: blocks of the exponential of
// the 5n x 5n block-triangular matrix of z = [x; s_p; s_q; S_pq; r],
// z' = [A x + r; E_p x + A s_p; E_q x + A s_q; E_pq x + E_q s_p + E_p s_q + A S_pq; 0].
void block_second_dynamic(Eigen::Index n, const double* a, const double* ep, const double* eq,
                          const double* epq, double tau, double* d2k, double* d2g) {
  using RowMajor = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using Block = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, 0, 30, 30>;
  const Eigen::Map<const RowMajor> am(a, n, n), pm(ep, n, n), qm(eq, n, n);
  Block m = Block::Zero(5 * n, 5 * n);
  for (Eigen::Index b = 0; b < 4; ++b) m.block(b * n, b * n, n, n) = am * tau;
  m.block(0, 4 * n, n, n) = RowMajor::Identity(n, n) * tau;
  m.block(n, 0, n, n) = pm * tau;
  m.block(2 * n, 0, n, n) = qm * tau;
  if (epq != nullptr) m.block(3 * n, 0, n, n) = Eigen::Map<const RowMajor>(epq, n, n) * tau;
  m.block(3 * n, n, n, n) = qm * tau;
  m.block(3 * n, 2 * n, n, n) = pm * tau;
  const Block x = m.exp();
  Eigen::Map<RowMajor>(d2k, n, n) = x.block(3 * n, 0, n, n);
  Eigen::Map<RowMajor>(d2g, n, n) = x.block(3 * n, 4 * n, n, n);
}

namespace {

// exp[p, q] = exp(hi) (1 - exp(-(hi - lo))) / (hi - lo): no cancellation, no overflow.
double exp_dd2(double p, double q) {
  const double hi = std::max(p, q), delta = std::fabs(p - q);
  if (delta == 0.0) return std::exp(hi);
  return std::exp(hi) * (-std::expm1(-delta) / delta);
}

// exp[z_0, ..., z_k] (k + 1 = count <= 4 points less than 1 apart) by its series about the
// midpoint mu: exp(mu) sum_m h_m(z - mu) / (m + k)!, h_m the complete homogeneous symmetric
// polynomials (|z_i - mu| < 0.5: term m is below C(m + 3, 3) 0.5^m / (m + 3)!, under 1e-30 of
// the first by m = 30).
double exp_dd_series(const double* z, int count) {
  double lo = z[0], hi = z[0];
  for (int i = 1; i < count; ++i) {
    lo = std::min(lo, z[i]);
    hi = std::max(hi, z[i]);
  }
  const double mu = 0.5 * (lo + hi);
  double h[4] = {1.0, 1.0, 1.0, 1.0};  // h[i]: h_m of the first i + 1 variables
  double fact = 1.0;
  for (int i = 2; i < count; ++i) fact *= i;
  double sum = 1.0 / fact;
  for (int m = 1; m <= 30; ++m) {
    h[0] *= z[0] - mu;
    for (int i = 1; i < count; ++i) h[i] = h[i - 1] + (z[i] - mu) * h[i];
    fact *= m + count - 1;
    sum += h[count - 1] / fact;
  }
  return std::exp(mu) * sum;
}

// exp[z_0, ..., z_{count-1}] for 3 or 4 points: the series when they are less than 1 apart,
// otherwise (f[without the lowest] - f[without the highest]) / (highest - lowest), where the
// difference loses at most a factor 2 to cancellation.
double exp_dd(double* z, int count) {
  std::sort(z, z + count);
  if (z[count - 1] - z[0] < 1.0) return exp_dd_series(z, count);
  double upper[3] = {}, lower[3] = {};  // count <= 4
  for (int i = 0; i < count - 1; ++i) {
    upper[i] = z[i + 1];
    lower[i] = z[i];
  }
  const double fu = count == 3 ? exp_dd2(upper[0], upper[1]) : exp_dd(upper, count - 1);
  const double fl = count == 3 ? exp_dd2(lower[0], lower[1]) : exp_dd(lower, count - 1);
  return (fu - fl) / (z[count - 1] - z[0]);
}

}  // namespace

// exp[a, b, c] and exp[a, b, c, 0], accurate for any spacing, equal points included.
void exp_divided_differences(double a, double b, double c, double& abc, double& abc0) {
  double z3[3] = {a, b, c};
  abc = exp_dd(z3, 3);
  double z4[4] = {a, b, c, 0.0};
  abc0 = exp_dd(z4, 4);
}

// The same from the exponential of the upper bidiagonal matrix with diagonal a, b, c, 0 and
// ones above it (entries (0, 2) and (0, 3); McCurdy, Ng and Parlett 1984): an independent
// reference for the tests.
void exp_divided_differences_reference(double a, double b, double c, double& abc, double& abc0) {
  Eigen::Matrix4d z = Eigen::Matrix4d::Zero();
  z(0, 0) = a;
  z(1, 1) = b;
  z(2, 2) = c;
  z(0, 1) = z(1, 2) = z(2, 3) = 1.0;
  const Eigen::Matrix4d x = z.exp();
  abc = x(0, 2);
  abc0 = x(0, 3);
}

}  // namespace pkscan::detail
