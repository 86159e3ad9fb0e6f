// The `pkscan` Python module (pybind11): simulate populations on a time grid, read and simulate
// NONMEM-format datasets, and evaluate predictions, log-likelihoods and their exact gradients
// through pkscan::Predictor, all on NumPy arrays.
//
// Conventions of the module's files:
// - Input arrays are taken as C-contiguous float64 (py::array::forcecast): an array that already
//   is one is used in place, anything else is converted once. Output arrays are either
//   allocated by NumPy and written by the engine (predictions, gradients) or views of the
//   engine's own result storage kept alive by a capsule (simulate, simulate_dataset): no copies.
// - Python objects are read and made with the GIL held; the computation itself runs with the GIL
//   released (py::gil_scoped_release), so other Python threads run meanwhile.
// - Errors: pkscan::InvalidArgument, DomainError and ConfigError become ValueError, every other
//   pkscan::Error RuntimeError; checks made here throw pkscan::InvalidArgument so that messages
//   and exception types match the library's.
//
// The module's files: convert.cpp (Python values -> pkscan values), simulate_bindings.cpp
// (simulate, Engine, GridGradient), population_bindings.cpp (simulate_population),
// design_bindings.cpp (simulate_design), dataset_bindings.cpp (datasets), predictor_bindings.cpp
// (Predictor) and jax_ffi.cpp (pkscan.jax's XLA handlers); this one defines the module, the
// Model class and the error translation.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <exception>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

#include "bindings.hpp"

namespace pkscan::python {

namespace {

// ---- Error translation ------------------------------------------------------------------------

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const pkscan::InvalidArgument& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const pkscan::DomainError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const pkscan::ConfigError& e) {
    PyErr_SetString(PyExc_ValueError, e.what());
  } catch (const pkscan::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
}

}  // namespace

}  // namespace pkscan::python

PYBIND11_MODULE(_core, m) {
  using namespace pkscan::python;  // NOLINT(google-build-using-namespace)
  m.doc() =
      "pkscan: linear pharmacokinetic compartment models for many subjects at once (simulation "
      "on a time grid, NONMEM-format datasets, predictions, log-likelihoods and exact gradients "
      "for fitting). See docs/python.md.";
  m.attr("__version__") = PKSCAN_VERSION_STRING;
  m.attr("has_cuda") = PKSCAN_HAS_CUDA != 0;
  py::register_exception_translator(&translate);
  bind_predictor(m);
#ifdef PKSCAN_WITH_XLA_FFI
  bind_jax_ffi(m);
#endif

  py::class_<PyModel>(m, "Model", R"doc(
A model: a built-in one by name, or a linear model declared flow by flow (Model.linear).
Its parameters are listed in column order (the order of Predictor parameter rows).)doc")
      .def(py::init([](const std::string& name) { return PyModel{resolve_model(py::str(name))}; }),
           py::arg("name"),
           "A built-in model: 'two_compartment', 'three_compartment' or 'four_compartment'.")
      .def_static(
          "linear",
          [](const std::vector<std::string>& compartments, const py::object& flows,
             const py::object& eliminations, const std::string& observe) {
            return PyModel{linear_model(compartments, flows, eliminations, observe)};
          },
          py::arg("compartments"), py::arg("flows") = py::list(),
          py::arg("eliminations") = py::list(), py::arg("observe") = "",
          R"doc(
A linear model: compartments in state order; flows as (from, to, rate) tuples or
{'from', 'to', 'rate'} dicts (rate names a new parameter); eliminations as (from, rate) or
{'from', 'rate'}; observe: the observed compartment (default central, else the first).)doc")
      .def_property_readonly("name", [](const PyModel& self) { return self.info->name; })
      .def_property_readonly("compartments",
                             [](const PyModel& self) { return names_of(self.info->compartments); })
      .def_property_readonly(
          "parameters",
          [](const PyModel& self) {
            py::list l;
            for (const pkscan::ParameterInfo& p : self.info->parameters) l.append(p.name);
            return l;
          },
          "Canonical parameter names, in column order.")
      .def_property_readonly(
          "aliases",
          [](const PyModel& self) {
            py::dict d;
            for (const pkscan::ParameterInfo& p : self.info->parameters)
              if (!p.alias.empty()) d[py::str(p.alias)] = p.name;
            return d;
          },
          "Alias -> canonical name ('k01' -> 'ka').")
      .def_property_readonly(
          "defaults",
          [](const PyModel& self) {
            py::dict d;
            for (const pkscan::ParameterInfo& p : self.info->parameters)
              d[py::str(p.name)] = p.default_value;
            return d;
          },
          "Default value of each parameter; NaN = required (or one of an alternative pair).")
      .def_property_readonly("observation_compartment",
                             [](const PyModel& self) {
                               return self.info->compartments[static_cast<std::size_t>(
                                   self.info->default_observation_compartment)];
                             })
      .def_property_readonly(
          "dose_compartment",
          [](const PyModel& self) {
            return self.info
                ->compartments[static_cast<std::size_t>(self.info->default_dose_compartment)];
          })
      .def("__repr__",
           [](const PyModel& self) { return "pkscan.Model('" + self.info->name + "')"; });

  m.def(
      "_check_memory",
      [](const std::string& who, double need, const std::string& what, const std::string& hint) {
        check_memory(who, need, what, pkscan::SimulateOptions{}, hint);
      },
      py::arg("who"), py::arg("need"), py::arg("what"), py::arg("hint"),
      "Raises MemoryError when `need` bytes exceed the memory a result may take (the library's "
      "result_byte_limit); for pkscan.jax.");
  bind_simulate(m);
  bind_population(m);
  bind_design(m);
  bind_vpc(m);
  bind_fit(m);
  bind_datasets(m);
}
