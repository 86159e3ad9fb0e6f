#pragma once
// Number formatting shared by the CSV writers (write_csv.cpp, sink_csv.cpp), so that every CSV
// pkscan writes spells the same value the same way.

#include <charconv>
#include <string>

namespace pkscan::output::detail {

// Writes the shortest representation of `v` that reads back to the same value (round-trip), for
// the value's own type: float32 results round-trip as float (at most 9 significant digits),
// float64 as double (at most 17), integers exactly. Returns the end of the written text.
// The caller provides room: 32 characters are enough for any double, float or 64-bit integer.
template <class T>
char* put(char* p, char* end, T v) {
  return std::to_chars(p, end, v).ptr;
}

// Room put() may need for one number.
inline constexpr int kMaxNumberChars = 32;

// A CSV field: as written, or quoted (quotes doubled) when it holds a comma, a quote or a line
// break.
inline std::string csv_field(const std::string& v) {
  if (v.find_first_of(",\"\n\r") == std::string::npos) return v;
  std::string q = "\"";
  for (char ch : v) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

}  // namespace pkscan::output::detail
