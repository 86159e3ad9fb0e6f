// The block-exponential Frechet derivative of expm (expm_derivative.hpp), in its own file: Eigen's
// MatrixFunctions exponential is one of the library's slowest templates to compile.
#include "events/expm_derivative.hpp"

#include <Eigen/Dense>
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

}  // namespace pkscan::detail
