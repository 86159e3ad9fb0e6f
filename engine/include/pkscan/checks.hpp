#pragma once
/// @file checks.hpp
/// The rules of check() and simulate(), one part of a Problem at a time, callable on their own: a
/// front end that reads a problem part by part (the YAML loader) checks each part as soon as it
/// has it, and maps each error's field path (Error::field(), error.hpp) to where the value came
/// from (the loader reports the YAML node's file:line:column), so every rule is written once, here.
///
/// check() runs them in this order: check_time_grid, check_parameter_rows, check_doses,
/// check_output_times, then check_euler_step with Discretization::Euler. Each throws what check()
/// throws (DomainError or InvalidArgument, "simulate: ..." messages) with the field path set.

#include <cstdint>
#include <pkscan/types.hpp>
#include <vector>

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

/// grid.dt finite and > 0; grid.steps in [1, 10^9]; the last grid time finite (field grid.steps).
/// @throws DomainError
void check_time_grid(const TimeGrid& grid);

/// Every row's parameters (parameter_violation's rules; field parameters[row].NAME) and, with
/// `grid_doses` (a run on a time grid, where every subject gets the same doses), bioavailability
/// 1 and lag 0. A large batch is scanned in parallel (on `threads` threads; 0: all hardware
/// threads); the first failing row is reported.
/// @throws DomainError
void check_parameter_rows(const ParameterBatch& parameters, bool grid_doses, int threads = 0);

/// Each dose of a grid run: compartment in [0, compartments), time, amount, rate, duration and
/// every finite and >= 0, not both rate and duration, repeat in [0, 10^8] with every a positive
/// multiple of grid.dt, and the time on the grid (fields doses[i].time, ...).
/// @throws DomainError, InvalidArgument
void check_doses(const std::vector<DoseEvent>& doses, int compartments, const TimeGrid& grid);

/// Output steps within [0, grid.steps] and strictly increasing (fields output.steps[i]).
/// @throws DomainError, InvalidArgument
void check_output_times(const OutputTimes& output, const TimeGrid& grid);

/// With Discretization::Euler: K = I + A dt has no negative diagonal entry for any row
/// (first_euler_violation; field grid.dt, since the step is too long for the rates).
/// @throws DomainError
void check_euler_step(const ParameterBatch& parameters, double dt);

}  // namespace pkscan
