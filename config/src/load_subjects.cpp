// subjects of a run on a time grid: subjects.parameters (numbers, or lists with one value per
// subject) and subjects.count, the memory check of the whole run, and the parameter rows.
#include <cmath>
#include <cstdint>
#include <memory>
#include <pkscan/checks.hpp>
#include <pkscan/engine.hpp>
#include <pkscan/error.hpp>
#include <string>
#include <utility>
#include <vector>

#include "load_sections.hpp"

namespace pkscan::config::detail {

// Stores a parameter given as one number (every subject) or a list (one per subject; its length
// is checked by the caller). The values' rules are the library's (check_parameter_rows).
void store_parameter(const Loader& L, const YAML::Node& v, const std::string& what,
                     const ParameterInfo& pi, ParameterBatch& batch) {
  if (!v.IsSequence()) {
    batch.set_all(pi.name, L.parameter(v, what));
    return;
  }
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::string item = what + "[" + std::to_string(i + 1) + "]";
    if (!v[i].IsScalar()) L.fail(v[i], item + " must be a number");
    batch.set(pi.name, static_cast<std::int64_t>(i), L.parameter(v[i], item));
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

GridSubjects parse_subjects(const Loader& L, const Loader::Entries& top, const YAML::Node& root,
                            RunSpec& spec, const std::shared_ptr<const ModelInfo>& model_ptr,
                            FieldTable& fields) {
  const ModelInfo& model = *model_ptr;
  const Loader::Entry& subj_e = L.require(top, "subjects", root, "the run file");
  auto subj = L.entries(subj_e.value, "subjects", {"count", "parameters", "population"});
  if (auto pit = subj.find("population"); pit != subj.end()) {
    for (const char* k : {"parameters", "count"})
      if (auto it = subj.find(k); it != subj.end())
        L.fail(it->second.key, "subjects." + std::string(k) +
                                   " cannot be given with subjects.population (the population's "
                                   "count and typical values say it); remove it");
    parse_population(L, pit->second.value, model_ptr, spec, fields, nullptr, arms_count(L, top));
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
  std::int64_t count = list_len > 0 ? list_len : 1;
  if (auto it = subj.find("count"); it != subj.end()) {
    count = L.integer(it->second.value, "subjects.count", 1, 1'000'000'000'000);
    if (list_len >= 0 && count != list_len)
      L.fail(it->second.value, "subjects.count is " + std::to_string(count) +
                                   ", but the parameter lists have " + std::to_string(list_len) +
                                   " values; they must agree");
  }
  const YAML::Node population =
      spec.population ? subj.at("population").value : YAML::Node(YAML::NodeType::Null);
  return GridSubjects{subj_e, std::move(subj), params_e, std::move(sources), count, population};
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
    const long double rows = static_cast<long double>(spec.sweep.points()) *
                             (spec.population ? static_cast<long double>(spec.population->count) *
                                                    static_cast<long double>(spec.replicates)
                                              : static_cast<long double>(count));
    if (rows > 1e12L)
      L.fail(subj_e.value, "the run has " + format_value(static_cast<double>(rows)) +
                               " subjects (replicates x sweep points x subjects), more than 10^12");
  }

  // Size check before allocating anything per subject (streamed runs hold one chunk at a time).
  if (!spec.streaming()) {
    Problem sizing;
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
    store_parameter(L, src.value, "subjects.parameters." + src.key.Scalar(), pi, p.parameters);
  }
  // Every row under the library's rules (a run on a time grid: bioavailability 1, lag 0), each
  // error at the value it names: "parameters[s].NAME" is subjects.parameters.KEY (or its item
  // s), or subjects.population.typical.KEY.
  const YAML::Node typical =
      spec.population ? subjects.population["typical"] : YAML::Node(YAML::NodeType::Null);
  L.checked(
      [&](const std::string& field) -> std::optional<Located> {
        std::size_t s = 0;
        std::string rest;
        if (!field_index(field, "parameters", &s, &rest) || rest.size() < 2) return std::nullopt;
        const int col = parameter_index(model, rest.substr(1));
        if (col < 0) return std::nullopt;
        if (spec.population) {
          for (auto it = typical.begin(); it != typical.end(); ++it)
            if (parameter_index(model, it->first.Scalar()) == col)
              return Located{it->second, "subjects.population.typical." + it->first.Scalar()};
          return Located{typical, "subjects.population.typical." + rest.substr(1), true, true};
        }
        for (const ParamSource& src : subjects.sources) {
          if (src.column != col) continue;
          const std::string name = "subjects.parameters." + src.key.Scalar();
          if (src.value.IsSequence() && s < src.value.size())
            return Located{src.value[s], name + "[" + std::to_string(s + 1) + "]"};
          return Located{src.value, name};
        }
        return Located{subjects.parameters.value, "subjects.parameters." + rest.substr(1), true,
                       true};
      },
      [&] { check_parameter_rows(p.parameters, true); });
}

}  // namespace pkscan::config::detail
