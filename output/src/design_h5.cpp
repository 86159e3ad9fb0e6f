// The HDF5 sink of design runs (make_design_h5_sink in sink.hpp; layout in docs/output.md,
// "Design simulations"): the CSV sink's columns as 1-D datasets of one entry per observation row
// (replicate by replicate), the parameter table in the group /parameters.
//
// The file is made like every pkscan HDF5 result (h5_write.hpp): created under a registered
// temporary name next to the target, datasets chunked along the rows, shuffled and gzipped,
// without modification times, and renamed into place by commit() only; a sink destroyed without
// commit() (an error, a signal's clean-up) closes and removes it. The observation rows are known
// before the first replicate (dataset rows x replicates), so their datasets are created at their
// final size; the parameter table's (rows per subject and occasion) grow as replicates arrive.
#include <hdf5.h>

#include <charconv>
#include <cstdint>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/output/sink.hpp>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "h5_write.hpp"
#include "text.hpp"

namespace pkscan::output {

namespace {

using h5::Id;
using hdf5::QuietHdf5;

bool parse_int(const std::string& s, std::int64_t& v) {
  const char* end = s.data() + s.size();
  const auto r = std::from_chars(s.data(), end, v);
  return !s.empty() && r.ec == std::errc() && r.ptr == end;
}

bool parse_double(const std::string& s, double& v) {
  const char* end = s.data() + s.size();
  const auto r = std::from_chars(s.data(), end, v);
  return !s.empty() && r.ec == std::errc() && r.ptr == end;
}

// The layout, checked before any file is created: a model and a dataset, no covariate column
// named like a result column, and every covariate column a name HDF5 can hold.
const DesignLayout& checked_layout(const std::string& path, const DesignLayout& layout) {
  if (!detail::ends_with(path, ".h5") && !detail::ends_with(path, ".hdf5"))
    throw InvalidArgument("make_design_h5_sink: the path \"" + path +
                          "\" must end in .h5 or .hdf5");
  if (!layout.model || !layout.data)
    throw InvalidArgument("make_design_h5_sink: the layout has no model or no dataset");
  const Dataset& data = *layout.data;
  check_design_columns(data, *layout.model);
  if (layout.resampled)
    for (const std::string& c : data.covariate_columns)
      if (c == "source_id")
        throw InvalidArgument("make_design_sink: the dataset " + data.file +
                              " has a column source_id, but a resampled design (count) writes "
                              "its own source_id column; rename the dataset's column");
  for (const std::string& c : data.covariate_columns)
    if (c.empty() || c == "." || c.find('/') != std::string::npos)
      throw InvalidArgument("dataset column \"" + c + "\" (column " +
                            std::to_string(data.header_column(c)) + " of " + data.file +
                            ") would be an HDF5 dataset of /covariates, but HDF5 names cannot be "
                            "empty, \".\" or hold \"/\"; rename it in the dataset");
  return layout;
}

// True when every subject's ID is an integer as written (then /id is int64, else strings).
bool integer_ids(const Dataset& data) {
  std::int64_t v = 0;
  for (const DatasetSubject& s : data.subjects)
    if (!parse_int(s.id, v)) return false;
  return true;
}

// True when covariate column `k` holds a number on every observation record (then float64, else
// strings as written).
bool numeric_column(const Dataset& data, std::size_t k) {
  double v = 0.0;
  for (const DatasetSubject& s : data.subjects)
    for (const DatasetRecord& r : s.records)
      if (r.evid == 0 && !parse_double(r.covariates[k], v)) return false;
  return true;
}

class DesignH5Sink final : public DesignSink {
 public:
  DesignH5Sink(std::string path, const DesignLayout& layout, const RunSource& source)
      : path_(std::move(path)),
        layout_(checked_layout(path_, layout)),
        data_(*layout_.data),
        rows_(static_cast<hsize_t>(data_.observation_count() * layout_.replicates)),
        integer_ids_(integer_ids(data_)),
        temp_(path_) {
    const QuietHdf5 quiet;
    const ModelInfo& model = *layout_.model;
    Id fapl = h5::file_access(path_);
    file_ = h5::create_file(temp_, fapl.get(), path_);
    const hid_t root = file_.get();
    h5::write_provenance(root, source.file, source.text, model, path_);
    string_ = h5::string_type(path_);
    const hid_t id_type = integer_ids_ ? H5T_STD_I64LE : string_.get();

    std::vector<std::string> columns;
    // A resampled design's replicates differ in rows: its datasets grow as they arrive.
    const bool grow = layout_.resampled;
    const auto column = [&](const std::string& name, hid_t type) {
      columns.push_back(name);
      return h5::create_dataset(root, name.c_str(), type, {grow ? 0 : rows_}, grow, path_);
    };
    // Resampled: id is the virtual subject's number, source_id the dataset ID it copies.
    id_ = column("id", grow ? H5T_STD_I64LE : id_type);
    if (grow) source_id_ = column("source_id", id_type);
    time_ = column("time", H5T_IEEE_F64LE);
    for (const std::string& c : model.compartments)
      amounts_.push_back(column("amount_" + c, H5T_IEEE_F64LE));
    for (const std::string& c : model.compartments)
      concentrations_.push_back(column("conc_" + c, H5T_IEEE_F64LE));
    if (layout_.replicates > 1) replicate_ = column("replicate", H5T_STD_I64LE);
    ipred_ = column("ipred", H5T_IEEE_F64LE);
    if (layout_.observations) dv_ = column("dv", H5T_IEEE_F64LE);
    if (layout_.blq) blq_ = column("blq", H5T_STD_I8LE);
    h5::write_strings_attribute(root, "columns", columns, path_);

    if (!data_.covariate_columns.empty()) {
      covariates_group_ = h5::create_group(root, "covariates", path_);
      for (std::size_t k = 0; k < data_.covariate_columns.size(); ++k) {
        numeric_.push_back(numeric_column(data_, k));
        covariates_.push_back(h5::create_dataset(
            covariates_group_.get(), data_.covariate_columns[k].c_str(),
            numeric_.back() ? H5T_IEEE_F64LE : string_.get(), {grow ? 0 : rows_}, grow, path_));
      }
      h5::write_strings_attribute(covariates_group_.get(), "columns", data_.covariate_columns,
                                  path_);
    }

    if (!layout_.parameter_table.empty()) {
      table_group_ = h5::create_group(root, "parameters", path_);
      const hid_t g = table_group_.get();
      std::vector<std::string> names;
      const auto table_column = [&](const std::string& name, hid_t type) {
        names.push_back(name);
        return h5::create_dataset(g, name.c_str(), type, {0}, true, path_);
      };
      table_id_ = table_column("id", grow ? H5T_STD_I64LE : id_type);
      if (grow) table_source_id_ = table_column("source_id", id_type);
      if (layout_.replicates > 1) table_replicate_ = table_column("replicate", H5T_STD_I64LE);
      if (layout_.occasions) table_occasion_ = table_column("occasion", H5T_IEEE_F64LE);
      for (int c : layout_.parameter_table)
        table_values_.push_back(
            table_column(model.parameters[static_cast<std::size_t>(c)].name, H5T_IEEE_F64LE));
      for (const std::string& e : layout_.eta_columns)
        table_values_.push_back(table_column(e, H5T_IEEE_F64LE));
      for (const std::string& e : layout_.iov_columns)
        table_values_.push_back(table_column(e, H5T_IEEE_F64LE));
      h5::write_strings_attribute(g, "columns", names, path_);
      table_names_.assign(names.end() - static_cast<std::ptrdiff_t>(table_values_.size()),
                          names.end());
    }
  }

