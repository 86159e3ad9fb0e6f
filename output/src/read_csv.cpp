// Reading a CSV result (contract trajectories or a summary) into Curves, and picking what to
// read (read_result, read.hpp).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <pkscan/error.hpp>
#include <pkscan/output/read.hpp>
#include <pkscan/output/temp_files.hpp>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "read_parts.hpp"
#include "text.hpp"

namespace pkscan::output {

namespace {

namespace fs = std::filesystem;
using detail::choose_compartment;
using detail::ends_with;
using detail::group_label;
using detail::number_text;
using detail::starts_with;

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

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
  // The fields of the next non-empty line, which must have `width` of them; false at the end.
  bool next_row(std::vector<std::string>& fields, std::size_t width) {
    std::string line;
    do {
      if (!next(line)) return false;
    } while (line.empty());
    fields = split_csv(line);
    if (fields.size() != width)
      throw InvalidArgument("line " + std::to_string(line_no_) + " has " +
                            std::to_string(fields.size()) + " fields, but the header has " +
                            std::to_string(width));
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

// The number of grouping columns (those before time,mean_conc_...) of a summary by group's
// header; 0 for any other header.
std::size_t group_columns_of(const std::vector<std::string>& header) {
  if (header.empty() || header[0] == "id") return 0;
  const auto time = std::find(header.begin(), header.end(), "time");
  if (time == header.end() || time + 1 == header.end() || !starts_with(time[1], "mean_conc_"))
    return 0;
  return static_cast<std::size_t>(time - header.begin());
}

// Summary CSV: [group columns,]time,mean_conc_<c>...,p<q>_conc_<c>... Grouped: each group's rows
// contiguous, every group with the same times; the first max_groups groups are kept.
Curves read_summary_csv(const std::string& path, const std::string& asked, int max_groups) {
  CsvReader in(path);
  std::string line;
  if (!in.next(line)) throw InvalidArgument("the file is empty");
  const std::vector<std::string> header = split_csv(line);
  Curves d;
  d.summary = true;
  const std::size_t time_col = group_columns_of(header);
  d.group_columns.assign(header.begin(), header.begin() + static_cast<std::ptrdiff_t>(time_col));
  for (std::size_t i = 0; i < time_col; ++i)
    if (header[i].empty())
      throw InvalidArgument("summary column " + std::to_string(i + 1) +
                            " has no name, but a group column must have one");
  std::map<std::string, std::size_t> mean_col;
  std::map<std::string, std::map<double, std::size_t>> pct_col;  // compartment -> q -> column
  for (std::size_t i = time_col + 1; i < header.size(); ++i) {
    const std::string& h = header[i];
    if (h == "exact" && i + 1 == header.size()) continue;  // 0 where percentiles are estimates
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
  if (header[time_col] != "time" || mean_col.empty())
    throw InvalidArgument("the header starts \"" + line.substr(0, 40) +
                          "\", but a summary must start with [group columns,]time,mean_conc_");
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
  std::vector<double> key(time_col), first_key;
  std::vector<std::string> arm_names;          // the arm column's names, numbered from 1
  std::map<std::vector<double>, int> started;  // group -> the line of its first row
  std::size_t times = 0;                       // rows of the current group so far
  // The groups of different arms may have their own times (each arm's output times).
  const bool arm_times = time_col > 0 && header[0] == "arm";
  std::vector<double> group_t;  // with arm_times: the current group's times
  std::map<double, std::pair<std::vector<double>, std::string>> arm_t;  // arm -> times, group
  // A group that ends must have had as many times as the first.
  const auto end_group = [&] {
    if (arm_times) {
      // The groups of one arm (by arm and swept parameters) have the same times.
      const std::string label = group_label(d.group_columns, key, arm_names);
      const auto [it, fresh] = arm_t.emplace(key[0], std::make_pair(group_t, label));
      if (!fresh && it->second.first != group_t)
        throw InvalidArgument("group " + label + " (from line " + std::to_string(started[key]) +
                              ") has other times than group " + it->second.second +
                              "; the groups of one arm must have the same times");
      if (d.groups <= max_groups && group_t != d.t) d.bands.back().t = group_t;
      return;
    }
    if (d.groups > 1 && times != d.t.size())
      throw InvalidArgument("group " + group_label(d.group_columns, key, arm_names) +
                            " (from line " + std::to_string(started[key]) + ") has " +
                            std::to_string(times) + " times, but group " +
                            group_label(d.group_columns, first_key, arm_names) + " has " +
                            std::to_string(d.t.size()) + "; every group must have the same times");
  };
  std::vector<std::string> f;
  while (in.next_row(f, header.size())) {
    std::vector<double> row_key(time_col);
    for (std::size_t j = 0; j < time_col; ++j) {
      if (header[j] == "arm") {  // an arm's name: numbered in order of first appearance
        auto a = std::find(arm_names.begin(), arm_names.end(), f[j]);
        if (a == arm_names.end()) a = arm_names.insert(arm_names.end(), f[j]);
        row_key[j] = static_cast<double>(a - arm_names.begin() + 1);
        continue;
      }
      row_key[j] = parse_number(f[j], header[j], in.line_no());
      if (!std::isfinite(row_key[j]))
        throw InvalidArgument("line " + std::to_string(in.line_no()) + ": column " + header[j] +
                              " is \"" + f[j] + "\", but a group's value must be a finite number");
    }
    if (d.groups == 0 || row_key != key) {
      if (d.groups > 0) end_group();
      const auto [it, fresh] = started.emplace(row_key, in.line_no());
      if (!fresh)
        throw InvalidArgument("line " + std::to_string(in.line_no()) + ": group " +
                              group_label(d.group_columns, row_key, arm_names) +
                              " started on line " + std::to_string(it->second) +
                              " and other groups came between, but the rows of a group must be "
                              "contiguous");
      key = row_key;
      if (d.groups == 0) first_key = key;
      ++d.groups;
      times = 0;
      group_t.clear();
      if (d.groups <= max_groups)
        d.bands.push_back(Band{group_label(d.group_columns, key, arm_names), key, {}, {}, {}, {}});
    }
    const double t = parse_number(f[time_col], "time", in.line_no());
    if (arm_times && !group_t.empty() && !(t > group_t.back()))
      throw InvalidArgument("line " + std::to_string(in.line_no()) + ": group " +
                            group_label(d.group_columns, key, arm_names) + " has time " +
                            number_text(t) + " after " + number_text(group_t.back()) +
                            "; a group's times must increase");
    group_t.push_back(t);
    if (d.groups == 1) {
      d.t.push_back(t);
    } else if (!arm_times && (times >= d.t.size() || t != d.t[times])) {
      const std::string first = "group " + group_label(d.group_columns, first_key, arm_names);
      throw InvalidArgument(
          "line " + std::to_string(in.line_no()) + ": group " +
          group_label(d.group_columns, key, arm_names) +
          (times >= d.t.size()
               ? " has more than the " + std::to_string(d.t.size()) + " times of " + first
               : " has time " + number_text(t) + " where " + first + " has " +
                     number_text(d.t[times])) +
          "; every group must have the same times");
    }
    ++times;
    if (d.groups <= max_groups) {
      Band& b = d.bands.back();
      b.center.push_back(parse_number(f[center], header[center], in.line_no()));
      if (!d.band_label.empty()) {
        b.low.push_back(parse_number(f[lo], header[lo], in.line_no()));
        b.high.push_back(parse_number(f[hi], header[hi], in.line_no()));
      }
    }
  }
  if (d.groups == 0) throw InvalidArgument("the summary has no data rows");
  end_group();
  return d;
}

// Contract or dataset CSV: id,time,amount_<c>...,conc_<c>...[,...]. A subject starts where the
// id changes or the time does not increase (replicates may repeat an id).
Curves read_trajectory_csv(const std::string& path, const std::string& asked, int max_subjects) {
  CsvReader in(path);
  std::string line;
  if (!in.next(line)) throw InvalidArgument("the file is empty");
  const std::vector<std::string> header = split_csv(line);
  Curves d;
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
  std::vector<std::string> f;
  while (in.next_row(f, header.size())) {
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

}  // namespace

namespace detail {

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

std::string group_label(const std::vector<std::string>& columns, const std::vector<double>& values,
                        const std::vector<std::string>& arm_names) {
  std::string label;
  for (std::size_t i = 0; i < columns.size() && i < values.size(); ++i) {
    const bool named =
        columns[i] == "arm" && values[i] >= 1 && values[i] <= static_cast<double>(arm_names.size());
    label += (i ? ", " : "") + columns[i] + (columns[i] == "replicate" ? " " : " = ") +
             (named ? arm_names[static_cast<std::size_t>(values[i]) - 1] : number_text(values[i]));
  }
  return label;
}

}  // namespace detail

Curves read_result(const std::string& path, const std::string& compartment, int max_subjects,
                   int max_groups) {
  max_groups = std::max(max_groups, 1);  // a summary always has something to draw
  if (ends_with(path, ".h5") || ends_with(path, ".hdf5"))
    return detail::read_h5(path, compartment, max_subjects, max_groups);
  std::string first;
  {
    CsvReader in(path);
    if (!in.next(first)) throw InvalidArgument("the file is empty");
  }
  if (starts_with(first, "time,") || group_columns_of(split_csv(first)) > 0)
    return read_summary_csv(path, compartment, max_groups);
  if (!starts_with(first, "id,time,"))
    throw InvalidArgument("the header starts \"" + first.substr(0, 40) +
                          "\", but a pkscan result starts with id,time, (trajectories) or "
                          "[group columns,]time,mean_conc_ (summary)");
  // A population run's summary next to its trajectories is read instead of the subjects. Every
  // run commits its files as one unit and removes the companions it does not write, so a
  // summary there belongs to the same run, unless a commit was cut short (SIGKILL, an I/O
  // error): its journal is still there until the next run to the same path completes it, and
  // the files may then come from two runs, so only the trajectories are read.
  const std::string stem = ends_with(path, ".csv") ? path.substr(0, path.size() - 4) : path;
  const std::string summary = stem + ".summary.csv";
  std::error_code ec;
  const bool interrupted = fs::exists(commit_journal_path(path), ec);
  if (!interrupted && fs::is_regular_file(summary, ec)) {
    try {
      return read_summary_csv(summary, compartment, max_groups);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(summary + ": " + e.what());
    }
  }
  return read_trajectory_csv(path, compartment, max_subjects);
}

}  // namespace pkscan::output
