#pragma once
/// @file types.hpp
/// Value types of a simulation problem: time grid, doses, output times, parameters.
///
/// Units: pkscan is unit-agnostic. Times, dt and infusion durations share one time unit (hours
/// in the examples); rate constants are in 1/time; infusion rates in amount/time; volumes in any
/// volume unit. Amounts come back in the dose unit and concentrations in dose unit / volume unit.

#include <cstdint>
#include <limits>
#include <memory>
#include <pkscan/models/model.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pkscan {

/// How the continuous model is turned into the per-step transition x_i = K x_{i-1} + b_i.
enum class Discretization {
  Exact,  ///< K = expm(A dt); infusions integrated exactly over each step
  Euler,  ///< K = I + A dt; an infusion adds rate*dt per covered step (original NumPyro model)
};

/// Floating-point type of the scan. Transition matrices are always built in double.
enum class Precision { Float64, Float32 };

/// Run-file name of a discretization ("exact", "euler").
std::string to_string(Discretization discretization);
/// Parses a discretization name. @throws InvalidArgument naming the accepted values
/// ("discretization is \"rk4\", but must be exact or euler").
Discretization discretization_from_string(std::string_view name);
/// Run-file name of a precision ("float64", "float32").
std::string to_string(Precision precision);
/// Parses a precision name. @throws InvalidArgument naming the accepted values
/// ("precision is \"float16\", but must be float64 or float32").
Precision precision_from_string(std::string_view name);

/// Uniform time grid t_i = i * dt, i = 0..steps.
struct TimeGrid {
  double dt = 1.0;         ///< step length, finite and > 0
  std::int64_t steps = 1;  ///< number of steps, >= 1
  /// Time of grid point i.
  double time(std::int64_t i) const noexcept { return static_cast<double>(i) * dt; }
  /// Grid index of time t when t lies on the grid within rounding (|t/dt - i| <= 1e-9 +
  /// 1e-13 i: "0.3 with dt 0.1" is on the grid), else -1. The one rule for doses, repeats,
  /// infusion ends and output times.
  std::int64_t index_of(double t) const noexcept;
};

/// One dose line: a bolus or a zero-order infusion, optionally repeated (NONMEM II/ADDL).
///
/// A bolus has rate == 0 and duration == 0. An infusion has exactly one of rate > 0 or
/// duration > 0; the other is derived from amount. Doses at time t_k = time + k*every for
/// k = 0..repeat. Times must lie on the grid.
struct DoseEvent {
  int compartment = 0;      ///< 0-based compartment index in the model's order
  double time = 0.0;        ///< time of the first dose, >= 0
  double amount = 0.0;      ///< amount per dose, >= 0
  double rate = 0.0;        ///< infusion rate (amount/time); 0 for bolus or duration-given
  double duration = 0.0;    ///< infusion duration; 0 for bolus or rate-given
  double every = 0.0;       ///< interval between repeated doses (NONMEM II); > 0 if repeat > 0
  std::int64_t repeat = 0;  ///< number of additional doses (NONMEM ADDL), >= 0
  /// True for a zero-order infusion.
  bool is_infusion() const noexcept { return rate > 0.0 || duration > 0.0; }
};

/// Which grid points are reported.
struct OutputTimes {
  bool all = true;                  ///< every grid point 0..steps
  std::vector<std::int64_t> steps;  ///< when !all: strictly increasing grid indices in 0..steps
  /// Every grid point.
  static OutputTimes every_step() { return OutputTimes{}; }
  /// Only these grid indices (strictly increasing).
  static OutputTimes at_steps(std::vector<std::int64_t> s) {
    return OutputTimes{false, std::move(s)};
  }
};

/// Parameters of a population: one row per subject, one column per model parameter in the
/// order of ModelInfo::parameters. Columns start at the model's defaults (NaN = not given).
class ParameterBatch {
 public:
  ParameterBatch() = default;
  /// A batch of `subjects` rows for a built-in `model`, filled with the model's defaults.
  ParameterBatch(ModelKind model, std::int64_t subjects);
  /// A batch for any model description (a `linear` model from make_linear_model).
  ParameterBatch(std::shared_ptr<const ModelInfo> model, std::int64_t subjects);
  /// The model's description (compartments, parameters, rate matrix rules).
  const ModelInfo& info() const noexcept { return *info_; }
  /// The same, shared.
  const std::shared_ptr<const ModelInfo>& info_ptr() const noexcept { return info_; }
  /// The model whose parameters these are.
  ModelKind model() const noexcept { return model_; }
  /// Number of subjects.
  std::int64_t subjects() const noexcept { return subjects_; }
  /// Number of parameters (columns).
  int parameters() const noexcept { return columns_; }
  /// Sets one parameter (name or alias) for one subject. @throws InvalidArgument on an unknown
  /// name or a subject index out of range.
  void set(const std::string& name, std::int64_t subject, double value);
  /// Sets one parameter (name or alias) for every subject. @throws InvalidArgument.
  void set_all(const std::string& name, double value);
  /// Value of column `column` for `subject` (no bounds check).
  double get(std::int64_t subject, int column) const noexcept {
    return values_[static_cast<std::size_t>(subject * columns_ + column)];
  }
  /// Row-major storage, subjects x parameters.
  const std::vector<double>& values() const noexcept { return values_; }
  /// Pointer to one subject's row.
  const double* row(std::int64_t subject) const noexcept {
    return values_.data() + subject * columns_;
  }
  /// Writable row-major storage (subjects x parameters), for filling many rows at once (a
  /// population sampler); NaN marks the unused one of micro constants / clearances. Values are
  /// validated when simulated.
  double* mutable_values() noexcept { return values_.data(); }

 private:
  ModelKind model_ = ModelKind::ThreeCompartment;
  std::shared_ptr<const ModelInfo> info_ = builtin(ModelKind::ThreeCompartment);
  std::int64_t subjects_ = 0;
  static std::shared_ptr<const ModelInfo> builtin(ModelKind kind);
  int columns_ = 0;
  std::vector<double> values_;
};

/// A whole simulation problem: parameters per subject (and with them the model), doses (applied
/// to every subject), time grid, discretization and output times.
struct Problem {
  Discretization discretization = Discretization::Exact;  ///< how steps are computed
  TimeGrid grid;                                          ///< uniform time grid
  ParameterBatch parameters;                              ///< the model and per-subject parameters
  std::vector<DoseEvent> doses;                           ///< regimen given to every subject
  OutputTimes output;                                     ///< reported grid points
};

}  // namespace pkscan
