#pragma once
// The definition of detail::real_eigendecomposition (declared in events/event_list.hpp). Included
// only by the six files CMake generates, one per model size N = 1..6 (each with one explicit
// instantiation, so that the six EigenSolver instantiations compile in parallel; compile times in
// docs/performance.md, "Thresholds"), instead of by every file that simulates datasets.
//
// A rate matrix is block triangular once its compartments are ordered by the flows: its blocks
// are the strongly connected sets of compartments (a depot, a central compartment with its
// peripherals), and its eigenvalues are those of the blocks. Where every block holds one or two
// compartments (the one- and two-compartment models with or without absorption, transit chains),
// compartment_eigendecomposition solves them in closed form, as the analytic PK solutions do
// (NONMEM's ADVAN1-4 alpha and beta): the 2 x 2 eigenvalues by the quadratic formula in its
// stable form, each eigenvector from its block and then down the flows, one small solve per
// downstream block, with exact zeros upstream. Otherwise Eigen's EigenSolver (Hessenberg
// reduction and shifted QR) serves. Either way Propagator::reset checks the result (condition,
// eigenvalue noise, reconstruction) before it is used.
#include <Eigen/Dense>
#include <cmath>

#include "events/event_list.hpp"

namespace pkscan::detail {

namespace eigen_detail {

// The eigenvalues and eigenvectors of `a` by its compartments' structure (above): false when a
// block holds more than two compartments, a 2 x 2 block has complex or two zero eigenvalues, or
// an eigenvalue of an upstream block is one of a downstream block's that its flows reach (a
// repeated eigenvalue: the general solver and the checks of Propagator::reset decide then).
template <int N>
bool compartment_eigendecomposition(const Mat<N>& a, const Eigen::Matrix<double, N, N>& mask,
                                    Eigen::Matrix<double, N, N>& v,
                                    Eigen::Matrix<double, N, 1>& lambda) {
  // reach(i, j): compartment i is reachable from j through the flows (the mask's transitive
  // closure of a(i, j) != 0: j flows to i).
  const auto reach = [&mask](int i, int j) { return mask(i, j) != 0.0; };
  // The blocks in flow order: a compartment reached from more compartments comes later (a
  // downstream block is reached from every compartment that reaches its upstream one, and from
  // itself), members of one block together.
  int ancestors[N] = {};
  int first[N] = {};  // the block's first member
  for (int i = 0; i < N; ++i) {
    first[i] = i;
    for (int j = 0; j < N; ++j) {
      ancestors[i] += reach(i, j) ? 1 : 0;
      if (j < first[i] && reach(i, j) && reach(j, i)) first[i] = j;
    }
  }
  int order[N];  // compartments, block after block in flow order
  for (int i = 0; i < N; ++i) order[i] = i;
  for (int i = 1; i < N; ++i)  // insertion sort by (ancestors, block, compartment)
    for (int k = i; k > 0; --k) {
      const int p = order[k - 1], q = order[k];
      if (ancestors[p] < ancestors[q] || (ancestors[p] == ancestors[q] && first[p] <= first[q]))
        break;
      order[k - 1] = q;
      order[k] = p;
    }
  int start[N + 1];  // the blocks: order[start[b]] .. order[start[b + 1] - 1]
  int blocks = 0;
  for (int k = 0; k < N; ++k)
    if (k == 0 || first[order[k]] != first[order[k - 1]]) start[blocks++] = k;
  start[blocks] = N;
  for (int b = 0; b < blocks; ++b)
    if (start[b + 1] - start[b] > 2) return false;

  v.setZero();
  int column = 0;
  for (int b = 0; b < blocks; ++b) {
    const int i = order[start[b]];
    const bool pair = start[b + 1] - start[b] == 2;
    const int j = pair ? order[start[b] + 1] : i;
    for (int e = 0; e < (pair ? 2 : 1); ++e, ++column) {
      double l = a(i, i);
      Eigen::Matrix<double, N, 1> x = Eigen::Matrix<double, N, 1>::Zero();
      x(i) = 1.0;
      if (pair) {
        // [p q; r s]: l = m + sign d with d = sqrt(h^2 + q r), h = (p - s) / 2; the larger
        // eigenvalue (in size) without cancellation, the smaller as the determinant over it.
        const double p = a(i, i), q = a(i, j), r = a(j, i), s = a(j, j);
        const double h = 0.5 * (p - s), m = 0.5 * (p + s);
        const double d2 = h * h + q * r;
        if (!(d2 >= 0.0)) return false;
        const double d = std::sqrt(d2);
        const double big_sign = m < 0.0 ? -1.0 : 1.0;
        const double big = m + big_sign * d;
        if (big == 0.0) return false;
        const double sign = e == 0 ? big_sign : -big_sign;
        l = e == 0 ? big : (p * s - q * r) / big;
        // (B - l I) x = 0 from the row whose entry l - p = -h + sign d or l - s = h + sign d
        // has no cancellation.
        const double t1 = -h + sign * d, t2 = h + sign * d;
        if (std::fabs(t1) >= std::fabs(t2)) {
          x(i) = q;
          x(j) = t1;
        } else {
          x(i) = t2;
          x(j) = r;
        }
      }
      // Down the flows: each later block's part from (B_c - l I) x_c = -(flows into it) x.
      for (int c = b + 1; c < blocks; ++c) {
        const int u = order[start[c]];
        const bool cpair = start[c + 1] - start[c] == 2;
        const int w = cpair ? order[start[c] + 1] : u;
        double fu = 0.0, fw = 0.0;  // -(flows into u and w from outside the block) . x
        for (int k = 0; k < N; ++k) {
          if (k == u || k == w || x(k) == 0.0) continue;
          fu -= a(u, k) * x(k);
          if (cpair) fw -= a(w, k) * x(k);
        }
        if (fu == 0.0 && fw == 0.0) continue;
        if (!cpair) {
          const double m = a(u, u) - l;
          if (m == 0.0) return false;
          x(u) = fu / m;
          continue;
        }
        const double m00 = a(u, u) - l, m01 = a(u, w), m10 = a(w, u), m11 = a(w, w) - l;
        const double det = m00 * m11 - m01 * m10;
        if (det == 0.0) return false;
        x(u) = (fu * m11 - m01 * fw) / det;
        x(w) = (m00 * fw - m10 * fu) / det;
      }
      // Scaled by a power of two (exactly) to a 1-norm in [0.5, 1), as the general solver's
      // unit columns: the condition number Propagator::reset bounds is that of balanced columns.
      int exponent = 0;
      std::frexp(x.cwiseAbs().sum(), &exponent);
      x *= std::ldexp(1.0, -exponent);
      lambda(column) = l;
      v.col(column) = x;
    }
  }
  return true;
}

}  // namespace eigen_detail

template <int N>
bool real_eigendecomposition(const Mat<N>& a, const Eigen::Matrix<double, N, N>& mask, double scale,
                             Eigen::Matrix<double, N, N>& v, Eigen::Matrix<double, N, N>& vinv,
                             Eigen::Matrix<double, N, 1>& lambda) {
  if (!eigen_detail::compartment_eigendecomposition<N>(a, mask, v, lambda)) {
    // A model of one or two compartments has no block of three: where its closed forms decline
    // (complex or repeated eigenvalues down a chain), the general solver's eigenvectors would be
    // (nearly) parallel, which Propagator::reset's condition bound rejects. It is not compiled.
    if constexpr (N <= 2) {
      static_cast<void>(scale);
      return false;
    } else {
      Eigen::EigenSolver<Eigen::Matrix<double, N, N>> es(a);
      if (es.info() != Eigen::Success) return false;
      if (es.eigenvalues().imag().cwiseAbs().maxCoeff() > 1e-12 * scale) return false;
      v = es.eigenvectors().real();
      lambda = es.eigenvalues().real();
    }
  }
  if constexpr (N <= 4) {
    // Cofactors (Eigen's closed forms for fixed sizes up to 4): V's condition, which
    // Propagator::reset bounds, is what their accuracy depends on.
    bool invertible = false;
    v.computeInverseWithCheck(vinv, invertible, 0.0);
    return invertible && vinv.allFinite();
  } else {
    const auto lu = v.fullPivLu();
    if (!lu.isInvertible()) return false;
    vinv = lu.inverse();
    return true;
  }
}

}  // namespace pkscan::detail
