#pragma once
// The sink of one arm of a trial (run_population): the arm's rows go to the run's sink with the
// arm's number first among the extra columns and the summary groups, and rows and ids
// continuing from the arms before.
#include <cstdint>
#include <pkscan/population_run.hpp>
#include <vector>

namespace pkscan::detail {

class ArmSink final : public ResultSink {
 public:
  ArmSink(ResultSink& to, std::int64_t n_total) : to_(to), n_total_(n_total) {}
  void start(std::int64_t arm, std::int64_t first_row, std::int64_t first_subject,
             std::int64_t count, int extras) {
    arm_ = arm;
    first_row_ = first_row;
    first_subject_ = first_subject;
    count_ = count;
    extras_ = extras;
  }
  void write(const Chunk& c) override { to_.write(translate(c)); }
  bool format(const Chunk& c, std::vector<char>& bytes) override {
    return to_.format(translate(c), bytes);
  }
  void write_formatted(const Chunk& c, const std::vector<char>& bytes) override {
    Chunk out = c;
    out.first = first_row_ + c.first;
    to_.write_formatted(out, bytes);
  }

  void write_summary(const TimeSummaryTable& t) override {
    TimeSummaryTable g = t;
    g.group.insert(g.group.begin(), static_cast<double>(arm_ + 1));
    to_.write_summary(g);
  }
  void write_replicate_summary(const ReplicateSummaryTable& t) override {
    ReplicateSummaryTable g = t;
    g.group.insert(g.group.begin(), static_cast<double>(arm_ + 1));
    to_.write_replicate_summary(g);
  }
  void commit() override {}

 private:
  // The arm's chunk as the trial's: rows, extra columns (the arm first) and ids.
  Chunk translate(const Chunk& c) {
    const std::int64_t n = c.result->subjects();
    const auto w = static_cast<std::size_t>(extras_ + 1);
    extra_.resize(static_cast<std::size_t>(n) * w);
    ids_.resize(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      const auto ui = static_cast<std::size_t>(i);
      extra_[ui * w] = static_cast<double>(arm_ + 1);
      for (int k = 0; k < extras_; ++k)
        extra_[ui * w + 1 + static_cast<std::size_t>(k)] =
            c.extra[ui * static_cast<std::size_t>(extras_) + static_cast<std::size_t>(k)];
      // The arm's id (sweep point-major within the arm) as the trial's: sweep point-major
      // over the whole population.
      const std::int64_t id = (c.ids ? c.ids[ui] : c.first + i + 1) - 1;
      ids_[ui] = (id / count_) * n_total_ + first_subject_ + id % count_ + 1;
    }
    Chunk out = c;
    out.first = first_row_ + c.first;
    out.extra = extra_.data();
    out.ids = ids_.data();
    return out;
  }

  ResultSink& to_;
  std::int64_t n_total_;
  std::int64_t arm_ = 0, first_row_ = 0, first_subject_ = 0, count_ = 1;
  int extras_ = 0;
  std::vector<double> extra_;
  std::vector<std::int64_t> ids_;
};

}  // namespace pkscan::detail
