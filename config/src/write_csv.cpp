#include <charconv>
#include <pkscan/config/output.hpp>
#include <pkscan/models/model_kind.hpp>
#include <string>

namespace pkscan::config {

namespace {
// Shortest representation that reads back to the same value (round-trip), for the value's own
// type: float32 results round-trip as float, float64 as double.
template <class T>
char* put(char* p, char* end, T v) {
  return std::to_chars(p, end, v).ptr;
}

template <class Real>
void write_rows(const SimulationResult& r, const Array<Real>& amounts, AtomicFile& out) {
  const int n = r.compartments();
  const std::int64_t times = r.times();
  char line[1024];
  char* const end = line + sizeof line;
  std::vector<Real> inv(static_cast<std::size_t>(n));
  for (std::int64_t s = 0; s < r.subjects(); ++s) {
    // Concentrations are amounts / volume, divided here at write time (deferred division).
    for (int c = 0; c < n; ++c)
      inv[static_cast<std::size_t>(c)] = static_cast<Real>(r.volume(s, c));
    for (std::int64_t t = 0; t < times; ++t) {
      const Real* a = amounts.data() + (s * times + t) * n;
      char* p = put(line, end, s + 1);
      *p++ = ',';
      p = put(p, end, r.output_times()[static_cast<std::size_t>(t)]);
      for (int c = 0; c < n; ++c) {
        *p++ = ',';
        p = put(p, end, a[c]);
      }
      for (int c = 0; c < n; ++c) {
        *p++ = ',';
        p = put(p, end, static_cast<Real>(a[c] / inv[static_cast<std::size_t>(c)]));
      }
      *p++ = '\n';
      out.write(line, static_cast<std::size_t>(p - line));
    }
  }
}
}  // namespace

void write_csv(const SimulationResult& result, const ModelInfo& model, const std::string& path) {
  AtomicFile out(path);
  std::string header = "id,time";
  for (const std::string& c : model.compartments) header += ",amount_" + c;
  for (const std::string& c : model.compartments) header += ",conc_" + c;
  header += '\n';
  out.write(header.data(), header.size());
  if (result.precision() == Precision::Float64)
    write_rows(result, result.amounts_f64(), out);
  else
    write_rows(result, result.amounts_f32(), out);
  out.commit();
}

}  // namespace pkscan::config