  DesignH5Sink(const DesignH5Sink&) = delete;
  DesignH5Sink& operator=(const DesignH5Sink&) = delete;

  ~DesignH5Sink() override {
    const QuietHdf5 quiet;
    for (Id* d : handles()) d->reset();  // then temp_ removes the file unless committed
  }

  void write(const DesignChunk& c) override {
    if (c.replicate != next_)
      throw InvalidArgument("DesignSink::write: replicate " + std::to_string(c.replicate + 1) +
                            " arrived, but " + std::to_string(next_ + 1) + " was next");
    const DatasetResult& r = *c.result;
    const hsize_t n = static_cast<hsize_t>(r.rows());
    if (static_cast<std::size_t>(r.compartments) != layout_.model->compartments.size())
      throw InvalidArgument("DesignSink::write: the result has " + std::to_string(r.compartments) +
                            " compartments, but the model " +
                            std::to_string(layout_.model->compartments.size()));
    if (layout_.resampled) {  // the rows of this replicate, appended
      for (Id* d : row_datasets())
        if (*d) h5::extend(d->get(), first_ + n, path_);
    } else if (first_ + n > rows_)
      throw InvalidArgument("DesignSink::write: replicate " + std::to_string(c.replicate + 1) +
                            " has " + std::to_string(n) + " rows, but the dataset has " +
                            std::to_string(data_.observation_count()) + " observation records");
    const QuietHdf5 quiet;
    const std::size_t rows = static_cast<std::size_t>(n);
    // The dataset subject whose records row i has (its source when resampled).
    const auto source = [&](std::size_t i) {
      const std::int64_t s = r.subject[i];
      return c.source ? c.source[static_cast<std::size_t>(s)] : s;
    };
    const auto subject = [&](std::size_t i) -> const DatasetSubject& {
      return data_.subjects[static_cast<std::size_t>(source(i))];
    };
    if (c.source) {
      std::vector<std::int64_t> virtual_id(rows);
      for (std::size_t i = 0; i < rows; ++i) virtual_id[i] = r.subject[i] + 1;
      put(id_, H5T_NATIVE_INT64, first_, n, virtual_id.data(), "id");
      write_ids(source_id_, rows, first_, source);
    } else {
      write_ids(id_, rows, first_, source);
    }
    put(time_, H5T_NATIVE_DOUBLE, first_, n, r.time.data(), "time");
    const std::vector<std::string>& names = layout_.model->compartments;
    const std::size_t nc = names.size();
    std::vector<double> column(rows);
    for (std::size_t k = 0; k < nc; ++k) {
      for (std::size_t i = 0; i < rows; ++i) column[i] = r.amounts[i * nc + k];
      put(amounts_[k], H5T_NATIVE_DOUBLE, first_, n, column.data(), "amount_" + names[k]);
      for (std::size_t i = 0; i < rows; ++i) column[i] = r.concentrations[i * nc + k];
      put(concentrations_[k], H5T_NATIVE_DOUBLE, first_, n, column.data(), "conc_" + names[k]);
    }
    if (replicate_) {
      const std::vector<std::int64_t> rep(rows, c.replicate + 1);
      put(replicate_, H5T_NATIVE_INT64, first_, n, rep.data(), "replicate");
    }
    put(ipred_, H5T_NATIVE_DOUBLE, first_, n, r.prediction.data(), "ipred");
    if (dv_) put(dv_, H5T_NATIVE_DOUBLE, first_, n, c.dv, "dv");
    if (blq_) put(blq_, H5T_NATIVE_INT8, first_, n, c.blq, "blq");
    for (std::size_t k = 0; k < covariates_.size(); ++k) {
      const auto text = [&](std::size_t i) -> const std::string& {
        return subject(i).records[static_cast<std::size_t>(r.record[i])].covariates[k];
      };
      if (numeric_[k]) {
        for (std::size_t i = 0; i < rows; ++i) parse_double(text(i), column[i]);
        put(covariates_[k], H5T_NATIVE_DOUBLE, first_, n, column.data(),
            "covariates/" + data_.covariate_columns[k]);
      } else {
        std::vector<const char*> p(rows);
        for (std::size_t i = 0; i < rows; ++i) p[i] = text(i).c_str();
        put(covariates_[k], string_.get(), first_, n, p.data(),
            "covariates/" + data_.covariate_columns[k]);
      }
    }
    first_ += n;
    ++next_;
    if (table_group_) write_table(c);
  }

