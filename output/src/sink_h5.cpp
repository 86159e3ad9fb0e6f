// The HDF5 result sink (layout in docs/output.md).
//
// One file, created under a temporary name next to the target and renamed into place by
// commit(); a sink destroyed without commit() closes and removes it. Objects carry no
// modification times, so the same run writes the same bytes. The file, the datasets and the
// commit are made by the helpers the design sink shares (h5_write.hpp).
// Every dataset indexed by row (subject) is chunked along the rows, shuffled and
// gzip-compressed, created at its final size when layout.rows is known (extended as chunks
// arrive when it is 0) and written chunk by chunk, so memory stays bounded whatever the number
// of subjects. The trajectories (amount, concentration: most of the file) go through ChunkWriter
// (h5_chunk_writer.hpp), which runs the shuffle and the compression on all threads and writes
// whole chunks directly; the small datasets go through HDF5's own filters with hyperslab
// selections and the chunk caches (kCacheBytes per dataset).
//
// Errors: every HDF5 call is checked; a failure becomes pkscan::Error("cannot write HDF5 file
// PATH: what: HDF5's innermost message"). HDF5's automatic error printing is switched off while
// a sink method runs (a library never prints) and the caller's setting restored afterwards.

#include <hdf5.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/output/sink.hpp>
#include <pkscan/threads.hpp>
#include <string>
#include <utility>
#include <vector>

#include "h5_chunk_writer.hpp"
#include "h5_write.hpp"
#include "sink_common.hpp"

