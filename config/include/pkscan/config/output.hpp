#pragma once
/// @file output.hpp
/// Writing results: CSV in the contract's layout, written atomically.

#include <pkscan/dataset.hpp>
#include <pkscan/events.hpp>
#include <pkscan/result.hpp>
#include <pkscan/types.hpp>
#include <string>

namespace pkscan::config {

/// A file written under a temporary name in the target's directory and renamed over the target
/// by commit(). Destroying it uncommitted removes the temporary file, so a failed run never
/// leaves a partial file. Not copyable.
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
  std::string path_;
  std::string temp_;
  int fd_ = -1;
  std::string buffer_;
  void flush();
  void write_all(const char* data, std::size_t size);
};

/// Writes the contract CSV: header `id,time,amount_<c>...,conc_<c>...` (compartment names of
/// `model`), one row per subject and output time, numbers in shortest round-trip form.
/// @throws Error on I/O failure; the target is then untouched.
void write_csv(const SimulationResult& result, const ModelInfo& model, const std::string& path);

/// Writes the rows of a dataset run: `id,time,amount_<c>...,conc_<c>...,dv,pred,<covariates>`,
/// one row per observation record in dataset order; id is the dataset's ID, pred the
/// concentration of the observed compartment, a missing DV an empty field; covariates as
/// written in the dataset (quoted when they hold a comma or a quote).
/// @throws Error on I/O failure; the target is then untouched.
void write_dataset_csv(const DatasetResult& result, const Dataset& data, const ModelInfo& model,
                       const std::string& path);

}  // namespace pkscan::config
