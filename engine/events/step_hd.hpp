#pragma once
// The event engine's step between two events, one piece of arithmetic for the CPU event solver
// (events/event_list.hpp's Propagator, events/solver.cpp) and the device kernel of datasets
// (device/dataset_kernels.hpp): the same operations in the same order on both, so the host
// system's device results are the CPU's bits and CUDA's differ only through exp and expm1.
//
// Layouts: v, vinv and mask are column-major N x N (Eigen's default: element (i, j) at i + j N);
// k and g are row-major (grid/transition.hpp's Mat<N>: element (i, j) at i N + j).
#include <cmath>

#include "core/hd.hpp"

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

}  // namespace pkscan::detail
