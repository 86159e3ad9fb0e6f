// Streamed population and sweep runs (engine/population/run.cpp, through run files and directly):
// row layout, determinism across thread counts, chunk sizes and CPU methods, summaries against a
// direct computation.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <pkscan/config/load.hpp>
#include <pkscan/config/population_run.hpp>
#include <pkscan/error.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace pkscan::config {
namespace {

namespace fs = std::filesystem;

using test::read_text;

std::vector<std::vector<std::string>> read_csv(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(read_text(path));
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::string cur;
    for (char c : line) {
      if (c == ',') {
        f.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    f.push_back(cur);
    rows.push_back(f);
  }
  return rows;
}

using Scratch = test::ScratchDir;

const char* kPopulation = R"(model: three_compartment
time: {dt: 1, steps: 24}
subjects:
  population:
    count: 2500
    seed: 11
    replicates: 2
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {block: [cl, v_central, ka], omega: [0.09, 0.03, 0.04, 0, 0, 0.16]}
doses:
  - {compartment: depot, time: 0, amount: 100, every: 12, repeat: 1}
output: {summaries: true}
)";

RunSpec spec_of(const std::string& text) { return parse_run_config(text, "test.yaml"); }

TEST(PopulationRun, BitIdenticalAcrossThreadsChunksAndMethods) {
  Scratch dir;
  std::string reference;
  int k = 0;
  for (Method m : {Method::Batched, Method::Scan, Method::Power}) {
    for (int threads : {1, 2}) {
      for (std::int64_t chunk : {std::int64_t{1024}, std::int64_t{3072}, std::int64_t{0}}) {
        RunSpec spec = spec_of(kPopulation);
        spec.options.method = m;
        spec.options.device = Device::Cpu;
        spec.options.threads = threads;
        PopulationRunOptions so;
        so.chunk_rows = chunk;
        const std::string path = dir.file("run" + std::to_string(k++) + ".csv");
        const PopulationRunReport rep = run_streaming(spec, path, so);
        EXPECT_EQ(rep.rows, 5000);
        const std::string all = read_text(path) +
                                read_text(path.substr(0, path.size() - 4) + ".summary.csv") +
                                read_text(path.substr(0, path.size() - 4) + ".metrics.csv");
        if (reference.empty()) {
          reference = all;
          EXPECT_GT(reference.size(), 5000u * 25u * 20u);
        } else {
          EXPECT_TRUE(all == reference)
              << "method " << to_string(m) << ", " << threads << " threads, chunk " << chunk
              << " differs from batched, 1 thread, chunk 1024";
        }
      }
    }
  }
}

TEST(PopulationRun, SummariesOnlyFusedMatchesScanBitForBit) {
  // 2 x 1100 subjects x 701 times x 3 compartments: past the exact phase (4e6 values), so the
  // batched method summarises as it simulates (Engine::summarize_into); the scan simulates
  // first. Summary and metrics files must be the same bytes.
  Scratch dir;
  std::string reference;
  int k = 0;
  for (Method m : {Method::Scan, Method::Batched}) {
    for (int threads : {1, 2}) {
      RunSpec spec = spec_of(R"(model: three_compartment
time: {dt: 0.1, steps: 700}
subjects:
  population:
    count: 1100
    seed: 3
    replicates: 2
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {block: [cl, v_central, ka], omega: [0.09, 0.03, 0.04, 0, 0, 0.16]}
doses:
  - {compartment: depot, time: 0, amount: 100, every: 2.4, repeat: 40}
output: {trajectories: false, summaries: {percentiles: [5, 50, 95]}}
)");
      spec.options.method = m;
      spec.options.device = Device::Cpu;
      spec.options.threads = threads;
      const std::string path = dir.file("f" + std::to_string(k++) + ".csv");
      const PopulationRunReport rep = run_streaming(spec, path);
      EXPECT_EQ(rep.rows, 2200);
      EXPECT_FALSE(fs::exists(path));  // no trajectories
      const std::string stem = path.substr(0, path.size() - 4);
      const std::string all = read_text(stem + ".summary.csv") + read_text(stem + ".metrics.csv");
      if (reference.empty()) {
        reference = all;
        EXPECT_GT(reference.size(), 2200u * 20u);
      } else {
        EXPECT_TRUE(all == reference) << to_string(m) << ", " << threads << " threads";
      }
    }
  }
}

TEST(PopulationRun, RowsIdsReplicateAndSweepColumns) {
  Scratch dir;
  RunSpec spec = spec_of(R"(model: three_compartment
time: {dt: 1, steps: 2}
subjects:
  population:
    count: 3
    seed: 5
    replicates: 2
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09}
sweep: {q: [4, 8], v_peripheral: [50, 60, 70]}
doses:
  - {compartment: central, time: 0, amount: 100}
)");
  const std::string path = dir.file("s.csv");
  run_streaming(spec, path);
  const auto rows = read_csv(path);
  ASSERT_EQ(rows.size(), 1u + 2u * 6u * 3u * 3u);  // replicates x points x subjects x times
  const std::vector<std::string> header = rows[0];
  ASSERT_EQ(header.size(), 11u);
  EXPECT_EQ(header[8], "replicate");
  EXPECT_EQ(header[9], "q");
  EXPECT_EQ(header[10], "v_peripheral");
  // Row order: replicate, sweep point (q slowest), subject, time.
  for (std::size_t r = 1; r < rows.size(); ++r) {
    const std::size_t i = r - 1;
    const std::size_t time = i % 3, subject = (i / 3) % 3, point = (i / 9) % 6, rep = i / 54;
    EXPECT_EQ(rows[r][0], std::to_string(point * 3 + subject + 1)) << r;
    EXPECT_EQ(rows[r][1], std::to_string(time)) << r;
    EXPECT_EQ(rows[r][8], std::to_string(rep + 1)) << r;
    EXPECT_EQ(rows[r][9], point / 3 == 0 ? "4" : "8") << r;
    EXPECT_EQ(rows[r][10], std::to_string(50 + 10 * (point % 3))) << r;
  }
  // A bolus into central with only cl varying: at time 0 every row holds the dose; at time 1
  // the same virtual subject (same cl) differs across sweep points, and subjects differ.
  EXPECT_EQ(rows[1][3], "100");
  EXPECT_NE(rows[2][3], rows[5][3]);  // subjects 1 and 2 of point 1 at time 1
  // Replicates draw different subjects.
  EXPECT_NE(rows[2][3], rows[1 + 54 + 1][3]);
}

