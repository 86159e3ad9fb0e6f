#pragma once
// Divided differences of exp for the sensitivities of the event engine, one source for the CPU
// solver (events/expm_derivative.hpp, solver_impl.hpp) and the device's event walk
// (device/walk_kernels.hpp). No Eigen.
#include <cmath>

#include "kernels/hd.hpp"

namespace pkscan::detail {

// ---- Divided differences of exp, accurate for close arguments. ----

// d * exp[l_i d, l_j d] = (e_i - e_j) / (l_i - l_j) (d e_i when equal).
PKSCAN_HD inline double phi_pair(double li, double lj, double ei, double ej, double d, double inv) {
  const double delta = li - lj;
  if (::fabs(delta) * d >= 0.01) return (ei - ej) * inv;  // cancellation costs <= 200 ulp
  if (delta == 0.0) return d * ej;
  return ej * ::expm1(delta * d) / delta;
}

// d^2 * exp[a, b, 0] with a = l_i d, b = l_j d: the divided difference of
// g(l) = (exp(l d) - 1) / l at l_i, l_j. phi = phi_pair(i, j); si, sj = g(l_i), g(l_j).
PKSCAN_HD inline double psi_pair(double li, double lj, double d, double phi, double si, double sj) {
  const double a = li * d, b = lj * d;
  // std::max({a, b, 0.0}) and std::min({a, b, 0.0}), as the CPU had them.
  double hi = a, lo = a;
  if (hi < b) hi = b;
  if (hi < 0.0) hi = 0.0;
  if (b < lo) lo = b;
  if (0.0 < lo) lo = 0.0;
  if (hi - lo < 0.02) {
    // exp[a, b, 0] = exp(mu) sum_m h_m(a - mu, b - mu, -mu) / (m + 2)!, h_m the complete
    // homogeneous symmetric polynomials; |a - mu| etc. <= 0.01, so 9 terms reach rounding.
    const double mu = 0.5 * (hi + lo);
    const double u = a - mu, v = b - mu, w = -mu;
    double p1 = 1.0, h2 = 1.0, h3 = 1.0, sum = 0.5, fact = 2.0;
    for (int m = 1; m <= 9; ++m) {
      p1 *= u;
      h2 = p1 + v * h2;
      h3 = h2 + w * h3;
      fact *= static_cast<double>(m + 2);
      sum += h3 / fact;
    }
    return d * d * ::exp(mu) * sum;
  }
  // f[x, y, z] = (f[x, y] - f[y, z]) / (x - z) with x, z the extreme points: no cancellation
  // beyond a factor 2 / (x - z) <= 100.
  const double fab = phi / d, fa0 = si / d, fb0 = sj / d;
  double r;
  if ((a >= 0.0 && b <= 0.0) || (a <= 0.0 && b >= 0.0))  // 0 in the middle
    r = (fa0 - fb0) / (a - b);
  else if ((b <= a && a <= 0.0) || (0.0 <= a && a <= b))  // a in the middle
    r = (fab - fa0) / b;
  else  // b in the middle
    r = (fab - fb0) / a;
  return d * d * r;
}

}  // namespace pkscan::detail