namespace pkscan::output {

namespace {

using h5::check;
using h5::checked;
using h5::chunk_shape;
using h5::create_dataset;
using h5::elements;
using h5::Id;
using h5::kDeflateLevel;
using h5::TempName;
using h5::write_all;
using h5::write_block;
using h5::write_string_attribute;
using h5::write_strings_attribute;
using hdf5::QuietHdf5;

[[noreturn]] void fail(const std::string& path, const std::string& what) {
  detail::h5_fail(path, what);
}

class H5Sink final : public ResultSink {
 public:
  H5Sink(std::string path, const RunLayout& layout)
      : path_(std::move(path)),
        temp_(path_),
        layout_(layout),
        times_(static_cast<hsize_t>(layout.times.size())),
        compartments_(static_cast<hsize_t>(layout.model->compartments.size())),
        parameters_(static_cast<hsize_t>(layout.model->parameters.size())),
        rows_(static_cast<hsize_t>(layout.rows)),
        extendible_(layout.rows == 0) {
    const QuietHdf5 quiet;
    Id fapl = h5::file_access(path_);
    file_ = h5::create_file(temp_, fapl.get(), path_);
    const hid_t root = file_.get();
    h5::write_provenance(root, layout_.run_file, layout_.run_text, *layout_.model, path_);

    Id time = create_dataset(root, "time", H5T_IEEE_F64LE, {times_}, false, path_);
    write_all(time.get(), H5T_NATIVE_DOUBLE, layout_.times.data(), path_, "dataset time");

    const bool f32 = layout_.precision == Precision::Float32;
    const hid_t real_type = f32 ? H5T_IEEE_F32LE : H5T_IEEE_F64LE;
    if (layout_.trajectories) {
      const std::vector<hsize_t> dims = {rows_, times_, compartments_};
      amount_ = create_dataset(root, "amount", real_type, dims, extendible_, path_);
      concentration_ = create_dataset(root, "concentration", real_type, dims, extendible_, path_);
      const std::size_t elem = f32 ? 4 : 8;
      const int threads = resolve_threads(layout_.threads);
      int fd = -1;  // the sec2 driver's descriptor (ChunkWriter starts the writeback early)
      if (void* handle = nullptr; H5Pget_driver(fapl.get()) == H5FD_SEC2 &&
                                  H5Fget_vfd_handle(file_.get(), H5P_DEFAULT, &handle) >= 0 &&
                                  handle != nullptr)
        fd = *static_cast<int*>(handle);
      const auto row = static_cast<std::int64_t>(times_ * compartments_);
      auto writer = [&](const Id& dset, const char* what) {
        return std::make_unique<detail::ChunkWriter>(dset.get(), chunk_shape(dims, elem), elem, row,
                                                     static_cast<int>(kDeflateLevel), threads, fd,
                                                     path_, what);
      };
      amount_writer_ = writer(amount_, "dataset amount");
      concentration_writer_ = writer(concentration_, "dataset concentration");
    }
    id_ = create_dataset(root, "id", H5T_STD_I64LE, {rows_}, extendible_, path_);
    if (!layout_.extra_columns.empty()) {
      extra_ = create_dataset(root, "extra", H5T_IEEE_F64LE,
                              {rows_, static_cast<hsize_t>(layout_.extra_columns.size())},
                              extendible_, path_);
      write_strings_attribute(extra_.get(), "columns", layout_.extra_columns, path_);
      if (!layout_.arm_names.empty())
        write_strings_attribute(extra_.get(), "arm_names", layout_.arm_names, path_);
    }
    if (!layout_.arm_names.empty()) {
      // Which times each arm samples (the others hold NaN in its rows and summaries).
      Id sampled =
          create_dataset(root, "arm_sampled", H5T_STD_I8LE,
                         {static_cast<hsize_t>(layout_.arm_names.size()), times_}, false, path_);
      write_all(sampled.get(), H5T_NATIVE_INT8, layout_.arm_sampled.data(), path_,
                "dataset arm_sampled");
      write_strings_attribute(sampled.get(), "arm_names", layout_.arm_names, path_);
    }
    if (layout_.observations) {
      ipred_ = create_dataset(root, "ipred", H5T_IEEE_F64LE, {rows_, times_}, extendible_, path_);
      dv_ = create_dataset(root, "dv", H5T_IEEE_F64LE, {rows_, times_}, extendible_, path_);
    }
    if (layout_.blq)
      blq_ = create_dataset(root, "blq", H5T_STD_I8LE, {rows_, times_}, extendible_, path_);
    if (!layout_.eta_columns.empty()) {
      etas_ = create_dataset(root, "etas", H5T_IEEE_F64LE,
                             {rows_, static_cast<hsize_t>(layout_.eta_columns.size())}, extendible_,
                             path_);
      write_strings_attribute(etas_.get(), "columns", layout_.eta_columns, path_);
    }
    parameters_set_ = create_dataset(root, "parameters", H5T_IEEE_F64LE, {rows_, parameters_},
                                     extendible_, path_);
    std::vector<std::string> names;
    for (const ParameterInfo& p : layout_.model->parameters) names.push_back(p.name);
    write_strings_attribute(parameters_set_.get(), "columns", names, path_);
    if (!layout_.metric_names.empty()) {
      metrics_ = create_dataset(root, "metrics", H5T_IEEE_F64LE,
                                {rows_, static_cast<hsize_t>(layout_.metric_names.size())},
                                extendible_, path_);
      write_strings_attribute(metrics_.get(), "columns", layout_.metric_names, path_);
      write_string_attribute(
          metrics_.get(), "compartment",
          layout_.model->compartments[static_cast<std::size_t>(layout_.metric_compartment)], path_);
    }
  }

  H5Sink(const H5Sink&) = delete;
  H5Sink& operator=(const H5Sink&) = delete;

  ~H5Sink() override {
    const QuietHdf5 quiet;
    close_all();  // then temp_ removes the file unless committed
  }