  void commit() override {
    if (next_ != layout_.replicates)
      throw InvalidArgument("DesignSink::commit: " + std::to_string(next_) + " of " +
                            std::to_string(layout_.replicates) + " replicates were written");
    if (!layout_.resampled && first_ != rows_)
      throw InvalidArgument("DesignSink::commit: " + std::to_string(first_) + " of " +
                            std::to_string(rows_) + " observation rows were written");
    {
      const QuietHdf5 quiet;
      for (Id* d : handles())
        if (d->close() < 0) detail::h5_fail(path_, "close");
    }
    h5::commit_file(temp_, path_);
  }

 private:
  // Every open identifier, the file last.
  std::vector<Id*> handles() {
    std::vector<Id*> h = {&id_,
                          &source_id_,
                          &time_,
                          &replicate_,
                          &ipred_,
                          &dv_,
                          &blq_,
                          &table_id_,
                          &table_source_id_,
                          &table_replicate_,
                          &table_occasion_};
    for (auto* v : {&amounts_, &concentrations_, &covariates_, &table_values_})
      for (Id& d : *v) h.push_back(&d);
    for (Id* d : {&covariates_group_, &table_group_, &string_, &file_}) h.push_back(d);
    return h;
  }

  // The datasets of the observation rows (null where absent).
  std::vector<Id*> row_datasets() {
    std::vector<Id*> h = {&id_, &source_id_, &time_, &replicate_, &ipred_, &dv_, &blq_};
    for (auto* v : {&amounts_, &concentrations_, &covariates_})
      for (Id& d : *v) h.push_back(&d);
    return h;
  }

  void put(const Id& d, hid_t mem_type, hsize_t first, hsize_t n, const void* data,
           const std::string& what) {
    h5::write_block(d.get(), mem_type, {first}, {n}, data, path_, "dataset " + what);
  }

