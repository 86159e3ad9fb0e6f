#pragma once
/// @file model.hpp
/// Built-in linear compartment models: their compartments, parameters and rate matrices.
///
/// Every model is linear with constant coefficients: x' = A x + r(t) for the vector x of
/// amounts. Each model lists its compartments (in output order) and its parameters. Rates are
/// in 1/time and volumes in any volume unit; pkscan is unit-agnostic (see types.hpp).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pkscan {

/// The built-in models. More linear models follow through the same n-compartment machinery.
enum class ModelKind {
  TwoCompartment,    ///< depot -> central, elimination from central (NONMEM ADVAN2)
  ThreeCompartment,  ///< depot -> central <-> peripheral, elimination from central (ADVAN4)
  FourCompartment,   ///< depot -> central <-> peripheral1, central <-> peripheral2 (ADVAN12)
  Linear,  ///< compartments and first-order flows declared by the user (make_linear_model)
};

/// What kind of quantity a parameter is; decides its validation rule.
enum class ParameterRole {
  Rate,             ///< first-order rate constant or clearance, finite and >= 0
  Volume,           ///< compartment volume, finite and > 0
  Bioavailability,  ///< f_<compartment>: fraction of each dose that enters, finite and >= 0
  Lag,              ///< lag_<compartment>: dose delay, finite and >= 0
};

/// One model parameter.
struct ParameterInfo {
  std::string name;      ///< canonical name, as in run files ("ka")
  std::string alias;     ///< accepted alternative name ("k01"), empty if none
  ParameterRole role;    ///< validation rule
  double default_value;  ///< used when the parameter is not given; NaN = required
};

/// Two ways of giving the same rate constants: micro constants (ke; k12, k21) or clearances
/// (cl; q), converted with the volumes (ke = cl / v_central, k12 = q / v_central,
/// k21 = q / v_peripheral). Each subject gives exactly one of the two.
struct ParameterAlternative {
  std::vector<int> micro;      ///< columns of the micro constants
  std::vector<int> clearance;  ///< columns of the clearances
};

/// A first-order flow: amount moves from `from` to `to` at rate k * amount(from); `to` == -1 is
/// elimination out of the system. k is the parameter `parameter` when it is given, else (for a
/// built-in model's flow with a clearance) p[clearance] / the volume of `from`.
struct Flow {
  int from;            ///< source compartment, 0-based
  int to;              ///< destination compartment, 0-based, or -1 for elimination
  int parameter;       ///< column of its rate constant
  int clearance = -1;  ///< column of the clearance that may give the rate instead, or -1
};

/// Description of a model (static for the built-ins; built by make_linear_model for `linear`).
struct ModelInfo {
  ModelKind kind;                         ///< the model
  std::string name;                       ///< run-file name ("three_compartment")
  std::vector<std::string> compartments;  ///< compartment names, in state order
  std::vector<ParameterInfo> parameters;  ///< parameters, in ParameterBatch column order
  std::vector<int> volume_parameter;      ///< per compartment: index of its volume parameter
  std::vector<int> f_parameter;           ///< per compartment: index of f_<compartment>
  std::vector<int> lag_parameter;         ///< per compartment: index of lag_<compartment>
  std::vector<ParameterAlternative> alternatives;  ///< micro constants or clearances
  std::vector<char> in_alternative;                ///< per parameter: 1 when part of an alternative
  int default_dose_compartment = 0;         ///< NONMEM's default dose compartment (CMT 1), 0-based
  int default_observation_compartment = 1;  ///< central, 0-based
  std::vector<Flow> flows;                  ///< the flows that make up A (every model)
};

/// Largest number of compartments of a `linear` model.
inline constexpr int kMaxLinearCompartments = 6;

/// One flow of a user-declared linear model, by names.
struct FlowSpec {
  std::string from;       ///< source compartment
  std::string to;         ///< destination compartment; empty for elimination
  std::string parameter;  ///< name of its rate constant (a new parameter of the model)
};

