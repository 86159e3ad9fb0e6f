#pragma once
// Derivatives of the matrix exponential for the Predictor's sensitivities (solver_impl.hpp):
// divided differences of exp on the eigenvalues (the Daleckii-Krein form, fast path) and the
// block-exponential Frechet derivative (fallback path).
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "kernels/divided_differences.hpp"

namespace pkscan::detail {

// Phi (and Psi) of an interval of length d for eigenvalues l of A (fast path): Phi_ij the
// divided difference of exp(. d) at l_i, l_j times d, Psi_ij that of (exp(. d) - 1) / . (only
// when want_psi). e = exp(l d), sg = (exp(l d) - 1) / l, inv_ij = 1 / (l_i - l_j) (0 if equal).
template <int N>
__attribute__((always_inline)) inline void divided_differences(
    const Eigen::Matrix<double, N, 1>& l, const Eigen::Matrix<double, N, N>& inv, double d,
    const Eigen::Matrix<double, N, 1>& e, const Eigen::Matrix<double, N, 1>& sg, bool want_psi,
    Eigen::Matrix<double, N, N>& phi, Eigen::Matrix<double, N, N>& psi) {
  for (int i = 0; i < N; ++i) {
    phi(i, i) = d * e(i);
    for (int j = 0; j < i; ++j) {
      const double v = phi_pair(l(i), l(j), e(i), e(j), d, inv(i, j));
      phi(i, j) = v;
      phi(j, i) = v;
    }
  }
  if (!want_psi) return;
  for (int i = 0; i < N; ++i)
    for (int j = 0; j <= i; ++j) {
      const double v = psi_pair(l(i), l(j), d, phi(i, j), sg(i), sg(j));
      psi(i, j) = v;
      psi(j, i) = v;
    }
}

// dK and dG of the direction E over tau: blocks of the exponential of
// [[A, 0, I], [E, A, 0], [0, 0, 0]] tau (z = [x; s; r], z' = [A x + r; E x + A s; 0]).
// a, e, dk, dg: n x n row-major, n <= 6. Allocates nothing.
void block_frechet_dynamic(Eigen::Index n, const double* a, const double* e, double tau, double* dk,
                           double* dg);

// Second derivatives d2K_pq, d2G_pq of K(tau) = expm(A tau) and G(tau) in the directions E_p,
// E_q with second derivative E_pq of A (null: 0): blocks of a 5n x 5n block exponential.
// Allocates nothing.
void block_second_dynamic(Eigen::Index n, const double* a, const double* ep, const double* eq,
                          const double* epq, double tau, double* d2k, double* d2g);

// The divided differences exp[a, b, c] and exp[a, b, c, 0], accurate for any spacing (a series
// for close points, otherwise the recursion on the extreme points).
void exp_divided_differences(double a, double b, double c, double& abc, double& abc0);
// The same from the exponential of a bidiagonal matrix (Eigen's scaling and squaring): the
// tests' independent reference.
void exp_divided_differences_reference(double a, double b, double c, double& abc, double& abc0);

// dK_k and dG_k (block_frechet_dynamic) of the directions da[0 .. p-1] for the interval lengths
// of one rate matrix A, computed once per length: a subject's intervals repeat a few lengths
// (dosing intervals). At most 64 lengths; then the last slot is reused. clear() when A changes.
template <int N>
class FrechetCache {
 public:
  using Mat = Eigen::Matrix<double, N, N, Eigen::RowMajor>;
  void clear() {
    lengths_.clear();
    mats_.clear();
  }
  // The 2 p matrices dK_0, dG_0, dK_1, dG_1, ... of length d (valid until the next call).
  const Mat* get(const Mat& a, const Mat* da, int p, double d) {
    std::size_t at = lengths_.size();
    for (std::size_t i = 0; i < lengths_.size(); ++i)
      if (lengths_[i] == d) at = i;
    const std::size_t stride = 2 * static_cast<std::size_t>(p);
    if (at == lengths_.size()) {
      if (lengths_.size() >= 64) {  // full: reuse the last slot
        at = lengths_.size() - 1;
        lengths_[at] = d;
      } else {
        lengths_.push_back(d);
        mats_.resize(lengths_.size() * stride);
      }
      for (int q = 0; q < p; ++q) {
        Mat& dk = mats_[at * stride + 2 * static_cast<std::size_t>(q)];
        Mat& dg = mats_[at * stride + 2 * static_cast<std::size_t>(q) + 1];
        block_frechet_dynamic(N, a.data(), da[q].data(), d, dk.data(), dg.data());
      }
    }
    return mats_.data() + at * stride;
  }

 private:
  std::vector<double> lengths_;
  std::vector<Mat> mats_;
};

}  // namespace pkscan::detail
