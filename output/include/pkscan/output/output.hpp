#pragma once
/// @file output.hpp
/// Writing results: CSV in the contract's layout, written atomically.

#include <memory>
#include <pkscan/dataset.hpp>
#include <pkscan/events.hpp>
#include <pkscan/result.hpp>
#include <pkscan/types.hpp>
#include <pkscan/vpc.hpp>
#include <string>
#include <vector>

namespace pkscan::output {

/// A file written under a temporary name in the target's directory
/// (`.NAME.pkscan-tmp.HOST.PID.XXXXXX`, see temp_files.hpp) and renamed over the target by
/// commit(). Destroying it uncommitted removes the temporary file, so a failed run never leaves
/// a partial file. Creating it first removes the temporary files of `path` left by processes
/// that no longer run. Not copyable.
class AtomicFile {
 public:
  /// Creates the temporary file. @throws Error naming the path when it cannot be created.
  explicit AtomicFile(std::string path);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();
  /// Appends bytes. @throws Error on a write failure (disk full).
  void write(const char* data, std::size_t size);
  /// Flushes, syncs and renames over the target. @throws Error on failure.
  void commit();
  /// Target path.
  const std::string& path() const noexcept { return path_; }
  /// Temporary path (empty once committed or removed).
  const std::string& temp_path() const noexcept { return temp_; }

 private:
  friend class OutputUnit;
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  std::string buffer_;
  void flush();
  void write_all(const char* data, std::size_t size);
  void finish();  // flush, fsync and close (once); the file stays under its temporary name
};

/// The files of one result, committed as one unit: each is written as an AtomicFile, and
/// commit() renames them all into place and removes the unit's files that this result does not
/// produce (companions left by an earlier run), under the temporary-file registry's lock and
/// with a journal (temp_files.hpp): a signal handled by a thread that calls discard_temp_files()
/// never splits the commit, and a commit cut short by SIGKILL or a failure is completed by the
/// next run to the same main path. Destroying the unit uncommitted removes its temporary files
/// and leaves the targets as they were. Every file must lie in the main file's directory.
/// Not copyable.
class OutputUnit {
 public:
  /// A unit whose main file is `main` (it names the journal). Completes the interrupted commit
  /// of an earlier process that no longer runs.
  explicit OutputUnit(std::string main);
  OutputUnit(const OutputUnit&) = delete;
  OutputUnit& operator=(const OutputUnit&) = delete;
  ~OutputUnit();
  /// Adds a file (created at once under a temporary name); the reference stays valid until the
  /// unit is destroyed. @throws Error when it cannot be created; InvalidArgument when `path`
  /// lies in another directory than the main file or is already in the unit.
  AtomicFile& add(const std::string& path);
  /// Drops a file added before: its temporary file is removed now and its target is removed at
  /// commit() (remove_on_commit). @throws InvalidArgument when `file` is not in the unit.
  void drop(const AtomicFile& file);
  /// Removes `path` at commit() (missing is fine). @throws InvalidArgument as add().
  void remove_on_commit(const std::string& path);
  /// Syncs every file and commits the unit. @throws InvalidArgument on a second call; Error on
  /// I/O failure (see commit_temp_files).
  void commit();
  /// The main path.
  const std::string& main() const noexcept { return main_; }

