// `pkscan plot FIT.table.csv`: the goodness-of-fit plots of a population fit's table
// (`pkscan fit FILE.yaml`): DV against PRED and against IPRED with the line of identity, CWRESI
// against TIME and |IWRES| against IPRED, as a 2 x 2 gnuplot multiplot.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <pkscan/error.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "plot_data.hpp"

namespace pkscan::cli::plot {

namespace {

constexpr const char* kHeader = "id,line,time,dv,pred,ipred,res,ires,wres,cwres,cwresi,iwres";

// The fields of one CSV line (a field may be quoted, with "" for a quote).
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  return out;
}

}  // namespace

bool is_fit_table(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string first;
  return in && std::getline(in, first) && first.rfind(kHeader, 0) == 0;
}

Script fit_table_script(const PlotOptions& o) {
  std::ifstream in(o.result, std::ios::binary);
  if (!in) throw InvalidArgument("cannot read " + o.result);
  std::string line;
  std::getline(in, line);
  // Columns: time dv pred ipred cwresi iwres (the header's 3rd to 6th, 11th and 12th).
  const std::size_t cols[6] = {2, 3, 4, 5, 10, 11};
  std::ostringstream data;
  std::int64_t rows = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::vector<std::string> f = csv_fields(line);
    if (f.size() < 12)
      throw InvalidArgument(o.result + ": row " + std::to_string(rows + 2) + " has " +
                            std::to_string(f.size()) + " fields, but a fit table has at least 12");
    for (std::size_t c : cols) {
      char* end = nullptr;
      const double v = std::strtod(f[c].c_str(), &end);
      const bool number = !f[c].empty() && end != nullptr && *end == '\0';
      if (!number && f[c] != "nan" && f[c] != "-nan")
        throw InvalidArgument(o.result + ": row " + std::to_string(rows + 2) + ": \"" + f[c] +
                              "\" is not a number");
      data << (c == cols[0] ? "" : " ") << (number && std::isfinite(v) ? number_text(v) : "?");
    }
    data << "\n";
    ++rows;
  }
  if (rows == 0) throw InvalidArgument(o.result + ": the fit table has no observations");

  const std::string title =
      o.title.empty() ? std::filesystem::path(o.result).filename().string() : o.title;
  std::string s = png_preamble(o.width, o.height);
  s += "$D << EOD\n" + data.str() + "EOD\n";
  s += "set datafile missing '?'\n";
  s += "set multiplot layout 2,2 title " + gp_quote(title) + "\n";
  s += "unset key\nset grid\n";
  const std::string logs = o.log ? "set logscale xy\n" : "";
  // DV against PRED and IPRED, with the line of identity (over the data's range).
  for (const char* which : {"PRED", "IPRED"}) {
    const int col = std::string(which) == "PRED" ? 3 : 4;
    s += logs + "set xlabel '" + which + "'\nset ylabel 'DV'\n";
    s += "plot $D using " + std::to_string(col) + ":2 with points pt 7 ps 0.5 lc rgb '#1f77b4', " +
         "$D using " + std::to_string(col) + ":" + std::to_string(col) +
         " with lines lc rgb '#555555'\n";
    if (o.log) s += "unset logscale xy\n";
  }
  s += "set xlabel 'TIME'\nset ylabel 'CWRESI'\n";
  s += "plot $D using 1:5 with points pt 7 ps 0.5 lc rgb '#d62728', 0 with lines lc rgb "
       "'#555555'\n";
  s += "set xlabel 'IPRED'\nset ylabel '|IWRES|'\n";
  s += "plot $D using 4:(abs($6)) with points pt 7 ps 0.5 lc rgb '#2ca02c'\n";
  s += "unset multiplot\n";
  return {s, "goodness of fit of " + std::to_string(rows) + " observations"};
}

}  // namespace pkscan::cli::plot
