// The CSV result sink, and make_sink's choice by extension.
//
// Files: trajectories in `path` (the contract's columns, exactly as write_csv writes them, then
// the extra columns), the time summary in `<stem>.summary.csv`, the metrics in
// `<stem>.metrics.csv`. The three are one OutputUnit: each file is an AtomicFile, created when
// the sink is made (so a bad directory fails before anything is simulated), and commit() moves
// them into place together and removes the ones this run does not write (no trajectories, no
// summary, no metrics), so no file of an earlier run stays next to the new ones.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/output/sink.hpp>
#include <pkscan/threads.hpp>
#include <string>
#include <vector>

#include "csv_format.hpp"
#include "formatted_parts.hpp"
#include "sink_common.hpp"
#include "text.hpp"

namespace pkscan::output {

namespace {

using detail::ends_with;
using detail::put;

// `path` without its ".csv" (the whole path when it has another ending).
std::string csv_stem(const std::string& path) {
  return ends_with(path, ".csv") ? path.substr(0, path.size() - 4) : path;
}

// The per-row tables of a CSV result (trajectories, metrics, parameters) formatted from chunks:
// the file sink's, and a formatter's on the rank that simulated the chunk, byte for byte the
// same.
class CsvRows {
 public:
  explicit CsvRows(const RunLayout& layout)
      : layout_(layout), compartments_(static_cast<int>(layout.model->compartments.size())) {
    const std::size_t extras = layout_.extra_columns.size();
    const std::size_t numbers = std::max(
        5 + 2 * static_cast<std::size_t>(compartments_) + extras + layout_.metric_names.size(),
        1 + extras + layout_.parameter_table.size() + layout_.eta_columns.size());
    for (const std::string& a : layout_.arm_names) arm_chars_ = std::max(arm_chars_, a.size());
    line_.resize(numbers * (detail::kMaxNumberChars + 1) + arm_chars_ + 2);
    buffers_.resize(static_cast<std::size_t>(resolve_threads(layout_.threads)));
  }

  const RunLayout& layout() const noexcept { return layout_; }
  std::size_t arm_chars() const noexcept { return arm_chars_; }
  bool has_metrics() const noexcept { return !layout_.metric_names.empty(); }
  bool has_parameters() const noexcept { return !layout_.parameter_table.empty(); }

  // The chunk's trajectory rows.
  template <class Out>
  void trajectories(const Chunk& chunk, Out& out) {
    if (layout_.precision == Precision::Float64)
      write_trajectories(chunk, chunk.result->amounts_f64(), out);
    else
      write_trajectories(chunk, chunk.result->amounts_f32(), out);
  }
  // The chunk's rows of the metrics table.
  template <class Out>
  void metrics(const Chunk& chunk, Out& out) {
    const std::size_t metrics = layout_.metric_names.size();
    write_table(chunk, out, metrics,
                [&](std::size_t s, std::size_t j) { return chunk.metrics[s * metrics + j]; });
  }
  // The chunk's rows of the parameter table.
  template <class Out>
  void parameters(const Chunk& chunk, Out& out) {
    const std::size_t np = layout_.model->parameters.size();
    const std::vector<int>& cols = layout_.parameter_table;
    const std::size_t ne = layout_.eta_columns.size();
    write_table(chunk, out, cols.size() + ne, [&](std::size_t s, std::size_t j) {
      return j < cols.size() ? chunk.parameters[s * np + static_cast<std::size_t>(cols[j])]
                             : chunk.etas[s * ne + (j - cols.size())];
    });
  }

  // Value v of extra (or group) column `column`: the arm's name in the `arm` column (always the
  // first with arms), else the number.
  char* put_extra(char* p, char* end, std::size_t column, double v) const {
    if (column != 0 || layout_.arm_names.empty()) return put(p, end, v);
    const std::string& name = layout_.arm_names[static_cast<std::size_t>(v) - 1];
    std::copy(name.begin(), name.end(), p);
    return p + name.size();
  }

