// `pkscan plot`: reads a result (contract CSV, summary CSV or HDF5), writes a gnuplot script
// with the data inline (datablocks) into a private temporary directory next to the output, runs
// gnuplot there by fork/exec (no shell; no user text reaches gnuplot except the title and the
// subject labels, quoted as gnuplot strings with enhanced text off), and renames the PNG over
// the output. The temporary directory is removed in every case.
#include "plot.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <pkscan/config/temp_files.hpp>
#include <pkscan/error.hpp>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "signals.hpp"

namespace pkscan::cli {

namespace {

namespace fs = std::filesystem;

// ---- What is drawn ------------------------------------------------------------------------------

struct Series {
  std::string label;  // "id 3"
  std::vector<double> t, y;
};

struct PlotData {
  std::vector<std::string> compartments;  // all compartments of the result
  std::string compartment;                // the one drawn
  // Summary: the centre line (median, else mean) and the band between the lowest and highest
  // percentile (empty when fewer than two percentiles).
  bool summary = false;
  std::string center_label, band_label;
  std::vector<double> t, center, low, high;
  std::int64_t count = -1;  // subjects summarised, -1 when unknown
  // Subjects (no summary): the first max_subjects of `total`.
  std::vector<Series> subjects;
  std::int64_t total = 0;
};

// ---- Small helpers ------------------------------------------------------------------------------

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

std::string number_text(double v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

// Picks the compartment to draw: the asked one, else central, else the first.
std::string choose_compartment(const std::vector<std::string>& available,
                               const std::string& asked) {
  if (available.empty()) throw InvalidArgument("the result has no concentration columns");
  if (!asked.empty()) {
    if (std::find(available.begin(), available.end(), asked) == available.end())
      throw InvalidArgument("--compartment is \"" + asked +
                            "\", but must be one of: " + join(available));
    return asked;
  }
  if (std::find(available.begin(), available.end(), "central") != available.end()) return "central";
  return available.front();
}

// ---- CSV ----------------------------------------------------------------------------------------

// Fields of one CSV line; quoted fields ("a,b", "say ""x""") as dataset covariates are written.
std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> fields;
  std::string cur;
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char ch = line[i];
    if (quoted) {
      if (ch != '"')
        cur += ch;
      else if (i + 1 < line.size() && line[i + 1] == '"')
        cur += '"', ++i;
      else
        quoted = false;
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      fields.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += ch;
    }
  }
  fields.push_back(std::move(cur));
  return fields;
}

class CsvReader {
 public:
  explicit CsvReader(const std::string& path) : in_(path, std::ios::binary) {
    if (!in_)
      throw InvalidArgument(std::string("cannot read the result file: ") + std::strerror(errno));
  }
  // The next line without its end ('\r' dropped); false at the end of the file.
  bool next(std::string& line) {
    if (!std::getline(in_, line)) {
      if (in_.bad()) throw InvalidArgument("cannot read the result file");
      return false;
    }
    ++line_no_;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    return true;
  }
  int line_no() const noexcept { return line_no_; }

 private:
  std::ifstream in_;
  int line_no_ = 0;
};

double parse_number(const std::string& field, const std::string& column, int line) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(field.c_str(), &end);
  if (field.empty() || end != field.c_str() + field.size())
    throw InvalidArgument("line " + std::to_string(line) + ": column " + column + " is \"" + field +
                          "\", but must be a number");
  return v;
}

