#pragma once
/// @file summary.hpp
/// Streaming summaries of population runs: per output time, the mean and percentiles of each
/// compartment's concentration across subjects; per subject, exposure metrics.

#include <cstdint>
#include <vector>

namespace pkscan {

/// Per output time and compartment: the mean and percentiles of the concentration across all
/// subjects of a run.
struct TimeSummaryTable {
  std::vector<double> times;        ///< output times
  std::vector<double> percentiles;  ///< e.g. {5, 50, 95}
  int compartments = 0;             ///< number of compartments
  std::vector<double> mean;         ///< times x compartments, row-major
  std::vector<double> quantiles;    ///< times x compartments x percentiles, row-major
  std::int64_t count = 0;           ///< subjects summarised
};

}  // namespace pkscan