 private:
  // One row per subject and output time, as write_csv writes them (same number formatting, same
  // deferred division by the volume in the result's precision), then the extra columns.
  template <class Real, class Out>
  void write_trajectories(const Chunk& chunk, const Array<Real>& amounts, Out& out) {
    const SimulationResult& r = *chunk.result;
    const int n = compartments_;
    const std::int64_t times = r.times();
    const std::size_t extras = layout_.extra_columns.size();
    char* const line = line_.data();
    char* const end = line + line_.size();
    std::vector<Real> volume(static_cast<std::size_t>(n));
    for (std::int64_t s = 0; s < r.subjects(); ++s) {
      for (int c = 0; c < n; ++c)
        volume[static_cast<std::size_t>(c)] = static_cast<Real>(r.volume(s, c));
      const std::int64_t id = chunk.ids != nullptr ? chunk.ids[s] : chunk.first + s + 1;
      const double* extra = chunk.extra + static_cast<std::size_t>(s) * extras;
      for (std::int64_t t = 0; t < times; ++t) {
        const Real* a = amounts.data() + (s * times + t) * n;
        char* p = put(line, end, id);
        *p++ = ',';
        p = put(p, end, r.output_times()[static_cast<std::size_t>(t)]);
        for (int c = 0; c < n; ++c) {
          *p++ = ',';
          p = put(p, end, a[c]);
        }
        for (int c = 0; c < n; ++c) {
          *p++ = ',';
          p = put(p, end, static_cast<Real>(a[c] / volume[static_cast<std::size_t>(c)]));
        }
        for (std::size_t e = 0; e < extras; ++e) {
          *p++ = ',';
          p = put_extra(p, end, e, extra[e]);
        }
        if (chunk.ipred != nullptr) {
          const std::size_t k = static_cast<std::size_t>(s * times + t);
          *p++ = ',';
          p = put(p, end, chunk.ipred[k]);
          *p++ = ',';
          p = put(p, end, chunk.dv[k]);
          if (chunk.blq != nullptr) {
            *p++ = ',';
            *p++ = chunk.blq[k] != 0 ? '1' : '0';
          }
        }
        *p++ = '\n';
        out.write(line, static_cast<std::size_t>(p - line));
      }
    }
  }

  // The chunk's lines of a per-row table (id, extra columns, then `columns` values value(s, j)),
  // formatted in parallel (contiguous ranges of subjects, one buffer per range, sized
  // beforehand so that nothing in the parallel region can throw) and written in subject order.
  template <class Out, class Value>
  void write_table(const Chunk& chunk, Out& out, std::size_t columns, Value value) {
    const std::size_t extras = layout_.extra_columns.size();
    const std::int64_t n = chunk.result->subjects();
    const std::size_t room = line_.size();  // enough for any one line
    const int parts = n > 1024 ? static_cast<int>(buffers_.size()) : 1;
    const std::int64_t per = (n + parts - 1) / parts;
    for (int k = 0; k < parts; ++k) {
      const std::int64_t rows = std::max<std::int64_t>(0, std::min(n, (k + 1) * per) - k * per);
      buffers_[static_cast<std::size_t>(k)].resize(static_cast<std::size_t>(rows) * room);
    }
    std::vector<std::size_t> used(static_cast<std::size_t>(parts), 0);
#pragma omp parallel for schedule(static, 1) num_threads(parts) if (parts > 1)
    for (int k = 0; k < parts; ++k) {
      char* const begin = buffers_[static_cast<std::size_t>(k)].data();
      char* const end = begin + buffers_[static_cast<std::size_t>(k)].size();
      char* p = begin;
      for (std::int64_t s = k * per; s < std::min(n, (k + 1) * per); ++s) {
        const std::size_t us = static_cast<std::size_t>(s);
        p = put(p, end, chunk.ids != nullptr ? chunk.ids[s] : chunk.first + s + 1);
        for (std::size_t e = 0; e < extras; ++e) {
          *p++ = ',';
          p = put_extra(p, end, e, chunk.extra[us * extras + e]);
        }
        for (std::size_t j = 0; j < columns; ++j) {
          *p++ = ',';
          p = put(p, end, value(us, j));
        }
        *p++ = '\n';
      }
      used[static_cast<std::size_t>(k)] = static_cast<std::size_t>(p - begin);
    }
    for (int k = 0; k < parts; ++k)
      out.write(buffers_[static_cast<std::size_t>(k)].data(), used[static_cast<std::size_t>(k)]);
  }

