// The module's simulations on a time grid: pkscan.simulate, pkscan.Engine (reused across calls)
// and pkscan.GridGradient (exact derivatives with the euler discretization, for pkscan.jax).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <pkscan/checks.hpp>
#include <pkscan/pkscan.hpp>
#include <string>
#include <utility>
#include <vector>

#include "arrays.hpp"
#include "bindings.hpp"

namespace pkscan::python {

namespace {

// ---- simulate ---------------------------------------------------------------------------------

pkscan::Problem make_problem(py::handle model, py::handle parameters, py::handle doses, double dt,
                             std::int64_t steps, py::handle times,
                             const std::string& discretization) {
  const ModelPtr info = resolve_model(model);
  pkscan::Problem p;
  p.discretization = pkscan::discretization_from_string(discretization);
  p.grid.dt = dt;
  p.grid.steps = steps;
  pkscan::check_time_grid(p.grid);  // an invalid grid is a ValueError, whatever its size
  std::int64_t subjects = -1;
  const std::vector<ParameterValue> values = read_parameters(*info, parameters, subjects);
  p.parameters = pkscan::ParameterBatch(info, subjects < 0 ? 1 : subjects);
  store_parameters(values, p.parameters);
  p.doses = read_doses(*info, doses);
  if (!times.is_none()) {
    const DoubleArray t = DoubleArray::ensure(times);
    if (!t || t.ndim() != 1) {
      PyErr_Clear();
      throw InvalidArgument("times must be None (every grid point) or a 1-D array of times");
    }
    std::vector<std::int64_t> idx;
    for (py::ssize_t i = 0; i < t.shape(0); ++i) {
      const double ti = t.data()[i];
      const std::int64_t k = p.grid.index_of(ti);
      if (k < 0 || k > steps)
        throw pkscan::DomainError("simulate: output time " + pkscan::format_value(ti) +
                                  " is not a point of the grid t = i * " +
                                  pkscan::format_value(dt) + ", i = 0.." + std::to_string(steps));
      idx.push_back(k);
    }
    p.output = pkscan::OutputTimes::at_steps(std::move(idx));
  }
  return p;
}

// MemoryError before simulating when the result does not fit (check_memory).
void check_result_memory(const pkscan::Problem& p, const pkscan::SimulateOptions& o) {
  const std::int64_t times =
      p.output.all ? p.grid.steps + 1 : static_cast<std::int64_t>(p.output.steps.size());
  check_memory("simulate", static_cast<long double>(pkscan::result_bytes(p, o)),
               "the amounts and concentrations of " + std::to_string(p.parameters.subjects()) +
                   " subjects x " + std::to_string(times) + " output times",
               o, "use fewer subjects, fewer steps or sparse output times");
}

py::dict result_dict(std::unique_ptr<pkscan::SimulationResult> r, const ModelInfo& model) {
  const pkscan::SimulationResult& res = *r;
  const py::ssize_t s = res.subjects();
  const py::ssize_t t = res.times();
  const py::ssize_t c = res.compartments();
  py::dict out;
  out["times"] = py::array_t<double>(t, res.output_times().data());
  py::array_t<bool> ok(s);
  for (py::ssize_t i = 0; i < s; ++i)
    ok.mutable_data()[i] = res.status()[static_cast<std::size_t>(i)] == pkscan::SubjectStatus::Ok;
  out["ok"] = ok;
  out["compartments"] = names_of(model.compartments);
  out["method"] = pkscan::to_string(res.summary().method);
  out["device"] = pkscan::to_string(res.summary().device);
  out["threads"] = res.summary().threads;
  const pkscan::Precision precision = res.precision();
  const py::capsule owner = owning_capsule(std::move(r));
  if (precision == pkscan::Precision::Float64) {
    out["amounts"] = view(res.amounts_f64().data(), {s, t, c}, owner);
    out["concentrations"] = view(res.concentrations_f64().data(), {s, t, c}, owner);
  } else {
    out["amounts"] = view(res.amounts_f32().data(), {s, t, c}, owner);
    out["concentrations"] = view(res.concentrations_f32().data(), {s, t, c}, owner);
  }
  return out;
}

const char* const kSimulateDoc = R"doc(
Simulates a population on the uniform time grid t_i = i * dt, i = 0..steps.

model: a Model, a built-in model name ('two_compartment', 'three_compartment',
    'four_compartment') or a linear model mapping {'compartments': [...], 'flows': [...],
    'eliminations': [...], 'observe': ...}.
parameters: dict name (or alias) -> number (every subject) or 1-D array (one value per subject;
    every array has the same length, the number of subjects; 1 subject when all are numbers).
doses: list of dicts {compartment (name or 0-based index; default: the model's dose
    compartment), time (default 0), amount, rate or duration (infusion), every and repeat
    (NONMEM II and ADDL)}, given to every subject. Times lie on the grid.
times: None (every grid point) or the output times (on the grid, strictly increasing).
method: 'auto', 'scan', 'batched', 'power'; device: 'auto', 'cpu', 'cuda';
precision: 'float64' or 'float32' (the dtype of the arrays); discretization: 'exact' or 'euler';
threads: CPU threads; 0 = OMP_NUM_THREADS, else every CPU this process may use.

Returns a dict: 'amounts' and 'concentrations' (arrays [subjects, times, compartments], views of
the engine's result, no copy), 'times', 'compartments' (names), 'ok' (per subject: every value
finite), 'method', 'device' and 'threads' (the path that ran). The GIL is released while the
engine runs. Raises ValueError for bad input, RuntimeError when the method or device is not
available.
)doc";

py::dict simulate_py(py::handle model, py::handle parameters, py::handle doses, double dt,
                     std::int64_t steps, py::handle times, const std::string& method,
                     const std::string& device, const std::string& precision,
                     const std::string& discretization, int threads) {
  const pkscan::Problem problem =
      make_problem(model, parameters, doses, dt, steps, times, discretization);
  const pkscan::SimulateOptions options = make_options(method, device, precision, threads);
  check_result_memory(problem, options);
  auto result = std::make_unique<pkscan::SimulationResult>();
  {
    py::gil_scoped_release nogil;
    pkscan::simulate_into(problem, options, *result);
  }
  return result_dict(std::move(result), problem.parameters.info());
}

// The Python `Engine`: a pkscan::Engine reused across calls (its compiled dosing schedule and
// buffers survive while the doses, grid and model stay the same). pkscan::Engine is not
// thread-safe, so calls from several Python threads take turns on `mutex`.
struct PyEngine {
  pkscan::Engine engine;
  std::mutex mutex;
};

}  // namespace

