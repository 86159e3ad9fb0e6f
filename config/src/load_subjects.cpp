// subjects of a run on a time grid: subjects.parameters (numbers, or lists with one value per
// subject) and subjects.count, the memory check of the whole run, and the parameter rows.
#include <cmath>
#include <cstdint>
#include <memory>
#include <pkscan/engine.hpp>
#include <pkscan/error.hpp>
#include <string>
#include <utility>
#include <vector>

#include "load_sections.hpp"

namespace pkscan::config::detail {

// Stores a parameter given as one number (every subject) or a list (one per subject; its length
// is checked by the caller), each value under the parameter role's rule.
void store_parameter(const Loader& L, const YAML::Node& v, const std::string& what,
                     const ParameterInfo& pi, ParameterBatch& batch) {
  const bool volume = pi.role == ParameterRole::Volume;
  const char* rule = volume ? "finite and > 0" : "finite and >= 0";
  if (!v.IsSequence()) {
    batch.set_all(pi.name, L.finite(v, what, rule, volume));
    return;
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string item = what + "[" + std::to_string(i + 1) + "]";
    if (!v[i].IsScalar()) L.fail(v[i], item + " must be a number");
    batch.set(pi.name, static_cast<std::int64_t>(i), L.finite(v[i], item, rule, volume));
  }
}

// Parameter column by name for population and sweep keys, or an error listing the names.
int named_parameter(const Loader& L, const ModelInfo& model, const YAML::Node& key,
                    const std::string& what) {
  const std::string name = key.Scalar();
  const int col = parameter_index(model, name);
  if (col < 0) {
    std::vector<std::string> names;
    for (const ParameterInfo& pi : model.parameters) names.push_back(pi.name);
    L.fail(key, what + " names the parameter '" + name + "', but model " + model.name +
                    " has the parameters " + join(names));
  }
  return col;
}

// A value of a parameter under its role's rule.
double parameter_value(const Loader& L, const YAML::Node& v, const std::string& what,
                       const ParameterInfo& pi) {
  const bool volume = pi.role == ParameterRole::Volume;
  return L.finite(v, what, volume ? "finite and > 0" : "finite and >= 0", volume);
}

// f_* and lag_* keep their defaults in runs on a time grid (every subject gets the same doses).
void reject_dose_parameter(const Loader& L, const YAML::Node& where, const ParameterInfo& pi,
                           const std::string& what) {
  if (pi.role == ParameterRole::Bioavailability || pi.role == ParameterRole::Lag)
    L.fail(where, what + ": " + pi.name +
                      " cannot vary in a run on a time grid (every subject gets the same doses "
                      "there); use subjects.dataset for per-subject bioavailability and lag");
}

GridSubjects parse_subjects(const Loader& L, const Loader::Entries& top, const YAML::Node& root,
                            RunSpec& spec, const ModelInfo& model) {
  const Loader::Entry& subj_e = L.require(top, "subjects", root, "the run file");
  auto subj = L.entries(subj_e.value, "subjects", {"count", "parameters", "population"});
  if (auto pit = subj.find("population"); pit != subj.end()) {
    for (const char* k : {"parameters", "count"})
      if (auto it = subj.find(k); it != subj.end())
        L.fail(it->second.key, "subjects." + std::string(k) +
                                   " cannot be given with subjects.population (the population's "
                                   "count and typical values say it); remove it");
    spec.population = parse_population(L, pit->second.value, model);
  }
  // With a population, subjects.parameters is absent: an empty mapping stands in for it.
  // Initialised once, never assigned (yaml_reader.hpp).
  const Loader::Entry params_e = spec.population
                                     ? Loader::Entry{subj_e.key, YAML::Node(YAML::NodeType::Map)}
                                     : L.require(subj, "parameters", subj_e.value, "subjects");
  std::vector<std::string> accepted;
  for (const ParameterInfo& pi : model.parameters)
    accepted.push_back(pi.alias.empty() ? pi.name : pi.name + " (alias " + pi.alias + ")");
  if (!params_e.value.IsMap())
    L.fail(params_e.value, "subjects.parameters must be a mapping of parameter names (" +
                               join(accepted) + ") to numbers or lists");
  std::vector<ParamSource> sources;
  std::vector<std::string> plain_names;
  for (const ParameterInfo& pi : model.parameters) {
    plain_names.push_back(pi.name);
    if (!pi.alias.empty()) plain_names.push_back(pi.alias);
  }
  auto params = L.entries(params_e.value, "subjects.parameters", plain_names);
  std::int64_t list_len = -1;
  int list_line = 0;  // 1-based line of the first list (a position: yaml_reader.hpp)
  std::string list_key;
  std::vector<int> seen(model.parameters.size(), 0);
  std::vector<std::pair<std::string, Loader::Entry>> in_order;  // document order
  for (auto it = params_e.value.begin(); it != params_e.value.end(); ++it)
    in_order.emplace_back(it->first.Scalar(), params.at(it->first.Scalar()));
  for (auto& kv : in_order) {
    const int col = parameter_index(model, kv.first);
    if (seen[static_cast<std::size_t>(col)]) {
      const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(col)];
      L.fail(kv.second.key, "parameter " + pi.name + " is given twice (as " + pi.name +
                                " and as its alias " + pi.alias + "); give one of them");
    }
    seen[static_cast<std::size_t>(col)] = 1;
    const YAML::Node& v = kv.second.value;
    if (v.IsSequence()) {
      const std::int64_t len = static_cast<std::int64_t>(v.size());
      if (len == 0)
        L.fail(v, "subjects.parameters." + kv.first +
                      " is an empty list; give a number or one value per subject");
      if (list_len >= 0 && len != list_len)
        L.fail(v, "subjects.parameters." + kv.first + " has " + std::to_string(len) +
                      " values, but subjects.parameters." + list_key + " (line " +
                      std::to_string(list_line) + ") has " + std::to_string(list_len) +
                      " values; every list needs one value per subject");
      if (list_len < 0) {
        list_len = len;
        list_line = v.Mark().line + 1;
        list_key = kv.first;
      }
    } else if (!v.IsScalar()) {
      L.fail(v, "subjects.parameters." + kv.first + " must be a number or a list of numbers");
    }
    sources.push_back({col, kv.second.key, v});
  }
  for (std::size_t c = 0; c < model.parameters.size(); ++c) {
    if (!spec.population && !seen[c] && std::isnan(model.parameters[c].default_value) &&
        !model.in_alternative[c])
      L.fail(params_e.value, "missing parameter '" + model.parameters[c].name +
                                 "' in subjects.parameters (required by model " + model.name + ")");
  }
  std::int64_t count = list_len > 0 ? list_len : 1;
  if (auto it = subj.find("count"); it != subj.end()) {
    count = L.integer(it->second.value, "subjects.count", 1, 1'000'000'000'000);
    if (list_len >= 0 && count != list_len)
      L.fail(it->second.value, "subjects.count is " + std::to_string(count) +
                                   ", but the parameter lists have " + std::to_string(list_len) +
                                   " values; they must agree");
  }
  return GridSubjects{subj_e, std::move(subj), params_e, std::move(sources), count};
}