  void write(const Chunk& chunk) override {
    protocol_.begin_write(layout_, chunk);
    if (chunk.result->subjects() > 0 && chunk.parameters == nullptr)
      throw InvalidArgument("HDF5 sink: chunk.parameters is null, but /parameters is written");
    const QuietHdf5 quiet;
    const SimulationResult& r = *chunk.result;
    const hsize_t n = static_cast<hsize_t>(r.subjects());
    const hsize_t first = static_cast<hsize_t>(chunk.first);
    if (n == 0) return;
    if (extendible_) extend(first + n);
    // An arm's rows on its own times: widened to the file's, NaN (blq 0) at the others.
    const auto at =
        layout_.arm_names.empty()
            ? std::vector<std::size_t>()
            : detail::table_positions(layout_, layout_.extra_columns, {chunk.extra[0]}, where_);
    if (layout_.trajectories) {
      if (layout_.precision == Precision::Float64)
        write_trajectories(r, first, r.amounts_f64().data(), at);
      else
        write_trajectories(r, first, r.amounts_f32().data(), at);
    }
    std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
    for (std::size_t s = 0; s < ids.size(); ++s)
      ids[s] = chunk.ids != nullptr ? chunk.ids[s] : chunk.first + static_cast<std::int64_t>(s) + 1;
    write_block(id_.get(), H5T_NATIVE_INT64, {first}, {n}, ids.data(), path_, "dataset id");
    if (extra_)
      write_block(extra_.get(), H5T_NATIVE_DOUBLE, {first, 0},
                  {n, static_cast<hsize_t>(layout_.extra_columns.size())}, chunk.extra, path_,
                  "dataset extra");
    write_block(parameters_set_.get(), H5T_NATIVE_DOUBLE, {first, 0}, {n, parameters_},
                chunk.parameters, path_, "dataset parameters");
    const double nan = std::numeric_limits<double>::quiet_NaN();
    if (ipred_) {
      write_times(ipred_, H5T_NATIVE_DOUBLE, first, n, chunk.ipred, at, nan, "dataset ipred");
      write_times(dv_, H5T_NATIVE_DOUBLE, first, n, chunk.dv, at, nan, "dataset dv");
    }
    if (blq_)
      write_times(blq_, H5T_NATIVE_INT8, first, n, chunk.blq, at, std::int8_t{0}, "dataset blq");
    if (etas_)
      write_block(etas_.get(), H5T_NATIVE_DOUBLE, {first, 0},
                  {n, static_cast<hsize_t>(layout_.eta_columns.size())}, chunk.etas, path_,
                  "dataset etas");
    if (metrics_)
      write_block(metrics_.get(), H5T_NATIVE_DOUBLE, {first, 0},
                  {n, static_cast<hsize_t>(layout_.metric_names.size())}, chunk.metrics, path_,
                  "dataset metrics");
    protocol_.end_write(r.subjects());
  }