void bind_simulate(py::module_& m) {
  m.def("simulate", &simulate_py, kSimulateDoc, py::arg("model"), py::arg("parameters"),
        py::arg("doses"), py::arg("dt"), py::arg("steps"), py::arg("times") = py::none(),
        py::arg("method") = "auto", py::arg("device") = "auto", py::arg("precision") = "float64",
        py::arg("discretization") = "exact", py::arg("threads") = 0);

  py::class_<pkscan::GridGradient>(m, "GridGradient", R"doc(
A grid problem with the euler discretization (the arguments of pkscan.simulate without the
parameters) prepared once: evaluate(row) gives one subject's concentrations at the output
times and their exact derivatives with respect to every parameter column, the values of
pkscan.simulate(..., discretization="euler") bit for bit. Used by pkscan.jax.Simulator.)doc")
      .def(py::init([](py::handle model, py::handle doses, double dt, std::int64_t steps,
                       py::handle times) {
             const pkscan::Problem problem =
                 make_problem(model, py::none(), doses, dt, steps, times, "euler");
             // An evaluation returns a subject's concentrations and their Jacobian.
             pkscan::SimulateOptions options;
             options.concentrations = false;
             const std::size_t np = problem.parameters.info().parameters.size();
             check_memory("GridGradient",
                          static_cast<long double>(pkscan::result_bytes(problem, options)) *
                              static_cast<long double>(1 + np),
                          "the concentrations and their derivatives of one evaluation", options,
                          "use fewer steps or sparse output times");
             return std::make_unique<pkscan::GridGradient>(problem);
           }),
           py::arg("model"), py::arg("doses"), py::arg("dt"), py::arg("steps"),
           py::arg("times") = py::none())
      .def_property_readonly("compartments", &pkscan::GridGradient::compartments)
      .def_property_readonly("parameters", &pkscan::GridGradient::parameters,
                             "Number of parameter columns (a row's length).")
      .def_property_readonly("output_steps", &pkscan::GridGradient::output_steps,
                             "Grid indices of the output times.")
      .def(
          "evaluate",
          [](const pkscan::GridGradient& g, const DoubleArray& row) {
            const std::size_t np = static_cast<std::size_t>(g.parameters());
            if (row.ndim() != 1 || static_cast<std::size_t>(row.shape(0)) != np)
              throw pkscan::InvalidArgument("GridGradient.evaluate: row must have " +
                                            std::to_string(np) +
                                            " values (one per parameter column)");
            const py::ssize_t t = static_cast<py::ssize_t>(g.output_steps().size());
            const py::ssize_t n = g.compartments();
            py::array_t<double> conc({t, n});
            py::array_t<double> jac({t, n, static_cast<py::ssize_t>(np)});
            double* c = conc.mutable_data();
            double* j = jac.mutable_data();
            {
              py::gil_scoped_release release;
              g.evaluate(row.data(), c, j);
            }
            return py::make_tuple(conc, jac);
          },
          py::arg("row"),
          "(concentrations [times, compartments], jacobian [times, compartments, parameters]).")
      .def_property_readonly(
          "_address",
          [](const pkscan::GridGradient& self) {
            return static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(&self));
          },
          "Address of the C++ object (for pkscan.jax's XLA FFI calls; valid while it lives).");

  py::class_<PyEngine>(m, "Engine", R"doc(
A simulation engine reused across calls: keeps the compiled dosing schedule while the model,
doses and grid stay the same (a fitting loop where only parameters change) and the compute
buffers. Engine.simulate takes the arguments of pkscan.simulate. Calls from several threads
take turns; use one PyEngine per thread for parallel work.)doc")
      .def(py::init<>())
      .def(
          "simulate",
          [](PyEngine& self, py::handle model, py::handle parameters, py::handle doses, double dt,
             std::int64_t steps, py::handle times, const std::string& method,
             const std::string& device, const std::string& precision,
             const std::string& discretization, int threads) {
            const pkscan::Problem problem =
                make_problem(model, parameters, doses, dt, steps, times, discretization);
            const pkscan::SimulateOptions options =
                make_options(method, device, precision, threads);
            check_result_memory(problem, options);
            auto result = std::make_unique<pkscan::SimulationResult>();
            {
              py::gil_scoped_release nogil;
              const std::lock_guard<std::mutex> lock(self.mutex);
              self.engine.simulate_into(problem, options, *result);
            }
            return result_dict(std::move(result), problem.parameters.info());
          },
          "See pkscan.simulate.", py::arg("model"), py::arg("parameters"), py::arg("doses"),
          py::arg("dt"), py::arg("steps"), py::arg("times") = py::none(),
          py::arg("method") = "auto", py::arg("device") = "auto", py::arg("precision") = "float64",
          py::arg("discretization") = "exact", py::arg("threads") = 0);
}

}  // namespace pkscan::python