void check_run_size(const Loader& L, const RunSpec& spec, const GridSubjects& subjects,
                    const std::shared_ptr<const ModelInfo>& model_ptr,
                    const YAML::Node& steps_node) {
  const Problem& p = spec.problem;
  const ModelInfo& model = *model_ptr;
  const Loader::Entry& subj_e = subjects.entry;
  const Loader::Entries& subj = subjects.keys;
  const std::int64_t count = subjects.count;
  if (spec.streaming()) {
    const long double rows =
        static_cast<long double>(spec.sweep.points()) *
        (spec.population ? static_cast<long double>(spec.population->count) *
                               static_cast<long double>(spec.population->replicates)
                         : static_cast<long double>(count));
    if (rows > 1e12L)
      L.fail(subj_e.value, "the run has " + format_value(static_cast<double>(rows)) +
                               " subjects (replicates x sweep points x subjects), more than 10^12");
  }

  // Size check before allocating anything per subject (streamed runs hold one chunk at a time).
  if (!spec.streaming()) {
    Problem sizing;
    sizing.model = p.model;
    sizing.grid = p.grid;
    sizing.output = p.output;
    SimulateOptions so = spec.options;
    so.concentrations = false;  // the CLI writes concentrations at output time
    const std::uint64_t per_subject = result_bytes(
        [&] {
          Problem one = sizing;
          one.parameters = ParameterBatch(model_ptr, 1);
          return one;
        }(),
        so);
    // Result plus the per-subject parameter table.
    const long double need = (static_cast<long double>(per_subject) +
                              8.0L * static_cast<long double>(model.parameters.size())) *
                             static_cast<long double>(count);
    const std::uint64_t limit = result_byte_limit(so);
    if (need > static_cast<long double>(limit)) {
      auto it = subj.find("count");
      const YAML::Node where = it != subj.end() ? it->second.value : steps_node;
      L.fail(where,
             "the run is too large to hold in memory: " + std::to_string(count) + " subjects x " +
                 std::to_string(p.output.all ? p.grid.steps + 1
                                             : static_cast<std::int64_t>(p.output.steps.size())) +
                 " output times need " +
                 format_value(static_cast<double>(need / (1024.0L * 1024 * 1024))) +
                 " GiB, but only " +
                 format_value(static_cast<double>(limit) / (1024.0 * 1024 * 1024)) +
                 " GiB are available; use fewer subjects, fewer steps or sparse output.times");
    }
  } else {
    // A streamed run holds one result chunk at a time, but the whole per-subject parameter
    // table (count rows; a population keeps one row of typical values).
    const long double need =
        8.0L * static_cast<long double>(model.parameters.size()) * static_cast<long double>(count);
    const std::uint64_t limit = result_byte_limit(spec.options);
    if (need > static_cast<long double>(limit)) {
      auto it = subj.find("count");
      L.fail(it != subj.end() ? it->second.value : subj_e.value,
             "the run is too large to hold in memory: the parameters of " + std::to_string(count) +
                 " subjects need " +
                 format_value(static_cast<double>(need / (1024.0L * 1024 * 1024))) +
                 " GiB, but only " +
                 format_value(static_cast<double>(limit) / (1024.0 * 1024 * 1024)) +
                 " GiB are available; use fewer subjects or subjects.population");
    }
  }
}

