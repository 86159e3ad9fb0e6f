#pragma once
// Checks shared by the result sinks (sink_csv.cpp, sink_h5.cpp). A sink checks its layout once,
// when it is made, and every chunk and summary against it, so a driver bug shows as an
// InvalidArgument naming what is inconsistent instead of a garbled file.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/output/sink.hpp>
#include <string>
#include <vector>

namespace pkscan::output::detail {

// The layout must name a model and at least one output time; the metric compartment must exist
// when metrics are written. @throws InvalidArgument
inline void check_layout(const RunLayout& layout, const std::string& where) {
  if (!layout.model)
    throw InvalidArgument(where + ": layout.model is null, but must describe the model");
  if (layout.model->compartments.empty())
    throw InvalidArgument(where + ": the model has no compartments");
  if (layout.times.empty())
    throw InvalidArgument(where + ": layout.times is empty, but must hold the output times");
  if (layout.rows < 0)
    throw InvalidArgument(where + ": layout.rows is " + std::to_string(layout.rows) +
                          ", but must be >= 0 (0 = not known in advance)");
  if (layout.summary_groups < 0 || (!layout.summary_columns.empty() && layout.summary_groups < 1))
    throw InvalidArgument(where + ": layout.summary_groups is " +
                          std::to_string(layout.summary_groups) +
                          ", but must be >= " + (layout.summary_columns.empty() ? "0" : "1") +
                          (layout.summary_columns.empty() ? "" : " (summary_columns are given)"));
  for (int c : layout.parameter_table)
    if (c < 0 || c >= static_cast<int>(layout.model->parameters.size()))
      throw InvalidArgument(where + ": layout.parameter_table holds column " + std::to_string(c) +
                            ", but the model has " +
                            std::to_string(layout.model->parameters.size()) + " parameters");
  if (!layout.arm_names.empty() &&
      layout.arm_sampled.size() != layout.arm_names.size() * layout.times.size())
    throw InvalidArgument(where + ": layout.arm_sampled has " +
                          std::to_string(layout.arm_sampled.size()) +
                          " flags, but must have arms x times = " +
                          std::to_string(layout.arm_names.size() * layout.times.size()));
  const int n = static_cast<int>(layout.model->compartments.size());
  if (!layout.metric_names.empty() &&
      (layout.metric_compartment < 0 || layout.metric_compartment >= n))
    throw InvalidArgument(where + ": layout.metric_compartment (0-based) is " +
                          std::to_string(layout.metric_compartment) + ", but must be in [0, " +
                          std::to_string(n) + ")");
}

// The arm (0-based) of the rows of a chunk or summary table whose first extra or group value is
// the arm's number (1-based); -1 without arms. @throws InvalidArgument for a number out of range
inline std::int64_t arm_of(const RunLayout& layout, double number, const std::string& where) {
  if (layout.arm_names.empty()) return -1;
  const auto arms = static_cast<double>(layout.arm_names.size());
  if (!(number >= 1 && number <= arms && number == static_cast<double>(static_cast<int>(number))))
    throw InvalidArgument(where + ": the arm column holds " + std::to_string(number) +
                          ", but must be an arm's number in [1, " +
                          std::to_string(layout.arm_names.size()) + "]");
  return static_cast<std::int64_t>(number) - 1;
}

// The output times of rows of arm `arm` (0-based; -1: the layout's times).
inline std::vector<double> times_of(const RunLayout& layout, std::int64_t arm) {
  return arm < 0 ? layout.times : arm_times_of(layout, arm);
}

// Positions in layout.times of the times of arm `arm` (0-based; -1: none); empty when it samples
// every time of the layout (nothing to widen).
inline std::vector<std::size_t> arm_positions(const RunLayout& layout, std::int64_t arm) {
  std::vector<std::size_t> at;
  if (arm < 0) return at;
  const std::size_t nt = layout.times.size();
  const std::int8_t* row = layout.arm_sampled.data() + static_cast<std::size_t>(arm) * nt;
  for (std::size_t i = 0; i < nt; ++i)
    if (row[i] != 0) at.push_back(i);
  if (at.size() == nt) at.clear();
  return at;
}

// arm_positions of the arm of rows or a table whose values of `columns` start with `values`
// (with arms, the arm's number comes first: `arm` is the first column).
inline std::vector<std::size_t> table_positions(const RunLayout& layout,
                                                const std::vector<std::string>& columns,
                                                const std::vector<double>& values,
                                                const std::string& where) {
  const bool by_arm = !columns.empty() && columns[0] == "arm" && !values.empty();
  return arm_positions(layout, by_arm ? arm_of(layout, values[0], where) : -1);
}

// `rows` blocks of at.size() times x `per_time` values, widened to rows x `times` x per_time
// values in `out`: time i of a block goes to time at[i], the other times hold `fill`.
template <class T>
void widen(const T* in, std::size_t rows, const std::vector<std::size_t>& at, std::size_t times,
           std::size_t per_time, T fill, std::vector<T>& out) {
  out.assign(rows * times * per_time, fill);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < at.size(); ++i)
      std::copy_n(in + (r * at.size() + i) * per_time, per_time,
                  out.data() + (r * times + at[i]) * per_time);
}

