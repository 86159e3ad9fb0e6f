// The CSV sink of design runs (make_design_sink in sink.hpp): the observation rows of every
// replicate in `path`, the parameter table in `<stem>.parameters.csv`, one OutputUnit. An HDF5
// path goes to the HDF5 sink (design_h5.cpp).
#include <cstdint>
#include <cstring>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/output/sink.hpp>
#include <string>
#include <vector>

#include "csv_format.hpp"
#include "formatted_parts.hpp"
#include "text.hpp"

namespace pkscan::output {

using detail::csv_field;

namespace {

using detail::put;

// The rows of a design's CSV result formatted from a replicate (its observation rows, then
// its parameter-table rows): the sink's, and a formatter's on the rank that simulated the
// replicate, byte for byte the same.
class DesignCsvRows {
 public:
  explicit DesignCsvRows(const DesignLayout& layout) : layout_(layout) {}
  bool has_table() const noexcept { return !layout_.parameter_table.empty(); }

  template <class Out>
  void rows(const DesignChunk& c, Out& out) {
    const DatasetResult& r = *c.result;
    const int n = r.compartments;
    char num[detail::kMaxNumberChars];
    auto put_num = [&](auto v) {
      line_ += ',';
      line_.append(num, static_cast<std::size_t>(put(num, num + sizeof num, v) - num));
    };
    for (std::int64_t i = 0; i < r.rows(); ++i) {
      const std::size_t ui = static_cast<std::size_t>(i);
      const DatasetSubject& subj = subject_of(c, r.subject[ui]);
      const DatasetRecord& rec = subj.records[static_cast<std::size_t>(r.record[ui])];
      start_line(c, r.subject[ui], subj, put_num);
      put_num(r.time[ui]);
      for (int k = 0; k < n; ++k)
        put_num(r.amounts[ui * static_cast<std::size_t>(n) + static_cast<std::size_t>(k)]);
      for (int k = 0; k < n; ++k)
        put_num(r.concentrations[ui * static_cast<std::size_t>(n) + static_cast<std::size_t>(k)]);
      if (layout_.replicates > 1) put_num(c.replicate + 1);
      put_num(r.prediction[ui]);
      if (layout_.observations) put_num(c.dv[ui]);
      if (layout_.blq) put_num(static_cast<int>(c.blq[ui]));
      for (const std::string& cov : rec.covariates) line_ += "," + csv_field(cov);
      line_ += '\n';
      out.write(line_.data(), line_.size());
    }
  }

  template <class Out>
  void table(const DesignChunk& c, Out& out) {
    char num[detail::kMaxNumberChars];
    auto put_num = [&](auto v) {
      line_ += ',';
      line_.append(num, static_cast<std::size_t>(put(num, num + sizeof num, v) - num));
    };
    const std::size_t np = layout_.model->parameters.size();
    const std::size_t ne = layout_.eta_columns.size();
    const std::size_t nk = layout_.iov_columns.size();
    for (std::int64_t t = 0; t < c.table_rows; ++t) {
      const std::size_t ut = static_cast<std::size_t>(t);
      start_line(c, c.table_subject[ut], subject_of(c, c.table_subject[ut]), put_num);
      if (layout_.replicates > 1) put_num(c.replicate + 1);
      if (layout_.occasions) put_num(c.table_occasion[ut]);
      for (int col : layout_.parameter_table)
        put_num(c.table_parameters[ut * np + static_cast<std::size_t>(col)]);
      for (std::size_t e = 0; e < ne; ++e) put_num(c.table_etas[ut * ne + e]);
      for (std::size_t e = 0; e < nk; ++e) put_num(c.table_kappas[ut * nk + e]);
      line_ += '\n';
      out.write(line_.data(), line_.size());
    }
  }

 private:
  // The dataset subject whose records subject s of a chunk has (its source when resampled).
  const DatasetSubject& subject_of(const DesignChunk& c, std::int64_t s) const {
    const std::int64_t at = c.source ? c.source[static_cast<std::size_t>(s)] : s;
    return layout_.data->subjects[static_cast<std::size_t>(at)];
  }
  // A line's first columns: the dataset ID, or when resampled the virtual subject's number
  // (1-based) and the ID it copies.
  template <class PutNum>
  void start_line(const DesignChunk& c, std::int64_t s, const DatasetSubject& subj,
                  PutNum& put_num) {
    if (c.source) {
      line_.clear();
      put_num(s + 1);
      line_.erase(0, 1);  // put_num's leading comma
      line_ += "," + csv_field(subj.id);
    } else {
      line_ = csv_field(subj.id);
    }
  }

