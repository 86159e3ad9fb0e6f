#pragma once
/// @file grid_gradient.hpp
/// Concentrations of a grid problem and their exact derivatives with respect to one subject's
/// parameters, many times over (fitting code and pkscan.jax.Simulator on a time grid).

#include <cstdint>
#include <memory>
#include <pkscan/types.hpp>
#include <vector>

namespace pkscan {

/// A grid problem (model, time grid, doses, output times) with the euler discretization,
/// prepared once; evaluate() then gives the concentrations of any parameter row at the output
/// times and, if asked, their derivatives with respect to every parameter column.
///
/// Values are those of simulate() with Method::Scan for the same row, bit for bit: the same
/// schedule, transition and summation order (x_i = K x_{i-1} + b_i with K = I + A dt), divided
/// by the compartments' volumes at the end. Derivatives are forward sensitivities of that
/// recurrence, s_i = K s_{i-1} + dt (dA/dp) x_{i-1} (the inputs b_i do not depend on the
/// parameters on a grid), exact for the discrete model up to rounding, plus the volume's own
/// term -x / V^2. For the exact discretization use a Predictor on a dataset with the same doses
/// and one observation record per output time (pkscan.jax.Simulator does).
class GridGradient {
 public:
  /// Validates the problem as check() does, except its parameter rows (those come with each
  /// evaluate call; the batch only names the model).
  /// @throws InvalidArgument / DomainError as check(); InvalidArgument for a discretization
  /// other than Discretization::Euler
  explicit GridGradient(const Problem& problem);
  ~GridGradient();
  GridGradient(GridGradient&&) noexcept;
  GridGradient& operator=(GridGradient&&) noexcept;
  GridGradient(const GridGradient&) = delete;
  GridGradient& operator=(const GridGradient&) = delete;

  int compartments() const noexcept;
  /// Number of parameter columns of the model (a row's length).
  int parameters() const noexcept;
  /// Grid indices of the output times, increasing.
  const std::vector<std::int64_t>& output_steps() const noexcept;

  /// One subject: conc[t * compartments() + c] at output time t, and with `jac` non-null
  /// jac[(t * compartments() + c) * parameters() + j] = d conc / d params[j] (0 for columns the
  /// concentrations do not depend on, and for NaN columns: unused alternatives). Thread-safe
  /// (const, no shared scratch).
  /// @throws DomainError for a row simulate() rejects: check_parameters' rules, bioavailability
  /// or lag other than 1 and 0, or a step too long for the rates (1 + A_rr dt < 0)
  void evaluate(const double* params, double* conc, double* jac) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pkscan
