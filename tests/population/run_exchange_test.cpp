// run_population split over several "processes" by a RunExchange of the caller's own (here
// threads passing messages through queues, as an MPI or socket transport would): rank 0's sink
// receives the bits of a run in one process, for 2 and 3 ranks; an error on another rank
// reaches rank 0 naming the rank, and rank 0 then commits nothing; run_units, the same protocol
// for any work.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <pkscan/engine.hpp>
#include <pkscan/error.hpp>
#include <pkscan/population.hpp>
#include <pkscan/population_run.hpp>
#include <pkscan/summary.hpp>
#include <string>
#include <thread>
#include <vector>

#include "population/exchange.hpp"

namespace pkscan {
namespace {

// Messages from each rank to rank 0, and rank 0's broadcasts to each rank, in order. Once
// rank 0 has failed, a rank waiting for a broadcast stops (as MPI_Abort stops every rank).
struct Mailbox {
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::deque<std::vector<char>>> from;
  std::vector<std::deque<std::vector<char>>> to;
  bool aborted = false;
};

class QueueExchange final : public RunExchange {
 public:
  QueueExchange(Mailbox& box, int rank, int size, std::int64_t fail_unit = -1,
                bool broadcasts = false)
      : box_(box), rank_(rank), size_(size), fail_unit_(fail_unit), broadcasts_(broadcasts) {}
  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }
  void send(const std::vector<char>& message) override {
    std::lock_guard<std::mutex> lock(box_.m);
    box_.from[static_cast<std::size_t>(rank_)].push_back(message);
    box_.cv.notify_all();
  }
  void receive(int from, std::vector<char>& message) override {
    std::unique_lock<std::mutex> lock(box_.m);
    auto& q = box_.from[static_cast<std::size_t>(from)];
    box_.cv.wait(lock, [&] { return !q.empty(); });
    message = std::move(q.front());
    q.pop_front();
  }
  void before_unit(std::int64_t unit) override {
    ++units;
    if (unit == fail_unit_) throw DomainError("subject 7: cl is -1, but must be > 0");
  }
  bool can_broadcast() const noexcept override { return broadcasts_; }
  void broadcast(std::vector<char>& message) override {
    std::unique_lock<std::mutex> lock(box_.m);
    if (rank_ == 0) {
      for (int r = 1; r < size_; ++r) box_.to[static_cast<std::size_t>(r)].push_back(message);
      box_.cv.notify_all();
      return;
    }
    auto& q = box_.to[static_cast<std::size_t>(rank_)];
    box_.cv.wait(lock, [&] { return !q.empty() || box_.aborted; });
    if (q.empty()) throw Error("rank 0 stopped the run");
    message = std::move(q.front());
    q.pop_front();
    ++plans;
  }
  int units = 0;
  int plans = 0;  // broadcasts received