/// Builds a `linear` model: compartments in state order, flows between them and eliminations
/// (FlowSpec with empty `to`). Its parameters are the flows' rate constants (in order of first
/// appearance; one parameter may serve several flows), then v_<compartment> (default 1), then
/// f_<compartment> and lag_<compartment>. Doses without a compartment go to the first;
/// observations are of `observe` (default: "central" if there is one, else the first).
/// @throws InvalidArgument naming the offending compartment, flow or parameter.
std::shared_ptr<const ModelInfo> make_linear_model(const std::vector<std::string>& compartments,
                                                   const std::vector<FlowSpec>& flows,
                                                   const std::string& observe = "");

/// Description of a built-in model (for ModelKind::Linear: an empty model; use the ModelInfo
/// from make_linear_model). Never throws.
const ModelInfo& model_info(ModelKind kind) noexcept;

/// Fills the row-major n x n rate matrix of any model (built-in or linear).
void rate_matrix(const ModelInfo& model, const double* params, double* a) noexcept;

/// Each compartment's total outflow rate, -A(i, i) of rate_matrix() with the same bits (n values;
/// 0 for a compartment without outflow), without building the matrix.
void outflow_rates(const ModelInfo& model, const double* params, double* out) noexcept;

/// Run-file name of a model ("three_compartment").
std::string to_string(ModelKind kind);

/// Parses a model name. @throws InvalidArgument naming the accepted values.
ModelKind model_from_string(std::string_view name);

/// Names of all built-in models, comma-separated, for error messages.
std::string model_names();

/// Column of a parameter (canonical name or alias) in the model's parameter list, or -1.
int parameter_index(const ModelInfo& model, std::string_view name) noexcept;

/// Index of a compartment by name, or -1.
int compartment_index(const ModelInfo& model, std::string_view name) noexcept;

/// Fills the row-major n x n rate matrix A (x' = A x) of one subject from its parameters,
/// using the micro constants when given (not NaN) and the clearances otherwise.
/// @param params one subject's parameters, in ModelInfo::parameters order
/// @param a output, n*n doubles, row-major
void rate_matrix(ModelKind kind, const double* params, double* a) noexcept;

/// The rule every value of a parameter of this role must meet: "finite and > 0" for a volume,
/// "finite and >= 0" otherwise.
const char* parameter_rule(ParameterRole role) noexcept;

/// True when `value` meets parameter_rule(role).
bool parameter_value_ok(ParameterRole role, double value) noexcept;

/// The first rule of the model that one subject's parameters break (ranges by role; exactly one
/// of micro constants or clearances), as parameter_violation() finds it.
struct ParameterViolation {
  int column = -1;      ///< the parameter the message names first; -1 when the row is valid
  std::string value;    ///< its value as the message shows it ("-1", "missing", "given")
  std::string rule;     ///< what it must be ("finite and >= 0"); "" when the message says more
  std::string message;  ///< "parameter ke is -1, but must be finite and >= 0"
  /// True when a rule is broken.
  explicit operator bool() const noexcept { return column >= 0; }
};

/// Checks one subject's parameters against the model's rules; an empty ParameterViolation when
/// they hold. Allocates nothing when they hold.
ParameterViolation parameter_violation(const ModelInfo& model, const double* params);

/// parameter_violation(model, params).message: an empty string when valid, else what is wrong
/// ("parameter ke is -1, but must be finite and >= 0"; "parameters k12 and Q are both given, but
/// must be one or the other (micro constants or clearances)").
std::string check_parameters(const ModelInfo& model, const double* params);

/// True when every f_* is 1 and every lag_* is 0 (doses enter as given).
bool default_bioavailability_and_lag(const ModelInfo& model, const double* params) noexcept;

/// The first of `n` subjects' parameter rows (row i at rows + i * model.parameters.size())
/// that check_parameters rejects or, with `grid_doses`, whose bioavailability or lag is not the
/// default; n when there is none. Runs in parallel (OpenMP, on `threads` threads; 0: all
/// hardware threads) over more than 4096 rows. A row whose check cannot build its message (no
/// memory) counts as rejected.
std::int64_t first_rejected_row(const ModelInfo& model, const double* rows, std::int64_t n,
                                bool grid_doses, int threads = 0) noexcept;

}  // namespace pkscan
