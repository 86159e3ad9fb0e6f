#pragma once
// Rate matrices of the engine's models for tests of the event solver's pieces.
#include "grid/transition.hpp"

namespace pkscan::test {

// The three-compartment model's rate matrix (depot, central, peripheral): ka from the depot to
// central, k12 and k21 between central and peripheral, ke out of central.
inline detail::Mat<3> oral_rates(double ka, double k12, double k21, double ke) {
  detail::Mat<3> a = detail::Mat<3>::Zero();
  a(0, 0) = -ka;
  a(1, 0) = ka;
  a(1, 1) = -(k12 + ke);
  a(2, 1) = k12;
  a(1, 2) = k21;
  a(2, 2) = -k21;
  return a;
}

}  // namespace pkscan::test
