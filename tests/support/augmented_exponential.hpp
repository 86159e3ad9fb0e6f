// The reference of an exact step: K = exp(A h) and G = the integral of exp(A s) over [0, h], the
// blocks of the exponential of [[A h, I h], [0, 0]] (Van Loan), by Eigen's MatrixFunctions
// exponential (Pade scaling and squaring, Higham 2005) in long double (64-bit significand),
// rounded to double. Its squarings cost 2^s of 2^-64 for s squarings, below 1e-15 while
// ||A h||_1 <= 16.
#pragma once

#include <Eigen/Dense>

namespace pkscan::test {

void augmented_exponential(const Eigen::MatrixXd& a, double h, Eigen::MatrixXd& k,
                           Eigen::MatrixXd& g);

}  // namespace pkscan::test