 private:
  Mailbox& box_;
  int rank_, size_;
  std::int64_t fail_unit_;
  bool broadcasts_;
};

// Everything a sink receives, as bytes: the chunks' columns and the summary tables.
class BytesSink final : public ResultSink {
 public:
  void write(const Chunk& c) override {
    const std::int64_t n = c.result->subjects();
    const auto& a = c.result->amounts_f64();
    if (trajectories) put(a.data(), a.size());  // else a sink does not read them
    put(c.ids, static_cast<std::size_t>(n));
    put(c.extra, static_cast<std::size_t>(n) * extras);
    put(c.parameters, static_cast<std::size_t>(n) * parameters);
    if (c.metrics) put(c.metrics, static_cast<std::size_t>(n) * kMetricCount);
    if (c.etas) put(c.etas, static_cast<std::size_t>(n) * etas);
    if (c.dv) put(c.dv, static_cast<std::size_t>(n * c.result->times()));
    rows += n;
  }
  void write_summary(const TimeSummaryTable& t) override {
    put(t.mean.data(), t.mean.size());
    put(t.quantiles.data(), t.quantiles.size());
    put(t.group.data(), t.group.size());
    ++tables;
  }
  void commit() override { committed = true; }
  template <class T>
  void put(const T* p, std::size_t n) {
    const std::size_t at = bytes.size();
    bytes.resize(at + n * sizeof(T));
    if (n) std::memcpy(bytes.data() + at, p, n * sizeof(T));
  }
  std::vector<char> bytes;
  std::int64_t rows = 0;
  int tables = 0;
  bool committed = false;
  std::size_t extras = 0, parameters = 0, etas = 0;
  bool trajectories = true;
};

PopulationRun a_run() {
  PopulationRun run;
  run.problem.grid = {0.5, 24};
  DoseEvent d;
  d.amount = 100.0;
  d.every = 6.0;
  d.repeat = 1;
  run.problem.doses = {d};
  PopulationSpec pop(ModelKind::ThreeCompartment, 2100, 8);
  pop.set_typical("ka", 1.0);
  pop.set_typical("cl", 5.0);
  pop.set_typical("v_central", 20.0);
  pop.set_typical("q", 8.0);
  pop.set_typical("v_peripheral", 70.0);
  pop.iiv = {pop.column("cl"), pop.column("ka")};
  pop.omega = Eigen::Vector2d(0.09, 0.16).asDiagonal();
  run.population = pop;
  run.replicates = 2;
  run.sweep.columns = {pop.column("ka")};
  run.sweep.values = {{0.5, 2.0}};
  run.summaries = true;
  run.residual = ResidualError{};
  run.residual->additive = 0.05;
  run.residual->proportional = 0.1;
  return run;
}

BytesSink sink_for(const PopulationRun& run) {
  const RunLayout layout = population_layout(run);
  BytesSink s;
  s.extras = layout.extra_columns.size();
  s.parameters = layout.model->parameters.size();
  s.etas = layout.eta_columns.size();
  s.trajectories = layout.trajectories;
  return s;
}

// Runs `run` over `size` ranks (threads); rank 0's sink, and each rank's error message.
struct Split {
  BytesSink sink;
  std::vector<std::string> errors;
  std::vector<int> units;
  std::vector<int> plans;
};
Split split_run(const PopulationRun& run, int size, int fail_rank = -1, std::int64_t fail_unit = -1,
                bool broadcasts = false) {
  Mailbox box;
  box.from.resize(static_cast<std::size_t>(size));
  box.to.resize(static_cast<std::size_t>(size));
  Split out{sink_for(run), std::vector<std::string>(static_cast<std::size_t>(size)),
            std::vector<int>(static_cast<std::size_t>(size)),
            std::vector<int>(static_cast<std::size_t>(size))};
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r)
    ranks.emplace_back([&, r] {
      QueueExchange ex(box, r, size, r == fail_rank ? fail_unit : -1, broadcasts);
      PopulationRunOptions o;
      o.chunk_rows = 1024;
      o.exchange = &ex;
      BytesSink other = sink_for(run);
      try {
        run_population(run, r == 0 ? out.sink : other, o);
        if (r != 0) {
          EXPECT_EQ(other.rows, 0) << "only rank 0's sink receives rows";
          EXPECT_FALSE(other.committed);
        }
      } catch (const Error& e) {
        out.errors[static_cast<std::size_t>(r)] = e.what();
        if (r == 0) {
          std::lock_guard<std::mutex> lock(box.m);
          box.aborted = true;
          box.cv.notify_all();
        }
      }
      out.units[static_cast<std::size_t>(r)] = ex.units;
      out.plans[static_cast<std::size_t>(r)] = ex.plans;
    });
  for (auto& t : ranks) t.join();
  return out;
}

TEST(RunExchange, RankZeroGetsTheBitsOfOneProcessForTwoAndThreeRanks) {
  const PopulationRun run = a_run();
  BytesSink one = sink_for(run);
  PopulationRunOptions o;
  o.chunk_rows = 1024;
  run_population(run, one, o);
  ASSERT_TRUE(one.committed);
  ASSERT_EQ(one.rows, 8400);
  ASSERT_EQ(one.tables, 2);  // one per ka, the replicates pooled
  for (int size : {2, 3}) {
    const Split s = split_run(run, size);
    for (const std::string& e : s.errors) EXPECT_EQ(e, "");
    EXPECT_TRUE(s.sink.committed);
    EXPECT_EQ(s.sink.rows, one.rows);
    EXPECT_EQ(s.sink.tables, one.tables);
    EXPECT_TRUE(s.sink.bytes == one.bytes) << size << " ranks: other bytes";
    // 12 chunks (each group's 2100 rows: 1024 + 1024 + 52), chunk u simulated by rank u mod size.
    for (int r = 0; r < size; ++r) EXPECT_EQ(s.units[static_cast<std::size_t>(r)], 12 / size) << r;
  }
}