// One table's `values` (an arm's times x per_time) on `times` times: `values` itself when `at`
// is empty, else widened into `out` (NaN at the times the arm does not sample).
inline const double* widened(const std::vector<double>& values, const std::vector<std::size_t>& at,
                             std::uint64_t times, std::uint64_t per_time,
                             std::vector<double>& out) {
  if (at.empty()) return values.data();
  widen(values.data(), 1, at, static_cast<std::size_t>(times), static_cast<std::size_t>(per_time),
        std::numeric_limits<double>::quiet_NaN(), out);
  return out.data();
}

// A chunk must continue the rows written so far, hold results of the layout's model, times and
// precision, and carry the per-subject arrays the layout announces. @throws InvalidArgument
inline void check_chunk(const RunLayout& layout, std::int64_t written, const Chunk& chunk,
                        const std::string& where) {
  if (chunk.result == nullptr) throw InvalidArgument(where + ": chunk.result is null");
  const SimulationResult& r = *chunk.result;
  if (chunk.first != written)
    throw InvalidArgument(where + ": chunk.first is " + std::to_string(chunk.first) +
                          ", but must be " + std::to_string(written) +
                          " (chunks arrive in row order, without gaps)");
  if (layout.rows > 0 && written + r.subjects() > layout.rows)
    throw InvalidArgument(where + ": the chunk ends at row " +
                          std::to_string(written + r.subjects()) + ", but layout.rows is " +
                          std::to_string(layout.rows));
  if (r.compartments() != static_cast<int>(layout.model->compartments.size()))
    throw InvalidArgument(where + ": the chunk has " + std::to_string(r.compartments()) +
                          " compartments, but the model " + layout.model->name + " has " +
                          std::to_string(layout.model->compartments.size()));
  if (r.subjects() > 0 && !layout.arm_names.empty() && chunk.extra == nullptr)
    throw InvalidArgument(where + ": chunk.extra is null, but the layout has arms");
  const std::int64_t arm =
      r.subjects() > 0 && !layout.arm_names.empty() ? arm_of(layout, chunk.extra[0], where) : -1;
  if (r.output_times() != times_of(layout, arm))
    throw InvalidArgument(
        where + ": the chunk's output times differ from layout.times" +
        (arm < 0 ? ""
                 : " (those arm " + layout.arm_names[static_cast<std::size_t>(arm)] + " samples)"));
  if (r.precision() != layout.precision)
    throw InvalidArgument(where + ": the chunk's precision differs from layout.precision");
  if (r.subjects() > 0 && !layout.extra_columns.empty() && chunk.extra == nullptr)
    throw InvalidArgument(where + ": chunk.extra is null, but layout.extra_columns has " +
                          std::to_string(layout.extra_columns.size()) + " columns");
  if (r.subjects() > 0 && layout.observations && (chunk.ipred == nullptr || chunk.dv == nullptr))
    throw InvalidArgument(where +
                          ": chunk.ipred or chunk.dv is null, but layout.observations "
                          "is set");
  if (r.subjects() > 0 && layout.blq && chunk.blq == nullptr)
    throw InvalidArgument(where + ": chunk.blq is null, but layout.blq is set");
  if (r.subjects() > 0 && !layout.eta_columns.empty() && chunk.etas == nullptr)
    throw InvalidArgument(where + ": chunk.etas is null, but layout.eta_columns has " +
                          std::to_string(layout.eta_columns.size()) + " names");
  if (r.subjects() > 0 && !layout.parameter_table.empty() && chunk.parameters == nullptr)
    throw InvalidArgument(where + ": chunk.parameters is null, but layout.parameter_table has " +
                          std::to_string(layout.parameter_table.size()) + " columns");
  if (r.subjects() > 0 && !layout.metric_names.empty() && chunk.metrics == nullptr)
    throw InvalidArgument(where + ": chunk.metrics is null, but layout.metric_names has " +
                          std::to_string(layout.metric_names.size()) + " names");
}

