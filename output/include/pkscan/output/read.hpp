#pragma once
/// @file read.hpp
/// Reading pkscan's own result files back (what `pkscan plot` draws): the concentrations of one
/// compartment over time, from a trajectory CSV (write_csv, write_dataset_csv, the CSV sink), a
/// summary CSV (`<stem>.summary.csv`) or an HDF5 result (docs/output.md).

#include <cstdint>
#include <string>
#include <vector>

namespace pkscan::output {

/// One subject's concentrations over time.
struct Series {
  std::string label;  ///< "id 3"
  std::vector<double> t, y;
};

/// The concentrations of one compartment of a result: a summary, or the first subjects.
struct Curves {
  std::vector<std::string> compartments;  ///< all compartments of the result
  std::string compartment;                ///< the one read
  /// Summary: the centre line (median, else mean) and the band between the lowest and highest
  /// percentile (empty when fewer than two percentiles).
  bool summary = false;
  std::string center_label, band_label;
  std::vector<double> t, center, low, high;
  std::int64_t count = -1;  ///< subjects summarised, -1 when unknown
  /// Subjects (no summary): the first max_subjects of `total`.
  std::vector<Series> subjects;
  std::int64_t total = 0;
};

/// Reads the result `path`: an HDF5 result (.h5, .hdf5: its summary when it has one, else the
/// first `max_subjects` subjects), a summary CSV, or a trajectory CSV (its `<stem>.summary.csv`
/// is read instead when it is there and no interrupted commit left the unit's journal,
/// temp_files.hpp). `compartment`: the one to read; empty = central, else the first.
/// @throws InvalidArgument for an unreadable file, one that is not a pkscan result, or an
///         unknown compartment
Curves read_result(const std::string& path, const std::string& compartment, int max_subjects);

}  // namespace pkscan::output