  // The /summary group: with grouping columns every dataset gains a leading group axis, row g
  // written by the g-th call; without, the one table.
  void write_summary(const TimeSummaryTable& t) override {
    protocol_.begin_summary(layout_, t);
    const QuietHdf5 quiet;
    const bool grouped = !layout_.summary_columns.empty();
    const hsize_t g = static_cast<hsize_t>(protocol_.summaries());
    const hsize_t groups = static_cast<hsize_t>(detail::SinkProtocol::groups(layout_));
    const hsize_t q = static_cast<hsize_t>(t.percentiles.size());
    const hsize_t k = static_cast<hsize_t>(t.group.size());
    std::vector<hsize_t> lead;  // the group axis, when grouped
    if (grouped) lead.push_back(groups);
    const auto dims = [&](std::vector<hsize_t> rest) {
      rest.insert(rest.begin(), lead.begin(), lead.end());
      return rest;
    };
    if (g == 0) {
      summary_ = h5::create_group(file_.get(), "summary", path_);
      const hid_t s = summary_.get();
      summary_mean_ =
          create_dataset(s, "mean", H5T_IEEE_F64LE, dims({times_, compartments_}), false, path_);
      summary_quantiles_ = create_dataset(s, "quantiles", H5T_IEEE_F64LE,
                                          dims({times_, compartments_, q}), false, path_);
      Id percentiles = create_dataset(s, "percentiles", H5T_IEEE_F64LE, {q}, false, path_);
      if (q > 0)
        write_all(percentiles.get(), H5T_NATIVE_DOUBLE, t.percentiles.data(), path_,
                  "dataset summary/percentiles");
      summary_count_ = create_dataset(s, "count", H5T_STD_I64LE, dims({}), false, path_);
      summary_excluded_ = create_dataset(s, "excluded", H5T_STD_I64LE, dims({}), false, path_);
      if (grouped) {
        summary_groups_ = create_dataset(s, "groups", H5T_IEEE_F64LE, {groups, k}, false, path_);
        write_strings_attribute(summary_groups_.get(), "columns", layout_.summary_columns, path_);
        if (!layout_.arm_names.empty())
          write_strings_attribute(summary_groups_.get(), "arm_names", layout_.arm_names, path_);
      }
      summary_exact_ = true;
    }
    const auto put_row = [&](const Id& d, hid_t type, std::vector<hsize_t> rest, const void* data,
                             const char* what) {
      if (grouped) {
        std::vector<hsize_t> start(rest.size() + 1, 0);
        start[0] = g;
        rest.insert(rest.begin(), 1);
        write_block(d.get(), type, start, rest, data, path_, what);
        return;
      }
      if (elements(rest) > 0) write_all(d.get(), type, data, path_, what);
    };
    // An arm's table on its own times: widened to the file's, NaN at the others.
    const auto at = detail::table_positions(layout_, layout_.summary_columns, t.group, where_);
    std::vector<double> mean, quantiles;
    const auto nc = static_cast<std::size_t>(compartments_);
    put_row(summary_mean_, H5T_NATIVE_DOUBLE, {times_, compartments_},
            detail::widened(t.mean, at, times_, nc, mean), "dataset summary/mean");
    put_row(summary_quantiles_, H5T_NATIVE_DOUBLE, {times_, compartments_, q},
            detail::widened(t.quantiles, at, times_, nc * q, quantiles),
            "dataset summary/quantiles");
    put_row(summary_count_, H5T_NATIVE_INT64, {}, &t.count, "dataset summary/count");
    put_row(summary_excluded_, H5T_NATIVE_INT64, {}, &t.excluded, "dataset summary/excluded");
    if (grouped)
      put_row(summary_groups_, H5T_NATIVE_DOUBLE, {k}, t.group.data(), "dataset summary/groups");
    summary_exact_ = summary_exact_ && t.exact;
    if (g + 1 == groups) {
      // 1: exact percentiles (every group); 0: the histogram sketch's estimates (engine
      // summary.hpp).
      h5::write_int8_attribute(summary_.get(), "exact", summary_exact_ ? 1 : 0, path_);
    }
    protocol_.end_summary();
  }

  // The /replicates group: `values` (G, T, C, S, Q) with grouping columns, else (T, C, S, Q);
  // row g written by the g-th call.
  void write_replicate_summary(const ReplicateSummaryTable& t) override {
    protocol_.begin_replicate_summary(layout_, t);
    const QuietHdf5 quiet;
    const bool grouped = !layout_.replicate_summary_columns.empty();
    const hsize_t g = static_cast<hsize_t>(protocol_.replicate_summaries());
    const hsize_t ns = t.statistics.size(), nq = t.percentiles.size();
    std::vector<hsize_t> dims = {times_, compartments_, ns, nq};
    if (g == 0) {
      replicates_ = h5::create_group(file_.get(), "replicates", path_);
      std::vector<hsize_t> all = dims;
      if (grouped) all.insert(all.begin(), static_cast<hsize_t>(layout_.replicate_summary_groups));
      replicate_values_ =
          create_dataset(replicates_.get(), "values", H5T_IEEE_F64LE, all, false, path_);
      write_strings_attribute(replicate_values_.get(), "statistics", t.statistics, path_);
      Id pct = create_dataset(replicates_.get(), "percentiles", H5T_IEEE_F64LE, {nq}, false, path_);
      write_all(pct.get(), H5T_NATIVE_DOUBLE, t.percentiles.data(), path_,
                "dataset replicates/percentiles");
      Id count = create_dataset(replicates_.get(), "replicates", H5T_STD_I64LE, {}, false, path_);
      write_all(count.get(), H5T_NATIVE_INT64, &t.replicates, path_,
                "dataset replicates/replicates");
      if (grouped) {
        const hsize_t k = layout_.replicate_summary_columns.size();
        replicate_groups_ = create_dataset(
            replicates_.get(), "groups", H5T_IEEE_F64LE,
            {static_cast<hsize_t>(layout_.replicate_summary_groups), k}, false, path_);
        write_strings_attribute(replicate_groups_.get(), "columns",
                                layout_.replicate_summary_columns, path_);
      }
    }
    // An arm's table on its own times: widened to the file's, NaN at the others.
    std::vector<double> wide;
    const double* values = detail::widened(
        t.values,
        detail::table_positions(layout_, layout_.replicate_summary_columns, t.group, where_),
        times_, compartments_ * ns * nq, wide);
    if (grouped) {
      dims.insert(dims.begin(), 1);
      write_block(replicate_values_.get(), H5T_NATIVE_DOUBLE, {g, 0, 0, 0, 0}, dims, values, path_,
                  "dataset replicates/values");
      write_block(replicate_groups_.get(), H5T_NATIVE_DOUBLE, {g, 0},
                  {1, static_cast<hsize_t>(t.group.size())}, t.group.data(), path_,
                  "dataset replicates/groups");
    } else {
      write_all(replicate_values_.get(), H5T_NATIVE_DOUBLE, values, path_,
                "dataset replicates/values");
    }
    protocol_.end_replicate_summary();
  }

