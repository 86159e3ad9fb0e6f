#pragma once
/// @file load.hpp
/// Run files (YAML) to a pkscan Problem. This is the only part of pkscan that sees yaml-cpp.
/// The contract: docs/run-files.md documents every key.

#include <cstdint>
#include <memory>
#include <pkscan/dataset.hpp>
#include <pkscan/engine.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/population_run.hpp>
#include <string>
#include <vector>

namespace pkscan::config {

/// A virtual population (`subjects.population`): parameter = typical * covariate effects *
/// exp(eta), eta ~ N(0, omega).
struct PopulationInput {
  std::int64_t count = 0;       ///< subjects per replicate (and per sweep point)
  std::uint64_t seed = 0;       ///< random seed
  std::int64_t replicates = 1;  ///< replicate trials (NONMEM's NSUBPROBLEMS)
  /// Typical values, one row in ModelInfo::parameters order (model defaults where not given,
  /// NaN for the unused one of micro constants / clearances).
  std::vector<double> typical;
  std::vector<int> eta_columns;              ///< parameters with between-subject variability
  std::vector<double> omega;                 ///< eta_columns^2 covariance, row-major, symmetric
  std::string covariate_file;                ///< covariates CSV ("" when none)
  std::vector<std::string> covariate_names;  ///< its columns
  std::vector<double> covariates;            ///< count x covariate_names, row-major
  /// A covariate effect: parameter *= (cov / reference)^coefficient (power) or
  /// exp(coefficient * (cov - reference)) (exponential).
  struct Effect {
    int column = 0;     ///< parameter
    int covariate = 0;  ///< index into covariate_names
    bool power = true;  ///< power or exponential
    double coefficient = 0.0;
    double reference = 1.0;
  };
  std::vector<Effect> effects;  ///< covariate effects, applied in order
};

/// A parameter grid (`sweep`): the library's Sweep (pkscan/population_run.hpp).
using SweepInput = pkscan::Sweep;

/// What a population or sweep run writes (`output.trajectories`, `output.summaries`).
struct StreamOutput {
  bool trajectories = true;                       ///< amounts and concentrations per time
  bool summaries = false;                         ///< per-time percentiles and subject metrics
  std::vector<double> percentiles = {5, 50, 95};  ///< summary percentiles, ascending
};

/// A parsed, validated run file.
struct RunSpec {
  std::string file;          ///< the run file's path as given
  Problem problem;           ///< what to simulate
  SimulateOptions options;   ///< method, device, precision
  std::string output_path;   ///< output.path ("" when not given)
  int output_path_line = 0;  ///< 1-based location of output.path, 0 if absent
  int output_path_column = 0;
  /// The NONMEM dataset of a `subjects: {dataset: ...}` run (null for grid runs). Then
  /// problem.parameters has one row per dataset subject and problem.grid/doses/output are unused.
  std::shared_ptr<const Dataset> dataset;
  int output_line = 0;  ///< 1-based location of the `output` key, 0 if absent
  int output_column = 0;
  /// The virtual population (null when subjects are listed in subjects.parameters). Then
  /// problem.parameters holds one row: the typical values.
  std::shared_ptr<const PopulationInput> population;
  SweepInput sweep;     ///< parameter grid (empty when there is none)
  StreamOutput stream;  ///< output.trajectories / output.summaries
  std::string text;     ///< the run file's text
  /// Every file the run reads: the run file (load_run_file), subjects.dataset and
  /// subjects.population.covariates.file. The output must be none of them
  /// (check_output_not_input).
  std::vector<output::InputFile> inputs;
  /// True when the run is simulated in chunks and streamed (a population, a sweep, summaries,
  /// no trajectories, or HDF5 output).
  bool streaming() const noexcept {
    return population || !sweep.columns.empty() || stream.summaries || !stream.trajectories;
  }
};

/// Reads and validates a run file.
/// @throws ConfigError (file:line:column, naming the key and the accepted values) for any bad
///         input, including a run too large to hold in memory
/// @throws BackendUnavailable when engine.method/engine.device is not available here
RunSpec load_run_file(const std::string& path);

/// Same, from text already in memory; `file` is used in messages.
RunSpec parse_run_config(const std::string& text, const std::string& file);

}  // namespace pkscan::config
