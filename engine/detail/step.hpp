#pragma once
// The per-step affine map y = K x + b for N compartments, shared by every compute path (host
// and device). K is row-major. The summation order is fixed here, so two paths that call these
// functions on the same inputs get the same bits (up to FMA contraction by the compiler).
#include "hd.hpp"

namespace pkscan::detail {

template <int N, class Real>
PKSCAN_HD inline void affine_step(const Real* k, const Real* x, const Real* b, Real* y) {
  for (int r = 0; r < N; ++r) {
    Real acc = k[r * N] * x[0];
    for (int j = 1; j < N; ++j) acc += k[r * N + j] * x[j];
    y[r] = acc + b[r];
  }
}

// Composition of affine maps: (K2, b2) o (K1, b1) = (K2 K1, K2 b1 + b2).
template <int N, class Real>
PKSCAN_HD inline void affine_compose(const Real* k2, const Real* b2, const Real* k1, const Real* b1,
                                     Real* k_out, Real* b_out) {
  for (int r = 0; r < N; ++r) {
    for (int c = 0; c < N; ++c) {
      Real acc = k2[r * N] * k1[c];
      for (int j = 1; j < N; ++j) acc += k2[r * N + j] * k1[j * N + c];
      k_out[r * N + c] = acc;
    }
    Real acc = k2[r * N] * b1[0];
    for (int j = 1; j < N; ++j) acc += k2[r * N + j] * b1[j];
    b_out[r] = acc + b2[r];
  }
}

}  // namespace pkscan::detail