  void commit() override {
    protocol_.begin_commit(layout_);
    {
      const QuietHdf5 quiet;
      for (detail::ChunkWriter* w : {amount_writer_.get(), concentration_writer_.get()})
        if (w != nullptr) w->finish();
      for (Id* d : datasets())
        if (d->close() < 0) fail(path_, "close");
      for (Id* d : summary_ids())
        if (d->close() < 0) fail(path_, "close");
      if (file_.close() < 0) fail(path_, "close");
    }
    h5::commit_file(temp_, path_);
    protocol_.end_commit();
  }

 private:
  std::vector<Id*> datasets() {
    return {&amount_,  &concentration_, &id_,    &extra_, &parameters_set_,
            &metrics_, &etas_,          &ipred_, &dv_,    &blq_};
  }

  // The /summary group and its datasets written group by group.
  std::vector<Id*> summary_ids() {
    return {&summary_mean_,     &summary_quantiles_, &summary_count_,
            &summary_excluded_, &summary_groups_,    &summary_,
            &replicate_values_, &replicate_groups_,  &replicates_};
  }

  void close_all() noexcept {
    for (Id* d : datasets()) d->reset();
    for (Id* d : summary_ids()) d->reset();
    file_.reset();
  }

  // Grows every row-indexed dataset to `rows` rows (layout.rows unknown).
  void extend(hsize_t rows) {
    for (Id* d : datasets())
      if (*d) h5::extend(d->get(), rows, path_);
  }

