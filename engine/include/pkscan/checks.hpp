#pragma once
/// @file checks.hpp
/// Single rules of check() and simulate(), callable on their own: a front end that knows where
/// a value came from (the YAML loader, which reports file:line:column) applies the library's rule
/// and words the error itself, so the rule is written once.

#include <cstdint>
#include <pkscan/types.hpp>

namespace pkscan {

/// Where the euler transition K = I + A dt has a negative diagonal entry: the step is too long
/// for the rates of that subject.
struct EulerViolation {
  std::int64_t subject = -1;  ///< 0-based row of the parameter batch; -1 when there is none
  int compartment = -1;       ///< 0-based compartment c of K[c][c]
  double k = 0.0;             ///< K[c][c] = 1 + A[c][c] dt, negative
  /// True when there is a violation.
  explicit operator bool() const noexcept { return subject >= 0; }
};

/// The first subject (then compartment) whose euler transition has K[c][c] = 1 + A[c][c] dt < 0,
/// or an empty EulerViolation when there is none. check() and simulate() reject a problem with
/// Discretization::Euler exactly when this finds one. Does not check the parameters themselves.
EulerViolation first_euler_violation(const ParameterBatch& parameters, double dt);

}  // namespace pkscan
