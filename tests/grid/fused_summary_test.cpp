// Engine::summarize_into: the fused simulate-and-summarise path must give the same bits as
// simulating (reference scan) and then calling TimeSummary::add and the metrics, for any
// chunking and thread count, with excluded subjects, every compiled compartment count, float32,
// infusions and sparse output times.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <pkscan/engine.hpp>
#include <pkscan/population.hpp>
#include <pkscan/summary.hpp>
#include <string>
#include <vector>

#include "support/expect_close.hpp"

namespace pkscan {
namespace {

using test::same_bits;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// n subjects of `kind` with log-normal variability on every parameter that has a typical value.
ParameterBatch population(ModelKind kind, std::int64_t n, const std::vector<std::string>& names,
                          const std::vector<double>& typical) {
  PopulationSpec s(kind, n, 7);
  for (std::size_t i = 0; i < names.size(); ++i) {
    s.set_typical(names[i], typical[i]);
    s.iiv.push_back(s.column(names[i]));
  }
  s.omega = Eigen::MatrixXd::Identity(static_cast<Eigen::Index>(names.size()),
                                      static_cast<Eigen::Index>(names.size())) *
            0.09;
  const PopulationSampler sampler(s);
  ParameterBatch b(kind, n);
  sampler.sample(0, 0, n, b.mutable_values());
  return b;
}

struct Outcome {
  TimeSummaryTable table;
  std::vector<double> metrics;
  std::vector<SubjectStatus> status;
  int fused = 0;  // chunks that ran fused
};

// Runs `all` through a TimeSummary in chunks of `chunk` subjects, fused (summarize_into with the
// batched method) or not (the reference scan, then add).
Outcome run(const Problem& base, const ParameterBatch& all, std::int64_t chunk, int threads,
            bool fused, Precision precision, int metric_compartment) {
  SimulateOptions o;
  o.method = fused ? Method::Batched : Method::Scan;
  o.device = Device::Cpu;
  o.threads = threads;
  o.precision = precision;
  o.concentrations = false;
  Problem p = base;
  p.parameters = ParameterBatch(all.info_ptr(), 1);
  std::copy_n(all.row(0), all.parameters(), p.parameters.mutable_values());
  Engine engine;
  const SimulationResult shape = engine.simulate(p, o);
  TimeSummaryOptions to;
  to.exact_values = 0;  // the sketch from the start (the fused path needs it)
  to.percentiles = {0, 5, 50, 95, 100};
  to.threads = threads;
  TimeSummary sum(shape.output_times(), shape.compartments(), to);
  Outcome out;
  const std::int64_t n = all.subjects();
  out.metrics.assign(static_cast<std::size_t>(n * kMetricCount), 0.0);
  const double last = last_dose_time(base.doses);
  SimulationResult r;
  for (std::int64_t first = 0; first < n; first += chunk) {
    const std::int64_t len = std::min(chunk, n - first);
    p.parameters = ParameterBatch(all.info_ptr(), len);
    std::copy_n(all.row(first), len * all.parameters(), p.parameters.mutable_values());
    double* m = out.metrics.data() + first * kMetricCount;
    if (fused) {
      out.fused += engine.summarize_into(p, o, sum, metric_compartment, last, m, r) ? 1 : 0;
    } else {
      engine.simulate_into(p, o, r);
      sum.add(r, metric_compartment, last, m);
    }
    out.status.insert(out.status.end(), r.status().begin(), r.status().end());
  }
  out.table = sum.finish();
  return out;
}

void expect_same(const Outcome& got, const Outcome& want, const std::string& what) {
  EXPECT_TRUE(same_bits(got.table.mean, want.table.mean)) << what << ": means";
  EXPECT_TRUE(same_bits(got.table.quantiles, want.table.quantiles)) << what << ": percentiles";
  EXPECT_EQ(got.table.count, want.table.count) << what;
  EXPECT_EQ(got.table.excluded, want.table.excluded) << what;
  EXPECT_FALSE(got.table.exact) << what;
  EXPECT_TRUE(same_bits(got.metrics, want.metrics)) << what << ": metrics";
  EXPECT_TRUE(got.status == want.status) << what << ": statuses";
}

void check_all_splits(Problem p, const ParameterBatch& all, Precision precision, int mc) {
  const std::int64_t n = all.subjects();
  const Outcome want = run(p, all, n, 1, false, precision, mc);
  ASSERT_GT(want.table.count, 0);
  for (int threads : {1, 2})
    for (std::int64_t chunk : {std::int64_t{1024}, std::int64_t{3072}, n}) {
      const Outcome got = run(p, all, chunk, threads, true, precision, mc);
      EXPECT_EQ(got.fused, static_cast<int>((n + chunk - 1) / chunk))
          << "every chunk starts a block: all fused";
      expect_same(got, want,
                  std::to_string(threads) + " threads, chunks of " + std::to_string(chunk));
    }
}

TEST(FusedSummary, ThreeCompartmentOralMatchesScanThenAdd) {
  Problem p;
  p.grid = {0.5, 150};
  DoseEvent d;
  d.amount = 100.0;
  d.every = 12.0;
  d.repeat = 5;
  p.doses = {d};
  const ParameterBatch all =
      population(ModelKind::ThreeCompartment, 4100, {"ka", "cl", "q", "v_central", "v_peripheral"},
                 {0.8, 2.0, 1.0, 15.0, 40.0});
  check_all_splits(p, all, Precision::Float64, 1);
}

TEST(FusedSummary, Float32InfusionsAndSparseOutputs) {
  Problem p;
  p.grid = {0.25, 400};
  DoseEvent inf;
  inf.compartment = 1;
  inf.amount = 50.0;
  inf.duration = 1.1;  // ends inside a step: partial infusion inputs
  inf.every = 24.0;
  inf.repeat = 3;
  DoseEvent bolus;
  bolus.amount = 20.0;
  bolus.time = 5.0;
  p.doses = {inf, bolus};
  p.output.all = false;
  for (std::int64_t s = 0; s <= 400; s += 7) p.output.steps.push_back(s);
  const ParameterBatch all =
      population(ModelKind::ThreeCompartment, 2500, {"ka", "cl", "q", "v_central", "v_peripheral"},
                 {0.8, 2.0, 1.0, 15.0, 40.0});
  check_all_splits(p, all, Precision::Float32, 1);
  check_all_splits(p, all, Precision::Float64, 2);
}

TEST(FusedSummary, OtherCompartmentCounts) {
  Problem p;
  p.grid = {1.0, 100};
  DoseEvent d;
  d.amount = 10.0;
  d.every = 24.0;
  d.repeat = 3;
  p.doses = {d};
  p.output.all = false;
  for (std::int64_t s = 3; s <= 100; s += 1) p.output.steps.push_back(s);  // no time 0
  check_all_splits(
      p, population(ModelKind::TwoCompartment, 2100, {"ka", "ke", "v_central"}, {1.0, 0.1, 10.0}),
      Precision::Float64, 1);
  check_all_splits(
      p,
      population(ModelKind::FourCompartment, 2100,
                 {"ka", "cl", "q", "q2", "v_central", "v_peripheral1", "v_peripheral2"},
                 {1.0, 2.0, 1.0, 0.5, 10.0, 30.0, 50.0}),
      Precision::Float64, 1);
}

TEST(FusedSummary, ExcludedSubjectsAsInAdd) {
  // As TimeSummary.ExcludesAndCountsNonFiniteSubjects: ka = 20 overflows the central amount
  // (status NonFinite), a tiny central volume overflows only the concentration; both are left
  // out of the summary, with NaN metrics, on either path.
  Problem p;
  p.grid = {1.0, 40};
  DoseEvent depot, central;
  depot.amount = 1.5e308;
  central.compartment = 1;
  central.amount = 1.5e308;
  p.doses = {depot, central};
  constexpr std::int64_t n = 2100;
  ParameterBatch b(ModelKind::ThreeCompartment, n);
  for (std::int64_t s = 0; s < n; ++s) {
    b.set("ka", s, s % 97 == 3 ? 20.0 : 0.0);
    b.set("k12", s, 0.1);
    b.set("k21", s, 0.05);
    b.set("ke", s, s % 97 == 3 ? 0.01 : 0.2 + 1e-4 * static_cast<double>(s));
    b.set("v_depot", s, 1e300);
    b.set("v_central", s, s % 89 == 7 ? 1e-10 : 1e300 * (1.0 + 1e-4 * static_cast<double>(s)));
    b.set("v_peripheral", s, 3e300);
  }
  const Outcome want = run(p, b, n, 1, false, Precision::Float64, 1);
  std::int64_t excluded = 0;
  for (std::int64_t s = 0; s < n; ++s) excluded += s % 97 == 3 || s % 89 == 7;
  EXPECT_EQ(want.table.excluded, excluded);
  for (std::int64_t s = 0; s < n; ++s)
    EXPECT_EQ(std::isnan(want.metrics[static_cast<std::size_t>(s * kMetricCount)]),
              s % 97 == 3 || s % 89 == 7)
        << s;
  check_all_splits(p, b, Precision::Float64, 1);
}

TEST(FusedSummary, FallsBackWhileExactOrOffBlock) {
  Problem p;
  p.grid = {1.0, 10};
  p.doses = {DoseEvent{}};
  p.doses[0].amount = 1.0;
  const ParameterBatch all =
      population(ModelKind::ThreeCompartment, 100, {"ka", "cl", "q", "v_central", "v_peripheral"},
                 {0.8, 2.0, 1.0, 15.0, 40.0});
  SimulateOptions o;
  o.method = Method::Batched;
  o.device = Device::Cpu;
  o.concentrations = false;  // concentration arrays are divided, not multiplied: no fusion
  Problem q = p;
  q.parameters = all;
  Engine engine;
  SimulationResult r;
  std::vector<double> m(100 * kMetricCount);
  {
    TimeSummary exact(engine.simulate(q, o).output_times(), 3);  // 100 x 33 values: exact
    EXPECT_FALSE(engine.summarize_into(q, o, exact, 1, kNaN, m.data(), r));
    EXPECT_TRUE(exact.exact());
    EXPECT_EQ(r.amounts_f64().size(), 100u * 11u * 3u);
  }
  TimeSummaryOptions to;
  to.exact_values = 0;
  TimeSummary sketch(r.output_times(), 3, to);
  EXPECT_TRUE(engine.summarize_into(q, o, sketch, 1, kNaN, m.data(), r));
  EXPECT_TRUE(r.amounts_f64().empty());
  EXPECT_EQ(r.subjects(), 100);
  // The next subject (100) does not start a block of 1024: the two-step path.
  EXPECT_FALSE(engine.summarize_into(q, o, sketch, 1, kNaN, m.data(), r));
  EXPECT_EQ(sketch.subjects(), 200);
  TimeSummary conc(r.output_times(), 3, to);
  o.concentrations = true;
  EXPECT_FALSE(engine.summarize_into(q, o, conc, 1, kNaN, m.data(), r));
  o.concentrations = false;
  o.method = Method::Scan;
  TimeSummary scan(r.output_times(), 3, to);
  EXPECT_FALSE(engine.summarize_into(q, o, scan, 1, kNaN, m.data(), r));
}

}  // namespace
}  // namespace pkscan
