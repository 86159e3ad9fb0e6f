#pragma once
// The definition of detail::real_eigendecomposition (declared in events/event_list.hpp). Included
// only by the six files CMake generates, one per model size N = 1..6 (each with one explicit
// instantiation, so that the six EigenSolver instantiations compile in parallel; compile times in
// docs/performance.md, "Thresholds"), instead of by every file that simulates datasets.
#include <Eigen/Dense>

#include "events/event_list.hpp"

namespace pkscan::detail {

template <int N>
bool real_eigendecomposition(const Mat<N>& a, double scale, Eigen::Matrix<double, N, N>& v,
                             Eigen::Matrix<double, N, N>& vinv,
                             Eigen::Matrix<double, N, 1>& lambda) {
  Eigen::EigenSolver<Eigen::Matrix<double, N, N>> es(a);
  if (es.info() != Eigen::Success) return false;
  if (es.eigenvalues().imag().cwiseAbs().maxCoeff() > 1e-12 * scale) return false;
  v = es.eigenvectors().real();
  lambda = es.eigenvalues().real();
  const auto lu = v.fullPivLu();
  if (!lu.isInvertible()) return false;
  vinv = lu.inverse();
  return true;
}

}  // namespace pkscan::detail