// Summaries only, groups past their exact phase (ka's two groups pool two replicates of 2100
// subjects: 4200 x 501 x 3 values each): the ranks summarise their units that start a block and
// send sums and sketches; a unit that starts inside a block (replicate 2's, at subject 2100 of
// its group) travels with its amounts. Exact percentiles need passes over the groups: rank 0's
// alone, or (an exchange that broadcasts) split over the ranks, each rank's values merged on
// rank 0.
TEST(RunExchange, SummariesByTheRanksAreTheBitsOfOneProcess) {
  PopulationRun run = a_run();
  run.problem.grid = {0.1, 500};
  run.trajectories = false;
  run.residual.reset();
  for (bool exact : {true, false}) {
    run.exact_percentiles = exact;
    BytesSink one = sink_for(run);
    PopulationRunOptions o;
    o.chunk_rows = 1024;
    run_population(run, one, o);
    ASSERT_EQ(one.tables, 2);
    for (int size : {2, 3})
      for (bool broadcasts : {false, true}) {
        const Split s = split_run(run, size, -1, -1, broadcasts);
        for (const std::string& e : s.errors) EXPECT_EQ(e, "");
        EXPECT_TRUE(s.sink.committed);
        EXPECT_TRUE(s.sink.bytes == one.bytes)
            << size << " ranks, exact " << exact << ", broadcasts " << broadcasts;
        // With exact percentiles every rank takes each pass's plan (one pass, then the plan
        // that ends the passes), else none.
        for (int r = 1; r < size; ++r)
          EXPECT_EQ(s.plans[static_cast<std::size_t>(r)], exact && broadcasts ? 2 : 0) << r;
      }
  }
}

// The messages of passes split over three ranks, with an exact-value budget far below the
// values needed, so that passes count values in sub-intervals before they collect them: rank
// 0's summary merges the plans' values and counts found by the others into the bits of one
// summary that runs its passes alone. Uneven chunks, chunk i added on rank i mod 3.
TEST(RunExchange, PassValuesOfTheRanksMergeIntoTheExactPercentilesOfOneSummary) {
  PopulationRun run = a_run();
  run.problem.grid = {1.0, 24};
  PopulationSpec& pop = *run.population;
  pop.count = 9000;
  // Nearly equal subjects: each row's values lie in one cell of the sketch, more than a pass
  // may collect.
  pop.omega = Eigen::Matrix2d::Identity() * 1e-14;
  const PopulationSampler sampler(pop);
  ParameterBatch all(ModelKind::ThreeCompartment, pop.count);
  sampler.sample(0, 0, pop.count, all.mutable_values());
  std::vector<SimulationResult> chunks;
  for (std::int64_t f = 0, len = 700; f < pop.count; f += len, len += 300) {
    len = std::min(len, pop.count - f);
    Problem p = run.problem;
    p.parameters = ParameterBatch(all.info_ptr(), len);
    std::copy_n(all.row(f), len * all.parameters(), p.parameters.mutable_values());
    chunks.push_back(simulate(p));
  }
  TimeSummaryOptions o;
  o.percentiles = {0, 2.5, 50, 97.5, 99.9, 100};
  o.exact_values = 500;
  const auto summary = [&](std::int64_t exact_values) {
    TimeSummaryOptions w = o;
    w.exact_values = exact_values;
    std::vector<TimeSummary> v;
    v.emplace_back(chunks[0].output_times(), chunks[0].compartments(), w);
    return v;
  };
  std::vector<TimeSummary> one = summary(o.exact_values), zero = summary(o.exact_values);
  for (const SimulationResult& r : chunks) {
    one[0].add(r);
    zero[0].add(r);
  }
  int passes = 0;
  while (one[0].begin_pass()) {
    for (const SimulationResult& r : chunks) one[0].add(r);
    one[0].end_pass();
    ASSERT_LT(++passes, 9);
  }
  ASSERT_GE(passes, 2) << "a pass that counts, then one that collects";
  std::vector<std::vector<TimeSummary>> others;
  others.push_back(summary(0));
  others.push_back(summary(0));
  std::vector<char> plan, values;
  int split = 0;
  for (;;) {
    const bool open = zero[0].begin_pass();
    detail::pack_pass_plan(zero, plan);
    for (auto& w : others) ASSERT_EQ(detail::unpack_pass_plan(plan, w), open);
    if (!open) break;
    for (std::size_t i = 0; i < chunks.size(); ++i)
      (i % 3 == 0 ? zero : others[i % 3 - 1])[0].add(chunks[i]);
    for (int r = 1; r <= 2; ++r) {
      detail::pack_pass_values(others[static_cast<std::size_t>(r - 1)], values);
      detail::unpack_pass_values(values, r, zero);
    }
    zero[0].end_pass();
    ASSERT_LT(++split, 9);
  }
  EXPECT_EQ(split, passes);
  const TimeSummaryTable a = one[0].finish(), b = zero[0].finish();
  ASSERT_TRUE(a.exact);
  EXPECT_TRUE(b.exact);
  ASSERT_EQ(a.quantiles.size(), b.quantiles.size());
  EXPECT_EQ(std::memcmp(a.quantiles.data(), b.quantiles.data(), a.quantiles.size() * 8), 0);
  // A message of values for other passes than those open is refused.
  EXPECT_THROW(detail::unpack_pass_values(values, 1, zero), Error);
}