  RunLayout layout_;
  int compartments_;
  std::size_t arm_chars_ = 0;               // the longest arm name
  std::vector<char> line_;                  // one output line
  std::vector<std::vector<char>> buffers_;  // write_table: one per thread
};

class CsvSink final : public ResultSink {
 public:
  CsvSink(const std::string& path, const RunLayout& layout)
      : layout_(layout), rows_(layout), unit_(path) {
    const std::string stem = csv_stem(path);
    if (layout_.trajectories) {
      trajectories_ = &unit_.add(path);
      std::string header = "id,time";
      for (const std::string& c : layout_.model->compartments) header += ",amount_" + c;
      for (const std::string& c : layout_.model->compartments) header += ",conc_" + c;
      for (const std::string& e : layout_.extra_columns) header += "," + e;
      if (layout_.observations) header += ",ipred,dv";
      if (layout_.blq) header += ",blq";
      header += '\n';
      trajectories_->write(header.data(), header.size());
    }
    if (!layout_.trajectories) unit_.remove_on_commit(path);
    summary_ = &unit_.add(stem + ".summary.csv");
    if (layout_.metric_names.empty()) {
      unit_.remove_on_commit(stem + ".metrics.csv");
    } else {
      metrics_ = &unit_.add(stem + ".metrics.csv");
      std::string header = "id";
      for (const std::string& e : layout_.extra_columns) header += "," + e;
      for (const std::string& m : layout_.metric_names) header += "," + m;
      header += '\n';
      metrics_->write(header.data(), header.size());
    }
    if (layout_.replicate_summary_groups == 0)
      unit_.remove_on_commit(stem + ".replicates.csv");
    else
      replicates_ = &unit_.add(stem + ".replicates.csv");
    if (layout_.parameter_table.empty()) {
      unit_.remove_on_commit(stem + ".parameters.csv");
    } else {
      parameters_ = &unit_.add(stem + ".parameters.csv");
      std::vector<std::string> names;
      for (int c : layout_.parameter_table)
        names.push_back(layout_.model->parameters[static_cast<std::size_t>(c)].name);
      // A swept parameter's column holds the subject's value: its sweep point's value (an extra
      // column of the same name) is `sweep_<name>` here.
      std::string header = "id";
      for (const std::string& e : layout_.extra_columns)
        header += (std::find(names.begin(), names.end(), e) != names.end() ? ",sweep_" : ",") + e;
      for (const std::string& name : names) header += "," + name;
      for (const std::string& e : layout_.eta_columns) header += "," + e;
      header += '\n';
      parameters_->write(header.data(), header.size());
    }
  }

  void write(const Chunk& chunk) override {
    protocol_.begin_write(layout_, chunk);
    if (trajectories_) rows_.trajectories(chunk, *trajectories_);
    if (metrics_) rows_.metrics(chunk, *metrics_);
    if (parameters_) rows_.parameters(chunk, *parameters_);
    protocol_.end_write(chunk.result->subjects());
  }

  // Rows formatted by format_chunk() (of a formatter of the same layout): each table's bytes
  // appended to its file, once all are found whole.
  void write_formatted(const Chunk& chunk, const std::vector<char>& bytes) override {
    protocol_.begin_formatted(layout_, chunk);
    AtomicFile* files[3] = {};
    int n = 0;
    for (AtomicFile* f : {trajectories_, metrics_, parameters_})
      if (f != nullptr) files[n++] = f;
    const char* begin[3] = {};
    std::size_t size[3] = {};
    if (!detail::split_parts(bytes, n, begin, size))
      throw InvalidArgument("CSV sink: write_formatted() was given " +
                            std::to_string(bytes.size()) +
                            " bytes that a formatter of this layout did not make");
    for (int k = 0; k < n; ++k) files[k]->write(begin[k], size[k]);
    protocol_.end_write(chunk.result->subjects());
  }

