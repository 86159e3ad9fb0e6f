// One dynamic size for every model size: the long double exponential compiles once, here.
#include "support/augmented_exponential.hpp"

#include <unsupported/Eigen/MatrixFunctions>

namespace pkscan::test {

void augmented_exponential(const Eigen::MatrixXd& a, double h, Eigen::MatrixXd& k,
                           Eigen::MatrixXd& g) {
  using Wide = Eigen::Matrix<long double, Eigen::Dynamic, Eigen::Dynamic>;
  const Eigen::Index n = a.rows();
  Wide aug = Wide::Zero(2 * n, 2 * n);
  aug.topLeftCorner(n, n) = (a * h).cast<long double>();
  aug.topRightCorner(n, n) = Wide::Identity(n, n) * static_cast<long double>(h);
  const Eigen::MatrixXd e = Wide(aug.exp()).cast<double>();
  k = e.topLeftCorner(n, n);
  g = e.topRightCorner(n, n);
}

}  // namespace pkscan::test
