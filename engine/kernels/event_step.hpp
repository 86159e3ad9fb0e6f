#pragma once
// The event engine's step between two events, one piece of arithmetic for the CPU event solver
// (events/event_list.hpp's Propagator, events/solver_impl.hpp) and the device's event walk
// (device/walk_kernels.hpp): the same operations in the same order on both, so the host
// system's device results are the CPU's bits and CUDA's differ only through exp and expm1.
//
// Layouts: v, vinv and mask are column-major N x N (Eigen's default: element (i, j) at i + j N);
// k, g and the other square matrices here are row-major (grid/transition.hpp's Mat<N>: element
// (i, j) at i N + j).
#include <cmath>

#include "kernels/hd.hpp"

namespace pkscan::detail {

// The eigenvalue terms of a step of length d: e_i = exp(lambda_i d) and
// s_i = (exp(lambda_i d) - 1) / lambda_i (d when lambda_i = 0), with expm1 for |lambda_i d| < 0.01
// (exp(x) - 1 is accurate to about 1e-14 relative above that).
template <int N>
PKSCAN_HD_FORCEINLINE void eigen_terms_hd(const double* lambda, double d, double* e, double* s) {
  for (int i = 0; i < N; ++i) {
    const double l = lambda[i];
    const double x = l * d;
    e[i] = ::exp(x);
    s[i] = l == 0.0 ? d : (::fabs(x) < 0.01 ? ::expm1(x) : e[i] - 1.0) / l;
  }
}

// out = (V diag(w) V^-1) o mask: K(d) for w = e, G(d) for w = s (eigen_terms_hd). The mask keeps
// the structural zeros of the transition (Propagator::reset).
template <int N>
PKSCAN_HD_FORCEINLINE void eigen_matrix_hd(const double* v, const double* vinv, const double* mask,
                                           const double* w, double* out) {
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j) {
      double acc = (v[i] * w[0]) * vinv[j * N];
      for (int m = 1; m < N; ++m) acc += (v[i + m * N] * w[m]) * vinv[m + j * N];
      out[i * N + j] = acc * mask[i + j * N];
    }
}

// y = K x + G r, or y = K x when no infusion runs (r null); y may alias x.
template <int N>
PKSCAN_HD_FORCEINLINE void step_state_hd(const double* k, const double* g, const double* x,
                                         const double* r, double* y) {
  double t[N];
  for (int i = 0; i < N; ++i) {
    double a = k[i * N] * x[0];
    for (int j = 1; j < N; ++j) a += k[i * N + j] * x[j];
    if (r != nullptr) {
      double b = g[i * N] * r[0];
      for (int j = 1; j < N; ++j) b += g[i * N + j] * r[j];
      a = a + b;
    }
    t[i] = a;
  }
  for (int i = 0; i < N; ++i) y[i] = t[i];
}

// y = M x (M row-major); y must not alias x.
template <int N>
PKSCAN_HD_FORCEINLINE void matvec_hd(const double* m, const double* x, double* y) {
  for (int i = 0; i < N; ++i) {
    double a = m[i * N] * x[0];
    for (int j = 1; j < N; ++j) a += m[i * N + j] * x[j];
    y[i] = a;
  }
}

// LU decomposition with full pivoting of `a` (row-major, overwritten by L below the diagonal and
// U on and above it; P a Q = L U, row i of P a is row rp[i] of a, column j of a Q is column cp[j]
// of a). Returns false when `a` is singular as Eigen's FullPivLU::isInvertible() judges it: some
// pivot is not above epsilon * N times the largest pivot (or the matrix is not finite).
template <int N>
PKSCAN_HD inline bool lu_full_hd(double* a, int* rp, int* cp) {
  for (int i = 0; i < N; ++i) rp[i] = cp[i] = i;
  double max_pivot = 0.0;
  bool invertible = true;
  for (int k = 0; k < N; ++k) {
    int pi = k, pj = k;
    double big = -1.0;
    for (int i = k; i < N; ++i)
      for (int j = k; j < N; ++j)
        if (::fabs(a[i * N + j]) > big) {
          big = ::fabs(a[i * N + j]);
          pi = i;
          pj = j;
        }
    if (pi != k) {
      for (int j = 0; j < N; ++j) {
        const double t = a[k * N + j];
        a[k * N + j] = a[pi * N + j];
        a[pi * N + j] = t;
      }
      const int t = rp[k];
      rp[k] = rp[pi];
      rp[pi] = t;
    }
    if (pj != k) {
      for (int i = 0; i < N; ++i) {
        const double t = a[i * N + k];
        a[i * N + k] = a[i * N + pj];
        a[i * N + pj] = t;
      }
      const int t = cp[k];
      cp[k] = cp[pj];
      cp[pj] = t;
    }
    const double piv = a[k * N + k];
    if (k == 0) max_pivot = ::fabs(piv);
    if (!(::fabs(piv) > 2.220446049250313e-16 * N * max_pivot) || !(piv - piv == 0.0)) {
      invertible = false;
      break;
    }
    for (int i = k + 1; i < N; ++i) {
      const double l = a[i * N + k] / piv;
      a[i * N + k] = l;
      for (int j = k + 1; j < N; ++j) a[i * N + j] -= l * a[k * N + j];
    }
  }
  return invertible;
}

// x with M x = b, from lu_full_hd's factors of M; x may alias b.
template <int N>
PKSCAN_HD inline void lu_solve_hd(const double* lu, const int* rp, const int* cp, const double* b,
                                  double* x) {
  double y[N];
  for (int i = 0; i < N; ++i) y[i] = b[rp[i]];
  for (int i = 1; i < N; ++i)
    for (int j = 0; j < i; ++j) y[i] -= lu[i * N + j] * y[j];
  for (int i = N - 1; i >= 0; --i) {
    for (int j = i + 1; j < N; ++j) y[i] -= lu[i * N + j] * y[j];
    y[i] /= lu[i * N + i];
  }
  for (int i = 0; i < N; ++i) x[cp[i]] = y[i];
}

// 1-norm of an N x N row-major matrix (the largest column sum of absolute values).
template <int N>
PKSCAN_HD inline double norm1_hd(const double* m) {
  double best = 0.0;
  for (int j = 0; j < N; ++j) {
    double c = 0.0;
    for (int i = 0; i < N; ++i) c += ::fabs(m[i * N + j]);
    best = c > best ? c : best;
  }
  return best;
}

// Largest 1-norm condition number of a linear system whose solution is trusted: its relative
// error is bounded by about cond u, so 1e8 keeps 8 digits.
constexpr double kMaxSolveCondition = 1e8;

// True when M, of 1-norm `norm` and factored by lu_full_hd into lu, rp, cp, has a 1-norm
// condition number ||M|| ||M^-1|| of at most kMaxSolveCondition (M^-1 column by column).
template <int N>
PKSCAN_HD inline bool well_conditioned_hd(double norm, const double* lu, const int* rp,
                                          const int* cp) {
  double inv_norm = 0.0, e[N], col[N];
  for (int j = 0; j < N; ++j) {
    for (int i = 0; i < N; ++i) e[i] = i == j ? 1.0 : 0.0;
    lu_solve_hd<N>(lu, rp, cp, e, col);
    double c = 0.0;
    for (int i = 0; i < N; ++i) c += ::fabs(col[i]);
    inv_norm = c > inv_norm ? c : inv_norm;
  }
  return norm * inv_norm <= kMaxSolveCondition;
}

}  // namespace pkscan::detail
