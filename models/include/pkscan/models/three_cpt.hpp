#pragma once
/// @file three_cpt.hpp
/// The three-compartment model: depot -> central <-> peripheral, elimination from central.

#include <Eigen/Core>

namespace pkscan {

/// Parameter columns of ModelKind::ThreeCompartment, in ParameterBatch order.
enum ThreeCptParam : int {
  kThreeCptKa = 0,           ///< absorption rate depot -> central (alias k01), 1/time
  kThreeCptK12 = 1,          ///< central -> peripheral, 1/time
  kThreeCptK21 = 2,          ///< peripheral -> central, 1/time
  kThreeCptKe = 3,           ///< elimination from central (alias u), 1/time
  kThreeCptVDepot = 4,       ///< depot volume (default 1)
  kThreeCptVCentral = 5,     ///< central volume
  kThreeCptVPeripheral = 6,  ///< peripheral volume
  kThreeCptParamCount = 7
};

/// Rate matrix of the three-compartment model for amounts (depot, central, peripheral):
///
///     A = [[-ka,          0,    0],
///          [ ka, -(k12+ke),  k21],
///          [  0,        k12, -k21]]
inline Eigen::Matrix3d three_compartment_rate_matrix(double ka, double k12, double k21, double ke) {
  Eigen::Matrix3d a;
  a << -ka, 0.0, 0.0,        //
      ka, -(k12 + ke), k21,  //
      0.0, k12, -k21;
  return a;
}

}  // namespace pkscan