  // One table per group, in group order: the header with the first (the grouping columns, then
  // time), then each group's rows.
  void write_summary(const TimeSummaryTable& t) override {
    protocol_.begin_summary(layout_, t);
    const std::vector<std::string>& names = layout_.model->compartments;
    if (protocol_.summaries() == 0) {
      std::string header;
      for (const std::string& g : layout_.summary_columns) header += g + ",";
      header += "time";
      for (const std::string& c : names) header += ",mean_conc_" + c;
      for (double q : t.percentiles)
        for (const std::string& c : names) header += ",p" + detail::number_text(q) + "_conc_" + c;
      if (layout_.summary_estimates) header += ",exact";
      header += '\n';
      summary_->write(header.data(), header.size());
    }
    const std::size_t n = names.size();
    const std::size_t nq = t.percentiles.size();
    const std::size_t values = n + n * nq;
    // Per time: the means, then each percentile's compartments (then whether they are exact).
    write_time_rows(*summary_, t.group, t.times, values + (layout_.summary_estimates ? 1 : 0),
                    [&](std::size_t i, std::size_t j) {
                      if (j == values) return t.exact ? 1.0 : 0.0;
                      return j < n ? t.mean[i * n + j]
                                   : t.quantiles[(i * n + (j - n) % n) * nq + (j - n) / n];
                    });
    protocol_.end_summary();
  }

  // One table per group without the replicate: the header with the first, then its rows.
  void write_replicate_summary(const ReplicateSummaryTable& t) override {
    protocol_.begin_replicate_summary(layout_, t);
    const std::vector<std::string>& names = layout_.model->compartments;
    if (protocol_.replicate_summaries() == 0) {
      std::string header;
      for (const std::string& g : layout_.replicate_summary_columns) header += g + ",";
      header += "time";
      for (const std::string& st : t.statistics)
        for (double q : t.percentiles)
          for (const std::string& c : names)
            header += "," + st + "_conc_" + c + "_q" + detail::number_text(q);
      header += '\n';
      replicates_->write(header.data(), header.size());
    }
    const std::size_t n = names.size(), ns = t.statistics.size(), nq = t.percentiles.size();
    // Per time: statistic, then percentile across replicates, then compartment.
    write_time_rows(*replicates_, t.group, t.times, n * ns * nq, [&](std::size_t i, std::size_t j) {
      const std::size_t c = j % n, q = (j / n) % nq, st = j / (n * nq);
      return t.values[((i * n + c) * ns + st) * nq + q];
    });
    protocol_.end_replicate_summary();
  }

  void commit() override {
    protocol_.begin_commit(layout_);
    if (!protocol_.summary_written()) {
      unit_.drop(*summary_);  // removes the unused temporary file and an earlier run's summary
      summary_ = nullptr;
    }
    unit_.commit();
    protocol_.end_commit();
  }

 private:
  // The rows of one group's per-time table: the group's values, the time, then `columns`
  // values value(i, j) of time i.
  template <class Value>
  void write_time_rows(AtomicFile& file, const std::vector<double>& group,
                       const std::vector<double>& times, std::size_t columns, Value value) const {
    std::vector<char> line((group.size() + 1 + columns) * (detail::kMaxNumberChars + 1) +
                           rows_.arm_chars() + 2);
    char* const end = line.data() + line.size();
    for (std::size_t i = 0; i < times.size(); ++i) {
      char* p = line.data();
      for (std::size_t g = 0; g < group.size(); ++g) {
        p = rows_.put_extra(p, end, g, group[g]);
        *p++ = ',';
      }
      p = put(p, end, times[i]);
      for (std::size_t j = 0; j < columns; ++j) {
        *p++ = ',';
        p = put(p, end, value(i, j));
      }
      *p++ = '\n';
      file.write(line.data(), static_cast<std::size_t>(p - line.data()));
    }
  }