void fill_parameters(const Loader& L, RunSpec& spec, const GridSubjects& subjects,
                     const std::shared_ptr<const ModelInfo>& model_ptr) {
  Problem& p = spec.problem;
  const ModelInfo& model = *model_ptr;
  p.parameters = ParameterBatch(model_ptr, subjects.count);
  if (spec.population) {
    for (std::size_t c = 0; c < model.parameters.size(); ++c)
      if (!std::isnan(spec.population->typical[c]))
        p.parameters.set(model.parameters[c].name, 0, spec.population->typical[c]);
  }
  for (const ParamSource& src : subjects.sources) {
    const ParameterInfo& pi = model.parameters[static_cast<std::size_t>(src.column)];
    const std::string what = "subjects.parameters." + src.key.Scalar();
    if (pi.role == ParameterRole::Bioavailability || pi.role == ParameterRole::Lag) {
      // A grid run gives every subject the same doses: only the defaults make sense here.
      auto is_default = [&](const YAML::Node& v) {
        return v.IsScalar() && v.Tag() != "!" && L.number(v, what) == pi.default_value;
      };
      bool ok = src.value.IsSequence() ? true : is_default(src.value);
      for (std::size_t i = 0; src.value.IsSequence() && i < src.value.size(); ++i)
        ok = ok && is_default(src.value[i]);
      if (!ok)
        L.fail(src.value, what + " must be " + format_value(pi.default_value) +
                              " in a run on a time grid (every subject gets the same doses there); "
                              "use subjects.dataset for per-subject bioavailability and lag");
    }
    store_parameter(L, src.value, what, pi, p.parameters);
  }
  // Micro constants or clearances, per subject (the first subject that breaks a rule is named).
  for (std::int64_t s = 0; s < p.parameters.subjects(); ++s) {
    const std::string msg = check_parameters(model, p.parameters.row(s));
    if (!msg.empty())
      L.fail(subjects.parameters.value,
             "subjects.parameters: " +
                 (p.parameters.subjects() > 1 ? "subject " + std::to_string(s + 1) + ": "
                                              : std::string()) +
                 msg);
  }
}

}  // namespace pkscan::config::detail
