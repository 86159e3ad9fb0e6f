// `pkscan plot`: the gnuplot script (pure: the curves and options in, script text out). The data
// go inline as datablocks; the only user text in it, the title and the subject labels, is
// quoted as gnuplot strings and drawn with enhanced text off.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <pkscan/error.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "plot_data.hpp"

namespace pkscan::cli::plot {

namespace {

namespace fs = std::filesystem;

// A gnuplot single-quoted string: no escapes are processed inside, '' stands for '; control
// characters become spaces.
std::string gp_quote(const std::string& s) {
  std::string q = "'";
  for (char ch : s) {
    if (ch == '\'')
      q += "''";
    else if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f)
      q += ' ';
    else
      q += ch;
  }
  return q + "'";
}

bool drawable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

}  // namespace

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string number_text(double v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

Script make_script(const output::Curves& d, const PlotOptions& o) {
  std::ostringstream s;
  const std::string size = std::to_string(o.width) + "," + std::to_string(o.height);
  // pngcairo when this gnuplot has it (antialiased), else the libgd png terminal.
  s << "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
    << "  set terminal pngcairo noenhanced size " << size << " font 'Sans,10'\n"
    << "} else {\n"
    << "  set terminal png noenhanced size " << size << "\n"
    << "}\n"
    << "set output 'plot.png'\n";
  std::string title = o.title.empty() ? fs::path(o.result).filename().string() : o.title;
  const std::int64_t drawn_subjects = static_cast<std::int64_t>(d.subjects.size());
  Script out;
  if (d.summary) {
    out.what = d.center_label + (d.band_label.empty() ? "" : " and " + d.band_label);
    if (d.count > 0)
      title += " (" + std::to_string(d.count) + (d.count == 1 ? " subject)" : " subjects)");
  } else if (d.total > drawn_subjects) {
    title += " (first " + std::to_string(drawn_subjects) + " of " + std::to_string(d.total) +
             " subjects)";
    out.what =
        "first " + std::to_string(drawn_subjects) + " of " + std::to_string(d.total) + " subjects";
  } else {
    out.what = std::to_string(d.total) + (d.total == 1 ? " subject" : " subjects");
  }
  out.what += ", conc_" + d.compartment + (o.log ? ", log scale" : "");
  s << "set title " << gp_quote(title) << "\n"
    << "set xlabel 'time'\n"
    << "set ylabel " << gp_quote("concentration (" + d.compartment + ")") << "\n"
    << "set grid\n"
    << "set key top right\n"
    << "set style data lines\n";
  if (o.log) s << "set logscale y\n";

  std::vector<std::string> plots;
  std::size_t points = 0;
  if (d.summary) {
    if (!d.band_label.empty()) {
      s << "$band << EOD\n";
      for (std::size_t i = 0; i < d.t.size(); ++i)
        if (std::isfinite(d.t[i]) && drawable(d.low[i], o.log) && drawable(d.high[i], o.log)) {
          s << number_text(d.t[i]) << ' ' << number_text(d.low[i]) << ' ' << number_text(d.high[i])
            << '\n';
          ++points;
        }
      s << "EOD\n";
      if (points > 0)
        plots.push_back(
            "$band using 1:2:3 with filledcurves fillcolor rgb '#4477aa' "
            "fillstyle transparent solid 0.25 noborder title " +
            gp_quote(d.band_label));
    }
    std::size_t center_points = 0;
    s << "$center << EOD\n";
    for (std::size_t i = 0; i < d.t.size(); ++i)
      if (std::isfinite(d.t[i]) && drawable(d.center[i], o.log)) {
        s << number_text(d.t[i]) << ' ' << number_text(d.center[i]) << '\n';
        ++center_points;
      }
    s << "EOD\n";
    if (center_points > 0)
      plots.push_back("$center using 1:2 with lines linewidth 2 linecolor rgb '#1f3f6e' title " +
                      gp_quote(d.center_label));
    points += center_points;
  } else {
    s << "$subjects << EOD\n";
    int block = 0;
    for (const output::Series& series : d.subjects) {
      std::size_t n = 0;
      for (std::size_t i = 0; i < series.t.size(); ++i)
        if (std::isfinite(series.t[i]) && drawable(series.y[i], o.log)) {
          s << number_text(series.t[i]) << ' ' << number_text(series.y[i]) << '\n';
          ++n;
        }
      if (n == 0) continue;  // nothing to draw for this subject
      s << "\n\n";           // two blank lines end a gnuplot data block (`index`)
      plots.push_back("$subjects index " + std::to_string(block++) +
                      " using 1:2 with lines linewidth 1.5 title " + gp_quote(series.label));
      points += n;
    }
    s << "EOD\n";
    if (plots.size() > 10) s << "unset key\n";
  }
  if (points == 0)
    throw InvalidArgument(
        o.log
            ? "there are no positive concentrations of " + d.compartment + " to draw on a log axis"
            : "there are no finite concentrations of " + d.compartment + " to draw");
  s << "plot ";
  for (std::size_t i = 0; i < plots.size(); ++i) s << (i ? ", \\\n     " : "") << plots[i];
  s << "\n";
  out.text = s.str();
  return out;
}

}  // namespace pkscan::cli::plot