  RunLayout layout_;
  CsvRows rows_;
  OutputUnit unit_;                     // the files below, committed together
  AtomicFile* trajectories_ = nullptr;  // in unit_; null when !layout.trajectories
  AtomicFile* summary_ = nullptr;       // in unit_, created eagerly, committed only if written
  AtomicFile* metrics_ = nullptr;       // in unit_; null when there are no metrics
  AtomicFile* parameters_ = nullptr;    // in unit_; null without a parameter table
  AtomicFile* replicates_ = nullptr;    // in unit_; null without summaries across replicates
  detail::SinkProtocol protocol_{"CSV sink"};
};

// The formatter of a CSV result on a rank other than 0 (make_formatter): no files; each
// chunk's tables as write_formatted() reads them (per table the sink writes, in the order
// trajectories, metrics, parameters: its size as 8 bytes, then its bytes).
// The formatter of another result format: it formats nothing (chunks travel as values).
class NoFormatter final : public ResultSink {
 public:
  void write(const Chunk&) override {}
  void write_summary(const TimeSummaryTable&) override {}
  void commit() override {}
};

class CsvFormatter final : public ResultSink {
 public:
  explicit CsvFormatter(const RunLayout& layout) : rows_(layout) {}
  bool format(const Chunk& chunk, std::vector<char>& bytes) override {
    const RunLayout& layout = rows_.layout();
    detail::check_chunk(layout, chunk.first, chunk, "CSV formatter");
    bytes.clear();
    using detail::append_part;
    if (layout.trajectories) append_part(bytes, [&](auto& out) { rows_.trajectories(chunk, out); });
    if (rows_.has_metrics()) append_part(bytes, [&](auto& out) { rows_.metrics(chunk, out); });
    if (rows_.has_parameters())
      append_part(bytes, [&](auto& out) { rows_.parameters(chunk, out); });
    return true;
  }
  void write(const Chunk&) override { refuse("write()"); }
  void write_summary(const TimeSummaryTable&) override { refuse("write_summary()"); }
  void commit() override { refuse("commit()"); }

 private:
  [[noreturn]] static void refuse(const char* call) {
    throw InvalidArgument(std::string("CSV formatter: ") + call +
                          ": a formatter writes no file (format() only)");
  }
  CsvRows rows_;
};

}  // namespace

std::unique_ptr<ResultSink> make_formatter(const std::string& path, const RunLayout& layout) {
  detail::check_layout(layout, "result formatter");
  if (ends_with(path, ".csv")) return std::make_unique<CsvFormatter>(layout);
  return std::make_unique<NoFormatter>();
}

std::unique_ptr<ResultSink> make_csv_sink(const std::string& path, const RunLayout& layout) {
  return detail::make_checked_sink<CsvSink>(path, layout, "CSV sink");
}

std::vector<std::string> csv_companions(const std::string& path) {
  if (!ends_with(path, ".csv")) return {};
  const std::string stem = csv_stem(path);
  return {stem + ".summary.csv", stem + ".metrics.csv", stem + ".parameters.csv",
          stem + ".replicates.csv"};
}

bool is_result_path(const std::string& path) noexcept {
  // A name, then the extension (docs/run-files.md).
  for (const char* ext : {".csv", ".h5", ".hdf5"}) {
    const std::string e = ext;
    if (path.size() > e.size() && ends_with(path, e)) return true;
  }
  return false;
}

std::unique_ptr<ResultSink> make_sink(const std::string& path, const RunLayout& layout) {
  if (ends_with(path, ".csv")) return make_csv_sink(path, layout);
  if (ends_with(path, ".h5") || ends_with(path, ".hdf5")) return make_h5_sink(path, layout);
  throw ConfigError(layout.run_file, 0, 0,
                    "output path is \"" + path + "\", but must end in .csv, .h5 or .hdf5");
}

}  // namespace pkscan::output