// The summary must describe the layout's times and compartments, with consistent sizes.
// @throws InvalidArgument
inline void check_summary(const RunLayout& layout, const TimeSummaryTable& t,
                          const std::string& where) {
  const std::size_t n = layout.model->compartments.size();
  const std::size_t q = t.percentiles.size();
  const bool by_arm = !layout.summary_columns.empty() && layout.summary_columns[0] == "arm";
  const std::int64_t arm = by_arm && !t.group.empty() ? arm_of(layout, t.group[0], where) : -1;
  if (t.times != times_of(layout, arm))
    throw InvalidArgument(
        where + ": the summary's times differ from layout.times" +
        (arm < 0 ? ""
                 : " (those arm " + layout.arm_names[static_cast<std::size_t>(arm)] + " samples)"));
  const std::size_t times = t.times.size();
  if (t.compartments != static_cast<int>(n))
    throw InvalidArgument(where + ": the summary has " + std::to_string(t.compartments) +
                          " compartments, but the model has " + std::to_string(n));
  if (t.mean.size() != times * n)
    throw InvalidArgument(
        where + ": the summary's mean has " + std::to_string(t.mean.size()) +
        " values, but must have times x compartments = " + std::to_string(times * n));
  if (t.group.size() != layout.summary_columns.size())
    throw InvalidArgument(where + ": the summary's group has " + std::to_string(t.group.size()) +
                          " values, but layout.summary_columns has " +
                          std::to_string(layout.summary_columns.size()));
  if (t.quantiles.size() != times * n * q)
    throw InvalidArgument(where + ": the summary's quantiles have " +
                          std::to_string(t.quantiles.size()) +
                          " values, but must have times x compartments x percentiles = " +
                          std::to_string(times * n * q));
}

// commit(): every announced row must have been written. @throws InvalidArgument
inline void check_complete(const RunLayout& layout, std::int64_t written,
                           const std::string& where) {
  if (layout.rows > 0 && written != layout.rows)
    throw InvalidArgument(where + ": " + std::to_string(written) +
                          " rows were written, but layout.rows is " + std::to_string(layout.rows) +
                          "; nothing was committed");
}

