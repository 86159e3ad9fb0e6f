// The table of a visual predictive check (write_vpc_csv in output.hpp).
#include <charconv>
#include <pkscan/output/output.hpp>
#include <string>

#include "csv_format.hpp"

namespace pkscan::output {

using detail::csv_field;

namespace {

std::string number(double v) {
  char buf[detail::kMaxNumberChars];
  return std::string(buf, detail::put(buf, buf + sizeof buf, v));
}

}  // namespace

std::vector<std::string> vpc_columns(const VpcTable& t) {
  std::vector<std::string> c;
  if (!t.stratify.empty()) c.emplace_back("stratum");
  for (const char* n : {"bin", "lower", "upper", "time", "observations"}) c.emplace_back(n);
  for (double p : t.percentiles) c.push_back("obs_p" + number(p));
  for (double p : t.percentiles)
    for (const char* end : {"_lo", "_median", "_hi"}) c.push_back("sim_p" + number(p) + end);
  if (t.blq)
    for (const char* n : {"obs_blq", "sim_blq_lo", "sim_blq_median", "sim_blq_hi"})
      c.emplace_back(n);
  return c;
}

void write_vpc_csv(const VpcTable& t, const std::string& path) {
  OutputUnit unit(path);
  AtomicFile& out = unit.add(path);
  std::string line;
  for (const std::string& c : vpc_columns(t)) line += (line.empty() ? "" : ",") + c;
  line += '\n';
  out.write(line.data(), line.size());
  for (std::size_t b = 0; b < t.bins.size(); ++b) {
    const VpcBin& bin = t.bins[b];
    line.clear();
    if (!t.stratify.empty()) line += csv_field(bin.stratum) + ",";
    line += std::to_string(b + 1);
    for (double v : {bin.lower, bin.upper, bin.time}) line += "," + number(v);
    line += "," + std::to_string(bin.observations);
    for (double v : bin.observed) line += "," + number(v);
    for (double v : bin.simulated) line += "," + number(v);
    if (t.blq) {
      line += "," + number(bin.observed_blq);
      for (double v : bin.simulated_blq) line += "," + number(v);
    }
    line += '\n';
    out.write(line.data(), line.size());
  }
  unit.commit();
}

}  // namespace pkscan::output
