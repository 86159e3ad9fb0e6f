#pragma once
/// @file model_kind.hpp
/// Built-in linear compartment models: their compartments, parameters and rate matrices.
///
/// Every model is linear with constant coefficients: x' = A x + r(t) for the vector x of
/// amounts. Each model lists its compartments (in output order) and its parameters. Rates are
/// in 1/time and volumes in any volume unit; pkscan is unit-agnostic (see types.hpp).

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace pkscan {

/// The built-in models. More linear models follow through the same n-compartment machinery.
enum class ModelKind {
  ThreeCompartment,  ///< depot -> central <-> peripheral, elimination from central
};

/// What kind of quantity a parameter is; decides its validation rule.
enum class ParameterRole {
  Rate,    ///< first-order rate constant, finite and >= 0
  Volume,  ///< compartment volume, finite and > 0
};

/// One model parameter.
struct ParameterInfo {
  std::string name;      ///< canonical name, as in run files ("ka")
  std::string alias;     ///< accepted alternative name ("k01"), empty if none
  ParameterRole role;    ///< validation rule
  double default_value;  ///< used when the parameter is not given; NaN = required
};

/// Static description of a model.
struct ModelInfo {
  ModelKind kind;                         ///< the model
  std::string name;                       ///< run-file name ("three_compartment")
  std::vector<std::string> compartments;  ///< compartment names, in state order
  std::vector<ParameterInfo> parameters;  ///< parameters, in ParameterBatch column order
  std::vector<int> volume_parameter;      ///< per compartment: index of its volume parameter
};

/// Description of a built-in model. Never throws.
const ModelInfo& model_info(ModelKind kind) noexcept;

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

/// Fills the row-major n x n rate matrix A (x' = A x) of one subject from its parameters.
/// @param params one subject's parameters, in ModelInfo::parameters order
/// @param a output, n*n doubles, row-major
void rate_matrix(ModelKind kind, const double* params, double* a) noexcept;

}  // namespace pkscan