// Summary CSV: time, mean_conc_<c>..., p<q>_conc_<c>...
PlotData read_summary_csv(const std::string& path, const std::string& asked) {
  CsvReader in(path);
  std::string line;
  if (!in.next(line)) throw InvalidArgument("the file is empty");
  const std::vector<std::string> header = split_csv(line);
  PlotData d;
  d.summary = true;
  std::map<std::string, std::size_t> mean_col;
  std::map<std::string, std::map<double, std::size_t>> pct_col;  // compartment -> q -> column
  for (std::size_t i = 1; i < header.size(); ++i) {
    const std::string& h = header[i];
    if (starts_with(h, "mean_conc_")) {
      const std::string c = h.substr(10);
      mean_col[c] = i;
      d.compartments.push_back(c);
      continue;
    }
    const std::size_t sep = h.find("_conc_");
    if (h.size() > 1 && h[0] == 'p' && sep != std::string::npos) {
      const std::string q = h.substr(1, sep - 1);
      char* end = nullptr;
      const double v = std::strtod(q.c_str(), &end);
      if (!q.empty() && end == q.c_str() + q.size() && v >= 0 && v <= 100) {
        pct_col[h.substr(sep + 6)][v] = i;
        continue;
      }
    }
    throw InvalidArgument("summary column " + std::to_string(i + 1) + " is \"" + h +
                          "\", but must be mean_conc_<compartment> or p<q>_conc_<compartment>");
  }
  if (header[0] != "time" || mean_col.empty())
    throw InvalidArgument("the header starts \"" + line.substr(0, 40) +
                          "\", but a summary must start with time,mean_conc_");
  d.compartment = choose_compartment(d.compartments, asked);
  const std::map<double, std::size_t>& pcts = pct_col[d.compartment];
  std::size_t center = mean_col[d.compartment];
  d.center_label = "mean";
  if (pcts.count(50.0)) {
    center = pcts.at(50.0);
    d.center_label = "median";
  }
  std::size_t lo = 0, hi = 0;
  if (pcts.size() >= 2) {
    lo = pcts.begin()->second;
    hi = pcts.rbegin()->second;
    d.band_label =
        "percentiles " + number_text(pcts.begin()->first) + "-" + number_text(pcts.rbegin()->first);
  }
  while (in.next(line)) {
    if (line.empty()) continue;
    const std::vector<std::string> f = split_csv(line);
    if (f.size() != header.size())
      throw InvalidArgument("line " + std::to_string(in.line_no()) + " has " +
                            std::to_string(f.size()) + " fields, but the header has " +
                            std::to_string(header.size()));
    d.t.push_back(parse_number(f[0], "time", in.line_no()));
    d.center.push_back(parse_number(f[center], header[center], in.line_no()));
    if (!d.band_label.empty()) {
      d.low.push_back(parse_number(f[lo], header[lo], in.line_no()));
      d.high.push_back(parse_number(f[hi], header[hi], in.line_no()));
    }
  }
  if (d.t.empty()) throw InvalidArgument("the summary has no data rows");
  return d;
}

// Contract or dataset CSV: id,time,amount_<c>...,conc_<c>...[,...]. A subject starts where the
// id changes or the time does not increase (replicates may repeat an id).
PlotData read_trajectory_csv(const std::string& path, const std::string& asked, int max_subjects) {
  CsvReader in(path);
  std::string line;
  if (!in.next(line)) throw InvalidArgument("the file is empty");
  const std::vector<std::string> header = split_csv(line);
  PlotData d;
  std::map<std::string, std::size_t> conc_col;
  for (std::size_t i = 2; i < header.size(); ++i)
    if (starts_with(header[i], "conc_")) {
      d.compartments.push_back(header[i].substr(5));
      conc_col[d.compartments.back()] = i;
    }
  d.compartment = choose_compartment(d.compartments, asked);
  const std::size_t col = conc_col[d.compartment];
  std::string last_id;
  double last_time = 0;
  while (in.next(line)) {
    if (line.empty()) continue;
    const std::vector<std::string> f = split_csv(line);
    if (f.size() != header.size())
      throw InvalidArgument("line " + std::to_string(in.line_no()) + " has " +
                            std::to_string(f.size()) + " fields, but the header has " +
                            std::to_string(header.size()));
    const double t = parse_number(f[1], "time", in.line_no());
    if (d.total == 0 || f[0] != last_id || !(t > last_time)) {
      ++d.total;
      if (d.total <= max_subjects) d.subjects.push_back(Series{"id " + f[0], {}, {}});
    }
    last_id = f[0];
    last_time = t;
    if (d.total <= max_subjects) {
      d.subjects.back().t.push_back(t);
      d.subjects.back().y.push_back(parse_number(f[col], header[col], in.line_no()));
    }
  }
  if (d.total == 0) throw InvalidArgument("the result has no data rows");
  return d;
}

// ---- HDF5 ---------------------------------------------------------------------------------------

