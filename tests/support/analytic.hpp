#pragma once
// Closed-form solutions used as oracles for the reference scan. Written from the textbook
// formulas (Gibaldi & Perrier), independent of pkscan's code.
#include <cmath>

namespace pkscan::test {

// One compartment, IV bolus D at t = 0, elimination ke: amount at t.
inline double one_cpt_bolus(double d, double ke, double t) { return d * std::exp(-ke * t); }

// One compartment with first-order absorption (Bateman): amount in central at t after an oral
// bolus D at t = 0 (ka != ke).
inline double bateman(double d, double ka, double ke, double t) {
  return d * ka / (ka - ke) * (std::exp(-ke * t) - std::exp(-ka * t));
}

// One compartment, zero-order infusion at rate r from 0 to tinf: amount in central at t.
inline double one_cpt_infusion(double r, double tinf, double ke, double t) {
  if (t <= tinf) return r / ke * (1.0 - std::exp(-ke * t));
  return r / ke * (1.0 - std::exp(-ke * tinf)) * std::exp(-ke * (t - tinf));
}

// Two-compartment IV bolus D into central: central and peripheral amounts at t.
struct TwoCpt {
  double central;
  double peripheral;
};
inline TwoCpt two_cpt_bolus(double d, double k12, double k21, double ke, double t) {
  const double s = k12 + k21 + ke;
  const double disc = std::sqrt(s * s - 4.0 * k21 * ke);
  const double alpha = 0.5 * (s + disc);
  const double beta = 0.5 * (s - disc);
  const double a = (alpha - k21) / (alpha - beta);
  const double b = (k21 - beta) / (alpha - beta);
  return {d * (a * std::exp(-alpha * t) + b * std::exp(-beta * t)),
          d * k12 / (alpha - beta) * (std::exp(-beta * t) - std::exp(-alpha * t))};
}

}  // namespace pkscan::test
