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
// is checked by the caller), each value under the parameter role's rule.
void store_parameter(const Loader& L, const YAML::Node& v, const std::string& what,
                     const ParameterInfo& pi, ParameterBatch& batch);

// Parameter column by name for population and sweep keys, or an error listing the names.
int named_parameter(const Loader& L, const ModelInfo& model, const YAML::Node& key,
                    const std::string& what);

// A value of a parameter under its role's rule.
double parameter_value(const Loader& L, const YAML::Node& v, const std::string& what,
                       const ParameterInfo& pi);

// f_* and lag_* keep their defaults in runs on a time grid (every subject gets the same doses).
void reject_dose_parameter(const Loader& L, const YAML::Node& where, const ParameterInfo& pi,
                           const std::string& what);

// ---- Model and options (load_model.cpp) ----------------------------------------------------

// `model`: a built-in name or {linear: {...}}; sets p.model and returns the description (the
// default model's when the key is absent).
std::shared_ptr<const ModelInfo> parse_model(const Loader& L, const Loader::Entries& top,
                                             Problem& p);

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

// `doses` into p.doses (the grid is read).
void parse_doses(const Loader& L, const Loader::Entries& top, Problem& p);

// With discretization euler, the library's rule on K = I + A dt (first_euler_violation),
// reported at time.dt.
void check_euler_step(const Loader& L, const Problem& p, const YAML::Node& dt_node);

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
};

// `subjects`: parameters (numbers or lists), count, or a population (spec.population).
GridSubjects parse_subjects(const Loader& L, const Loader::Entries& top, const YAML::Node& root,
                            RunSpec& spec, const ModelInfo& model);

// The run fits in memory (and a streamed run has at most 10^12 subjects); checked before
// anything per subject is allocated.
void check_run_size(const Loader& L, const RunSpec& spec, const GridSubjects& subjects,
                    const std::shared_ptr<const ModelInfo>& model_ptr,
                    const YAML::Node& steps_node);

// spec.problem.parameters: one row per subject (the typical values of a population), each
// checked against the model's rules.
void fill_parameters(const Loader& L, RunSpec& spec, const GridSubjects& subjects,
                     const std::shared_ptr<const ModelInfo>& model_ptr);

// ---- Output (load_output.cpp) --------------------------------------------------------------

// `output: {path, times, trajectories, summaries}` of a grid run (the grid is read).
void parse_output(const Loader& L, const Loader::Entries& top, RunSpec& spec);

// ---- Population and sweep (load_population.cpp) --------------------------------------------

// subjects.population, with its covariates file read (relative to the run file's folder).
std::shared_ptr<const PopulationInput> parse_population(const Loader& L, const YAML::Node& node,
                                                        const ModelInfo& model);

// `sweep: {parameter: [values], ...}`.
SweepInput parse_sweep(const Loader& L, const YAML::Node& node, const ModelInfo& model);

}  // namespace pkscan::config::detail
