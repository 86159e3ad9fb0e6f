#pragma once
// The sections of a run file, one reader each (private to pkscan::config). parse_run_config
// (load.cpp) calls them in a fixed order, so that of two mistakes the same one is reported:
// model, options, then either a dataset run, or time, subjects, output, sweep, the size check,
// the parameter rows, doses and the euler step.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <memory>
#include <pkscan/config/load.hpp>
#include <string>
#include <vector>

#include "yaml_reader.hpp"

namespace pkscan::config::detail {

// ---- Parameter values (load_subjects.cpp) --------------------------------------------------

// Stores a parameter given as one number (every subject) or a list (one per subject; its length
// is checked by the caller); the values' rules are the library's (check_parameter_rows).
void store_parameter(const Loader& L, const YAML::Node& v, const std::string& what,
                     const ParameterInfo& pi, ParameterBatch& batch);

// Parameter column by name for population and sweep keys, or an error listing the names.
int named_parameter(const Loader& L, const ModelInfo& model, const YAML::Node& key,
                    const std::string& what);

// ---- Model and options (load_model.cpp) ----------------------------------------------------

// `model`: a built-in name or {linear: {...}}; returns its description (the default model's,
// three_compartment, when the key is absent).
std::shared_ptr<const ModelInfo> parse_model(const Loader& L, const Loader::Entries& top);

// `discretization`, `precision` and `engine`. Returns where an unavailable method or device is
// reported (a null mark when `engine` is absent).
YAML::Mark parse_options(const Loader& L, const Loader::Entries& top, RunSpec& spec);

// ---- A run on a NONMEM dataset (load_dataset_run.cpp) --------------------------------------

// `subjects: {dataset: FILE, parameters: {...}}`, `output: {path}`; the whole run.
void parse_dataset_run(const Loader& L, const Loader::Entries& top, RunSpec& spec,
                       const std::shared_ptr<const ModelInfo>& model_ptr,
                       const YAML::Mark& engine_mark);

// ---- The time grid and what lies on it (load_doses.cpp) ------------------------------------

// The nodes of time.dt and time.steps, where later errors about them are reported.
struct TimeNodes {
  YAML::Node dt;
  YAML::Node steps;
};

// `time: {dt, steps}` into p.grid.
TimeNodes parse_time(const Loader& L, const Loader::Entries& top, const YAML::Node& root,
                     Problem& p);

// A list of doses at `list` (named `name` in messages: "doses", "arms[1].doses") into `doses`
// and `scaling` (one DoseScaling per dose, or none when no dose depends on the subject): each
// {compartment, time, amount | bands, rate, duration, every, repeat, per}; `per` and `bands`
// name columns of pop's covariates. Checked by check_doses at their nodes (p's grid and model);
// `fields` (if given) gets where `<scaling_field>[i].covariate` is.
void parse_dose_list(const Loader& L, const YAML::Node& list, const std::string& name,
                     const Problem& p, const PopulationSpec* pop, std::vector<DoseEvent>& doses,
                     std::vector<DoseScaling>& scaling, FieldTable* fields,
                     const std::string& scaling_field);

// `doses` into spec.problem.doses and spec.dose_scaling (the grid, the parameters and the
// population are read); an error with arms.
void parse_doses(const Loader& L, const Loader::Entries& top, RunSpec& spec, FieldTable& fields);

// The subjects of `arms` when every arm gives a count (0 otherwise): the population's count.
std::int64_t arms_count(const Loader& L, const Loader::Entries& top);

// `arms` into spec.arms (after subjects and the population): names, counts or shares of
// population.count, and doses. `fields` gets where arms[k].* are.
void parse_arms(const Loader& L, const Loader::Entries& top, RunSpec& spec, FieldTable& fields);

// Where the library's errors about grid.dt and grid.steps point (time.dt, time.steps).
Locate locate_time(const TimeNodes& time);
// ---- Subjects of a grid run (load_subjects.cpp) --------------------------------------------

// subjects.parameters (one key of it).
struct ParamSource {
  int column;
  YAML::Node key;
  YAML::Node value;
};

// What the `subjects` section leaves for the size check and the parameter rows.
struct GridSubjects {
  Loader::Entry entry;               // the `subjects` key and mapping
  Loader::Entries keys;              // its entries
  Loader::Entry parameters;          // subjects.parameters (an empty mapping with a population)
  std::vector<ParamSource> sources;  // subjects.parameters in document order
  std::int64_t count = 1;            // subjects (rows of the parameter table)
  YAML::Node population;             // subjects.population (a null node without one)
};

// `subjects`: parameters (numbers or lists), count, or a population (parse_population).
// Where the population's values are goes into `fields`.
GridSubjects parse_subjects(const Loader& L, const Loader::Entries& top, const YAML::Node& root,
                            RunSpec& spec, const std::shared_ptr<const ModelInfo>& model_ptr,
                            FieldTable& fields);

// The run fits in memory (and a streamed run has at most 10^12 subjects); checked before
// anything per subject is allocated.
void check_run_size(const Loader& L, const RunSpec& spec, const GridSubjects& subjects,
                    const std::shared_ptr<const ModelInfo>& model_ptr,
                    const YAML::Node& steps_node);

// spec.problem.parameters: one row per subject (the typical values of a population), each
// checked by the library's rules (check_parameter_rows), errors at the value's node.
void fill_parameters(const Loader& L, RunSpec& spec, const GridSubjects& subjects,
                     const std::shared_ptr<const ModelInfo>& model_ptr);

// ---- Output (load_output.cpp) --------------------------------------------------------------

// `output: {path, times, trajectories, summaries}` of a grid run (the grid is read).
// `fields` gets where the summary percentiles are (percentiles[i]).
void parse_output(const Loader& L, const Loader::Entries& top, RunSpec& spec, FieldTable& fields);
// Output times (`output.times`, `arms[k].times`; `what` names the node): all, or a non-empty,
// strictly increasing list of grid times in [0, steps * dt] (check_output_times' rules), each
// error at the node that breaks them.
OutputTimes parse_output_times(const Loader& L, const YAML::Node& node, const std::string& what,
                               const TimeGrid& grid);
// `output.summaries.by` of a grid run, after the sweep is read: replicate and swept parameters.
// `fields` gets where the library's errors about the groups point (summary_by).
void parse_summary_by(const Loader& L, const Loader::Entries& top, const ModelInfo& model,
                      RunSpec& spec, FieldTable& fields);

// ---- Population and sweep (load_population.cpp) --------------------------------------------

// The run's PopulationRun without its base problem (population_run.cpp): what
// check_population_run checks (model, replicates, sweep, population, percentiles), without a copy
// of the parameter table.
PopulationRun population_parts(const RunSpec& spec);

// subjects.population into spec.population and spec.replicates, with its covariates file read
// (relative to the run file's folder; added to spec.inputs). Its values' rules are the library's
// (check_population_run); `fields` gets where each value is, under the library's field paths
// (typical[c], iiv[a], omega[i][j], effects[e].reference, ...).
// With `design` (a design run: subjects.dataset with subjects.population) there is no count and
// no covariates file: the covariates of effects are the dataset's columns, `iov` names its
// occasion column and `lloq` may name a column.
// `arms_count` (> 0): the subjects the arms give, the population's count when it has none (and
// what its count must be otherwise).
void parse_population(const Loader& L, const YAML::Node& node,
                      const std::shared_ptr<const ModelInfo>& model_ptr, RunSpec& spec,
                      FieldTable& fields, const Dataset* design = nullptr,
                      std::int64_t arms_count = 0);

// A sweep key naming a dose property, `doses[K].FIELD` (K from 1; FIELD amount, every, repeat,
// duration or rate); false for any other key.
bool dose_target(const std::string& key, DoseTarget& target);

// `sweep: {parameter: [values], ...}`; `fields` gets sweep.columns[k] and sweep.values[k][j].
Sweep parse_sweep(const Loader& L, const YAML::Node& node, const ModelInfo& model,
                  FieldTable& fields);

}  // namespace pkscan::config::detail