 private:
  std::string main_;
  std::vector<std::unique_ptr<AtomicFile>> files_;
  std::vector<std::string> removals_;
  bool committed_ = false;
  void check_path(const std::string& path) const;
};

/// A file that a run reads (the run file, its dataset, its covariates file).
struct InputFile {
  std::string what;  ///< how messages name it: "the run file", "subjects.dataset", ...
  std::string path;  ///< the path it was read from
};

/// Checks, before anything runs, that a result unit whose main file is `main` and whose other
/// files are `companions` (in the same directory, e.g. csv_companions(main)) can be committed:
/// none of them is a directory or another non-regular file, every name (and the temporary and
/// journal names the commit uses, temp_files.hpp) fits the file system's limit on a name
/// (pathconf _PC_NAME_MAX), and a temporary file can be created next to `main` (it is removed
/// at once; creating it completes an interrupted commit to `main`, see OutputUnit).
/// @throws InvalidArgument naming the file and the reason; Error when the temporary file cannot
///         be created (missing directory, no permission)
void check_output_unit(const std::string& main, const std::vector<std::string>& companions);

/// Checks that no file of a result unit (`main`, `companions`) is one of `inputs`: compared by
/// file identity (device and inode), so that symlinks, hard links, `./`, `..` and paths relative
/// to other directories name the same file. A file that does not exist is no input.
/// @throws InvalidArgument naming the output file and the input it would replace or remove
void check_output_not_input(const std::string& main, const std::vector<std::string>& companions,
                            const std::vector<InputFile>& inputs);

/// The columns of a dataset run's result before the covariates (write_dataset_csv):
/// `id,time,amount_<c>...,conc_<c>...,dv,pred`.
std::vector<std::string> dataset_result_columns(const ModelInfo& model);

/// Checks that no covariate column of `data` (carried to the result by write_dataset_csv) would
/// be taken for a result column: its name, compared ignoring case, is not one of
/// dataset_result_columns(model) and does not start with `amount_` or `conc_`.
/// @throws InvalidArgument "dataset column NAME (column K of FILE) ..."
void check_dataset_columns(const Dataset& data, const ModelInfo& model);

/// The columns a design run's result may hold before the covariates (make_design_sink):
/// `id,time,amount_<c>...,conc_<c>...,replicate,ipred,dv,blq`.
std::vector<std::string> design_result_columns(const ModelInfo& model);

/// check_dataset_columns for a design run's result (design_result_columns).
/// @throws InvalidArgument "dataset column NAME (column K of FILE) ..."
void check_design_columns(const Dataset& data, const ModelInfo& model);

/// The columns of a VPC table (write_vpc_csv): `[stratum,]bin,lower,upper,time,observations`,
/// `obs_p<q>` per percentile, `sim_p<q>_lo,sim_p<q>_median,sim_p<q>_hi` per percentile, and with
/// an LLOQ `obs_blq,sim_blq_lo,sim_blq_median,sim_blq_hi`.
std::vector<std::string> vpc_columns(const VpcTable& table);

/// Writes a VPC's table as CSV (vpc_columns; one row per bin, strata in order; bin counts from 1
/// across the file), atomically. @throws Error on I/O failure (the target is then untouched).
void write_vpc_csv(const VpcTable& table, const std::string& path);

/// Writes the contract CSV: header `id,time,amount_<c>...,conc_<c>...` (compartment names of
/// `model`), one row per subject and output time, numbers in shortest round-trip form.
/// `stale`: files removed in the same commit (an OutputUnit), e.g. csv_companions(path) so that
/// no summary of an earlier run stays next to the new file. Returns the number of subjects whose
/// status is not Ok or whose rows hold a value that is not finite (a concentration overflows
/// where a volume is subnormal; the status, about amounts, stays Ok).
/// @throws Error on I/O failure; the target is then untouched.
std::int64_t write_csv(const SimulationResult& result, const ModelInfo& model,
                       const std::string& path, const std::vector<std::string>& stale = {});

/// The header line of a dataset run's CSV result (write_dataset_csv), its newline included.
/// @throws InvalidArgument as check_dataset_columns
std::string dataset_csv_header(const Dataset& data, const ModelInfo& model);

/// The rows write_dataset_csv writes for `result` (its subject indices count into `data`),
/// appended to `bytes`: a dataset run's rows formatted apart, by part of its subjects (the
/// dataset runs of config::run split over processes). Returns what write_dataset_csv returns for
/// these subjects.
std::int64_t format_dataset_rows(const DatasetResult& result, const Dataset& data,
                                 std::vector<char>& bytes);

/// Writes the rows of a dataset run: `id,time,amount_<c>...,conc_<c>...,dv,pred,<covariates>`,
/// one row per observation record in dataset order; id is the dataset's ID, pred the
/// concentration of the observed compartment, a missing DV an empty field; covariates as
/// written in the dataset (quoted when they hold a comma or a quote).
/// `stale` as for write_csv. Returns the number of subjects whose status is not Ok or whose rows
/// hold a value that is not finite (a concentration overflows where a volume is subnormal).
/// @throws InvalidArgument when a covariate column has the name of a result column
/// (check_dataset_columns), before any file is created; Error on I/O failure; the target is then
/// untouched.
std::int64_t write_dataset_csv(const DatasetResult& result, const Dataset& data,
                               const ModelInfo& model, const std::string& path,
                               const std::vector<std::string>& stale = {});

}  // namespace pkscan::output