TEST(PopulationRun, SweepWithoutPopulationReplacesTheParameter) {
  Scratch dir;
  RunSpec spec = spec_of(R"(model: three_compartment
time: {dt: 1, steps: 3}
subjects:
  parameters: {ka: 1.0, ke: 0.2, k12: 0, k21: 0, v_central: 10, v_peripheral: 1}
sweep: {ke: [0.1, 0.3]}
doses:
  - {compartment: central, time: 0, amount: 100}
)");
  const std::string path = dir.file("s.csv");
  run_streaming(spec, path);
  const auto rows = read_csv(path);
  ASSERT_EQ(rows.size(), 1u + 2u * 4u);
  EXPECT_EQ(rows[0].back(), "ke");
  for (std::size_t r = 1; r < rows.size(); ++r) {
    const double ke = std::stod(rows[r].back());
    const double t = std::stod(rows[r][1]);
    // One-compartment bolus into central: amount = 100 exp(-ke t).
    EXPECT_NEAR(std::stod(rows[r][3]), 100 * std::exp(-ke * t), 1e-12 * 100) << r;
  }
}

// Type-7 percentile (numpy's default) of a sorted vector.
double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double h = (static_cast<double>(v.size()) - 1) * q / 100.0;
  const auto lo = static_cast<std::size_t>(std::floor(h));
  const std::size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (h - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

TEST(PopulationRun, SummaryAndMetricsMatchADirectComputation) {
  Scratch dir;
  RunSpec spec = spec_of(R"(model: three_compartment
time: {dt: 0.5, steps: 48}
subjects:
  population:
    count: 300
    seed: 3
    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {cl: 0.09, v_central: 0.04, ka: 0.1}
doses:
  - {compartment: depot, time: 0, amount: 100, every: 12, repeat: 1}
output: {summaries: {percentiles: [10, 50, 90]}}
)");
  const std::string path = dir.file("p.csv");
  run_streaming(spec, path);
  const auto traj = read_csv(path);
  const auto summ = read_csv(dir.file("p.summary.csv"));
  const auto met = read_csv(dir.file("p.metrics.csv"));
  ASSERT_EQ(traj.size(), 1u + 300u * 49u);
  ASSERT_EQ(summ.size(), 1u + 49u);
  ASSERT_EQ(met.size(), 1u + 300u);
  // Column indices by name.
  auto col = [](const std::vector<std::string>& h, const std::string& n) {
    const auto it = std::find(h.begin(), h.end(), n);
    EXPECT_NE(it, h.end()) << n;
    return static_cast<std::size_t>(it - h.begin());
  };
  const std::size_t cc = col(traj[0], "conc_central");
  std::map<double, std::vector<double>> by_time;
  std::vector<std::vector<std::pair<double, double>>> curves(300);
  for (std::size_t r = 1; r < traj.size(); ++r) {
    const double t = std::stod(traj[r][1]);
    const double c = std::stod(traj[r][cc]);
    by_time[t].push_back(c);
    curves[static_cast<std::size_t>(std::stoll(traj[r][0]) - 1)].emplace_back(t, c);
  }
  const std::size_t mean_c = col(summ[0], "mean_conc_central");
  const std::size_t p10 = col(summ[0], "p10_conc_central");
  const std::size_t p50 = col(summ[0], "p50_conc_central");
  const std::size_t p90 = col(summ[0], "p90_conc_central");
  for (std::size_t r = 1; r < summ.size(); ++r) {
    const double t = std::stod(summ[r][0]);
    const std::vector<double>& v = by_time.at(t);
    double mean = 0;
    for (double x : v) mean += x;
    mean /= static_cast<double>(v.size());
    const double scale = std::max(1e-300, std::abs(mean));
    EXPECT_NEAR(std::stod(summ[r][mean_c]), mean, 1e-12 * scale) << t;
    EXPECT_NEAR(std::stod(summ[r][p10]), percentile(v, 10), 1e-12 * scale) << t;
    EXPECT_NEAR(std::stod(summ[r][p50]), percentile(v, 50), 1e-12 * scale) << t;
    EXPECT_NEAR(std::stod(summ[r][p90]), percentile(v, 90), 1e-12 * scale) << t;
  }
  const std::size_t cmax = col(met[0], "cmax"), tmax = col(met[0], "tmax"),
                    auc = col(met[0], "auc"), cmin = col(met[0], "cmin");
  for (std::size_t s = 0; s < 300; ++s) {
    const auto& cv = curves[s];
    double m = -1, tm = 0, a = 0, mn = 1e300;
    for (std::size_t i = 0; i < cv.size(); ++i) {
      if (cv[i].second > m) m = cv[i].second, tm = cv[i].first;
      if (cv[i].first >= 12.0) mn = std::min(mn, cv[i].second);
      if (i + 1 < cv.size()) {
        const double c0 = cv[i].second, c1 = cv[i + 1].second, dt = cv[i + 1].first - cv[i].first;
        a += (c1 < c0 && c1 > 0) ? (c0 - c1) * dt / std::log(c0 / c1) : (c0 + c1) * dt / 2;
      }
    }
    const auto& row = met[s + 1];
    EXPECT_EQ(row[0], std::to_string(s + 1));
    EXPECT_NEAR(std::stod(row[cmax]), m, 1e-15 * m);
    EXPECT_EQ(std::stod(row[tmax]), tm);
    EXPECT_NEAR(std::stod(row[auc]), a, 1e-10 * a);
    EXPECT_NEAR(std::stod(row[cmin]), mn, 1e-15 * mn);
  }
}

TEST(PopulationRun, NothingLeftWhenASubjectIsInvalid) {
  Scratch dir;
  // Euler with a step too long for the sampled subjects with large ka.
  RunSpec spec = spec_of(R"(model: three_compartment
discretization: euler
time: {dt: 0.5, steps: 10}
subjects:
  population:
    count: 2000
    seed: 1
    typical: {ka: 1.5, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}
    iiv: {ka: 1.0}
doses:
  - {compartment: depot, time: 0, amount: 100}
)");
  const std::string path = dir.file("bad.csv");
  EXPECT_THROW(run_streaming(spec, path), Error);
  EXPECT_FALSE(fs::exists(path));
  std::size_t files = 0;
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 0u);
}

}  // namespace
}  // namespace pkscan::config