// HDF5's automatic error printing off while reading, the caller's setting restored after.
class QuietHdf5 {
 public:
  QuietHdf5() {
    if (H5Eget_auto2(H5E_DEFAULT, &func_, &data_) < 0) func_ = nullptr;
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;
  ~QuietHdf5() {
    H5Eclear2(H5E_DEFAULT);
    H5Eset_auto2(H5E_DEFAULT, func_, data_);
  }

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id(hid_t id, Closer close, const std::string& what) : id_(id), close_(close) {
    if (id_ < 0) throw InvalidArgument("not a readable pkscan HDF5 result: cannot read " + what);
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() {
    if (id_ >= 0) close_(id_);
  }
  hid_t get() const noexcept { return id_; }

 private:
  hid_t id_;
  Closer close_;
};

std::vector<hsize_t> dims_of(hid_t dset, const std::string& name) {
  Id space(H5Dget_space(dset), H5Sclose, name);
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) throw InvalidArgument("not a readable pkscan HDF5 result: cannot read " + name);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

void expect_dims(const std::vector<hsize_t>& dims, const std::vector<hsize_t>& want,
                 const std::string& name) {
  if (dims != want) {
    std::string d, w;
    for (hsize_t x : dims) d += (d.empty() ? "" : " x ") + std::to_string(x);
    for (hsize_t x : want) w += (w.empty() ? "" : " x ") + std::to_string(x);
    throw InvalidArgument("HDF5 dataset " + name + " has shape " + (d.empty() ? "()" : d) +
                          ", but must have " + w);
  }
}

// Reads a whole dataset as doubles (HDF5 converts float32).
std::vector<double> read_doubles(hid_t file, const std::string& name) {
  Id d(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, name);
  std::size_t n = 1;
  for (hsize_t x : dims_of(d.get(), name)) n *= static_cast<std::size_t>(x);
  std::vector<double> v(n);
  if (n > 0 && H5Dread(d.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    throw InvalidArgument("not a readable pkscan HDF5 result: cannot read " + name);
  return v;
}

std::vector<std::string> read_strings_attribute(hid_t loc, const char* name) {
  const std::string what = std::string("attribute ") + name;
  Id attr(H5Aopen(loc, name, H5P_DEFAULT), H5Aclose, what);
  Id type(H5Aget_type(attr.get()), H5Tclose, what);
  if (H5Tis_variable_str(type.get()) <= 0)
    throw InvalidArgument("HDF5 " + what + " is not a list of strings");
  Id space(H5Aget_space(attr.get()), H5Sclose, what);
  const hssize_t n = H5Sget_simple_extent_npoints(space.get());
  if (n < 0) throw InvalidArgument("not a readable pkscan HDF5 result: cannot read " + what);
  Id mem(H5Tcopy(H5T_C_S1), H5Tclose, what);
  H5Tset_size(mem.get(), H5T_VARIABLE);
  H5Tset_cset(mem.get(), H5Tget_cset(type.get()));
  std::vector<char*> buf(static_cast<std::size_t>(n), nullptr);
  if (n > 0 && H5Aread(attr.get(), mem.get(), buf.data()) < 0)
    throw InvalidArgument("not a readable pkscan HDF5 result: cannot read " + what);
  std::vector<std::string> out;
  out.reserve(buf.size());
  for (char* s : buf) out.emplace_back(s != nullptr ? s : "");
  if (n > 0) H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, buf.data());
  return out;
}

PlotData read_h5(const std::string& path, const std::string& asked, int max_subjects) {
  const QuietHdf5 quiet;
  if (H5Fis_hdf5(path.c_str()) <= 0) {
    if (::access(path.c_str(), R_OK) != 0)
      throw InvalidArgument(std::string("cannot read the result file: ") + std::strerror(errno));
    throw InvalidArgument("not an HDF5 file");
  }
  Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "the file");
  PlotData d;
  d.compartments = read_strings_attribute(file.get(), "compartments");
  d.compartment = choose_compartment(d.compartments, asked);
  const hsize_t c =
      static_cast<hsize_t>(std::find(d.compartments.begin(), d.compartments.end(), d.compartment) -
                           d.compartments.begin());
  const hsize_t nc = d.compartments.size();
  const std::vector<double> time = read_doubles(file.get(), "time");
  const hsize_t nt = time.size();
  if (H5Lexists(file.get(), "summary", H5P_DEFAULT) > 0) {
    d.summary = true;
    d.t = time;
    const std::vector<double> pct = read_doubles(file.get(), "summary/percentiles");
    const std::vector<double> mean = read_doubles(file.get(), "summary/mean");
    const std::vector<double> quant = read_doubles(file.get(), "summary/quantiles");
    const std::vector<double> count = read_doubles(file.get(), "summary/count");
    const hsize_t nq = pct.size();
    if (mean.size() != nt * nc || quant.size() != nt * nc * nq)
      throw InvalidArgument("HDF5 /summary does not match /time and the compartments");
    if (count.size() == 1) d.count = static_cast<std::int64_t>(count[0]);
    std::size_t center = nq, lo = nq, hi = nq;  // nq = none
    for (std::size_t q = 0; q < nq; ++q) {
      if (pct[q] == 50.0) center = q;
      if (lo == nq || pct[q] < pct[lo]) lo = q;
      if (hi == nq || pct[q] > pct[hi]) hi = q;
    }
    d.center_label = center < nq ? "median" : "mean";
    const bool band = nq >= 2 && pct[lo] < pct[hi];
    if (band) d.band_label = "percentiles " + number_text(pct[lo]) + "-" + number_text(pct[hi]);
    for (hsize_t t = 0; t < nt; ++t) {
      const std::size_t base = static_cast<std::size_t>((t * nc + c) * nq);
      d.center.push_back(center < nq ? quant[base + center]
                                     : mean[static_cast<std::size_t>(t * nc + c)]);
      if (band) {
        d.low.push_back(quant[base + lo]);
        d.high.push_back(quant[base + hi]);
      }
    }
    return d;
  }
  if (H5Lexists(file.get(), "concentration", H5P_DEFAULT) <= 0)
    throw InvalidArgument("the HDF5 result has neither /summary nor /concentration to draw");
  Id conc(H5Dopen2(file.get(), "concentration", H5P_DEFAULT), H5Dclose, "/concentration");
  const std::vector<hsize_t> dims = dims_of(conc.get(), "/concentration");
  if (dims.size() != 3) expect_dims(dims, {0, nt, nc}, "/concentration");
  expect_dims(dims, {dims[0], nt, nc}, "/concentration");
  d.total = static_cast<std::int64_t>(dims[0]);
  if (d.total == 0) throw InvalidArgument("the HDF5 result has no subjects");
  const hsize_t rows = std::min<hsize_t>(dims[0], static_cast<hsize_t>(max_subjects));
  std::vector<double> y(static_cast<std::size_t>(rows * nt));
  {
    Id fspace(H5Dget_space(conc.get()), H5Sclose, "/concentration");
    const hsize_t start[3] = {0, 0, c};
    const hsize_t count[3] = {rows, nt, 1};
    Id mspace(H5Screate_simple(3, count, nullptr), H5Sclose, "/concentration");
    if (H5Sselect_hyperslab(fspace.get(), H5S_SELECT_SET, start, nullptr, count, nullptr) < 0 ||
        H5Dread(conc.get(), H5T_NATIVE_DOUBLE, mspace.get(), fspace.get(), H5P_DEFAULT, y.data()) <
            0)
      throw InvalidArgument("not a readable pkscan HDF5 result: cannot read /concentration");
  }
  std::vector<double> ids;
  if (H5Lexists(file.get(), "id", H5P_DEFAULT) > 0) ids = read_doubles(file.get(), "id");
  for (hsize_t s = 0; s < rows; ++s) {
    Series series;
    series.label = "id " + (s < ids.size() ? number_text(ids[s]) : std::to_string(s + 1));
    series.t = time;
    series.y.assign(y.begin() + static_cast<std::ptrdiff_t>(s * nt),
                    y.begin() + static_cast<std::ptrdiff_t>((s + 1) * nt));
    d.subjects.push_back(std::move(series));
  }
  return d;
}

PlotData read_result(const PlotOptions& o) {
  if (ends_with(o.result, ".h5") || ends_with(o.result, ".hdf5"))
    return read_h5(o.result, o.compartment, o.max_subjects);
  std::string first;
  {
    CsvReader in(o.result);
    if (!in.next(first)) throw InvalidArgument("the file is empty");
  }
  if (starts_with(first, "time,")) return read_summary_csv(o.result, o.compartment);
  if (!starts_with(first, "id,time,"))
    throw InvalidArgument("the header starts \"" + first.substr(0, 40) +
                          "\", but a pkscan result starts with id,time, (trajectories) or "
                          "time,mean_conc_ (summary)");
  // A population run's summary next to its trajectories is drawn instead of the subjects. Every
  // run commits its files as one unit and removes the companions it does not write, so a
  // summary there belongs to the same run, unless a commit was cut short (SIGKILL, an I/O
  // error): its journal is still there until the next run to the same path completes it, and
  // the files may then come from two runs, so only the trajectories are drawn.
  const std::string stem =
      ends_with(o.result, ".csv") ? o.result.substr(0, o.result.size() - 4) : o.result;
  const std::string summary = stem + ".summary.csv";
  std::error_code ec;
  const bool interrupted = fs::exists(config::commit_journal_path(o.result), ec);
  if (!interrupted && fs::is_regular_file(summary, ec)) {
    try {
      return read_summary_csv(summary, o.compartment);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(summary + ": " + e.what());
    }
  }
  return read_trajectory_csv(o.result, o.compartment, o.max_subjects);
}

// ---- gnuplot ------------------------------------------------------------------------------------

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

struct Script {
  std::string text;
  std::string what;  // for the success line
};

Script make_script(const PlotData& d, const PlotOptions& o) {
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
    for (const Series& series : d.subjects) {
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

// The gnuplot program: o.gnuplot, else $PKSCAN_GNUPLOT, else `gnuplot` on PATH.
std::string find_gnuplot(const PlotOptions& o) {
  std::string name = o.gnuplot;
  std::string source;
  if (name.empty()) {
    const char* env = std::getenv("PKSCAN_GNUPLOT");
    if (env != nullptr && *env != '\0') {
      name = env;
      source = "PKSCAN_GNUPLOT";
    }
  }
  auto executable = [](const std::string& p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.empty()) name = "gnuplot";
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return name;
    throw BackendUnavailable("gnuplot not found; install gnuplot-nox (" +
                             (source.empty() ? std::string("the gnuplot program") : source) +
                             " names " + name + ", which is not an executable file)");
  }
  const char* path = std::getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  for (;;) {
    const std::size_t colon = dirs.find(':', start);
    std::string dir = dirs.substr(start, colon == std::string::npos ? colon : colon - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    if (executable(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  throw BackendUnavailable("gnuplot not found; install gnuplot-nox");
}

// A private directory next to the output (a registered temporary directory, temp_files.hpp:
// removed with its contents on destruction, on a terminating signal, or by the next plot to the
// same output after SIGKILL).
class TempDir {
 public:
  explicit TempDir(const std::string& output) {
    try {
      path_ = config::create_temp_dir(output);
    } catch (const Error& e) {
      throw InvalidArgument(std::string("--output: ") + e.what());
    }
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() { config::remove_temp_file(path_); }
  std::string file(const char* name) const { return path_ + "/" + name; }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

// The line of gnuplot's stderr that says what went wrong: the first `"plot.gp" line N: ...`
// (gnuplot may first echo the offending command), else the first non-blank line.
std::string first_error_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, first;
  while (std::getline(in, line)) {
    const std::size_t b = line.find_first_not_of(" \t\r^");
    if (b == std::string::npos) continue;
    line = line.substr(b);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (first.empty()) first = line;
    if (line.find("line ") != std::string::npos && line.find(':') != std::string::npos) return line;
  }
  return first;
}

// Runs `gnuplot -d plot.gp` in `dir` (-d: ignore the user's init files), stdin from /dev/null,
// stdout and stderr into plot.err. Returns the wait status.
int run_gnuplot(const std::string& gnuplot, const TempDir& dir) {
  // Everything the child needs is prepared before fork: after fork only async-signal-safe calls.
  const std::string& dir_path = dir.path();
  const char* argv[] = {"gnuplot", "-d", "plot.gp", nullptr};
  const char exec_failed[] = "pkscan: cannot execute the gnuplot program\n";
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(std::string("cannot start gnuplot: ") + std::strerror(errno));
  if (pid == 0) {
    restore_signal_mask_in_child();  // gnuplot starts with the signals it would have had
    if (::chdir(dir_path.c_str()) != 0) ::_exit(127);
    const int in = ::open("/dev/null", O_RDONLY);
    const int err = ::open("plot.err", O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || err < 0) ::_exit(127);
    ::dup2(in, 0);
    ::dup2(err, 1);
    ::dup2(err, 2);
    ::execv(gnuplot.c_str(), const_cast<char* const*>(argv));
    const ssize_t ignored = ::write(2, exec_failed, sizeof exec_failed - 1);
    (void)ignored;
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      throw Error(std::string("cannot wait for gnuplot: ") + std::strerror(errno));
  }
  return status;
}

}  // namespace

CLI::App* add_plot_command(CLI::App& app, PlotOptions& o) {
  CLI::App* plot = app.add_subcommand(
      "plot", "Draw the concentration-time curves of a result with gnuplot (PNG)");
  plot->add_option("result", o.result,
                   "Result: a CSV written by pkscan run (its <stem>.summary.csv is drawn when "
                   "present), a summary CSV, or an .h5 file")
      ->required();
  plot->add_option("--output,-o", o.output, "PNG file to write")->required();
  plot->add_option("--width", o.width, "Image width in pixels (default 800)")
      ->check(CLI::Range(64, 10000));
  plot->add_option("--height", o.height, "Image height in pixels (default 500)")
      ->check(CLI::Range(64, 10000));
  plot->add_flag("--log", o.log, "Logarithmic concentration axis (non-positive values skipped)");
  plot->add_option("--compartment", o.compartment,
                   "Compartment to draw (default: central, else the first)");
  plot->add_option("--max-subjects", o.max_subjects,
                   "Most subject lines drawn without a summary (default 30)")
      ->check(CLI::Range(1, 100000));
  plot->add_option("--title", o.title, "Title (default: the result file's name)");
  plot->footer(
      "Needs gnuplot (Debian: gnuplot-nox); PKSCAN_GNUPLOT may name the program.\n"
      "Exit status: 0 success; 2 unreadable or invalid result file or bad option; 3 gnuplot not\n"
      "found; 1 gnuplot failed. Errors are one line on stderr.");
  return plot;
}

void run_plot(const PlotOptions& o, std::ostream& out) {
  if (!ends_with(o.output, ".png"))
    throw InvalidArgument("--output is \"" + o.output + "\", but must end in .png");
  const PlotData data = read_result(o);
  const Script script = make_script(data, o);
  const TempDir dir(o.output);  // a bad output directory is bad input, gnuplot or not
  const std::string gnuplot = find_gnuplot(o);
  {
    std::ofstream f(dir.file("plot.gp"), std::ios::binary);
    f << script.text;
    f.close();
    if (!f) throw Error("cannot write the gnuplot script in " + dir.path());
  }
  const int status = run_gnuplot(gnuplot, dir);
  if (WIFSIGNALED(status))
    throw Error("gnuplot was killed by signal " + std::to_string(WTERMSIG(status)));
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code != 0) {
    const std::string line = first_error_line(dir.file("plot.err"));
    throw Error("gnuplot failed: " + (line.empty() ? "exit status " + std::to_string(code) : line));
  }
  const std::string png = dir.file("plot.png");
  std::error_code ec;
  if (!fs::is_regular_file(png, ec) || fs::file_size(png, ec) == 0) {
    const std::string line = first_error_line(dir.file("plot.err"));
    throw Error("gnuplot failed: it wrote no image" + (line.empty() ? "" : ": " + line));
  }
  ::chmod(png.c_str(), 0644);
  if (::rename(png.c_str(), o.output.c_str()) != 0)
    throw Error("cannot move the image into place at " + o.output + ": " + std::strerror(errno));
  out << "pkscan: wrote " << o.output << " (" << o.width << "x" << o.height << ", " << script.what
      << ")\n";
}

}  // namespace pkscan::cli
