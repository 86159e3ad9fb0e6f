#pragma once
/// @file run.hpp
/// The run of a run file, as `pkscan run` does it: a grid run, a dataset run or a streamed
/// (population, sweep, HDF5) run, chosen from the run file, simulated and written to its result
/// files as one unit. C++ callers get what the program gets.

#include <cstdint>
#include <pkscan/config/load.hpp>
#include <pkscan/error.hpp>
#include <pkscan/population_run.hpp>
#include <pkscan/result.hpp>
#include <string>

namespace pkscan::config {

/// An error about a run's output path: its suffix, a file the run reads that it would replace or
/// remove, or a place where its files cannot be committed (a directory, a missing directory, a
/// name too long, no permission). The message does not say where the path came from (the run
/// file's output.path or a caller's argument); the caller adds that.
class OutputPathError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

/// Which run a run file describes.
enum class RunKind {
  Grid,      ///< subjects on a time grid, held in memory and written as CSV
  Dataset,   ///< a NONMEM dataset's records (`subjects: {dataset: ...}`), written as CSV
  Design,    ///< a design simulation (`subjects: {dataset, population}`): replicates of the
             ///< dataset's records with drawn parameters, streamed to CSV
  Streamed,  ///< a population, sweep or replicates, or any run to HDF5: streamed in chunks
};

/// What run() wrote.
struct RunReport {
  RunKind kind = RunKind::Grid;
  RunSummary summary;        ///< the compute path, its timings and the non-finite subjects
  std::int64_t rows = 0;     ///< subjects (Grid), observation rows (Dataset, Design: all
                             ///< replicates), rows (Streamed)
  std::int64_t times = 0;    ///< output times per subject (Grid), 0 otherwise
  bool summaries = false;    ///< summaries were written (Streamed)
  bool trajectories = true;  ///< trajectories were written (Grid, Dataset: always)
};

/// The run a run file describes (the choice run() makes).
RunKind run_kind(const RunSpec& spec, const std::string& path) noexcept;

/// The checks of an output path that write nothing: it ends in .csv, .h5 or .hdf5 (.csv for a
/// dataset run) and replaces or removes no file the run reads (spec.inputs).
/// @throws OutputPathError
void check_output_path(const RunSpec& spec, const std::string& path);

/// The checks that a dataset or design run makes as it reads the dataset's records (each
/// record's parameters against their rules; a design's covariates, occasions and LLOQs), made
/// without simulating: `pkscan validate` makes them after load_run_file. Errors are reported at
/// their place (RunSpec::located). Nothing for grid and streamed runs: load_run_file checks
/// their values.
/// @throws ConfigError, InvalidArgument, DomainError
void check_run(const RunSpec& spec);

/// Runs the run file's run and writes its result files at `path` (.csv or .h5) as one unit:
/// `path`, and for CSV its companions `<stem>.summary.csv` and `<stem>.metrics.csv` (written
/// when the run has them, removed when it has not, so that none of an earlier run stays next to
/// this one). Before anything is simulated, `path` is checked (check_output_path) and so is
/// the place where its files will be committed. When the run fails, no partial file is left and
/// the files of an earlier run at `path` are untouched. `options.progress` is called for
/// streamed runs (rows done of all). With `options.exchange` (more than one process: every
/// process calls run() with the same spec and path), every run is split over the processes and
/// rank 0 writes the files of one process: a streamed or grid run by its chunks (run_population),
/// a design run by its replicates (run_design), a dataset run by blocks of 1024 subjects
/// (run_units); another rank writes nothing and returns the rows it simulated.
/// @throws OutputPathError about `path`; otherwise what simulate(), simulate_dataset(),
///         run_population() and the result files throw
RunReport run(const RunSpec& spec, const std::string& path,
              const PopulationRunOptions& options = {});

}  // namespace pkscan::config
