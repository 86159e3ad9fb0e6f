// `pkscan plot`: the gnuplot script (pure: the curves and options in, script text out). The data
// go inline as datablocks; the only user text in it, the title and the subject and group labels,
// is quoted as gnuplot strings and drawn with enhanced text off.
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

bool drawable(double v, bool log) { return std::isfinite(v) && (!log || v > 0); }

// The colours of the groups of a summary by group, in group order (matplotlib's tab10); they
// repeat after ten.
constexpr const char* kGroupColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// The datablock `name` of the band's drawable points (time, low, high); returns their number.
std::size_t band_block(std::ostream& s, const std::string& name, const std::vector<double>& t,
                       const output::Band& b, bool log) {
  std::size_t points = 0;
  s << name << " << EOD\n";
  for (std::size_t i = 0; i < t.size(); ++i)
    if (std::isfinite(t[i]) && drawable(b.low[i], log) && drawable(b.high[i], log)) {
      s << number_text(t[i]) << ' ' << number_text(b.low[i]) << ' ' << number_text(b.high[i])
        << '\n';
      ++points;
    }
  s << "EOD\n";
  return points;
}

// The datablock `name` of the drawable points (time, y); returns their number.
std::size_t line_block(std::ostream& s, const std::string& name, const std::vector<double>& t,
                       const std::vector<double>& y, bool log) {
  std::size_t points = 0;
  s << name << " << EOD\n";
  for (std::size_t i = 0; i < t.size(); ++i)
    if (std::isfinite(t[i]) && drawable(y[i], log)) {
      s << number_text(t[i]) << ' ' << number_text(y[i]) << '\n';
      ++points;
    }
  s << "EOD\n";
  return points;
}

}  // namespace

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

std::string png_preamble(int width, int height) {
  const std::string size = std::to_string(width) + "," + std::to_string(height);
  // pngcairo when this gnuplot has it (antialiased), else the libgd png terminal.
  return "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
         "  set terminal pngcairo noenhanced size " +
         size +
         " font 'Sans,10'\n"
         "} else {\n"
         "  set terminal png noenhanced size " +
         size +
         "\n"
         "}\n"
         "set output 'plot.png'\n";
}

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
  s << png_preamble(o.width, o.height);
  std::string key_title;  // a summary by group: what its lines and bands are
  std::string title = o.title.empty() ? fs::path(o.result).filename().string() : o.title;
  const std::int64_t drawn_subjects = static_cast<std::int64_t>(d.subjects.size());
  const bool grouped = d.summary && !d.group_columns.empty();
  const std::int64_t drawn_groups = static_cast<std::int64_t>(d.bands.size());
  Script out;
  const auto subjects = [](std::int64_t n) {
    return std::to_string(n) + (n == 1 ? " subject" : " subjects");
  };
  if (d.summary) {
    out.what = d.center_label + (d.band_label.empty() ? "" : " and " + d.band_label);
    if (grouped) {
      key_title = out.what;
      const bool capped = d.groups > drawn_groups;
      const std::string groups =
          capped ? "first " + std::to_string(drawn_groups) + " of " + std::to_string(d.groups) +
                       " groups"
                 : std::to_string(d.groups) + (d.groups == 1 ? " group" : " groups");
      out.what += (capped ? " of the " : " of ") + groups;
      title += " (" + groups + (!capped && d.count > 0 ? ", " + subjects(d.count) : "") + ")";
    } else if (d.count > 0) {
      title += " (" + subjects(d.count) + ")";
    }
  } else if (d.total > drawn_subjects) {
    title += " (first " + std::to_string(drawn_subjects) + " of " + std::to_string(d.total) +
             " subjects)";
    out.what =
        "first " + std::to_string(drawn_subjects) + " of " + std::to_string(d.total) + " subjects";
  } else {
    out.what = subjects(d.total);
  }
  out.what += ", conc_" + d.compartment + (o.log ? ", log scale" : "");
  s << "set title " << gp_quote(title) << "\n"
    << "set xlabel 'time'\n"
    << "set ylabel " << gp_quote("concentration (" + d.compartment + ")") << "\n"
    << "set grid\n"
    << "set key top right\n"
    << "set style data lines\n";
  if (!key_title.empty()) s << "set key title " << gp_quote(key_title) << "\n";
  if (o.log) s << "set logscale y\n";

  std::vector<std::string> plots;
  std::size_t points = 0;
  if (grouped) {
    // Each group its band (semi-transparent, so that overlapping bands stay readable) and its
    // centre line in its own colour; every band is drawn before the lines, so that no band
    // covers a line. The line carries the group's legend entry (the band when it has no line).
    std::vector<std::string> lines;
    for (std::size_t g = 0; g < d.bands.size(); ++g) {
      const output::Band& b = d.bands[g];
      const std::string colour = kGroupColours[g % (sizeof kGroupColours / sizeof *kGroupColours)];
      const std::string n = std::to_string(g + 1);
      const std::vector<double>& t = b.t.empty() ? d.t : b.t;  // an arm's own times
      const std::size_t band_points =
          d.band_label.empty() ? 0 : band_block(s, "$band" + n, t, b, o.log);
      const std::size_t center_points = line_block(s, "$center" + n, t, b.center, o.log);
      if (band_points > 0)
        plots.push_back("$band" + n + " using 1:2:3 with filledcurves fillcolor rgb '" + colour +
                        "' fillstyle transparent solid 0.2 noborder " +
                        (center_points > 0 ? "notitle" : "title " + gp_quote(b.label)));
      if (center_points > 0)
        lines.push_back("$center" + n + " using 1:2 with lines linewidth 2 linecolor rgb '" +
                        colour + "' title " + gp_quote(b.label));
      points += band_points + center_points;
    }
    plots.insert(plots.end(), lines.begin(), lines.end());
  } else if (d.summary) {
    const output::Band& b = d.bands.front();
    if (!d.band_label.empty()) {
      points = band_block(s, "$band", d.t, b, o.log);
      if (points > 0)
        plots.push_back(
            "$band using 1:2:3 with filledcurves fillcolor rgb '#4477aa' "
            "fillstyle transparent solid 0.25 noborder title " +
            gp_quote(d.band_label));
    }
    const std::size_t center_points = line_block(s, "$center", d.t, b.center, o.log);
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