  // Amounts straight from the result; concentrations divided here (amount / volume in the
  // result's precision, as write_csv does), each chunk on the thread that compresses it. The
  // rows of an arm that samples the file's times at `at` only (arm_positions; empty: all) are
  // widened as they are copied, NaN at the other times.
  template <class Real>
  void write_trajectories(const SimulationResult& r, hsize_t first, const Real* amounts,
                          const std::vector<std::size_t>& at) {
    const auto n = static_cast<std::int64_t>(r.subjects());
    const auto total = static_cast<std::int64_t>(extendible_ ? 0 : rows_);
    const auto f = static_cast<std::int64_t>(first);
    const auto per_subject = static_cast<std::int64_t>(times_ * compartments_);
    const auto nc = static_cast<std::int64_t>(compartments_);
    // The file's time of each of the chunk's times, -1 for a time the arm does not sample.
    std::vector<std::int64_t> source(at.empty() ? 0 : static_cast<std::size_t>(times_), -1);
    for (std::size_t i = 0; i < at.size(); ++i) source[at[i]] = static_cast<std::int64_t>(i);
    const auto arm_subject = static_cast<std::int64_t>(at.size()) * nc;
    // Elements [e0, e0 + count) of the file's row of chunk subject `subject` into `o`.
    const auto copy = [&](std::int64_t subject, std::int64_t e0, std::int64_t count, Real* o) {
      if (source.empty()) {
        std::copy_n(amounts + subject * per_subject + e0, count, o);
        return;
      }
      for (std::int64_t i = 0; i < count; ++i) {
        const std::int64_t t = source[static_cast<std::size_t>((e0 + i) / nc)];
        o[i] = t < 0 ? std::numeric_limits<Real>::quiet_NaN()
                     : amounts[subject * arm_subject + t * nc + (e0 + i) % nc];
      }
    };
    amount_writer_->write(
        f, n, total,
        [&](std::int64_t row, std::int64_t rows, std::int64_t e0, std::int64_t count, void* out) {
          Real* o = static_cast<Real*>(out);
          for (std::int64_t s = 0; s < rows; ++s) copy(row - f + s, e0, count, o + s * count);
        });
    concentration_writer_->write(
        f, n, total,
        [&](std::int64_t row, std::int64_t rows, std::int64_t e0, std::int64_t count, void* out) {
          Real* o = static_cast<Real*>(out);
          Real volume[64];  // compartments (a model has at most kMaxLinearCompartments)
          for (std::int64_t s = 0; s < rows; ++s) {
            const std::int64_t subject = row - f + s;
            for (std::int64_t c = 0; c < nc; ++c)
              volume[c] = static_cast<Real>(r.volume(subject, static_cast<int>(c)));
            Real* a = o + s * count;
            copy(subject, e0, count, a);
            for (std::int64_t i = 0; i < count; ++i)
              a[i] = static_cast<Real>(a[i] / volume[(e0 + i) % nc]);
          }
        });
  }

  // A (rows, times) dataset's rows [first, first + n): `values` on the file's times, or an arm's
  // rows on its own (at: arm_positions), widened block by block (bounded memory), `fill` at the
  // times the arm does not sample.
  template <class T>
  void write_times(const Id& d, hid_t type, hsize_t first, hsize_t n, const T* values,
                   const std::vector<std::size_t>& at, T fill, const char* what) {
    if (at.empty()) {
      write_block(d.get(), type, {first, 0}, {n, times_}, values, path_, what);
      return;
    }
    const hsize_t block = std::max<hsize_t>(1, (hsize_t{1} << 20) / times_);
    std::vector<T> wide;
    for (hsize_t r = 0; r < n; r += block) {
      const hsize_t m = std::min(block, n - r);
      detail::widen(values + r * at.size(), static_cast<std::size_t>(m), at,
                    static_cast<std::size_t>(times_), 1, fill, wide);
      write_block(d.get(), type, {first + r, 0}, {m, times_}, wide.data(), path_, what);
    }
  }

  std::string path_;
  TempName temp_;  // the file being written; removed unless committed
  RunLayout layout_;
  hsize_t times_;
  hsize_t compartments_;
  hsize_t parameters_;
  hsize_t rows_;
  bool extendible_;
  Id file_;
  Id amount_, concentration_, id_, extra_, parameters_set_, metrics_, etas_, ipred_, dv_, blq_;
  Id replicates_, replicate_values_, replicate_groups_;
  Id summary_, summary_mean_, summary_quantiles_, summary_count_, summary_excluded_,
      summary_groups_;
  bool summary_exact_ = true;  // every group's percentiles so far are exact
  // The trajectories' writers (declared after the datasets they write: destroyed first).
  std::unique_ptr<detail::ChunkWriter> amount_writer_, concentration_writer_;
  const std::string where_ = "HDF5 sink";
  detail::SinkProtocol protocol_{"HDF5 sink"};
};

}  // namespace

std::unique_ptr<ResultSink> make_h5_sink(const std::string& path, const RunLayout& layout) {
  return detail::make_checked_sink<H5Sink>(path, layout, "HDF5 sink");
}

}  // namespace pkscan::output
