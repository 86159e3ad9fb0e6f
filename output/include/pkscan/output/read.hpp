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

/// One band of a summary: the centre line and the band of one group (of the whole summary when
/// it is not grouped), at Curves::t.
struct Band {
  /// The group's values, as "ka = 0.5" or "replicate 2, ka = 1" (numbers in their shortest
  /// form, as the files write them); empty when the summary is not grouped.
  std::string label;
  std::vector<double> values;     ///< the group's value of each of Curves::group_columns
  std::vector<double> center;     ///< median, else mean
  std::vector<double> low, high;  ///< lowest and highest percentile; empty without a band
  /// The band's own times when they are not Curves::t (the arms of a trial with their own
  /// output times); empty: Curves::t.
  std::vector<double> t;
};

/// The concentrations of one compartment of a result: a summary, or the first subjects.
struct Curves {
  std::vector<std::string> compartments;  ///< all compartments of the result
  std::string compartment;                ///< the one read
  /// Summary: per band the centre line (median, else mean) and the band between the lowest and
  /// highest percentile (none when fewer than two percentiles).
  bool summary = false;
  std::string center_label, band_label;
  std::vector<double> t;
  /// The grouping columns of a summary by group (`replicate`, swept parameters); empty when the
  /// summary is not grouped.
  std::vector<std::string> group_columns;
  /// One band when the summary is not grouped; else the first max_groups groups, in file order.
  std::vector<Band> bands;
  std::int64_t groups = 0;  ///< groups of the summary (1 when not grouped), drawn or not
  std::int64_t count = -1;  ///< subjects summarised (all groups), -1 when unknown
  /// Subjects (no summary): the first max_subjects of `total`.
  std::vector<Series> subjects;
  std::int64_t total = 0;
};

/// Reads the result `path`: an HDF5 result (.h5, .hdf5: its summary when it has one, else the
/// first `max_subjects` subjects), a summary CSV, or a trajectory CSV (its `<stem>.summary.csv`
/// is read instead when it is there and no interrupted commit left the unit's journal,
/// temp_files.hpp). `compartment`: the one to read; empty = central, else the first. Of a
/// summary by group, the first `max_groups` groups (at least one) are kept; the times and
/// grouping values of every group are checked: every group has the first group's times, except
/// that the groups of different arms (a summary CSV grouped by `arm`) may have their own.
/// @throws InvalidArgument for an unreadable file, one that is not a pkscan result (a grouped
///         summary included whose group values are not numbers, whose groups' rows are not
///         contiguous or whose groups have different times), or an unknown compartment
Curves read_result(const std::string& path, const std::string& compartment, int max_subjects,
                   int max_groups);

}  // namespace pkscan::output