TEST(RunExchange, AnErrorOnAnotherRankReachesRankZeroWhichCommitsNothing) {
  const PopulationRun run = a_run();
  const Split s = split_run(run, 3, 2, 5);  // chunk 5 is rank 2's
  EXPECT_EQ(s.errors[0], "rank 2: subject 7: cl is -1, but must be > 0");
  EXPECT_EQ(s.errors[2], "subject 7: cl is -1, but must be > 0");
  EXPECT_EQ(s.errors[1], "");
  EXPECT_FALSE(s.sink.committed);
  EXPECT_LT(s.sink.rows, 8400);
  // Passes split over the ranks: rank 0 stops at the error, and so do the others.
  const Split b = split_run(run, 3, 2, 5, true);
  EXPECT_EQ(b.errors[0], "rank 2: subject 7: cl is -1, but must be > 0");
  EXPECT_FALSE(b.sink.committed);
}

// run_units over 1 to 3 ranks: every unit made once, by rank u mod size, and taken by rank 0 in
// unit order with its own bytes; commit after all; an error on rank 2 reaches rank 0 with its
// kind and rank, and nothing is committed.
TEST(RunExchange, RunUnitsTakesEveryUnitInOrderFromItsRank) {
  for (int size = 1; size <= 3; ++size) {
    for (const std::int64_t fail : {std::int64_t{-1}, std::int64_t{5}}) {
      Mailbox box;
      box.from.resize(static_cast<std::size_t>(size));
      box.to.resize(static_cast<std::size_t>(size));
      std::vector<std::string> taken;
      std::vector<std::vector<std::int64_t>> made(static_cast<std::size_t>(size));
      std::vector<std::string> errors(static_cast<std::size_t>(size));
      bool committed = false;
      const auto rank_main = [&](int rank) {
        QueueExchange ex(box, rank, size, rank == 5 % size ? fail : -1);
        try {
          run_units(
              ex, 7,
              [&](std::int64_t u, std::vector<char>& bytes) {
                made[static_cast<std::size_t>(rank)].push_back(u);
                const std::string text =
                    "unit " + std::to_string(u) + " of rank " + std::to_string(rank);
                bytes.assign(text.begin(), text.end());
              },
              [&](std::int64_t u, const std::vector<char>& bytes) {
                EXPECT_EQ(rank, 0);
                EXPECT_EQ(static_cast<std::int64_t>(taken.size()), u);
                taken.emplace_back(bytes.begin(), bytes.end());
              },
              [&] {
                EXPECT_EQ(rank, 0);
                committed = true;
              });
        } catch (const DomainError& e) {
          errors[static_cast<std::size_t>(rank)] = e.what();
        }
      };
      std::vector<std::thread> others;
      for (int r = 1; r < size; ++r) others.emplace_back(rank_main, r);
      rank_main(0);
      for (std::thread& t : others) t.join();
      if (fail < 0) {
        ASSERT_EQ(taken.size(), 7u);
        for (std::int64_t u = 0; u < 7; ++u)
          EXPECT_EQ(taken[static_cast<std::size_t>(u)],
                    "unit " + std::to_string(u) + " of rank " + std::to_string(u % size));
        for (int r = 0; r < size; ++r)
          for (std::int64_t u : made[static_cast<std::size_t>(r)]) EXPECT_EQ(u % size, r);
        EXPECT_TRUE(committed);
      } else {
        const int owner = static_cast<int>(fail % size);
        EXPECT_FALSE(committed);
        EXPECT_LT(taken.size(), 7u);
        EXPECT_EQ(errors[0], (owner == 0 ? std::string() : "rank " + std::to_string(owner) + ": ") +
                                 "subject 7: cl is -1, but must be > 0");
      }
    }
  }
}

}  // namespace
}  // namespace pkscan