// The call order every sink enforces, with the checks above: write() and write_summary() only
// before commit(), write_summary() at most once per summary group (RunLayout::summary_groups,
// at least 1), every group or none, commit() once and only after every announced row. A sink calls
// begin_*() first (it throws InvalidArgument naming the sink) and end_*() once the call has done
// its work.
class SinkProtocol {
 public:
  explicit SinkProtocol(const char* where) : where_(where) {}
  void begin_write(const RunLayout& layout, const Chunk& chunk) const {
    if (committed_) throw InvalidArgument(where_ + ": write() after commit()");
    check_chunk(layout, written_, chunk, where_);
  }
  // write_formatted(): the chunk continues the rows (its content was checked where it was
  // formatted).
  void begin_formatted(const RunLayout& layout, const Chunk& chunk) const {
    if (committed_) throw InvalidArgument(where_ + ": write_formatted() after commit()");
    if (chunk.result == nullptr) throw InvalidArgument(where_ + ": chunk.result is null");
    if (chunk.first != written_ ||
        (layout.rows > 0 && written_ + chunk.result->subjects() > layout.rows))
      throw InvalidArgument(where_ + ": write_formatted(): rows " + std::to_string(chunk.first) +
                            " to " + std::to_string(chunk.first + chunk.result->subjects()) +
                            " do not continue the " + std::to_string(written_) +
                            " rows written (of layout.rows " + std::to_string(layout.rows) + ")");
  }
  void end_write(std::int64_t subjects) noexcept { written_ += subjects; }
  void begin_summary(const RunLayout& layout, const TimeSummaryTable& t) const {
    if (committed_) throw InvalidArgument(where_ + ": write_summary() after commit()");
    if (summaries_ >= groups(layout))
      throw InvalidArgument(where_ + ": write_summary() called " + std::to_string(summaries_ + 1) +
                            " times, but layout.summary_groups is " +
                            std::to_string(groups(layout)));
    check_summary(layout, t, where_);
  }
  void end_summary() noexcept { ++summaries_; }
  void begin_replicate_summary(const RunLayout& layout, const ReplicateSummaryTable& t) const {
    if (committed_) throw InvalidArgument(where_ + ": write_replicate_summary() after commit()");
    if (replicate_summaries_ >= layout.replicate_summary_groups)
      throw InvalidArgument(where_ + ": write_replicate_summary() called " +
                            std::to_string(replicate_summaries_ + 1) +
                            " times, but layout.replicate_summary_groups is " +
                            std::to_string(layout.replicate_summary_groups));
    const bool by_arm =
        !layout.replicate_summary_columns.empty() && layout.replicate_summary_columns[0] == "arm";
    const std::int64_t arm = by_arm && !t.group.empty() ? arm_of(layout, t.group[0], where_) : -1;
    const std::size_t want = t.times.size() * layout.model->compartments.size() *
                             t.statistics.size() * t.percentiles.size();
    if (t.times != times_of(layout, arm) || t.values.size() != want ||
        t.group.size() != layout.replicate_summary_columns.size())
      throw InvalidArgument(where_ +
                            ": the summary across replicates does not match the layout "
                            "(times, sizes or group columns)");
  }
  void end_replicate_summary() noexcept { ++replicate_summaries_; }
  std::int64_t replicate_summaries() const noexcept { return replicate_summaries_; }
  void begin_commit(const RunLayout& layout) const {
    if (committed_) throw InvalidArgument(where_ + ": commit() called twice");
    check_complete(layout, written_, where_);
    if (replicate_summaries_ != layout.replicate_summary_groups)
      throw InvalidArgument(where_ + ": " + std::to_string(replicate_summaries_) + " of " +
                            std::to_string(layout.replicate_summary_groups) +
                            " summaries across replicates were written; nothing was committed");
    if (summaries_ > 0 && summaries_ != groups(layout))
      throw InvalidArgument(where_ + ": " + std::to_string(summaries_) + " of " +
                            std::to_string(groups(layout)) +
                            " summary groups were written; nothing was committed");
  }
  void end_commit() noexcept { committed_ = true; }
  bool summary_written() const noexcept { return summaries_ > 0; }
  // Summary tables written so far (the index of the next group).
  std::int64_t summaries() const noexcept { return summaries_; }
  std::int64_t written() const noexcept { return written_; }
  // Summary tables a run of this layout writes when it writes summaries.
  static std::int64_t groups(const RunLayout& layout) noexcept {
    return std::max<std::int64_t>(layout.summary_groups, 1);
  }

 private:
  std::string where_;
  std::int64_t written_ = 0;    // rows written so far
  std::int64_t summaries_ = 0;  // summary tables written so far
  std::int64_t replicate_summaries_ = 0;
  bool committed_ = false;
};

// Checks the layout, then makes the sink.
template <class Sink>
std::unique_ptr<ResultSink> make_checked_sink(const std::string& path, const RunLayout& layout,
                                              const char* where) {
  check_layout(layout, where);
  return std::make_unique<Sink>(path, layout);
}

}  // namespace pkscan::output::detail
