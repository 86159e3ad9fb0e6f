// A run on a NONMEM dataset (subjects.dataset): the dataset replaces the time grid, the doses
// and the output times; parameters come from its columns and subjects.parameters.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <pkscan/backend.hpp>
#include <pkscan/config/population_run.hpp>
#include <pkscan/dataset.hpp>
#include <pkscan/design.hpp>
#include <pkscan/error.hpp>
#include <pkscan/events.hpp>
#include <pkscan/output/output.hpp>
#include <string>
#include <utility>
#include <vector>

#include "load_sections.hpp"

namespace pkscan::config::detail {

namespace {

// `output: {path, parameters}` of a dataset or design run; the other keys say why they are not
// used.
void parse_dataset_output(const Loader& L, const Loader::Entries& top, RunSpec& spec, bool design) {
  auto it = top.find("output");
  if (it == top.end()) return;
  auto out = L.entries(it->second.value, "output",
                       {"path", "times", "trajectories", "summaries", "parameters"});
  spec.output_line = it->second.key.Mark().line + 1;
  spec.output_column = it->second.key.Mark().column + 1;
  for (const char* key : {"times", "trajectories", "summaries", "parameters"}) {
    auto t = out.find(key);
    if (t == out.end()) continue;
    if (design && std::string(key) == "parameters") {
      const YAML::Node& b = t->second.value;
      if (!b.IsScalar() || b.Tag() == "!" || (b.Scalar() != "true" && b.Scalar() != "false"))
        L.fail(b, "output.parameters must be true or false");
      spec.stream.parameters = b.Scalar() == "true";
      continue;
    }
    L.fail(t->second.key, "output." + std::string(key) +
                              " is not used with subjects.dataset (the result is one row per "
                              "observation record of the dataset); remove it");
  }
  if (auto pth = out.find("path"); pth != out.end()) {
    // A design may also write HDF5 (docs/output.md, "Design simulations in HDF5").
    const char* ends = design ? ".csv, .h5 or .hdf5" : ".csv";
    spec.output_path = L.scalar_string(pth->second.value, "output.path",
                                       std::string("a file path ending in ") + ends);
    const std::string& op = spec.output_path;
    const auto ends_in = [&](const char* e) {
      const std::size_t n = std::strlen(e);
      return op.size() > n && op.compare(op.size() - n, n, e) == 0;
    };
    if (!ends_in(".csv") && !(design && (ends_in(".h5") || ends_in(".hdf5"))))
      L.fail(pth->second.value, "output.path is \"" + op + "\", but must end in " + ends);
    spec.output_path_line = pth->second.value.Mark().line + 1;
    spec.output_path_column = pth->second.value.Mark().column + 1;
  }
}

// A design simulation: `subjects: {dataset: FILE, population: {...}}` (NONMEM's $SIM).
void parse_design(const Loader& L, const Loader::Entries& top, RunSpec& spec,
                  const std::shared_ptr<const ModelInfo>& model_ptr,
                  const std::shared_ptr<Dataset>& data, const YAML::Node& pop_node,
                  const YAML::Mark& engine_mark) {
  FieldTable fields;
  parse_population(L, pop_node, model_ptr, spec, fields, data.get());
  if (spec.design_count > 0)
    for (const std::string& c : data->covariate_columns)
      if (c == "source_id")
        L.fail(top.at("subjects").value["dataset"],
               "the dataset " + data->file +
                   " has a column source_id, but subjects.population.count writes its own "
                   "source_id column (the dataset ID each virtual subject copies); rename the "
                   "dataset's column");
  parse_dataset_output(L, top, spec, true);
  if (std::string why; !is_backend_available(spec.options.method, spec.options.device, &why))
    throw BackendUnavailable(L.where(engine_mark) + ": engine.method: " + why);
  spec.dataset = data;
  // The dataset's cells are reported at their file, line and column (ConfigError); the
  // population's values at their nodes; a dataset column that gives a varied parameter at the
  // dataset node.
  fields.emplace("data.parameter_columns",
                 Located{top.at("subjects").value["dataset"], "subjects.dataset", false});
  fields.emplace("population", Located{pop_node, "subjects.population", false});
  fields.emplace("replicates", Located{pop_node, "subjects.population.replicates", false});
  // The design's checks on every record (check_design_run) are the run's own: it makes them as
  // it prepares the design, and `located` says where an error is.
  spec.located = [L, fields](const std::function<void()>& check) {
    // The error being handled, at its place (Loader::checked); other errors pass unchanged.
    const auto at_place = [&] {
      L.checked(locate_in(fields), [] { std::rethrow_exception(std::current_exception()); });
    };
    try {
      check();
    } catch (const InvalidArgument&) {
      at_place();
    } catch (const DomainError&) {
      at_place();
    }
  };
}

}  // namespace

// A run on a NONMEM dataset: `subjects: {dataset: FILE, parameters: {...}}`, `output: {path}`.
void parse_dataset_run(const Loader& L, const Loader::Entries& top, RunSpec& spec,
                       const std::shared_ptr<const ModelInfo>& model_ptr,
                       const YAML::Mark& engine_mark) {
  Problem& p = spec.problem;
  const ModelInfo& model = *model_ptr;
  // Every key a dataset run accepts is used; the others are errors that say why.
  for (const char* key : {"time", "doses"}) {
    if (auto it = top.find(key); it != top.end())
      L.fail(it->second.key, std::string(key) +
                                 " is not used with subjects.dataset (times and doses come from "
                                 "the dataset); remove it");
  }
  if (auto it = top.find("sweep"); it != top.end())
    L.fail(it->second.key,
           "sweep is not used with subjects.dataset (each dataset subject is simulated once); "
           "remove it, and give per-subject values as lists in subjects.parameters or as dataset "
           "columns");
  if (auto it = top.find("discretization");
      it != top.end() && p.discretization != Discretization::Exact)
    L.fail(it->second.value,
           "discretization is euler, but a dataset run needs discretization: exact (event times "
           "are arbitrary)");
  if (auto it = top.find("precision");
      it != top.end() && spec.options.precision != Precision::Float64)
    L.fail(it->second.value,
           "precision is float32, but a dataset run computes and writes float64 only; remove "
           "precision or give float64");
  if (auto it = top.find("engine"); it != top.end() && spec.options.method == Method::Power)
    L.fail(it->second.value["method"],
           "engine.method is power, but a dataset run solves each subject's events in turn and has "
           "no power method; use auto, batched (subjects in parallel) or scan (one thread)");
  const Loader::Entry& subj_e = top.at("subjects");
  auto subj = L.entries(subj_e.value, "subjects", {"dataset", "parameters", "count", "population"});
  if (auto it = subj.find("count"); it != subj.end())
    L.fail(it->second.key,
           "subjects.count is not used with subjects.dataset (the dataset's IDs are the subjects); "
           "remove it");
  const auto pop_it = subj.find("population");
  if (pop_it != subj.end()) {
    if (auto it = subj.find("parameters"); it != subj.end())
      L.fail(it->second.key,
             "subjects.parameters cannot be given with subjects.population (the population's "
             "typical values give the parameters of a design simulation); remove it");
    if (auto it = top.find("engine"); it != top.end() && spec.options.device == Device::Cuda)
      L.fail(it->second.value["device"],
             "engine.device is cuda, but a design simulation (subjects.dataset with "
             "subjects.population) runs on the CPU; remove engine.device or give cpu");
  }
  const YAML::Node dnode = subj.at("dataset").value;
  const std::string dpath =
      L.scalar_string(dnode, "subjects.dataset", "the path of a NONMEM-format CSV file");
  const std::string resolved = L.resolve(dpath);  // relative to the run file's folder
  auto data = std::make_shared<Dataset>(read_dataset(resolved, model));
  spec.inputs.push_back(output::InputFile{"subjects.dataset", resolved});
  try {
    // Its covariates go to the result beside the result's own columns.
    if (pop_it != subj.end())
      output::check_design_columns(*data, model);
    else
      output::check_dataset_columns(*data, model);
  } catch (const InvalidArgument& e) {
    L.fail(dnode, e.what());
  }
  if (pop_it != subj.end()) {
    parse_design(L, top, spec, model_ptr, data, pop_it->second.value, engine_mark);
    return;
  }
  const std::int64_t count = static_cast<std::int64_t>(data->subjects.size());
  p.parameters = ParameterBatch(model_ptr, count);
  std::vector<char> given(model.parameters.size(), 0);
  for (const std::string& c : data->parameter_columns) {
    const int col = parameter_index(model, c);
    if (col < 0) L.fail(dnode, "dataset column " + c + " does not name a parameter of the model");
    given[static_cast<std::size_t>(col)] = 1;
  }
  std::map<int, Loader::Entry> from_file;  // parameters given in the run file, by column
  if (auto it = subj.find("parameters"); it != subj.end()) {
    std::vector<std::string> plain;
    for (const ParameterInfo& pi : model.parameters) {
      plain.push_back(pi.name);
      if (!pi.alias.empty()) plain.push_back(pi.alias);
    }
    auto params = L.entries(it->second.value, "subjects.parameters", plain);
    std::vector<char> seen(model.parameters.size(), 0);
    for (auto& kv : params) {
      const int col = parameter_index(model, kv.first);
      const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(col)];
      if (seen[static_cast<std::size_t>(col)])
        L.fail(kv.second.key, "parameter " + pi.name + " is given twice (as " + pi.name +
                                  " and as its alias " + pi.alias + "); give one of them");
      seen[static_cast<std::size_t>(col)] = 1;
      const std::string what = "subjects.parameters." + kv.first;
      const YAML::Node& v = kv.second.value;
      given[static_cast<std::size_t>(col)] = 1;
      if (v.IsSequence() && static_cast<std::int64_t>(v.size()) != count)
        L.fail(v, what + " has " + std::to_string(v.size()) + " values, but the dataset has " +
                      std::to_string(count) +
                      " subjects (IDs); give one value per subject, in dataset order");
      store_parameter(L, v, what, pi, p.parameters);
      from_file.emplace(col, kv.second);
      // The library's rule for the parameter's role, here too for values that a dataset column
      // replaces in every record (check_dataset sees only the values used).
      for (std::size_t i = 0; i < (v.IsSequence() ? v.size() : 1); ++i) {
        const YAML::Node x = v.IsSequence() ? v[i] : v;
        const double value =
            p.parameters.get(v.IsSequence() ? static_cast<std::int64_t>(i) : 0, col);
        if (!parameter_value_ok(pi.role, value))
          L.fail(x, what + (v.IsSequence() ? "[" + std::to_string(i + 1) + "]" : "") + " is " +
                        x.Scalar() + ", but must be " + parameter_rule(pi.role));
      }
    }
  }
  parse_dataset_output(L, top, spec, false);
  // Availability of the requested path (device cuda runs datasets too): exit status 3, not 2.
  if (std::string why; !is_backend_available(spec.options.method, spec.options.device, &why))
    throw BackendUnavailable(L.where(engine_mark) + ": engine." +
                             (spec.options.device == Device::Cuda ? "device" : "method") + ": " +
                             why);
  // Per-record parameter checks, the library's, made by the run as it plans each subject
  // (simulate_dataset; check_run without simulating): a value from the dataset is reported at
  // the dataset's line, one from the run file (Error::field() "parameters[s].NAME") at its node.
  spec.located = [L, dnode, from_file, model_ptr](const std::function<void()>& check) {
    try {
      check();
    } catch (const DomainError& e) {
      const Locate run_file = [&](const std::string& field) -> std::optional<Located> {
        std::size_t s = 0;
        std::string rest;
        if (!field_index(field, "parameters", &s, &rest) || rest.size() < 2) return std::nullopt;
        const std::string name = rest.substr(1);
        auto it = from_file.find(parameter_index(*model_ptr, name));
        if (it == from_file.end())
          return Located{dnode,
                         "subjects.parameters." + name + " (or a dataset column " + name + ")",
                         true, true};
        const std::string what = "subjects.parameters." + it->second.key.Scalar();
        if (it->second.value.IsSequence() && s < it->second.value.size())
          return Located{it->second.value[s], what + "[" + std::to_string(s + 1) + "]"};
        return Located{it->second.value, what};
      };
      // An error without a rule (micro constants and clearances mixed up) already names the
      // dataset's line; it stays there.
      if (!e.field().empty() && !e.rule().empty())
        L.checked(run_file, [] { std::rethrow_exception(std::current_exception()); });
      std::string msg = e.what();
      if (msg.rfind("simulate_dataset: ", 0) == 0) msg = msg.substr(18);
      throw ConfigError("", 0, 0, msg);
    }
  };
  spec.dataset = std::move(data);
}

}  // namespace pkscan::config::detail
