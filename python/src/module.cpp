// The `pkscan` Python module (pybind11): simulate populations on a time grid, read and simulate
// NONMEM-format datasets, and evaluate predictions, log-likelihoods and their exact gradients
// through pkscan::Predictor, all on NumPy arrays.
//
// Conventions of this file:
// - Input arrays are taken as C-contiguous float64 (py::array::forcecast): an array that already
//   is one is used in place, anything else is converted once. Output arrays are either
//   allocated by NumPy and written by the engine (predictions, gradients) or views of the
//   engine's own result storage kept alive by a capsule (simulate, simulate_dataset): no copies.
// - Python objects are read and made with the GIL held; the computation itself runs with the GIL
//   released (py::gil_scoped_release), so other Python threads run meanwhile.
// - Errors: pkscan::InvalidArgument, DomainError and ConfigError become ValueError, every other
//   pkscan::Error RuntimeError; checks made here throw pkscan::InvalidArgument so that messages
//   and exception types match the library's.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <pkscan/pkscan.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"

namespace pkscan::python {

// ---- Models -----------------------------------------------------------------------------------

// A built-in model's description; model_info() returns a static object, so the shared pointer
// owns nothing.
ModelPtr builtin_model(pkscan::ModelKind kind) {
  return ModelPtr(ModelPtr(), &pkscan::model_info(kind));
}

std::string str_of(py::handle h, const std::string& what) {
  if (!py::isinstance<py::str>(h))
    throw InvalidArgument(what + " must be a string, not " +
                          std::string(py::str(py::type::of(h).attr("__name__"))));
  return h.cast<std::string>();
}

// `flows` items: {"from", "to", "rate"} mappings or (from, to, rate) tuples; `eliminations`
// items: {"from", "rate"} or (from, rate).
ModelPtr linear_model(const std::vector<std::string>& compartments, py::handle flows,
                      py::handle eliminations, const std::string& observe) {
  std::vector<pkscan::FlowSpec> specs;
  auto read = [&specs](py::handle seq, bool elimination) {
    if (seq.is_none()) return;
    const char* what = elimination ? "eliminations" : "flows";
    std::size_t i = 0;
    for (py::handle item : py::iter(seq)) {
      ++i;
      const std::string ctx = std::string("linear model: ") + what + "[" + std::to_string(i) + "]";
      pkscan::FlowSpec f;
      if (py::isinstance<py::dict>(item)) {
        const py::dict d = py::reinterpret_borrow<py::dict>(item);
        for (auto kv : d) {
          const std::string k = str_of(kv.first, ctx + " key");
          if (k != "from" && k != "rate" && (elimination || k != "to"))
            throw InvalidArgument(ctx + ": unknown key '" + k + "' (accepted: from, " +
                                  (elimination ? "" : "to, ") + "rate)");
        }
        for (const char* need : {"from", "to", "rate"}) {
          if (elimination && std::string(need) == "to") continue;
          if (!d.contains(need))
            throw InvalidArgument(ctx + ": missing key '" + std::string(need) + "'");
        }
        f.from = str_of(d["from"], ctx + ".from");
        if (!elimination) f.to = str_of(d["to"], ctx + ".to");
        f.parameter = str_of(d["rate"], ctx + ".rate");
      } else {
        const py::sequence t = py::reinterpret_borrow<py::sequence>(item);
        const std::size_t n = elimination ? 2 : 3;
        if (!py::isinstance<py::sequence>(item) || py::isinstance<py::str>(item) || t.size() != n)
          throw InvalidArgument(ctx + " must be a mapping or a tuple " +
                                (elimination ? "(from, rate)" : "(from, to, rate)"));
        f.from = str_of(t[0], ctx + " from");
        if (!elimination) f.to = str_of(t[1], ctx + " to");
        f.parameter = str_of(t[n - 1], ctx + " rate");
      }
      specs.push_back(std::move(f));
    }
  };
  read(flows, false);
  read(eliminations, true);
  return pkscan::make_linear_model(compartments, specs, observe);
}

// A model given as a Model, a built-in name, or a mapping {"compartments", "flows",
// "eliminations", "observe"} (optionally wrapped in {"linear": ...}, as in run files).
ModelPtr resolve_model(py::handle h) {
  if (py::isinstance<PyModel>(h)) return h.cast<const PyModel&>().info;
  if (py::isinstance<py::str>(h)) {
    const std::string name = h.cast<std::string>();
    if (name == "linear")
      throw InvalidArgument(
          "model linear needs its compartments and flows: pass Model.linear(...) or a mapping "
          "{'compartments': [...], 'flows': [...], 'eliminations': [...]}");
    return builtin_model(pkscan::model_from_string(name));
  }
  if (py::isinstance<py::dict>(h)) {
    py::dict d = py::reinterpret_borrow<py::dict>(h);
    if (d.size() == 1 && d.contains("linear")) {
      if (!py::isinstance<py::dict>(d["linear"]))
        throw InvalidArgument("model {'linear': ...} must hold a mapping");
      d = py::reinterpret_borrow<py::dict>(d["linear"]);
    }
    for (auto kv : d) {
      const std::string k = str_of(kv.first, "model key");
      if (k != "compartments" && k != "flows" && k != "eliminations" && k != "observe")
        throw InvalidArgument("linear model: unknown key '" + k +
                              "' (accepted: compartments, flows, eliminations, observe)");
    }
    if (!d.contains("compartments"))
      throw InvalidArgument("linear model: missing key 'compartments'");
    std::vector<std::string> comps;
    for (py::handle c : py::iter(d["compartments"]))
      comps.push_back(str_of(c, "linear model: compartments item"));
    const py::object none = py::none();
    return linear_model(
        comps, d.contains("flows") ? py::object(d["flows"]) : none,
        d.contains("eliminations") ? py::object(d["eliminations"]) : none,
        d.contains("observe") ? str_of(d["observe"], "linear model: observe") : std::string());
  }
  throw InvalidArgument("model must be a Model, a model name (" + pkscan::model_names() +
                        ") or a linear model mapping, not " +
                        std::string(py::str(py::type::of(h).attr("__name__"))));
}

std::string parameter_list(const ModelInfo& m) {
  std::string s;
  for (const pkscan::ParameterInfo& p : m.parameters) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

// ---- Parameters -------------------------------------------------------------------------------

// Reads {name: number or 1-D array}. Returns the values and the number of subjects implied by
// the arrays (-1 when every value is a number). Names or aliases; each parameter once.
std::vector<ParameterValue> read_parameters(const ModelInfo& model, py::handle parameters,
                                            std::int64_t& subjects) {
  std::vector<ParameterValue> out;
  subjects = -1;
  if (parameters.is_none()) return out;
  if (!py::isinstance<py::dict>(parameters))
    throw InvalidArgument("parameters must be a dict {name: number or 1-D array}");
  std::vector<std::string> seen(model.parameters.size());
  std::string first_array;
  for (auto kv : py::reinterpret_borrow<py::dict>(parameters)) {
    ParameterValue v;
    v.name = str_of(kv.first, "parameter name");
    v.column = pkscan::parameter_index(model, v.name);
    if (v.column < 0)
      throw InvalidArgument("parameter '" + v.name + "' is not a parameter of model " + model.name +
                            " (parameters: " + parameter_list(model) + ")");
    std::string& prev = seen[static_cast<std::size_t>(v.column)];
    if (!prev.empty())
      throw InvalidArgument(
          "parameter " + model.parameters[static_cast<std::size_t>(v.column)].name +
          " is given twice (as " + prev + " and as " + v.name + "); give one of them");
    prev = v.name;
    v.array = DoubleArray::ensure(kv.second);
    if (!v.array) {
      PyErr_Clear();
      throw InvalidArgument("parameter " + v.name + " must be a number or a 1-D array of numbers");
    }
    if (v.array.ndim() > 1)
      throw InvalidArgument("parameter " + v.name + " has " + std::to_string(v.array.ndim()) +
                            " dimensions, but must be a number or a 1-D array (one per subject)");
    if (v.array.ndim() == 1) {
      const auto n = static_cast<std::int64_t>(v.array.shape(0));
      if (n == 0) throw InvalidArgument("parameter " + v.name + " is an empty array");
      if (subjects >= 0 && n != subjects)
        throw InvalidArgument("parameter " + v.name + " has " + std::to_string(n) +
                              " values, but " + first_array + " has " + std::to_string(subjects) +
                              "; every array must have one value per subject");
      if (subjects < 0) first_array = v.name;
      subjects = n;
    }
    out.push_back(std::move(v));
  }
  return out;
}

// Fills `batch` (already sized) with the values; arrays must have batch.subjects() values.
void store_parameters(const std::vector<ParameterValue>& values, pkscan::ParameterBatch& batch) {
  const ModelInfo& model = batch.info();
  for (const ParameterValue& v : values) {
    const std::string& name = model.parameters[static_cast<std::size_t>(v.column)].name;
    if (v.array.ndim() == 0) {
      batch.set_all(name, *v.array.data());
      continue;
    }
    if (static_cast<std::int64_t>(v.array.shape(0)) != batch.subjects())
      throw InvalidArgument("parameter " + v.name + " has " + std::to_string(v.array.shape(0)) +
                            " values, but there are " + std::to_string(batch.subjects()) +
                            " subjects; give one value per subject");
    const double* p = v.array.data();
    for (std::int64_t s = 0; s < batch.subjects(); ++s) batch.set(name, s, p[s]);
  }
}

// ---- Options ----------------------------------------------------------------------------------

pkscan::Precision precision_from_string(const std::string& s) {
  if (s == "float64") return pkscan::Precision::Float64;
  if (s == "float32") return pkscan::Precision::Float32;
  throw InvalidArgument("precision is '" + s + "', but must be one of: float64, float32");
}

pkscan::Discretization discretization_from_string(const std::string& s) {
  if (s == "exact") return pkscan::Discretization::Exact;
  if (s == "euler") return pkscan::Discretization::Euler;
  throw InvalidArgument("discretization is '" + s + "', but must be one of: exact, euler");
}

pkscan::SimulateOptions make_options(const std::string& method, const std::string& device,
                                     const std::string& precision, int threads) {
  pkscan::SimulateOptions o;
  o.method = pkscan::method_from_string(method);
  o.device = pkscan::device_from_string(device);
  o.precision = precision_from_string(precision);
  if (threads < 0)
    throw InvalidArgument("threads is " + std::to_string(threads) +
                          ", but must be >= 0 (0 = all cores)");
  o.threads = threads;
  o.concentrations = true;
  return o;
}

// ---- Doses ------------------------------------------------------------------------------------

double number_of(py::handle h, const std::string& what) {
  try {
    return h.cast<double>();
  } catch (const py::cast_error&) {
    throw InvalidArgument(what + " must be a number");
  }
}

std::vector<pkscan::DoseEvent> read_doses(const ModelInfo& model, py::handle doses) {
  std::vector<pkscan::DoseEvent> out;
  if (doses.is_none()) return out;
  std::size_t i = 0;
  for (py::handle item : py::iter(doses)) {
    ++i;
    const std::string ctx = "doses[" + std::to_string(i - 1) + "]";
    if (!py::isinstance<py::dict>(item))
      throw InvalidArgument(ctx + " must be a dict {compartment, time, amount, ...}");
    pkscan::DoseEvent d;
    d.compartment = model.default_dose_compartment;
    bool has_amount = false;
    for (auto kv : py::reinterpret_borrow<py::dict>(item)) {
      const std::string k = str_of(kv.first, ctx + " key");
      const std::string what = ctx + "." + k;
      if (k == "compartment") {
        if (py::isinstance<py::str>(kv.second)) {
          const std::string name = kv.second.cast<std::string>();
          d.compartment = pkscan::compartment_index(model, name);
          if (d.compartment < 0) {
            std::string names;
            for (const std::string& c : model.compartments)
              names += (names.empty() ? "" : ", ") + c;
            throw InvalidArgument(what + " is '" + name + "', but model " + model.name +
                                  " has the compartments " + names);
          }
        } else {
          // A 0-based index; the engine checks its range.
          try {
            d.compartment = kv.second.cast<int>();
          } catch (const py::cast_error&) {
            throw InvalidArgument(what + " must be a compartment name or a 0-based index");
          }
        }
      } else if (k == "time") {
        d.time = number_of(kv.second, what);
      } else if (k == "amount") {
        d.amount = number_of(kv.second, what);
        has_amount = true;
      } else if (k == "rate") {
        d.rate = number_of(kv.second, what);
      } else if (k == "duration") {
        d.duration = number_of(kv.second, what);
      } else if (k == "every") {
        d.every = number_of(kv.second, what);
      } else if (k == "repeat") {
        try {
          d.repeat = kv.second.cast<std::int64_t>();
        } catch (const py::cast_error&) {
          throw InvalidArgument(what + " must be a whole number");
        }
      } else {
        throw InvalidArgument(
            ctx + ": unknown key '" + k +
            "' (accepted: compartment, time, amount, rate, duration, every, repeat)");
      }
    }
    if (!has_amount) throw InvalidArgument(ctx + ": missing key 'amount'");
    out.push_back(d);
  }
  return out;
}

// ---- Zero-copy result arrays ------------------------------------------------------------------

// A NumPy array viewing `data` (owned by the object behind `owner`).
template <class T>
py::array view(const T* data, std::vector<py::ssize_t> shape, const py::capsule& owner) {
  return py::array_t<T>(std::move(shape), data, owner);
}

template <class T>
py::capsule owning_capsule(std::unique_ptr<T> p) {
  return py::capsule(p.release(), [](void* q) { delete static_cast<T*>(q); });
}

py::list names_of(const std::vector<std::string>& v) {
  py::list l;
  for (const std::string& s : v) l.append(s);
  return l;
}

// ---- simulate ---------------------------------------------------------------------------------

pkscan::Problem make_problem(py::handle model, py::handle parameters, py::handle doses, double dt,
                             std::int64_t steps, py::handle times,
                             const std::string& discretization) {
  const ModelPtr info = resolve_model(model);
  pkscan::Problem p;
  p.model = info->kind;
  p.discretization = discretization_from_string(discretization);
  p.grid.dt = dt;
  p.grid.steps = steps;
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
threads: CPU threads, 0 = all cores.

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

// ---- Datasets ---------------------------------------------------------------------------------

std::vector<std::pair<std::string, std::string>> dataset_names(const ModelInfo& model) {
  std::vector<std::pair<std::string, std::string>> names;
  for (const pkscan::ParameterInfo& pi : model.parameters) {
    names.emplace_back(pi.name, pi.name);
    if (!pi.alias.empty()) names.emplace_back(pi.alias, pi.name);
  }
  return names;
}

PyDataset read_dataset_py(const std::string& path, py::handle model) {
  PyDataset d;
  d.model = resolve_model(model);
  const auto names = dataset_names(*d.model);
  const int n = static_cast<int>(d.model->compartments.size());
  py::gil_scoped_release nogil;
  d.data = std::make_shared<const pkscan::Dataset>(pkscan::read_dataset(path, names, n));
  return d;
}

PyDataset parse_dataset_py(const std::string& text, py::handle model, const std::string& file) {
  PyDataset d;
  d.model = resolve_model(model);
  const auto names = dataset_names(*d.model);
  const int n = static_cast<int>(d.model->compartments.size());
  py::gil_scoped_release nogil;
  d.data = std::make_shared<const pkscan::Dataset>(pkscan::parse_dataset(text, file, names, n));
  return d;
}

// A dataset given as a Dataset, CSV text (a string with a line break) or a path.
PyDataset load_dataset(py::handle dataset, py::handle model) {
  if (py::isinstance<PyDataset>(dataset)) {
    const PyDataset& d = dataset.cast<const PyDataset&>();
    if (!model.is_none()) {
      const ModelPtr m = resolve_model(model);
      if (m->name != d.model->name || m->compartments != d.model->compartments ||
          m->parameters.size() != d.model->parameters.size())
        throw InvalidArgument("the dataset was read for model " + d.model->name +
                              ", not for model " + m->name + "; read it again for this model");
    }
    return d;
  }
  if (model.is_none())
    throw InvalidArgument("model is required when the dataset is a path or CSV text");
  const std::string s = str_of(dataset, "dataset");
  if (s.find('\n') != std::string::npos) return parse_dataset_py(s, model, "<text>");
  return read_dataset_py(s, model);
}

// Per-record table of a dataset: one entry per column, arrays over all records in file order.
py::dict dataset_records(const PyDataset& d) {
  const pkscan::Dataset& data = *d.data;
  const auto n = static_cast<py::ssize_t>(data.record_count());
  const auto np = static_cast<py::ssize_t>(data.parameter_columns.size());
  py::array_t<std::int64_t> subject(n), line(n), addl(n);
  py::array_t<double> time(n), amt(n), rate(n), ii(n), dv(n);
  py::array_t<int> evid(n), cmt(n), ss(n);
  py::array_t<bool> mdv(n);
  py::array_t<double> params({n, np});
  py::ssize_t i = 0;
  for (std::size_t s = 0; s < data.subjects.size(); ++s)
    for (const pkscan::DatasetRecord& r : data.subjects[s].records) {
      subject.mutable_data()[i] = static_cast<std::int64_t>(s);
      line.mutable_data()[i] = r.line;
      time.mutable_data()[i] = r.time;
      evid.mutable_data()[i] = r.evid;
      amt.mutable_data()[i] = r.amt;
      rate.mutable_data()[i] = r.rate;
      cmt.mutable_data()[i] = r.cmt;
      ii.mutable_data()[i] = r.ii;
      addl.mutable_data()[i] = r.addl;
      ss.mutable_data()[i] = r.ss;
      dv.mutable_data()[i] = r.dv;
      mdv.mutable_data()[i] = r.mdv;
      for (py::ssize_t c = 0; c < np; ++c)
        params.mutable_data()[i * np + c] = r.parameters[static_cast<std::size_t>(c)];
      ++i;
    }
  py::dict out;
  out["subject"] = subject;
  out["line"] = line;
  out["time"] = time;
  out["evid"] = evid;
  out["amt"] = amt;
  out["rate"] = rate;
  out["cmt"] = cmt;
  out["ii"] = ii;
  out["addl"] = addl;
  out["ss"] = ss;
  out["dv"] = dv;
  out["mdv"] = mdv;
  out["parameters"] = params;
  return out;
}

py::list dataset_ids(const pkscan::Dataset& data) {
  py::list ids;
  for (const pkscan::DatasetSubject& s : data.subjects) ids.append(s.id);
  return ids;
}

// The parameter batch of a dataset run: one row per dataset subject; a parameter that is
// required, has no default and is neither given nor a dataset column is an error.
pkscan::ParameterBatch dataset_batch(const PyDataset& d, py::handle parameters,
                                     const char* function) {
  const ModelInfo& model = *d.model;
  const auto count = static_cast<std::int64_t>(d.data->subjects.size());
  std::int64_t subjects = -1;
  const std::vector<ParameterValue> values = read_parameters(model, parameters, subjects);
  if (subjects >= 0 && subjects != count)
    throw InvalidArgument(std::string(function) + ": parameter arrays have " +
                          std::to_string(subjects) + " values, but the dataset has " +
                          std::to_string(count) +
                          " subjects (IDs); give one value per subject, in dataset order");
  pkscan::ParameterBatch batch(d.model, count);
  store_parameters(values, batch);
  std::vector<char> given(model.parameters.size(), 0);
  for (const ParameterValue& v : values) given[static_cast<std::size_t>(v.column)] = 1;
  for (const std::string& c : d.data->parameter_columns) {
    const int col = pkscan::parameter_index(model, c);
    if (col >= 0) given[static_cast<std::size_t>(col)] = 1;
  }
  for (std::size_t c = 0; c < model.parameters.size(); ++c)
    if (!given[c] && std::isnan(model.parameters[c].default_value) && !model.in_alternative[c])
      throw InvalidArgument(
          std::string(function) + ": missing parameter '" + model.parameters[c].name +
          "': give it in parameters or as a dataset column (required by model " + model.name + ")");
  return batch;
}

py::dict simulate_dataset_py(py::handle dataset, py::handle model, py::handle parameters,
                             const std::string& method, const std::string& device, int threads) {
  const PyDataset d = load_dataset(dataset, model);
  const pkscan::ParameterBatch batch = dataset_batch(d, parameters, "simulate_dataset");
  const pkscan::SimulateOptions options = make_options(method, device, "float64", threads);
  auto result = std::make_unique<pkscan::DatasetResult>();
  {
    py::gil_scoped_release nogil;
    pkscan::simulate_dataset_into(*d.data, d.model->kind, batch, options, *result);
  }
  const pkscan::DatasetResult& r = *result;
  const auto rows = static_cast<py::ssize_t>(r.rows());
  const py::ssize_t c = r.compartments;
  py::dict out;
  py::array_t<double> dv(rows);
  py::array_t<int> compartment(rows);
  for (py::ssize_t i = 0; i < rows; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    const pkscan::DatasetSubject& subj = d.data->subjects[static_cast<std::size_t>(r.subject[ui])];
    dv.mutable_data()[i] = subj.records[static_cast<std::size_t>(r.record[ui])].dv;
    compartment.mutable_data()[i] = r.compartment[ui];
  }
  const auto subjects = static_cast<py::ssize_t>(r.status.size());
  py::array_t<bool> ok(subjects);
  for (py::ssize_t i = 0; i < subjects; ++i)
    ok.mutable_data()[i] = r.status[static_cast<std::size_t>(i)] == pkscan::SubjectStatus::Ok;
  out["dv"] = dv;
  out["compartment"] = compartment;
  out["ok"] = ok;
  out["ids"] = dataset_ids(*d.data);
  out["compartments"] = names_of(d.model->compartments);
  out["method"] = pkscan::to_string(r.summary.method);
  out["device"] = pkscan::to_string(r.summary.device);
  out["threads"] = r.summary.threads;
  const py::capsule owner = owning_capsule(std::move(result));
  out["subject"] = view(r.subject.data(), {rows}, owner);
  out["record"] = view(r.record.data(), {rows}, owner);
  out["time"] = view(r.time.data(), {rows}, owner);
  out["amounts"] = view(r.amounts.data(), {rows, c}, owner);
  out["concentrations"] = view(r.concentrations.data(), {rows, c}, owner);
  out["prediction"] = view(r.prediction.data(), {rows}, owner);
  return out;
}

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
             return std::make_unique<pkscan::GridGradient>(
                 make_problem(model, py::none(), doses, dt, steps, times, "euler"));
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

  py::class_<PyDataset>(m, "Dataset", R"doc(
A NONMEM-format dataset read for a model (pkscan.read_dataset, pkscan.parse_dataset).)doc")
      .def_property_readonly("model", [](const PyDataset& self) { return PyModel{self.model}; })
      .def_property_readonly("file", [](const PyDataset& self) { return self.data->file; })
      .def_property_readonly("columns",
                             [](const PyDataset& self) { return names_of(self.data->columns); })
      .def_property_readonly(
          "parameter_columns",
          [](const PyDataset& self) { return names_of(self.data->parameter_columns); },
          "Model parameters given as columns (canonical names).")
      .def_property_readonly(
          "covariate_columns",
          [](const PyDataset& self) { return names_of(self.data->covariate_columns); })
      .def_property_readonly(
          "ids", [](const PyDataset& self) { return dataset_ids(*self.data); },
          "Subject IDs as written, in dataset order.")
      .def_property_readonly("subjects",
                             [](const PyDataset& self) {
                               return static_cast<std::int64_t>(self.data->subjects.size());
                             })
      .def_property_readonly("observation_count",
                             [](const PyDataset& self) { return self.data->observation_count(); })
      .def_property_readonly("record_count",
                             [](const PyDataset& self) { return self.data->record_count(); })
      .def("records", &dataset_records, R"doc(
Every record, in file order, as a dict of arrays: subject (0-based index), line, time, evid,
amt, rate, cmt (0 = not given), ii, addl, ss, dv (NaN = missing), mdv, and parameters
([records, len(parameter_columns)], NaN = '.').)doc")
      .def("__len__",
           [](const PyDataset& self) {
             return static_cast<py::ssize_t>(self.data->subjects.size());
           })
      .def("__repr__", [](const PyDataset& self) {
        return "pkscan.Dataset('" + self.data->file + "', model='" + self.model->name + "', " +
               std::to_string(self.data->subjects.size()) + " subjects, " +
               std::to_string(self.data->record_count()) + " records)";
      });

  m.def("read_dataset", &read_dataset_py, py::arg("path"), py::arg("model"), R"doc(
Reads a NONMEM-format CSV dataset for `model` (a Model, name or linear mapping): columns named
like the model's parameters become per-record parameters. Raises ValueError with the file, line
and column of the first problem.)doc");
  m.def("parse_dataset", &parse_dataset_py, py::arg("text"), py::arg("model"),
        py::arg("file") = "<text>", "Same as read_dataset, from the CSV text itself.");
  m.def("simulate_dataset", &simulate_dataset_py, py::arg("dataset"), py::arg("model") = py::none(),
        py::arg("parameters") = py::none(), py::arg("method") = "auto", py::arg("device") = "auto",
        py::arg("threads") = 0, R"doc(
Simulates every subject of a dataset with exact event times.

dataset: a Dataset, a path or CSV text (then model is required).
parameters: dict name -> number or 1-D array with one value per dataset subject (dataset order):
    the parameters that are not dataset columns, and fall-backs for missing ('.') cells.

Returns a dict with one row per observation record (EVID 0), in dataset order: 'subject'
(0-based index into 'ids'), 'record' (index within the subject), 'time', 'compartment'
(observed, 0-based), 'amounts' and 'concentrations' ([rows, compartments]), 'prediction'
(concentration of the observed compartment), 'dv' (NaN = missing); and 'ids', 'ok' (per subject),
'compartments', 'method', 'device', 'threads'.)doc");
}
