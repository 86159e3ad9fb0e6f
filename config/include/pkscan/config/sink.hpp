#pragma once
/// @file sink.hpp
/// Streaming result writers for population and sweep runs: the run is simulated in chunks of
/// consecutive subjects and each chunk is handed to a writer, so memory does not grow with the
/// number of subjects. The file format follows the output path's extension (.csv or .h5).
/// Every writer writes to a temporary file next to the target and renames it on commit(); a
/// writer destroyed without commit() removes its temporary file (no partial output).

#include <cstdint>
#include <memory>
#include <pkscan/models/model_kind.hpp>
#include <pkscan/result.hpp>
#include <pkscan/summary.hpp>
#include <pkscan/types.hpp>
#include <string>
#include <vector>

namespace pkscan::config {

/// What a writer knows before the first chunk.
struct RunLayout {
  std::shared_ptr<const ModelInfo> model;  ///< compartments and parameter names
  std::vector<double> times;               ///< output times, ascending
  Precision precision = Precision::Float64;  ///< precision of the simulated values
  std::int64_t rows = 0;  ///< total number of simulated subjects (replicates x grid x subjects)
  /// Names of per-subject columns that describe a row beyond its id: "replicate", then the sweep
  /// parameters, in that order (may be empty).
  std::vector<std::string> extra_columns;
  /// Names of per-subject exposure metrics (see summary), e.g. {"cmax","tmax","auc","cmin"};
  /// empty when metrics are not written.
  std::vector<std::string> metric_names;
  /// Compartment whose concentration the metrics describe (0-based).
  int metric_compartment = 1;
  bool trajectories = true;  ///< write amounts/concentrations per subject and time
  std::string run_text;      ///< the run file's text (stored as an attribute in HDF5)
  std::string run_file;      ///< the run file's path
};

/// One chunk of consecutive subjects, rows [first, first + result.subjects()).
struct Chunk {
  std::int64_t first = 0;            ///< global 0-based row index of the chunk's first subject
  const SimulationResult* result;    ///< amounts (and concentrations) of the chunk's subjects
  const std::int64_t* ids = nullptr; ///< per subject: the `id` column (1-based)
  /// per subject x extra_columns, row-major (replicate number 1-based, sweep values)
  const double* extra = nullptr;
  /// per subject x model parameters (ModelInfo::parameters order; NaN = unused), row-major
  const double* parameters = nullptr;
  /// per subject x metric_names, row-major; null when metrics are not written
  const double* metrics = nullptr;
};

/// The per-time summary table (engine/include/pkscan/summary.hpp).
using TimeSummaryTable = pkscan::TimeSummaryTable;

/// A destination for one run's results.
class ResultSink {
 public:
  virtual ~ResultSink() = default;
  /// Writes one chunk; chunks arrive in row order. @throws Error on I/O failure.
  virtual void write(const Chunk& chunk) = 0;
  /// Writes the per-time summary (at most once, after the last chunk).
  virtual void write_summary(const TimeSummaryTable& table) = 0;
  /// Completes the file(s) and moves them into place. @throws Error on I/O failure.
  virtual void commit() = 0;
};

/// A sink for `path`, chosen by its extension (".csv" or ".h5").
/// CSV: trajectories in `path` (contract columns, then `extra_columns`), the time summary in
/// `<stem>.summary.csv` and the metrics in `<stem>.metrics.csv` (stem = path without ".csv").
/// HDF5: one file; layout in docs/output.md.
/// @throws ConfigError for an unknown extension, Error when the file cannot be created
std::unique_ptr<ResultSink> make_sink(const std::string& path, const RunLayout& layout);

/// The CSV sink (see make_sink).
std::unique_ptr<ResultSink> make_csv_sink(const std::string& path, const RunLayout& layout);

/// The HDF5 sink (see make_sink and docs/output.md).
std::unique_ptr<ResultSink> make_h5_sink(const std::string& path, const RunLayout& layout);

}  // namespace pkscan::config
