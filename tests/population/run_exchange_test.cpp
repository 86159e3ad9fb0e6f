// run_population split over several "processes" by a RunExchange of the caller's own (here
// threads passing messages through queues, as an MPI or socket transport would): rank 0's sink
// receives the bits of a run in one process, for 2 and 3 ranks; an error on another rank
// reaches rank 0 naming the rank, and rank 0 then commits nothing.
#include <gtest/gtest.h>

#include <Eigen/Core>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <pkscan/error.hpp>
#include <pkscan/population.hpp>
#include <pkscan/population_run.hpp>
#include <string>
#include <thread>
#include <vector>

namespace pkscan {
namespace {

// Messages from each rank to rank 0, in order.
struct Mailbox {
  std::mutex m;
  std::condition_variable cv;
  std::vector<std::deque<std::vector<char>>> from;
};

class QueueExchange final : public RunExchange {
 public:
  QueueExchange(Mailbox& box, int rank, int size, std::int64_t fail_unit = -1)
      : box_(box), rank_(rank), size_(size), fail_unit_(fail_unit) {}
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
  int units = 0;

 private:
  Mailbox& box_;
  int rank_, size_;
  std::int64_t fail_unit_;
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
};
Split split_run(const PopulationRun& run, int size, int fail_rank = -1,
                std::int64_t fail_unit = -1) {
  Mailbox box;
  box.from.resize(static_cast<std::size_t>(size));
  Split out{sink_for(run), std::vector<std::string>(static_cast<std::size_t>(size)),
            std::vector<int>(static_cast<std::size_t>(size))};
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r)
    ranks.emplace_back([&, r] {
      QueueExchange ex(box, r, size, r == fail_rank ? fail_unit : -1);
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
      }
      out.units[static_cast<std::size_t>(r)] = ex.units;
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
// its group) travels with its amounts. Exact percentiles: rank 0's passes.
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
    for (int size : {2, 3}) {
      const Split s = split_run(run, size);
      for (const std::string& e : s.errors) EXPECT_EQ(e, "");
      EXPECT_TRUE(s.sink.committed);
      EXPECT_TRUE(s.sink.bytes == one.bytes) << size << " ranks, exact " << exact;
    }
  }
}

TEST(RunExchange, AnErrorOnAnotherRankReachesRankZeroWhichCommitsNothing) {
  const PopulationRun run = a_run();
  const Split s = split_run(run, 3, 2, 5);  // chunk 5 is rank 2's
  EXPECT_EQ(s.errors[0], "rank 2: subject 7: cl is -1, but must be > 0");
  EXPECT_EQ(s.errors[2], "subject 7: cl is -1, but must be > 0");
  EXPECT_EQ(s.errors[1], "");
  EXPECT_FALSE(s.sink.committed);
  EXPECT_LT(s.sink.rows, 8400);
}

}  // namespace
}  // namespace pkscan
