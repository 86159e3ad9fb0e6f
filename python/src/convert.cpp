// Python objects -> pkscan values for the module: models (a Model, a built-in name or a linear
// mapping), parameters ({name: number or 1-D array}), simulation options and doses. Checks throw
// pkscan::InvalidArgument, as the library does (translated to ValueError).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <pkscan/pkscan.hpp>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"

namespace pkscan::python {

namespace {

// A built-in model's description; model_info() returns a static object, so the shared pointer
// owns nothing.
ModelPtr builtin_model(pkscan::ModelKind kind) {
  return ModelPtr(ModelPtr(), &pkscan::model_info(kind));
}

std::string parameter_list(const ModelInfo& m) {
  std::string s;
  for (const pkscan::ParameterInfo& p : m.parameters) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

double number_of(py::handle h, const std::string& what) {
  try {
    return h.cast<double>();
  } catch (const py::cast_error&) {
    throw InvalidArgument(what + " must be a number");
  }
}

}  // namespace

// ---- Models -----------------------------------------------------------------------------------

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

pkscan::SimulateOptions make_options(const std::string& method, const std::string& device,
                                     const std::string& precision, int threads) {
  pkscan::SimulateOptions o;
  o.method = pkscan::method_from_string(method);
  o.device = pkscan::device_from_string(device);
  o.precision = pkscan::precision_from_string(precision);
  if (threads < 0)
    throw InvalidArgument(
        "threads is " + std::to_string(threads) +
        ", but must be >= 0 (0 = OMP_NUM_THREADS, else every CPU this process may use)");
  o.threads = threads;
  o.concentrations = true;
  return o;
}

// ---- Sizes ------------------------------------------------------------------------------------

void check_memory(const std::string& who, long double need, const std::string& what,
                  const pkscan::SimulateOptions& options, const std::string& hint) {
  // The engine's check() reads the memory available only above 64 MiB (a read of /proc/meminfo
  // costs more than a small simulation); the same here.
  if (!(need > static_cast<long double>(std::uint64_t{64} << 20))) return;
  const std::uint64_t limit = pkscan::result_byte_limit(options);
  if (need <= static_cast<long double>(limit)) return;
  const auto gib = [](long double bytes) {  // to 0.1 GiB
    return pkscan::format_value(
        static_cast<double>(std::round(bytes / (1024.0L * 1024.0L * 1024.0L) * 10.0L) / 10.0L));
  };
  const std::string msg = who + ": " + what + " need " + gib(need) + " GiB, but only " +
                          gib(static_cast<long double>(limit)) + " GiB are available; " + hint;
  PyErr_SetString(PyExc_MemoryError, msg.c_str());
  throw py::error_already_set();
}

// ---- Doses ------------------------------------------------------------------------------------

std::vector<pkscan::DoseEvent> read_doses(const ModelInfo& model, py::handle doses,
                                          const std::string& what_doses,
                                          const std::vector<std::string>* covariates,
                                          std::vector<DoseScaling>* scaling) {
  std::vector<pkscan::DoseEvent> out;
  if (scaling) scaling->clear();
  if (doses.is_none()) return out;
  std::size_t i = 0;
  bool any_scaling = false;
  for (py::handle item : py::iter(doses)) {
    ++i;
    const std::string ctx = what_doses + "[" + std::to_string(i - 1) + "]";
    if (!py::isinstance<py::dict>(item))
      throw InvalidArgument(ctx + " must be a dict {compartment, time, amount, ...}");
    pkscan::DoseEvent d;
    DoseScaling sc;
    d.compartment = model.default_dose_compartment;
    bool has_amount = false;
    py::handle per, bands;
    for (auto kv : py::reinterpret_borrow<py::dict>(item)) {
      const std::string k = str_of(kv.first, ctx + " key");
      const std::string what = ctx + "." + k;
      if (k == "compartment") {
        if (py::isinstance<py::str>(kv.second)) {
          const std::string name = kv.second.cast<std::string>();
          d.compartment = pkscan::compartment_index(model, name);
          if (d.compartment < 0)
            throw InvalidArgument(what + " is '" + name + "', but model " + model.name +
                                  " has the compartments " + join_names(model.compartments));
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
      } else if (scaling && k == "per") {
        per = kv.second;
      } else if (scaling && k == "bands") {
        bands = kv.second;
      } else {
        throw InvalidArgument(ctx + ": unknown key '" + k +
                              "' (accepted: compartment, time, amount, rate, duration, every, "
                              "repeat" +
                              (scaling ? ", per, bands)" : ")"));
      }
    }
    if (per && bands) throw InvalidArgument(ctx + " gives both per and bands; give one of them");
    if (bands && has_amount)
      throw InvalidArgument(ctx +
                            " gives both amount and bands (the bands give the amount); "
                            "remove amount");
    if (!has_amount && !bands) throw InvalidArgument(ctx + ": missing key 'amount'");
    // The covariate of `per` or `bands`: one of the population's covariates.
    auto covariate = [&](py::handle h, const std::string& what) {
      const std::string name = str_of(h, what);
      const auto it = std::find(covariates->begin(), covariates->end(), name);
      if (it == covariates->end())
        throw InvalidArgument(
            what + " is '" + name + "', but " +
            (covariates->empty() ? "no covariates were given (covariates={'" + name + "': values})"
                                 : "the covariates are " + join_names(*covariates)));
      return static_cast<int>(it - covariates->begin());
    };
    if (per) sc.covariate = covariate(per, ctx + ".per");
    if (bands) {
      const std::string bctx = ctx + ".bands";
      if (!py::isinstance<py::dict>(bands))
        throw InvalidArgument(bctx + " must be a dict {covariate, edges, amounts}");
      const py::dict b = py::reinterpret_borrow<py::dict>(bands);
      for (const auto& kv : b) {
        const std::string k = str_of(kv.first, bctx + " key");
        if (k != "covariate" && k != "edges" && k != "amounts")
          throw InvalidArgument(bctx + ": unknown key '" + k +
                                "'; give covariate, edges and amounts");
      }
      for (const char* k : {"covariate", "edges", "amounts"})
        if (!b.contains(k)) throw InvalidArgument(bctx + ": missing key '" + std::string(k) + "'");
      sc.covariate = covariate(b["covariate"], bctx + ".covariate");
      sc.band_edges = b["edges"].cast<std::vector<double>>();
      sc.band_amounts = b["amounts"].cast<std::vector<double>>();
      if (sc.band_edges.empty())
        throw InvalidArgument(bctx +
                              ".edges must be a non-empty list of ascending covariate "
                              "values");
      if (sc.band_amounts.size() != sc.band_edges.size() + 1)
        throw InvalidArgument(bctx + ".amounts has " + std::to_string(sc.band_amounts.size()) +
                              " amounts, but must have " +
                              std::to_string(sc.band_edges.size() + 1) +
                              " (one more than edges: below the first edge, between edges, "
                              "from the last edge on)");
      d.amount = 1.0;  // the band gives the amount
    }
    any_scaling = any_scaling || sc.covariate >= 0;
    out.push_back(d);
    if (scaling) scaling->push_back(sc);
  }
  if (scaling && !any_scaling) scaling->clear();
  return out;
}

py::list names_of(const std::vector<std::string>& v) {
  py::list l;
  for (const std::string& s : v) l.append(s);
  return l;
}

std::string join_names(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace pkscan::python
