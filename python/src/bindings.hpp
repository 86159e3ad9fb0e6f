#pragma once
// Private header of the pkscan Python module: what its files share (module.cpp, convert.cpp,
// simulate_bindings.cpp, population_bindings.cpp, design_bindings.cpp, vpc_bindings.cpp,
// dataset_bindings.cpp, predictor_bindings.cpp, jax_ffi.cpp). Not installed.
//
// Every function here is called with the GIL held; it reads or makes Python objects. Checks
// throw pkscan::InvalidArgument (translated to ValueError), as the library does.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <pkscan/dataset.hpp>
#include <pkscan/design.hpp>
#include <pkscan/models/model.hpp>
#include <pkscan/options.hpp>
#include <pkscan/population.hpp>
#include <pkscan/population_run.hpp>
#include <pkscan/types.hpp>
#include <string>
#include <vector>

namespace pkscan::python {

namespace py = pybind11;

/// A model description, shared by the datasets and predictors made for it.
using ModelPtr = std::shared_ptr<const ModelInfo>;

/// A C-contiguous float64 array; an argument that already is one is used in place.
using DoubleArray = py::array_t<double, py::array::c_style | py::array::forcecast>;

/// The Python `Model`.
struct PyModel {
  ModelPtr info;  ///< never null
};

/// The Python `Dataset`: a dataset read for one model (its parameter names decide which columns
/// are parameters, its compartments the CMT range).
struct PyDataset {
  std::shared_ptr<const Dataset> data;  ///< never null
  ModelPtr model;                       ///< never null
};

/// One parameter value from Python: a number (every subject) or a 1-D array (one per subject).
struct ParameterValue {
  int column = 0;     ///< column in ModelInfo::parameters
  std::string name;   ///< as the user wrote it (name or alias)
  DoubleArray array;  ///< 0-d or 1-d
};

/// The text of a Python str; InvalidArgument naming `what` for anything else.
std::string str_of(py::handle h, const std::string& what);

/// A model given as a PyModel, a built-in name, or a linear-model mapping {"compartments",
/// "flows", "eliminations", "observe"} (optionally inside {"linear": ...}).
ModelPtr resolve_model(py::handle h);

/// A Python list of the strings.
py::list names_of(const std::vector<std::string>& v);

/// The strings joined by ", " (for messages).
std::string join_names(const std::vector<std::string>& v);

/// The subject IDs of a dataset, in dataset order.
py::list dataset_ids(const Dataset& data);

/// A dataset given as a PyDataset (then `model`, if not None, must be the dataset's), CSV text
/// (a string with a line break) or a path (both need `model`).
PyDataset load_dataset(py::handle dataset, py::handle model);

/// Reads {name or alias: number or 1-D array}; `subjects` receives the length of the arrays
/// (all equal) or -1 when every value is a number. None gives no values.
std::vector<ParameterValue> read_parameters(const ModelInfo& model, py::handle parameters,
                                            std::int64_t& subjects);

/// Writes the values into `batch`; arrays must have batch.subjects() values.
void store_parameters(const std::vector<ParameterValue>& values, ParameterBatch& batch);

/// A linear model from its compartments, `flows` ({"from", "to", "rate"} mappings or (from, to,
/// rate) tuples) and `eliminations` ({"from", "rate"} or (from, rate)); None gives none.
ModelPtr linear_model(const std::vector<std::string>& compartments, py::handle flows,
                      py::handle eliminations, const std::string& observe);

/// Simulation options from their names (as the Python functions take them); concentrations on.
SimulateOptions make_options(const std::string& method, const std::string& device,
                             const std::string& precision, int threads);

/// Raises MemoryError ("<who>: <what> need X GiB, but only Y GiB are available; <hint>") when
/// `need` bytes (what the call will hold; long double, so that absurd sizes do not wrap) exceed
/// the library's limit for a result, result_byte_limit(options): options.max_result_bytes, else
/// 80% of the memory available. Call it before allocating.
void check_memory(const std::string& who, long double need, const std::string& what,
                  const SimulateOptions& options, const std::string& hint);

/// The doses of a list of dicts {compartment (name or 0-based index), time, amount, rate,
/// duration, every, repeat}; None gives none. `what` names the list in messages. With `scaling`
/// (a population's doses; then `covariates` names its covariates), a dose may also carry `per`
/// (a covariate: the amount per unit of the subject's value) or, instead of `amount`, `bands`
/// ({covariate, edges, amounts}: the amount by covariate band); `scaling` receives one
/// DoseScaling per dose, or none when no dose depends on the subject.
std::vector<DoseEvent> read_doses(const ModelInfo& model, py::handle doses,
                                  const std::string& what = "doses",
                                  const std::vector<std::string>* covariates = nullptr,
                                  std::vector<DoseScaling>* scaling = nullptr);

/// The typical values of a population (PopulationSpec::typical): {name or alias: number} over
/// the model's defaults (population_bindings.cpp, as the other population readers).
std::vector<double> read_typical(const ModelPtr& model, py::handle typical);

/// Variability of `spec`'s parameters: {name: variance of <of>} (diagonal) or {'block': [names],
/// 'omega': [lower triangle of the covariance]} appends the parameter columns to `columns` and
/// sets `omega`; None gives none. `what` names the argument in messages ("iiv", "iov").
void read_omega(py::handle h, const std::string& what, const std::string& of,
                const PopulationSpec& spec, std::vector<int>& columns, Eigen::MatrixXd& omega);

/// A residual error {'additive', 'proportional', 'exponential': standard deviation}; None gives
/// none.
std::optional<ResidualError> read_residual(py::handle residual);

/// Covariate effects [{parameter, covariate, type, coefficient, reference}] appended to `spec`
/// (design_bindings.cpp); None gives none. With `dataset_columns` a covariate is a dataset
/// column (added to spec.covariate_names, as a run file's design simulations read them),
/// otherwise one of spec.covariate_names.
void read_effects(py::handle effects, PopulationSpec& spec, bool dataset_columns);

/// The design simulation of simulate_design's arguments (design_bindings.cpp): the dataset, the
/// population (typical, iiv, iov, effects), residual, lloq (a number or a dataset column), seed,
/// replicates, and the CPU options; run_design checks the rest.
DesignRun read_design_run(py::handle dataset, py::handle typical, py::handle model, py::handle iiv,
                          py::handle iov, py::handle effects, py::handle residual, py::handle lloq,
                          std::uint64_t seed, std::int64_t replicates, const std::string& method,
                          int threads);

/// Adds simulate, Engine and GridGradient to the module (simulate_bindings.cpp).
void bind_simulate(py::module_& m);

/// Adds Dataset, read_dataset, parse_dataset and simulate_dataset (dataset_bindings.cpp).
void bind_datasets(py::module_& m);

/// Adds simulate_population (population_bindings.cpp).
void bind_population(py::module_& m);

/// Adds simulate_design (design_bindings.cpp).
void bind_design(py::module_& m);

/// Adds vpc (vpc_bindings.cpp).
void bind_vpc(py::module_& m);

/// Adds _fit, the population estimation behind pkscan.fit (fit_bindings.cpp).
void bind_fit(py::module_& m);

/// Adds the Predictor class to the module.
void bind_predictor(py::module_& m);

/// Adds `_xla_ffi_targets()`, the XLA FFI handlers of pkscan.jax, and the XLA FFI API version
/// they were built with (jax_ffi.cpp; only in builds with PKSCAN_WITH_XLA_FFI).
void bind_jax_ffi(py::module_& m);

}  // namespace pkscan::python