  // IDs of `rows` rows from `first` (subject_of(i): the row's index into Dataset::subjects).
  template <class SubjectOf>
  void write_ids(const Id& d, std::size_t rows, hsize_t first, const SubjectOf& subject_of) {
    const auto& subjects = data_.subjects;
    if (integer_ids_) {
      std::vector<std::int64_t> ids(rows);
      for (std::size_t i = 0; i < rows; ++i)
        parse_int(subjects[static_cast<std::size_t>(subject_of(i))].id, ids[i]);
      put(d, H5T_NATIVE_INT64, first, rows, ids.data(), "id");
    } else {
      std::vector<const char*> ids(rows);
      for (std::size_t i = 0; i < rows; ++i)
        ids[i] = subjects[static_cast<std::size_t>(subject_of(i))].id.c_str();
      put(d, string_.get(), first, rows, ids.data(), "id");
    }
  }

  // The table's rows of one replicate, appended to /parameters.
  void write_table(const DesignChunk& c) {
    const QuietHdf5 quiet;
    const hsize_t n = static_cast<hsize_t>(c.table_rows);
    const hsize_t first = table_rows_;
    table_rows_ += n;
    const std::size_t rows = static_cast<std::size_t>(n);
    for (Id* d : {&table_id_, &table_source_id_, &table_replicate_, &table_occasion_})
      if (*d) h5::extend(d->get(), table_rows_, path_);
    for (Id& d : table_values_) h5::extend(d.get(), table_rows_, path_);
    if (c.source) {  // the virtual subject's number, and the dataset ID it copies
      std::vector<std::int64_t> virtual_id(rows);
      for (std::size_t i = 0; i < rows; ++i) virtual_id[i] = c.table_subject[i] + 1;
      put(table_id_, H5T_NATIVE_INT64, first, n, virtual_id.data(), "parameters/id");
      write_ids(table_source_id_, rows, first, [&](std::size_t i) {
        return c.source[static_cast<std::size_t>(c.table_subject[i])];
      });
    } else {
      write_ids(table_id_, rows, first, [&](std::size_t i) { return c.table_subject[i]; });
    }
    if (table_replicate_) {
      const std::vector<std::int64_t> rep(rows, c.replicate + 1);
      put(table_replicate_, H5T_NATIVE_INT64, first, n, rep.data(), "parameters/replicate");
    }
    if (table_occasion_)
      put(table_occasion_, H5T_NATIVE_DOUBLE, first, n, c.table_occasion, "parameters/occasion");
    // The columns: parameters (of ModelInfo::parameters' np per row), etas, kappas.
    const std::size_t np = layout_.model->parameters.size();
    const std::size_t ne = layout_.eta_columns.size();
    const std::size_t nk = layout_.iov_columns.size();
    std::vector<double> column(rows);
    std::size_t d = 0;
    const auto strided = [&](const double* base, std::size_t stride, std::size_t offset) {
      for (std::size_t i = 0; i < rows; ++i) column[i] = base[i * stride + offset];
      put(table_values_[d], H5T_NATIVE_DOUBLE, first, n, column.data(),
          "parameters/" + table_names_[d]);
      ++d;
    };
    for (int p : layout_.parameter_table)
      strided(c.table_parameters, np, static_cast<std::size_t>(p));
    for (std::size_t e = 0; e < ne; ++e) strided(c.table_etas, ne, e);
    for (std::size_t e = 0; e < nk; ++e) strided(c.table_kappas, nk, e);
  }

  std::string path_;
  DesignLayout layout_;
  const Dataset& data_;
  hsize_t rows_;  // observation rows of every replicate
  bool integer_ids_;
  h5::TempName temp_;  // the file being written; removed unless committed
  Id file_, string_;
  Id id_, source_id_, time_, replicate_, ipred_, dv_, blq_;
  std::vector<Id> amounts_, concentrations_;
  Id covariates_group_;
  std::vector<Id> covariates_;
  std::vector<bool> numeric_;  // per covariate column: float64 (else strings)
  Id table_group_, table_id_, table_source_id_, table_replicate_, table_occasion_;
  std::vector<Id> table_values_;          // parameters, etas, kappas, in the table's column order
  std::vector<std::string> table_names_;  // their names
  hsize_t first_ = 0;                     // observation rows written
  hsize_t table_rows_ = 0;                // parameter table rows written
  std::int64_t next_ = 0;                 // the next replicate
};

}  // namespace

std::unique_ptr<DesignSink> make_design_h5_sink(const std::string& path, const DesignLayout& layout,
                                                const RunSource& source) {
  return std::make_unique<DesignH5Sink>(path, layout, source);
}

}  // namespace pkscan::output