  DesignLayout layout_;
  std::string line_;
};

class DesignCsvSink final : public DesignSink {
 public:
  DesignCsvSink(const std::string& path, const DesignLayout& layout)
      : layout_(layout), rows_format_(layout), unit_(path) {
    if (!detail::ends_with(path, ".csv"))
      throw InvalidArgument("make_design_sink: the path \"" + path +
                            "\" must end in .csv, .h5 or .hdf5");
    if (!layout_.model || !layout_.data)
      throw InvalidArgument("make_design_sink: the layout has no model or no dataset");
    check_design_columns(*layout_.data, *layout_.model);
    if (layout_.resampled)
      for (const std::string& c : layout_.data->covariate_columns)
        if (c == "source_id")
          throw InvalidArgument("make_design_sink: the dataset " + layout_.data->file +
                                " has a column source_id, but a resampled design (count) writes "
                                "its own source_id column; rename the dataset's column");
    const ModelInfo& model = *layout_.model;
    const std::string stem = path.substr(0, path.size() - 4);
    rows_ = &unit_.add(path);
    for (const std::string& c : csv_companions(path))
      if (layout_.parameter_table.empty() || c != stem + ".parameters.csv")
        unit_.remove_on_commit(c);
    std::string header = layout_.resampled ? "id,source_id,time" : "id,time";
    for (const std::string& c : model.compartments) header += ",amount_" + c;
    for (const std::string& c : model.compartments) header += ",conc_" + c;
    if (layout_.replicates > 1) header += ",replicate";
    header += ",ipred";
    if (layout_.observations) header += ",dv";
    if (layout_.blq) header += ",blq";
    for (const std::string& c : layout_.data->covariate_columns) header += "," + csv_field(c);
    header += '\n';
    rows_->write(header.data(), header.size());
    if (!layout_.parameter_table.empty()) {
      table_ = &unit_.add(stem + ".parameters.csv");
      std::string h = layout_.resampled ? "id,source_id" : "id";
      if (layout_.replicates > 1) h += ",replicate";
      if (layout_.occasions) h += ",occasion";
      for (int c : layout_.parameter_table)
        h += "," + model.parameters[static_cast<std::size_t>(c)].name;
      for (const std::string& e : layout_.eta_columns) h += "," + e;
      for (const std::string& e : layout_.iov_columns) h += "," + e;
      h += '\n';
      table_->write(h.data(), h.size());
    }
  }

  void write(const DesignChunk& c) override {
    next(c.replicate);
    rows_format_.rows(c, *rows_);
    if (table_) rows_format_.table(c, *table_);
  }

  // A replicate formatted by a formatter of the same layout (formatted_parts.hpp): its
  // observation rows, then its table rows (when the result has a table).
  void write_formatted(std::int64_t replicate, std::int64_t /*rows*/,
                       const std::vector<char>& bytes) override {
    const char* begin[2] = {};
    std::size_t size[2] = {};
    if (!detail::split_parts(bytes, table_ ? 2 : 1, begin, size))
      throw InvalidArgument("DesignSink::write_formatted: " + std::to_string(bytes.size()) +
                            " bytes that a formatter of this layout did not make");
    next(replicate);
    rows_->write(begin[0], size[0]);
    if (table_) table_->write(begin[1], size[1]);
  }

  void commit() override {
    if (next_ != layout_.replicates)
      throw InvalidArgument("DesignSink::commit: " + std::to_string(next_) + " of " +
                            std::to_string(layout_.replicates) + " replicates were written");
    unit_.commit();
  }

 private:
  void next(std::int64_t replicate) {
    if (replicate != next_)
      throw InvalidArgument("DesignSink::write: replicate " + std::to_string(replicate + 1) +
                            " arrived, but " + std::to_string(next_ + 1) + " was next");
    ++next_;
  }
  DesignLayout layout_;
  DesignCsvRows rows_format_;
  OutputUnit unit_;
  AtomicFile* rows_ = nullptr;
  AtomicFile* table_ = nullptr;
  std::int64_t next_ = 0;
};

// The formatter of a design's CSV result on a rank other than 0 (make_design_formatter).
class DesignCsvFormatter final : public DesignSink {
 public:
  explicit DesignCsvFormatter(const DesignLayout& layout) : rows_(layout) {}
  bool format(const DesignChunk& c, std::vector<char>& bytes) override {
    bytes.clear();
    detail::append_part(bytes, [&](auto& out) { rows_.rows(c, out); });
    if (rows_.has_table()) detail::append_part(bytes, [&](auto& out) { rows_.table(c, out); });
    return true;
  }
  void write(const DesignChunk&) override {
    throw InvalidArgument("design formatter: write(): a formatter writes no file (format() only)");
  }
  void commit() override {
    throw InvalidArgument("design formatter: commit(): a formatter writes no file");
  }

 private:
  DesignCsvRows rows_;
};

// The formatter of a design's HDF5 result: it formats nothing (replicates travel as values).
class NoDesignFormatter final : public DesignSink {
 public:
  void write(const DesignChunk&) override {}
  void commit() override {}
};

}  // namespace

std::unique_ptr<DesignSink> make_design_formatter(const std::string& path,
                                                  const DesignLayout& layout) {
  if (!layout.model || !layout.data)
    throw InvalidArgument("make_design_formatter: the layout has no model or no dataset");
  if (detail::ends_with(path, ".csv")) return std::make_unique<DesignCsvFormatter>(layout);
  return std::make_unique<NoDesignFormatter>();
}

std::unique_ptr<DesignSink> make_design_sink(const std::string& path, const DesignLayout& layout,
                                             const RunSource& source) {
  if (detail::ends_with(path, ".h5") || detail::ends_with(path, ".hdf5"))
    return make_design_h5_sink(path, layout, source);
  return std::make_unique<DesignCsvSink>(path, layout);
}

}  // namespace pkscan::output
