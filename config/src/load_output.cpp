// output of a run on a time grid: the result path, the output times, and what a streamed run
// writes (trajectories, summaries with their percentiles).
#include <algorithm>
#include <cstdint>
#include <pkscan/checks.hpp>
#include <pkscan/error.hpp>
#include <pkscan/output/sink.hpp>
#include <string>
#include <utility>
#include <vector>

#include "load_sections.hpp"

namespace pkscan::config::detail {

namespace {

// output.summaries: true | false | {percentiles: [..], by, replicates, exact}; the percentiles'
// rules are the library's (check_population_run), `fields` says where each one is.
void parse_summaries(const Loader& L, const YAML::Node& v, StreamOutput& so, FieldTable& fields) {
  if (v.IsScalar() && v.Tag() != "!" && (v.Scalar() == "true" || v.Scalar() == "false")) {
    so.summaries = v.Scalar() == "true";
    return;
  }
  if (!v.IsMap())
    L.fail(v,
           "output.summaries must be true, false or {percentiles: [numbers in 0..100], by: "
           "[replicate or swept parameters]}");
  auto m = L.entries(v, "output.summaries", {"percentiles", "by", "replicates", "exact"});
  so.summaries = true;
  if (auto it = m.find("exact"); it != m.end()) {
    const YAML::Node& e = it->second.value;
    if (!e.IsScalar() || e.Tag() == "!" || (e.Scalar() != "true" && e.Scalar() != "false"))
      L.fail(e, "output.summaries.exact must be true or false");
    so.exact_percentiles = e.Scalar() == "true";
  }
  if (auto it = m.find("replicates"); it != m.end()) {
    // true: the 5th, 50th and 95th percentiles across replicates; or {percentiles: [...]}.
    const YAML::Node& r = it->second.value;
    if (r.IsScalar() && r.Tag() != "!" && (r.Scalar() == "true" || r.Scalar() == "false")) {
      if (r.Scalar() == "true") so.replicate_percentiles = {5, 50, 95};
    } else if (r.IsMap()) {
      auto rm = L.entries(r, "output.summaries.replicates", {"percentiles"});
      so.replicate_percentiles = {5, 50, 95};
      if (auto p = rm.find("percentiles"); p != rm.end()) {
        const YAML::Node& pl = p->second.value;
        if (!pl.IsSequence() || pl.size() == 0 || pl.size() > 99)
          L.fail(pl,
                 "output.summaries.replicates.percentiles must be a list of 1 to 99 numbers "
                 "in [0, 100]");
        so.replicate_percentiles.clear();
        for (std::size_t i = 0; i < pl.size(); ++i) {
          const std::string what =
              "output.summaries.replicates.percentiles[" + std::to_string(i + 1) + "]";
          so.replicate_percentiles.push_back(L.number(pl[i], what));
          fields.emplace("replicate_percentiles[" + std::to_string(i) + "]", Located{pl[i], what});
        }
      }
    } else {
      L.fail(r,
             "output.summaries.replicates must be true, false or {percentiles: [numbers in "
             "0..100]}");
    }
    fields.emplace("replicate_percentiles", Located{r, "output.summaries.replicates", false});
  }
  if (auto it = m.find("percentiles"); it != m.end()) {
    const YAML::Node& pl = it->second.value;
    if (!pl.IsSequence() || pl.size() == 0 || pl.size() > 99)
      L.fail(pl, "output.summaries.percentiles must be a list of 1 to 99 numbers in [0, 100]");
    so.percentiles.clear();
    for (std::size_t i = 0; i < pl.size(); ++i) {
      const std::string what = "output.summaries.percentiles[" + std::to_string(i + 1) + "]";
      so.percentiles.push_back(L.number(pl[i], what));
      fields.emplace("percentiles[" + std::to_string(i) + "]", Located{pl[i], what});
    }
  }
}

}  // namespace

void parse_summary_by(const Loader& L, const Loader::Entries& top, const ModelInfo& model,
                      RunSpec& spec, FieldTable& fields) {
  // The library's errors about the groups (their memory) point at `by`, else at the sweep that
  // makes the default groups.
  if (auto sweep = top.find("sweep"); sweep != top.end())
    fields.insert_or_assign("summary_by", Located{sweep->second.key, "sweep", false});
  const auto output = top.find("output");
  if (output == top.end() || !output->second.value.IsMap()) return;
  const YAML::Node summaries = output->second.value["summaries"];
  // Summaries across replicates summarise each replicate's tables: without `by`, the default
  // groups gain the replicate.
  if (!spec.stream.replicate_percentiles.empty() && summaries && summaries.IsMap() &&
      !summaries["by"])
    spec.stream.by = SummaryBy{true, spec.sweep.columns, !spec.arms.empty()};
  if (!summaries || !summaries.IsMap() || !summaries["by"]) return;
  const YAML::Node by = summaries["by"];
  fields.insert_or_assign("summary_by", Located{by, "output.summaries.by", false});
  if (!by.IsSequence())
    L.fail(by,
           "output.summaries.by must be a list of replicate and swept parameters ([] for one "
           "summary of every row)");
  SummaryBy groups;
  bool replicate = false;
  for (std::size_t i = 0; i < by.size(); ++i) {
    const YAML::Node& k = by[i];
    const std::string what = "output.summaries.by[" + std::to_string(i + 1) + "]";
    if (!k.IsScalar() || k.Tag() == "!")
      L.fail(k, what + " must be replicate, arm, the name of a swept parameter or a covariate");
    if (k.Scalar() == "replicate") {
      if (replicate) L.fail(k, what + " repeats replicate");
      replicate = groups.replicate = true;
      continue;
    }
    if (k.Scalar() == "arm") {
      if (spec.arms.empty()) L.fail(k, what + " is arm, but the run has no arms");
      if (groups.arm) L.fail(k, what + " repeats arm");
      groups.arm = true;
      continue;
    }
    if (spec.population) {  // a covariate: strata
      const std::vector<std::string>& names = spec.population->covariate_names;
      const auto it = std::find(names.begin(), names.end(), k.Scalar());
      if (it != names.end()) {
        if (groups.covariate >= 0)
          L.fail(k, what + " is " + k.Scalar() + ", but the summaries are already stratified by " +
                        names[static_cast<std::size_t>(groups.covariate)] +
                        " (one covariate at most)");
        groups.covariate = static_cast<int>(it - names.begin());
        fields.insert_or_assign("summary_by.covariate", Located{k, what, false});
        continue;
      }
    }
    DoseTarget target;
    if (dose_target(k.Scalar(), target) || k.Scalar().rfind("dose", 0) == 0) {
      // A swept dose property, as sweep writes it (doses[1].amount) or as its column
      // (dose1_amount).
      const std::vector<DoseTarget>& t = spec.sweep.dose_targets;
      std::size_t j = 0;
      while (
          j < t.size() && dose_target_name(t[j]) != k.Scalar() &&
          !(dose_target(k.Scalar(), target) && dose_target_name(t[j]) == dose_target_name(target)))
        ++j;
      if (j == t.size()) L.fail(k, what + " is " + k.Scalar() + ", but the sweep does not vary it");
      const int col = -1 - static_cast<int>(j);
      if (std::find(groups.columns.begin(), groups.columns.end(), col) != groups.columns.end())
        L.fail(k, what + " names " + k.Scalar() + " twice");
      groups.columns.push_back(col);
      continue;
    }
    const int col = named_parameter(L, model, k, what);
    const std::string& name = model.parameters[static_cast<std::size_t>(col)].name;
    const std::vector<int>& swept = spec.sweep.columns;
    if (std::find(swept.begin(), swept.end(), col) == swept.end())
      L.fail(k, what + " is " + k.Scalar() + ", but " + name +
                    " is not swept: the summaries can be grouped by replicate, arm, the "
                    "parameters of sweep and a covariate of subjects.population.covariates.file");
    if (std::find(groups.columns.begin(), groups.columns.end(), col) != groups.columns.end())
      L.fail(k, what + " names " + name + " twice");
    groups.columns.push_back(col);
  }
  if (!spec.arms.empty() && !groups.arm)
    L.fail(by,
           "output.summaries.by must include arm: the summaries of a run with arms are "
           "grouped by arm");
  spec.stream.by = std::move(groups);
}

OutputTimes parse_output_times(const Loader& L, const YAML::Node& tv, const std::string& what,
                               const TimeGrid& grid) {
  if (tv.IsScalar() && tv.Tag() != "!" && tv.Scalar() == "all") return OutputTimes::every_step();
  if (!tv.IsSequence()) L.fail(tv, what + " must be all or a list of grid times");
  if (tv.size() == 0) L.fail(tv, what + " is an empty list; give all or a list of grid times");
  const double t_end = grid.time(grid.steps);
  std::vector<std::int64_t> steps;
  for (std::size_t i = 0; i < tv.size(); ++i) {
    const std::string at = what + "[" + std::to_string(i + 1) + "]";
    const double t = L.finite(tv[i], at, "finite and >= 0", false);
    const std::int64_t s = grid.index_of(t);
    if (s < 0)
      L.fail(tv[i], at + " is " + tv[i].Scalar() +
                        ", but must lie on the time grid (a multiple of time.dt = " +
                        format_value(grid.dt) + ")");
    if (t > t_end * (1 + 1e-12) + 1e-12)
      L.fail(tv[i], at + " is " + tv[i].Scalar() + ", but must be <= the last grid time " +
                        format_value(t_end));
    steps.push_back(s);
  }
  OutputTimes output = OutputTimes::at_steps(std::move(steps));
  // The library's rules on output steps (increasing), at the time that breaks them.
  L.checked(
      [&](const std::string& field) -> std::optional<Located> {
        std::size_t i = 0;
        std::string rest;
        if (!field_index(field, "output.steps", &i, &rest) || !rest.empty() || i >= tv.size())
          return std::nullopt;
        return Located{tv[i], what + "[" + std::to_string(i + 1) + "]"};
      },
      [&] { check_output_times(output, grid); });
  return output;
}

void parse_output(const Loader& L, const Loader::Entries& top, RunSpec& spec, FieldTable& fields) {
  Problem& p = spec.problem;
  // `output` may be left out when the path comes from --output (times then default to all).
  const auto output = top.find("output");
  const Loader::Entries out =
      output == top.end() ? Loader::Entries()
                          : L.entries(output->second.value, "output",
                                      {"path", "times", "trajectories", "summaries", "parameters"});
  if (output != top.end()) {
    spec.output_line = output->second.key.Mark().line + 1;
    spec.output_column = output->second.key.Mark().column + 1;
  }
  if (auto it = out.find("path"); it != out.end()) {
    spec.output_path = L.scalar_string(it->second.value, "output.path",
                                       "a file path ending in .csv, .h5 or .hdf5");
    const std::string& op = spec.output_path;
    if (!output::is_result_path(op))
      L.fail(it->second.value, "output.path is \"" + op + "\", but must end in .csv, .h5 or .hdf5");
    spec.output_path_line = it->second.value.Mark().line + 1;
    spec.output_path_column = it->second.value.Mark().column + 1;
  }
  if (auto it = out.find("times"); it != out.end())
    p.output = parse_output_times(L, it->second.value, "output.times", p.grid);

  if (auto it = out.find("trajectories"); it != out.end()) {
    const YAML::Node& v = it->second.value;
    if (!v.IsScalar() || v.Tag() == "!" || (v.Scalar() != "true" && v.Scalar() != "false"))
      L.fail(v, "output.trajectories must be true or false");
    spec.stream.trajectories = v.Scalar() == "true";
    if (!spec.stream.trajectories) spec.stream.summaries = true;  // something must be written
  }
  if (auto it = out.find("parameters"); it != out.end()) {
    const YAML::Node& v = it->second.value;
    if (!v.IsScalar() || v.Tag() == "!" || (v.Scalar() != "true" && v.Scalar() != "false"))
      L.fail(v, "output.parameters must be true or false");
    spec.stream.parameters = v.Scalar() == "true";
  }
  if (auto it = out.find("summaries"); it != out.end()) {
    parse_summaries(L, it->second.value, spec.stream, fields);
    if (!spec.stream.summaries && !spec.stream.trajectories)
      L.fail(it->second.value,
             "output.summaries is false and output.trajectories is false: nothing to write");
  }
}

}  // namespace pkscan::config::detail
