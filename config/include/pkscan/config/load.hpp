#pragma once
/// @file load.hpp
/// Run files (YAML) to a pkscan Problem. This is the only part of pkscan that sees yaml-cpp.
/// The contract: docs/run-files.md documents every key.

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <pkscan/dataset.hpp>
#include <pkscan/engine.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/population.hpp>
#include <pkscan/population_run.hpp>
#include <string>
#include <vector>

namespace pkscan::config {

/// What a population or sweep run writes (`output.trajectories`, `output.summaries`).
struct StreamOutput {
  bool trajectories = true;                       ///< amounts and concentrations per time
  bool summaries = false;                         ///< per-time percentiles and subject metrics
  std::vector<double> percentiles = {5, 50, 95};  ///< summary percentiles, ascending
  /// output.summaries.by: what the summaries are grouped by; absent = the library's default
  /// (PopulationRun::summary_by: every swept parameter).
  std::optional<SummaryBy> by;
  /// output.summaries.replicates: percentiles across replicates (empty: none).
  std::vector<double> replicate_percentiles;
  /// output.summaries.exact: percentiles exact at any size (PopulationRun::exact_percentiles);
  /// false keeps the sketch's estimates beyond the exact budget.
  bool exact_percentiles = true;
  /// output.parameters: each row's parameters (and etas) in `STEM.parameters.csv` / the HDF5
  /// file's /etas; absent = written for populations.
  std::optional<bool> parameters;
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
  /// The virtual population (`subjects.population`; its covariates read from their file); absent
  /// when subjects are listed in subjects.parameters. Then problem.parameters holds one row: the
  /// typical values.
  std::optional<PopulationSpec> population;
  std::int64_t replicates = 1;  ///< subjects.population.replicates (NONMEM's NSUBPROBLEMS)
  /// subjects.population.residual, as standard deviations (absent: no simulated observations)
  std::optional<ResidualError> residual;
  /// subjects.population.lloq (NaN: none, or a column: lloq_column)
  double lloq = std::numeric_limits<double>::quiet_NaN();
  /// With subjects.dataset: the dataset column holding each observation's LLOQ (`lloq: NAME`)
  std::string lloq_column;
  /// With subjects.dataset: subjects.population.count, the virtual subjects resampled from the
  /// dataset's per replicate (DesignRun::count); 0 without it
  std::int64_t design_count = 0;
  /// With subjects.dataset: the occasion column of subjects.population.iov
  std::string occasion;
  Sweep sweep;  ///< parameter grid (`sweep`; empty when there is none)
  /// Per-subject amounts of `doses` (`per`, `bands`): one per dose line, or empty
  std::vector<DoseScaling> dose_scaling;
  /// `arms`: each arm's name, count and doses (empty: none)
  std::vector<Arm> arms;
  StreamOutput stream;  ///< output.trajectories / output.summaries
  std::string text;     ///< the run file's text
  /// Every file the run reads: the run file (load_run_file), subjects.dataset and
  /// subjects.population.covariates.file. The output must be none of them
  /// (check_output_not_input).
  std::vector<output::InputFile> inputs;
  /// Runs `check` (a check or a run of this spec's dataset or design run) so that an error about
  /// one of its values (InvalidArgument, DomainError: a dataset record's parameter, covariate,
  /// occasion or LLOQ) becomes a ConfigError at the value's place, as load_run_file reports the
  /// run file's other values: the run file's node, or the dataset's file and line. Set by
  /// load_run_file for dataset and design runs, whose values on every record are checked once,
  /// as the run reads them (run(), check_run()); empty for other runs (`check` runs as it is).
  std::function<void(const std::function<void()>& check)> located;
  /// True for a design simulation: subjects.dataset with subjects.population.
  bool design() const noexcept { return dataset && population; }
  /// True when the run is simulated in chunks and streamed (a population, a sweep, summaries,
  /// no trajectories, or HDF5 output).
  bool streaming() const noexcept {
    return population || !arms.empty() || !sweep.columns.empty() || stream.summaries ||
           !stream.trajectories || stream.parameters.value_or(false);
  }
};

/// Reads and validates a run file. The values that a dataset or design run reads on every
/// dataset record are checked by the run itself (run(), or check_run() without running).
/// @throws ConfigError (file:line:column, naming the key and the accepted values) for any bad
///         input, including a run too large to hold in memory
/// @throws BackendUnavailable when engine.method/engine.device is not available here
RunSpec load_run_file(const std::string& path);

/// Same, from text already in memory; `file` is used in messages.
RunSpec parse_run_config(const std::string& text, const std::string& file);

}  // namespace pkscan::config
