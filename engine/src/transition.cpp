// Matrix exponentials for the transition matrices. Eigen's MatrixFunctions module implements
// scaling and squaring with Pade approximants (Higham 2005), accurate to double rounding for
// the well-conditioned, non-positive-spectrum rate matrices of linear PK models.
#include "detail/transition.hpp"

#include <unsupported/Eigen/MatrixFunctions>

namespace pkscan::detail {

template <int N>
void exact_transition(const Mat<N>& a, double h, Mat<N>& k, Mat<N>& g) {
  Eigen::Matrix<double, 2 * N, 2 * N> aug = Eigen::Matrix<double, 2 * N, 2 * N>::Zero();
  aug.template topLeftCorner<N, N>() = a * h;
  aug.template topRightCorner<N, N>() = Eigen::Matrix<double, N, N>::Identity() * h;
  const Eigen::Matrix<double, 2 * N, 2 * N> e = aug.exp();
  k = e.template topLeftCorner<N, N>();
  g = e.template topRightCorner<N, N>();
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