// ---- The library's driver with a sink of the caller's own (no run file, no files) ----------

namespace pkscan {
namespace {

// Keeps the ids, the extra columns and the metrics, and checks the call order.
class RecordingSink final : public ResultSink {
 public:
  void write(const Chunk& c) override {
    EXPECT_FALSE(committed);
    EXPECT_EQ(c.first, static_cast<std::int64_t>(ids.size())) << "chunks in row order";
    for (std::int64_t s = 0; s < c.result->subjects(); ++s) {
      ids.push_back(c.ids[s]);
      extra.push_back(c.extra[s]);
      auc.push_back(c.metrics[s * kMetricCount + 2]);
    }
    ++chunks;
  }
  void write_summary(const TimeSummaryTable& t) override {
    EXPECT_FALSE(committed);
    summaries.push_back(t);
  }
  void commit() override { committed = true; }
  std::vector<std::int64_t> ids;
  std::vector<double> extra, auc;
  std::vector<TimeSummaryTable> summaries;
  int chunks = 0;
  bool committed = false;
};

TEST(RunPopulation, ASweepIntoTheCallersSinkGivesClosedFormMetrics) {
  // IV bolus into the central compartment of two_compartment: C = D/V exp(-CL/V t), and the
  // log-down trapezoid AUC over [0, T] is exact for one exponential: D/CL (1 - exp(-CL/V T)).
  PopulationRun run;
  run.problem.grid = {0.5, 48};
  DoseEvent d;
  d.compartment = 1;
  d.amount = 100.0;
  run.problem.doses = {d};
  PopulationSpec pop(ModelKind::TwoCompartment, 1500, 9);  // no variability: typical subjects
  pop.set_typical("cl", 5.0);
  pop.set_typical("v_central", 20.0);
  pop.set_typical("ka", 1.0);
  run.population = pop;
  run.sweep.columns = {pop.column("cl")};
  run.sweep.values = {{2.0, 8.0}};
  run.summaries = true;
  run.trajectories = false;
  const RunLayout layout = population_layout(run);
  EXPECT_EQ(layout.rows, 3000);
  EXPECT_EQ(layout.extra_columns, std::vector<std::string>{"cl"});
  EXPECT_EQ(layout.summary_columns, std::vector<std::string>{"cl"});  // one summary per cl
  EXPECT_EQ(layout.summary_groups, 2);
  RecordingSink sink;
  PopulationRunOptions options;
  options.chunk_rows = 1024;
  const PopulationRunReport report = run_population(run, sink, options);
  EXPECT_TRUE(sink.committed);
  EXPECT_EQ(report.rows, 3000);
  EXPECT_EQ(sink.chunks, 4);  // a call's rows stay in one group: 1024 + 476 per cl
  ASSERT_EQ(sink.ids.size(), 3000u);
  for (std::size_t r = 0; r < 3000; ++r) {
    const double cl = r < 1500 ? 2.0 : 8.0;
    EXPECT_EQ(sink.ids[r], static_cast<std::int64_t>(r) + 1);
    EXPECT_EQ(sink.extra[r], cl);
    EXPECT_NEAR(sink.auc[r], 100.0 / cl * (1.0 - std::exp(-cl / 20.0 * 24.0)), 1e-9 * 100.0 / cl);
  }
  ASSERT_EQ(sink.summaries.size(), 2u);
  for (std::size_t g = 0; g < 2; ++g) {
    const double cl = g == 0 ? 2.0 : 8.0;
    EXPECT_EQ(sink.summaries[g].group, std::vector<double>{cl});
    EXPECT_EQ(sink.summaries[g].count, 1500);
    // Typical subjects: the mean at t = 24 is the closed form of the group's cl.
    const std::size_t last = (sink.summaries[g].times.size() - 1) * 2 + 1;  // central
    EXPECT_NEAR(sink.summaries[g].mean[last], 100.0 / 20.0 * std::exp(-cl / 20.0 * 24.0),
                1e-12 * 5.0);
  }
}

// Grouped summaries do not depend on the chunk size or the thread count, and a group is
// summarised as a run of its rows alone: replicate 2's group at one sweep point equals the
// group of a run with only that sweep point (the draws depend on seed, replicate and subject).
TEST(RunPopulation, GroupedSummariesAreTheSameBitsForAnyChunkAndThreads) {
  PopulationRun run;
  run.problem.grid = {0.5, 12};
  DoseEvent d;
  d.amount = 100.0;
  run.problem.doses = {d};
  PopulationSpec pop(ModelKind::TwoCompartment, 1300, 4);
  pop.set_typical("cl", 5.0);
  pop.set_typical("v_central", 20.0);
  pop.set_typical("ka", 1.0);
  pop.iiv = {pop.column("cl"), pop.column("ka")};
  pop.omega = Eigen::Vector2d(0.09, 0.16).asDiagonal();
  run.population = pop;
  run.replicates = 2;
  run.sweep.columns = {pop.column("ka"), pop.column("cl")};
  run.sweep.values = {{0.5, 2.0}, {4.0, 6.0, 8.0}};
  run.summaries = true;
  run.trajectories = false;
  run.summary_by = SummaryBy{true, {pop.column("cl")}};
  const RunLayout layout = population_layout(run);
  EXPECT_EQ(layout.summary_columns, (std::vector<std::string>{"replicate", "cl"}));
  EXPECT_EQ(layout.summary_groups, 6);
  RecordingSink a, b;
  PopulationRunOptions options;
  run_population(run, a, options);
  options.chunk_rows = 1000;
  run.options.threads = 1;
  run_population(run, b, options);
  ASSERT_EQ(a.summaries.size(), 6u);
  ASSERT_EQ(b.summaries.size(), 6u);
  for (std::size_t g = 0; g < 6; ++g) {
    EXPECT_EQ(a.summaries[g].group,
              (std::vector<double>{g < 3 ? 1.0 : 2.0, 4.0 + 2.0 * static_cast<double>(g % 3)}));
    EXPECT_EQ(a.summaries[g].count, 2600);  // both ka of the replicate
    EXPECT_EQ(a.summaries[g].group, b.summaries[g].group);
    EXPECT_EQ(a.summaries[g].mean, b.summaries[g].mean) << g;
    EXPECT_EQ(a.summaries[g].quantiles, b.summaries[g].quantiles) << g;
  }
  // One ka only: replicate 2 at cl = 6 alone.
  run.sweep.values = {{2.0}, {4.0, 6.0, 8.0}};
  run.summary_by = SummaryBy{true, {pop.column("cl"), pop.column("ka")}};
  RecordingSink c;
  run_population(run, c, options);
  PopulationRun all = run;
  all.sweep.values = {{0.5, 2.0}, {4.0, 6.0, 8.0}};
  RecordingSink full;
  run_population(all, full, options);
  ASSERT_EQ(c.summaries.size(), 6u);
  ASSERT_EQ(full.summaries.size(), 12u);
  // Groups (replicate, ka, cl) in row order: replicate 2, ka 2, cl 6 is group 10 of the full run
  // and group 4 of the one-ka run.
  EXPECT_EQ(full.summaries[10].group, (std::vector<double>{2.0, 2.0, 6.0}));
  EXPECT_EQ(c.summaries[4].group, full.summaries[10].group);
  EXPECT_EQ(c.summaries[4].mean, full.summaries[10].mean);
  EXPECT_EQ(c.summaries[4].quantiles, full.summaries[10].quantiles);
}

TEST(RunPopulation, AnInconsistentRunIsInvalidArgument) {
  PopulationRun run;
  run.problem.grid = {0.5, 4};
  run.population = PopulationSpec(ModelKind::TwoCompartment, 10, 1);
  run.sweep.columns = {99};
  run.sweep.values = {{1.0}};
  RecordingSink sink;
  EXPECT_THROW(run_population(run, sink), InvalidArgument);
  EXPECT_FALSE(sink.committed);
  run.sweep = {};
  run.replicates = 0;
  EXPECT_THROW(run_population(run, sink), InvalidArgument);
}

// The passes of exact percentiles after the last chunk report their progress: each pass from
// its first call to all of the run's rows; the run's own progress ends at its rows before them.
TEST(RunPopulation, ThePassesOfExactPercentilesReportTheirProgress) {
  PopulationRun run;
  run.problem.grid = {1.0, 400};  // 401 times x 2 compartments x 5000 subjects > 4e6 values
  DoseEvent d;
  d.amount = 100.0;
  run.problem.doses = {d};
  PopulationSpec pop(ModelKind::TwoCompartment, 5000, 3);
  pop.set_typical("cl", 5.0);
  pop.set_typical("v_central", 20.0);
  pop.set_typical("ka", 1.0);
  pop.iiv = {pop.column("cl")};
  pop.omega = Eigen::MatrixXd::Identity(1, 1) * 0.09;
  run.population = pop;
  run.summaries = true;
  run.trajectories = false;
  // Keeps the summaries only.
  class SummarySink final : public ResultSink {
   public:
    void write(const Chunk&) override {}
    void write_summary(const TimeSummaryTable& t) override { summaries.push_back(t); }
    void commit() override {}
    std::vector<TimeSummaryTable> summaries;
  } sink;
  PopulationRunOptions options;
  std::vector<std::int64_t> done;
  std::vector<std::array<std::int64_t, 3>> passes;  // pass, done, total
  options.progress = [&](std::int64_t n, std::int64_t total) {
    EXPECT_TRUE(passes.empty()) << "the run's progress comes before the passes";
    EXPECT_EQ(total, 5000);
    done.push_back(n);
  };
  options.pass_progress = [&](int pass, std::int64_t n, std::int64_t total) {
    passes.push_back({pass, n, total});
  };
  run_population(run, sink, options);
  ASSERT_FALSE(done.empty());
  EXPECT_EQ(done.back(), 5000);
  ASSERT_FALSE(passes.empty()) << "5000 x 401 x 2 values need a pass";
  EXPECT_EQ(passes.front()[0], 1);
  for (std::size_t i = 0; i < passes.size(); ++i) {
    EXPECT_EQ(passes[i][2], 5000);
    EXPECT_GT(passes[i][1], 0);
    if (i > 0 && passes[i][0] == passes[i - 1][0]) {
      EXPECT_GT(passes[i][1], passes[i - 1][1]);
    }
    if (i > 0 && passes[i][0] != passes[i - 1][0]) {
      EXPECT_EQ(passes[i][0], passes[i - 1][0] + 1);
      EXPECT_EQ(passes[i - 1][1], 5000) << "a pass ends at the run's last row";
    }
  }
  EXPECT_EQ(passes.back()[1], 5000);
  ASSERT_EQ(sink.summaries.size(), 1u);
  EXPECT_TRUE(sink.summaries[0].exact);
}

}  // namespace
}  // namespace pkscan
