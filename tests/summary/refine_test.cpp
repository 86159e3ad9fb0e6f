// Exact percentiles at any size (TimeSummary::begin_pass / end_pass): after passes over the same
// subjects, the percentiles equal the test's own type-7 percentiles of the sorted values, bit
// for bit, whatever the values (zeros, negatives, subnormals, ties, float32), and a pass that
// sees other values keeps the estimates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <pkscan/engine.hpp>
#include <pkscan/error.hpp>
#include <pkscan/population.hpp>
#include <pkscan/summary.hpp>
#include <vector>

namespace pkscan {
namespace {

// Parameters of n subjects of an oral three-compartment population with log-normal ka, cl and
// v_central of standard deviation `sd`.
ParameterBatch population(std::int64_t n, double sd, std::uint64_t seed) {
  PopulationSpec s(ModelKind::ThreeCompartment, n, seed);
  s.set_typical("ka", 0.8);
  s.set_typical("cl", 2.0);
  s.set_typical("q", 1.0);
  s.set_typical("v_central", 15.0);
  s.set_typical("v_peripheral", 40.0);
  s.iiv = {s.column("ka"), s.column("cl"), s.column("v_central")};
  s.omega = omega_from_sd({sd, sd, sd}, Eigen::MatrixXd::Identity(3, 3));
  const PopulationSampler sampler(s);
  ParameterBatch b(ModelKind::ThreeCompartment, n);
  sampler.sample(0, 0, n, b.mutable_values());
  return b;
}

// Subjects [first, first + n) of `all` on a grid of `steps` steps of 1 h, 100 mg every 12 h,
// as concentrations (which the summary reads as they are).
SimulationResult simulate_range(const ParameterBatch& all, std::int64_t first, std::int64_t n,
                                std::int64_t steps, Precision precision = Precision::Float64) {
  Problem p;
  p.grid = {1.0, steps};
  DoseEvent d;
  d.amount = 100.0;
  d.every = 12.0;
  d.repeat = 2;
  p.doses = {d};
  p.parameters = ParameterBatch(all.info_ptr(), n);
  std::copy_n(all.row(first), n * all.parameters(), p.parameters.mutable_values());
  SimulateOptions o;
  o.precision = precision;
  o.concentrations = true;
  return simulate(p, o);
}

// numpy.percentile's default (linear, type 7) of sorted values, in numpy's form.
double numpy_percentile(const std::vector<double>& v, double p) {
  const double h = (static_cast<double>(v.size()) - 1.0) * (p / 100.0);
  const double fk = std::floor(h);
  const auto k = static_cast<std::size_t>(fk);
  if (k + 1 >= v.size()) return v.back();
  const double g = h - fk, a = v[k], b = v[k + 1], d = b - a;
  return g < 0.5 ? a + d * g : b - d * (1.0 - g);
}

// Every included subject's value at (time t, compartment c) over the chunks, sorted.
std::vector<double> sorted_column(const std::vector<SimulationResult>& chunks, std::int64_t t,
                                  int c) {
  std::vector<double> v;
  for (const SimulationResult& r : chunks)
    for (std::int64_t s = 0; s < r.subjects(); ++s) {
      bool finite = r.status()[static_cast<std::size_t>(s)] == SubjectStatus::Ok;
      for (std::int64_t i = 0; finite && i < r.times(); ++i)
        for (int k = 0; k < r.compartments(); ++k)
          finite = finite && std::isfinite(r.concentration(s, i, k));
      if (finite) v.push_back(r.concentration(s, t, c));
    }
  std::sort(v.begin(), v.end());
  return v;
}

// Runs passes until begin_pass() says none is needed; returns the passes.
int run_passes(TimeSummary& sum, const std::vector<SimulationResult>& chunks) {
  int passes = 0;
  while (sum.begin_pass()) {
    for (const SimulationResult& r : chunks) sum.add(r);
    sum.end_pass();
    ++passes;
    if (passes > 20) break;  // the documented bound is 8: fails below
  }
  return passes;
}

// Every percentile of the table equals numpy's of the values, bit for bit.
void expect_exact(const std::vector<SimulationResult>& chunks, const TimeSummaryTable& t) {
  const std::size_t P = t.percentiles.size();
  const SimulationResult& r0 = chunks.front();
  int differ = 0;
  for (std::int64_t i = 0; i < r0.times(); ++i)
    for (int c = 0; c < r0.compartments(); ++c) {
      const std::vector<double> v = sorted_column(chunks, i, c);
      ASSERT_EQ(static_cast<std::int64_t>(v.size()), t.count);
      const std::size_t row = static_cast<std::size_t>(i * r0.compartments() + c);
      for (std::size_t p = 0; p < P; ++p) {
        const double want = numpy_percentile(v, t.percentiles[p]);
        const double got = t.quantiles[row * P + p];
        if (got != want && differ++ < 10)
          ADD_FAILURE() << "time " << i << " compartment " << c << " percentile "
                        << t.percentiles[p] << ": " << got << " != " << want;
      }
    }
  EXPECT_EQ(differ, 0);
}

TEST(ExactPercentiles, PassesFindEveryOrderStatisticOfAwkwardValues) {
  // 24000 subjects in uneven chunks; factors make zeros, negatives, subnormals, ties (blocks of
  // identical subjects) and excluded subjects (NaN).
  const std::int64_t n = 24000;
  ParameterBatch all = population(n, 0.3, 5);
  for (std::int64_t s = 20000; s < 22000; ++s)  // ties: 2000 copies of subject 20000
    std::copy_n(all.row(20000), all.parameters(), all.mutable_values() + s * all.parameters());
  std::vector<SimulationResult> chunks;
  for (std::int64_t f = 0, len = 1000; f < n; f += len, len += 1500) {
    len = std::min(len, n - f);
    SimulationResult r = simulate_range(all, f, len, 24);
    std::vector<double> factor(static_cast<std::size_t>(len), 1.0);
    for (std::int64_t s = 0; s < len; ++s) {
      const std::int64_t g = f + s;
      double& x = factor[static_cast<std::size_t>(s)];
      if (g % 7 == 0) x = 0.0;
      if (g % 11 == 0) x = -0.5;
      if (g % 13 == 0) x = 1e-310;  // subnormal values
      if (g % 997 == 0) x = std::numeric_limits<double>::quiet_NaN();
    }
    r.scale_subjects(factor.data());
    chunks.push_back(std::move(r));
  }
  TimeSummaryOptions o;
  o.percentiles = {0, 1, 5, 37.5, 50, 95, 99.9, 100};
  o.exact_values = 1000;  // the sketch after the first chunk
  TimeSummary sum(chunks.front().output_times(), 3, o);
  for (const SimulationResult& r : chunks) sum.add(r);
  EXPECT_FALSE(sum.exact());
  EXPECT_TRUE(sum.needs_pass());
  const TimeSummaryTable before = sum.finish();
  EXPECT_FALSE(before.exact);
  const int passes = run_passes(sum, chunks);
  EXPECT_GE(passes, 1);
  EXPECT_LE(passes, 8);
  EXPECT_EQ(sum.passes(), passes);
  EXPECT_TRUE(sum.exact());
  EXPECT_FALSE(sum.needs_pass());
  EXPECT_FALSE(sum.begin_pass());
  const TimeSummaryTable t = sum.finish();
  EXPECT_TRUE(t.exact);
  EXPECT_EQ(t.count, before.count);
  EXPECT_EQ(t.excluded, before.excluded);
  EXPECT_GT(t.excluded, 0);
  EXPECT_EQ(t.mean, before.mean);  // a pass changes the percentiles only
  EXPECT_NE(t.quantiles, before.quantiles);  // the first pass's were estimates
  expect_exact(chunks, t);
}

TEST(ExactPercentilesCrowded, SeveralPassesWhenTheNeededBucketsHoldManyValues) {
  // A narrow population: each needed bucket of the sketch holds most of the 300000 values of
  // its time, more than one pass may collect, so the first passes count sub-intervals.
  const std::int64_t n = 300000;
  const ParameterBatch all = population(n, 0.002, 9);
  std::vector<SimulationResult> chunks;
  for (std::int64_t f = 0; f < n; f += 60000) chunks.push_back(simulate_range(all, f, 60000, 4));
  TimeSummaryOptions o;
  o.percentiles = {5, 50, 95};
  o.exact_values = 0;
  TimeSummary sum(chunks.front().output_times(), 3, o);
  for (const SimulationResult& r : chunks) sum.add(r);
  const int passes = run_passes(sum, chunks);
  EXPECT_GE(passes, 2);
  EXPECT_LE(passes, 8);
  const TimeSummaryTable t = sum.finish();
  EXPECT_TRUE(t.exact);
  expect_exact(chunks, t);
}

TEST(ExactPercentiles, Float32ValuesAndUnevenChunksOfThePass) {
  const std::int64_t n = 9000;
  const ParameterBatch all = population(n, 0.4, 21);
  std::vector<SimulationResult> first, again;
  for (std::int64_t f = 0; f < n; f += 3000)
    first.push_back(simulate_range(all, f, 3000, 30, Precision::Float32));
  // The pass adds the same subjects in other chunks (order and chunking do not matter).
  again.push_back(simulate_range(all, 4500, 4500, 30, Precision::Float32));
  again.push_back(simulate_range(all, 0, 4500, 30, Precision::Float32));
  TimeSummaryOptions o;
  o.percentiles = {2.5, 50, 97.5};
  o.exact_values = 0;
  TimeSummary sum(first.front().output_times(), 3, o);
  for (const SimulationResult& r : first) sum.add(r);
  while (sum.begin_pass()) {
    for (const SimulationResult& r : again) sum.add(r);
    sum.end_pass();
  }
  EXPECT_TRUE(sum.exact());
  expect_exact(first, sum.finish());
}

TEST(ExactPercentiles, APassOfOtherValuesKeepsTheEstimates) {
  const ParameterBatch all = population(4000, 0.3, 2);
  std::vector<SimulationResult> chunks{simulate_range(all, 0, 4000, 12)};
  TimeSummaryOptions o;
  o.exact_values = 0;
  TimeSummary sum(chunks.front().output_times(), 3, o);
  sum.add(chunks.front());
  const TimeSummaryTable before = sum.finish();
  SimulationResult other = simulate_range(all, 0, 4000, 12);
  std::vector<double> twice(4000, 2.0);
  other.scale_subjects(twice.data());
  ASSERT_TRUE(sum.begin_pass());
  EXPECT_TRUE(sum.in_pass());
  sum.add(other);
  sum.end_pass();
  EXPECT_FALSE(sum.in_pass());
  EXPECT_FALSE(sum.needs_pass());
  EXPECT_FALSE(sum.begin_pass());
  EXPECT_FALSE(sum.exact());
  const TimeSummaryTable after = sum.finish();
  EXPECT_FALSE(after.exact);
  EXPECT_EQ(after.quantiles, before.quantiles);
}

TEST(ExactPercentiles, MisuseIsAnInvalidArgument) {
  const ParameterBatch all = population(3000, 0.3, 4);
  const SimulationResult r = simulate_range(all, 0, 3000, 6);
  TimeSummaryOptions o;
  o.exact_values = 0;
  TimeSummary sum(r.output_times(), 3, o);
  EXPECT_THROW(sum.end_pass(), InvalidArgument);  // none open
  sum.add(r);
  ASSERT_TRUE(sum.begin_pass());
  EXPECT_THROW(sum.begin_pass(), InvalidArgument);  // already open
  const SimulationResult part = simulate_range(all, 0, 1000, 6);
  sum.add(part);
  EXPECT_THROW(sum.end_pass(), InvalidArgument);  // fewer subjects than the summary holds

  // Exact from the start (the values are kept), or no percentiles: no pass.
  TimeSummary kept(r.output_times(), 3, TimeSummaryOptions{});
  kept.add(r);
  EXPECT_TRUE(kept.exact());
  EXPECT_FALSE(kept.needs_pass());
  EXPECT_FALSE(kept.begin_pass());
  TimeSummaryOptions none;
  none.percentiles.clear();
  none.exact_values = 0;
  TimeSummary means(r.output_times(), 3, none);
  means.add(r);
  EXPECT_FALSE(means.begin_pass());
}

}  // namespace
}  // namespace pkscan
