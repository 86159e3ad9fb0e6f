#pragma once
// Private header of the pkscan Python module: what module.cpp (simulate, datasets, the module
// itself) shares with predictor.cpp (the Predictor class). Not installed.
//
// Every function here is called with the GIL held; it reads or makes Python objects. Checks
// throw pkscan::InvalidArgument (translated to ValueError), as the library does.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <pkscan/dataset.hpp>
#include <pkscan/models/model_kind.hpp>
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

/// Adds the Predictor class to the module.
void bind_predictor(py::module_& m);

/// Adds `_xla_ffi_targets()`, the XLA FFI handlers of pkscan.jax (jax_ffi.cpp; only in builds
/// with PKSCAN_WITH_XLA_FFI).
void bind_jax_ffi(py::module_& m);

}  // namespace pkscan::python
