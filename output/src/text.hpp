#pragma once
// Text helpers shared by the writers and the readers of result files (sink_csv.cpp, read_csv.cpp,
// read_h5.cpp).

#include <string>

#include "csv_format.hpp"

namespace pkscan::output::detail {

// put() as a string: "5", "50", "2.5" (a percentile in a column name, a number in a label).
inline std::string number_text(double v) {
  char buf[kMaxNumberChars];
  return std::string(buf, put(buf, buf + sizeof buf, v));
}

inline bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

inline bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace pkscan::output::detail
