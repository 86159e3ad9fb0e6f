#pragma once
/// @file sink.hpp
/// Streaming result writers for population and sweep runs: the run is simulated in chunks of
/// consecutive subjects and each chunk is handed to a writer, so memory does not grow with the
/// number of subjects. The file format follows the output path's extension (.csv or .h5).
/// Every writer writes to temporary files next to the targets and moves them into place on
/// commit(), all files of the run as one unit (OutputUnit in output.hpp); a writer destroyed
/// without commit() removes its temporary files (no partial output, earlier results untouched).
///
/// Memory: a writer's buffers do not grow with the number of rows (CSV: one line and the
/// files' 1 MiB write buffers; HDF5: at most 2 MiB of chunk cache per dataset, a 4 MiB metadata
/// cache and a 4 MiB block of concentrations). Not thread-safe: one thread calls
/// write(), write_summary() and commit(), in that order.

#include <cstdint>
#include <memory>
#include <pkscan/design.hpp>
#include <pkscan/models/model.hpp>
#include <pkscan/population_run.hpp>
#include <pkscan/result.hpp>
#include <pkscan/summary.hpp>
#include <pkscan/types.hpp>
#include <string>
#include <vector>

namespace pkscan::output {

// The file sinks implement the library's writer interface (ResultSink, with RunLayout and Chunk,
// pkscan/population_run.hpp), which the population driver feeds. Their contract beyond
// ResultSink's:
// - write() @throws InvalidArgument when the chunk does not continue the rows written so far,
//   goes past RunLayout::rows, differs from the layout (compartments, output times, precision)
//   or lacks an array the layout announces (extra, metrics; parameters for HDF5); Error on I/O
//   failure.
// - write_summary(): without this call no summary is written (CSV: no `<stem>.summary.csv`;
//   HDF5: no /summary group). @throws InvalidArgument when the table does not match the layout
//   (times, compartments, sizes) or on a second call; Error on I/O failure.
// - commit() completes the file(s) and moves them into place as one unit (CSV: also removes
//   the files of the unit this run does not write, so no `<stem>.summary.csv` or
//   `<stem>.metrics.csv` of an earlier run stays next to the new files). @throws
//   InvalidArgument when fewer than RunLayout::rows rows were written (nothing is moved into
//   place); Error on I/O failure.

/// A sink for `path`, chosen by its extension (".csv", ".h5" or ".hdf5"; case-sensitive).
/// CSV: trajectories in `path` (contract columns, then `extra_columns`; only when
/// RunLayout::trajectories), the time summary in `<stem>.summary.csv` and the metrics in
/// `<stem>.metrics.csv` (stem = path without ".csv"; only when metric_names is non-empty).
/// HDF5: one file; layout in docs/output.md. The files are created (under temporary names) at
/// once, so a missing or read-only directory fails here, before anything is simulated.
/// @throws ConfigError (file = RunLayout::run_file, no line) for another extension naming the
/// accepted ones; InvalidArgument for an inconsistent layout (no model, no output times, a
/// metric compartment out of range); Error when the file cannot be created
std::unique_ptr<ResultSink> make_sink(const std::string& path, const RunLayout& layout);

/// The formatter of a result `path` on a rank other than 0 of a run split over processes
/// (RunExchange): a ResultSink that writes no file and whose format() turns a chunk into what
/// make_sink(path, layout)'s write_formatted() appends (CSV: the rows of its tables, byte for
/// byte those of write()); for another format it formats nothing (format() is false, and
/// write(), write_summary() and commit() do nothing).
/// @throws InvalidArgument for an inconsistent layout
std::unique_ptr<ResultSink> make_formatter(const std::string& path, const RunLayout& layout);

/// The companions of a CSV result `path`: `<stem>.summary.csv` and `<stem>.metrics.csv`
/// (empty for a path not ending in .csv). A run that writes `path` without them removes them
/// in its commit (write_csv's `stale`), so they never describe another run.
std::vector<std::string> csv_companions(const std::string& path);

/// True when `path` is a name followed by an extension make_sink accepts (.csv, .h5, .hdf5).
bool is_result_path(const std::string& path) noexcept;

/// The CSV sink (see make_sink).
std::unique_ptr<ResultSink> make_csv_sink(const std::string& path, const RunLayout& layout);

/// The HDF5 sink (see make_sink and docs/output.md). After a write error (disk full, file size
/// limit) HDF5 1.10 cannot close the file, and its exit handler then crashes at the end of the
/// process: a program that keeps running after such an error should call H5dont_atexit() before
/// any HDF5 call (the pkscan program does).
std::unique_ptr<ResultSink> make_h5_sink(const std::string& path, const RunLayout& layout);

/// Where a run's results come from, stored by the HDF5 sinks (root attributes run_file and
/// run_text; RunLayout carries the same for population runs).
struct RunSource {
  std::string file;  ///< the run file's path, as given
  std::string text;  ///< its whole text
};

/// The CSV sink of a design run (design.hpp). `path` holds one row per observation record and
/// replicate: `id,time,amount_<c>...,conc_<c>...[,replicate],ipred[,dv][,blq],<covariates>`
/// (replicate 1-based, only with more than one; dv and blq with a residual error and an LLOQ;
/// the dataset's covariate columns as written), replicate by replicate in dataset order.
/// `<stem>.parameters.csv` (with DesignLayout::parameter_table): `id[,replicate][,occasion],
/// <parameters>,eta_<p>...,iov_<p>...`, one row per subject (and occasion). The files are one
/// OutputUnit with the other companions of `path` (csv_companions), which the commit removes.
/// A path ending in .h5 or .hdf5 goes to make_design_h5_sink (with `source`).
/// @throws InvalidArgument for a path not ending in .csv, .h5 or .hdf5 or a covariate column
///         named like a result column (check_design_columns); Error when a file cannot be created
std::unique_ptr<DesignSink> make_design_sink(const std::string& path, const DesignLayout& layout,
                                             const RunSource& source = {});

/// The formatter of a design result `path` on a rank other than 0 of a design run split over
/// processes (run_design with a RunExchange): a DesignSink that writes no file and whose
/// format() turns a replicate into what make_design_sink(path, layout)'s write_formatted()
/// appends (CSV: its rows, byte for byte those of write()); for HDF5 it formats nothing.
/// @throws InvalidArgument for a layout without a model or dataset
std::unique_ptr<DesignSink> make_design_formatter(const std::string& path,
                                                  const DesignLayout& layout);

/// The HDF5 sink of a design run (layout in docs/output.md, "Design simulations"): one file whose
/// root holds the CSV's result columns as 1-D datasets of one entry per observation row (`id`
/// int64 when every ID is an integer, else strings; `time`, `amount_<c>`, `conc_<c>`, `ipred`,
/// `dv` float64; `replicate` int64; `blq` int8; root attribute `columns` in the CSV's order),
/// the dataset's other columns in the group `/covariates` (float64 when the column holds a number
/// on every observation record, else strings as written) and, with
/// DesignLayout::parameter_table, the parameter table in the group `/parameters` (one 1-D dataset
/// per column of `<stem>.parameters.csv`, attribute `columns`); the root attributes of every
/// result (run_file and run_text from `source`, model, compartments, pkscan_version). Written
/// under a temporary name
/// and renamed into place by commit(), as make_h5_sink's file.
/// @throws InvalidArgument for a path not ending in .h5 or .hdf5, a covariate column named like a
///         result column or that cannot name an HDF5 dataset (empty, ".", holding "/"), before
///         the file is created; Error when the file cannot be created
std::unique_ptr<DesignSink> make_design_h5_sink(const std::string& path, const DesignLayout& layout,
                                                const RunSource& source = {});

}  // namespace pkscan::output
