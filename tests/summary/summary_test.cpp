// Streaming summaries (means and percentiles per output time) and exposure metrics, against
// direct computations in the test: sorting and type-7 percentiles, plain means, the
// linear-up/log-down trapezoid written out, closed forms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <pkscan/engine.hpp>
#include <pkscan/error.hpp>
#include <pkscan/population.hpp>
#include <pkscan/summary.hpp>
#include <string>
#include <vector>

namespace pkscan {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Parameters of n subjects: an oral three-compartment population with log-normal ka, cl,
// v_central (the sampler is tested on its own in tests/population/population_test.cpp).
ParameterBatch population(std::int64_t n, std::uint64_t seed = 11) {
  PopulationSpec s(ModelKind::ThreeCompartment, n, seed);
  s.set_typical("ka", 0.8);
  s.set_typical("cl", 2.0);
  s.set_typical("q", 1.0);
  s.set_typical("v_central", 15.0);
  s.set_typical("v_peripheral", 40.0);
  s.iiv = {s.column("ka"), s.column("cl"), s.column("v_central")};
  Eigen::MatrixXd r = Eigen::MatrixXd::Identity(3, 3);
  r(1, 2) = r(2, 1) = 0.4;
  s.omega = omega_from_sd({0.4, 0.3, 0.25}, r);
  const PopulationSampler sampler(s);
  ParameterBatch b(ModelKind::ThreeCompartment, n);
  sampler.sample(0, 0, n, b.mutable_values());
  return b;
}

Problem base_problem(double dt, std::int64_t steps) {
  Problem p;
  p.grid = {dt, steps};
  DoseEvent d;
  d.amount = 100.0;
  d.every = 12.0;
  d.repeat = 2;
  p.doses = {d};
  return p;
}

// Subjects [first, first + n) of `all`, simulated by the reference scan (each subject's values
// do not depend on the chunk it is in).
SimulationResult simulate_range(const Problem& base, const ParameterBatch& all, std::int64_t first,
                                std::int64_t n, bool concentrations = true,
                                Precision precision = Precision::Float64) {
  Problem p = base;
  p.parameters = ParameterBatch(all.info_ptr(), n);
  std::copy_n(all.row(first), n * all.parameters(), p.parameters.mutable_values());
  SimulateOptions o;
  o.method = Method::Scan;
  o.device = Device::Cpu;
  o.threads = 1;
  o.concentrations = concentrations;
  o.precision = precision;
  return simulate(p, o);
}

// The test's own type-7 percentile of unsorted values.
double percentile7(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const double h = (static_cast<double>(v.size()) - 1.0) * p / 100.0;
  const std::size_t k = static_cast<std::size_t>(std::floor(h));
  if (k + 1 >= v.size()) return v.back();
  return v[k] + (h - static_cast<double>(k)) * (v[k + 1] - v[k]);
}

// Values of one (time, compartment) across the included subjects of several chunks.
std::vector<double> column(const std::vector<SimulationResult>& chunks, std::int64_t t, int c) {
  std::vector<double> v;
  for (const SimulationResult& r : chunks)
    for (std::int64_t s = 0; s < r.subjects(); ++s) {
      if (r.status()[static_cast<std::size_t>(s)] != SubjectStatus::Ok) continue;
      bool finite = true;
      for (std::int64_t i = 0; i < r.times(); ++i)
        for (int k = 0; k < r.compartments(); ++k)
          finite = finite && std::isfinite(r.concentration(s, i, k));
      if (finite) v.push_back(r.concentration(s, t, c));
    }
  return v;
}

TimeSummaryTable summarize(const std::vector<SimulationResult>& chunks, TimeSummaryOptions o = {}) {
  TimeSummary sum(chunks.front().output_times(), chunks.front().compartments(), std::move(o));
  for (const SimulationResult& r : chunks) sum.add(r);
  return sum.finish();
}

void expect_table_matches_direct(const std::vector<SimulationResult>& chunks,
                                 const TimeSummaryTable& t, double rtol) {
  const SimulationResult& r0 = chunks.front();
  const std::size_t P = t.percentiles.size();
  for (std::int64_t i = 0; i < r0.times(); ++i)
    for (int c = 0; c < r0.compartments(); ++c) {
      const std::vector<double> v = column(chunks, i, c);
      double mean = 0.0;
      for (double x : v) mean += x;
      mean /= static_cast<double>(v.size());
      const std::size_t row = static_cast<std::size_t>(i * r0.compartments() + c);
      EXPECT_NEAR(t.mean[row], mean, std::max(1e-13, rtol) * std::fabs(mean) + 1e-300)
          << "time " << i << " compartment " << c;
      for (std::size_t p = 0; p < P; ++p) {
        const double want = percentile7(v, t.percentiles[p]);
        EXPECT_NEAR(t.quantiles[row * P + p], want, rtol * std::fabs(want) + 1e-300)
            << "time " << i << " compartment " << c << " percentile " << t.percentiles[p];
      }
    }
}

TEST(TimeSummary, ExactPercentilesAndMeansMatchDirectComputation) {
  const ParameterBatch all = population(333);
  const Problem base = base_problem(0.5, 60);
  // Uneven chunks; one from amounts / volume, the others from concentration arrays.
  std::vector<SimulationResult> chunks;
  chunks.push_back(simulate_range(base, all, 0, 100));
  chunks.push_back(simulate_range(base, all, 100, 1, false));
  chunks.push_back(simulate_range(base, all, 101, 232));
  TimeSummaryOptions o;
  o.percentiles = {5, 50, 95, 0, 100, 37.5};
  const TimeSummaryTable t = summarize(chunks, o);
  EXPECT_TRUE(t.exact);
  EXPECT_EQ(t.count, 333);
  EXPECT_EQ(t.excluded, 0);
  EXPECT_EQ(t.compartments, 3);
  EXPECT_EQ(t.times, chunks.front().output_times());
  ASSERT_EQ(t.mean.size(), 61u * 3u);
  ASSERT_EQ(t.quantiles.size(), 61u * 3u * 6u);
  // amount * (1 / volume) is within one rounding of amount / volume
  expect_table_matches_direct(chunks, t, 4e-16);
  // t = 0: central and peripheral are 0 for everyone (the dose is in the depot)
  EXPECT_EQ(t.quantiles[1 * 6 + 1], 0.0);
  EXPECT_EQ(t.mean[2], 0.0);
}

TEST(TimeSummary, SketchIsWithinItsDocumentedBound) {
  const ParameterBatch all = population(3000, 3);
  const Problem base = base_problem(1.0, 48);
  std::vector<SimulationResult> chunks;
  for (std::int64_t f = 0; f < 3000; f += 1024)
    chunks.push_back(simulate_range(base, all, f, std::min<std::int64_t>(1024, 3000 - f)));
  TimeSummaryOptions o;
  o.percentiles = {1, 5, 25, 50, 75, 95, 99};
  o.exact_values = 0;  // sketch from the first value
  const TimeSummaryTable t = summarize(chunks, o);
  EXPECT_FALSE(t.exact);
  EXPECT_EQ(t.count, 3000);
  const std::size_t P = o.percentiles.size();
  const double window = std::ldexp(1.0, -32);
  int checked = 0;
  for (std::int64_t i = 0; i < chunks[0].times(); ++i)
    for (int c = 0; c < 3; ++c) {
      std::vector<double> v = column(chunks, i, c);
      std::sort(v.begin(), v.end());
      const std::size_t row = static_cast<std::size_t>(i * 3 + c);
      double mean = 0.0;
      for (double x : v) mean += x;
      mean /= static_cast<double>(v.size());
      EXPECT_NEAR(t.mean[row], mean, 1e-13 * std::fabs(mean));  // means stay exact
      for (std::size_t p = 0; p < P; ++p) {
        const double want = percentile7(v, o.percentiles[p]);
        // The documented bound: 2^-8 x for an order statistic x in the window, max * 2^-32
        // below it, combined with the interpolation weights.
        const double h = (static_cast<double>(v.size()) - 1.0) * o.percentiles[p] / 100.0;
        const std::size_t k = static_cast<std::size_t>(std::floor(h));
        const double g = h - static_cast<double>(k);
        auto err = [&](double x) {
          return x >= v.back() * window ? std::ldexp(x, -8) : v.back() * window;
        };
        const double bound = (1 - g) * err(v[k]) + g * err(v[std::min(k + 1, v.size() - 1)]);
        EXPECT_LE(std::fabs(t.quantiles[row * P + p] - want), bound)
            << "time " << i << " compartment " << c << " percentile " << o.percentiles[p]
            << ": sketch " << t.quantiles[row * P + p] << ", exact " << want;
        ++checked;
      }
    }
  EXPECT_EQ(checked, 49 * 3 * 7);
}

TEST(TimeSummary, SwitchesFromExactToSketchWhenTheValuesDoNotFit) {
  const ParameterBatch all = population(600, 8);
  const Problem base = base_problem(1.0, 24);
  std::vector<SimulationResult> chunks;
  for (std::int64_t f = 0; f < 600; f += 200) chunks.push_back(simulate_range(base, all, f, 200));
  TimeSummaryOptions o;
  o.exact_values = 500 * 25 * 3;  // 500 subjects fit, 600 do not
  TimeSummary sum(chunks[0].output_times(), 3, o);
  sum.add(chunks[0]);
  sum.add(chunks[1]);
  EXPECT_TRUE(sum.exact());
  sum.add(chunks[2]);
  EXPECT_FALSE(sum.exact());
  const TimeSummaryTable t = sum.finish();
  EXPECT_FALSE(t.exact);
  for (std::int64_t i = 1; i < 25; ++i)
    for (int c = 0; c < 3; ++c) {
      const std::vector<double> v = column(chunks, i, c);
      for (std::size_t p = 0; p < 3; ++p) {
        const double want = percentile7(v, t.percentiles[p]);
        EXPECT_LE(std::fabs(t.quantiles[static_cast<std::size_t>(i * 3 + c) * 3 + p] - want),
                  std::ldexp(want, -8));
      }
    }
}

// Bit-identical tables for any chunking (multiples of 1024 and others) and thread count.
TEST(TimeSummary, DeterministicAcrossChunkingsAndThreads) {
  constexpr std::int64_t n = 5000;
  const ParameterBatch all = population(n, 21);
  const Problem base = base_problem(0.5, 100);
  for (const std::int64_t exact_values : {std::int64_t{0}, std::int64_t{10'000'000}}) {
    std::vector<TimeSummaryTable> tables;
    std::vector<std::vector<double>> metrics;
    const std::vector<std::vector<std::int64_t>> splits = {
        {n}, {1024, 1024, 1024, 1024, 904}, {2048, 2048, 904}, {3072, 1928}, {1000, 37, 3963}};
    for (const std::vector<std::int64_t>& split : splits)
      for (int threads : {1, 2}) {
        TimeSummaryOptions o;
        o.threads = threads;
        o.exact_values = exact_values;
        std::vector<double> times;
        for (std::int64_t i = 0; i <= base.grid.steps; ++i) times.push_back(base.grid.time(i));
        TimeSummary sum(times, 3, o);
        std::int64_t first = 0;
        std::vector<double> m(static_cast<std::size_t>(n * kMetricCount));
        for (std::int64_t len : split) {
          const SimulationResult r = simulate_range(base, all, first, len, false);
          sum.add(r, 1, 24.0, m.data() + first * kMetricCount);
          first += len;
        }
        tables.push_back(sum.finish());
        metrics.push_back(m);
      }
    for (std::size_t k = 1; k < tables.size(); ++k) {
      SCOPED_TRACE("split/threads case " + std::to_string(k));
      ASSERT_EQ(tables[k].mean.size(), tables[0].mean.size());
      EXPECT_EQ(0, std::memcmp(tables[k].mean.data(), tables[0].mean.data(),
                               tables[0].mean.size() * sizeof(double)));
      EXPECT_EQ(0, std::memcmp(tables[k].quantiles.data(), tables[0].quantiles.data(),
                               tables[0].quantiles.size() * sizeof(double)));
      EXPECT_EQ(
          0, std::memcmp(metrics[k].data(), metrics[0].data(), metrics[0].size() * sizeof(double)));
    }
    EXPECT_EQ(tables[0].exact, exact_values > 0);
  }
}

TEST(TimeSummary, ExcludesAndCountsNonFiniteSubjects) {
  // ka = 0 keeps the 1.5e308 depot dose where it is; ka = 20 moves it into a central
  // compartment that already holds 1.5e308: the amount overflows (status NonFinite). A tiny central
  // volume overflows only the concentration (status Ok, concentration infinite).
  Problem p;
  p.grid = {1.0, 6};
  DoseEvent depot, central;
  depot.amount = 1.5e308;
  central.compartment = 1;
  central.amount = 1.5e308;
  p.doses = {depot, central};
  constexpr std::int64_t n = 40;
  ParameterBatch b(ModelKind::ThreeCompartment, n);
  for (std::int64_t s = 0; s < n; ++s) {
    b.set("ka", s, s % 10 == 3 ? 20.0 : 0.0);
    b.set("k12", s, 0.1);
    b.set("k21", s, 0.05);
    b.set("ke", s, s % 10 == 3 ? 0.01 : 0.2 + 0.01 * static_cast<double>(s));
    // huge volumes keep the other concentrations (and their sums) finite
    b.set("v_depot", s, 1e300);
    b.set("v_central", s, s % 10 == 7 ? 1e-10 : 1e300 * (1.0 + 0.01 * static_cast<double>(s)));
    b.set("v_peripheral", s, 3e300);
  }
  std::vector<SimulationResult> chunks;
  for (bool conc : {true, false}) {
    chunks.clear();
    chunks.push_back(simulate_range(p, b, 0, 25, conc));
    chunks.push_back(simulate_range(p, b, 25, 15, conc));
    int non_finite_status = 0;
    for (const SimulationResult& r : chunks)
      for (SubjectStatus st : r.status()) non_finite_status += st == SubjectStatus::NonFinite;
    ASSERT_EQ(non_finite_status, 4);  // subjects 3, 13, 23, 33
    TimeSummary sum(chunks[0].output_times(), 3);
    std::vector<double> m(static_cast<std::size_t>(n * kMetricCount));
    sum.add(chunks[0], 1, kNaN, m.data());
    sum.add(chunks[1], 1, kNaN, m.data() + 25 * kMetricCount);
    const TimeSummaryTable t = sum.finish();
    EXPECT_EQ(t.count, 32);
    EXPECT_EQ(t.excluded, 8);
    EXPECT_EQ(sum.excluded(), 8);
    expect_table_matches_direct(chunks, t, 4e-16);
    for (std::int64_t s = 0; s < n; ++s) {
      const bool excluded = s % 10 == 3 || s % 10 == 7;
      for (int k = 0; k < kMetricCount; ++k)
        EXPECT_EQ(std::isnan(m[static_cast<std::size_t>(s * kMetricCount + k)]), excluded)
            << "subject " << s << " metric " << kMetricNames[static_cast<std::size_t>(k)];
    }
    // The standalone metrics agree.
    std::vector<double> m2(static_cast<std::size_t>(25 * kMetricCount));
    subject_metrics(chunks[0], 1, kNaN, m2.data());
    for (std::size_t i = 0; i < m2.size(); ++i)
      EXPECT_TRUE(m2[i] == m[i] || (std::isnan(m2[i]) && std::isnan(m[i])));
  }
}

TEST(TimeSummary, EmptyAndFloat32) {
  const ParameterBatch all = population(50, 4);
  const Problem base = base_problem(1.0, 12);
  const SimulationResult r = simulate_range(base, all, 0, 50, true, Precision::Float32);
  TimeSummary sum(r.output_times(), 3);
  const TimeSummaryTable empty = sum.finish();
  EXPECT_EQ(empty.count, 0);
  EXPECT_TRUE(std::isnan(empty.mean[4]));
  EXPECT_TRUE(std::isnan(empty.quantiles[4]));
  sum.add(r);
  expect_table_matches_direct({r}, sum.finish(), 1e-15);
  // float32 amounts without concentration arrays: widened to double and multiplied by
  // 1 / volume, within float32 rounding of the float32 division concentration() does
  const SimulationResult a = simulate_range(base, all, 0, 50, false, Precision::Float32);
  TimeSummary from_amounts(a.output_times(), 3);
  from_amounts.add(a);
  expect_table_matches_direct({a}, from_amounts.finish(), 2e-7);
}

// Two and four compartments, and a five-compartment linear model (rows per sub-tile that are
// not a multiple of 8 in the last one), through the exact path and the sketch.
TEST(TimeSummary, OtherCompartmentCounts) {
  std::vector<ParameterBatch> batches;
  ParameterBatch two(ModelKind::TwoCompartment, 300);
  ParameterBatch four(ModelKind::FourCompartment, 300);
  for (std::int64_t s = 0; s < 300; ++s) {
    const double f = 1.0 + 0.003 * static_cast<double>(s);
    two.set("ka", s, 0.9 * f);
    two.set("cl", s, 2.0 / f);
    two.set("v_central", s, 10.0 * f);
    for (const char* k : {"ka", "k12", "k21", "k13", "k31"}) four.set(k, s, 0.2 * f);
    four.set("ke", s, 0.1 / f);
    for (const char* v : {"v_central", "v_peripheral1", "v_peripheral2"}) four.set(v, s, 5.0 * f);
  }
  const std::shared_ptr<const ModelInfo> lin =
      make_linear_model({"gut", "central", "p1", "p2", "p3"}, {{"gut", "central", "ka"},
                                                               {"central", "p1", "k1"},
                                                               {"p1", "p2", "k2"},
                                                               {"p2", "p3", "k3"},
                                                               {"p3", "central", "k4"},
                                                               {"central", "", "ke"}});
  ParameterBatch five(lin, 300);
  for (std::int64_t s = 0; s < 300; ++s) {
    const double f = 1.0 + 0.003 * static_cast<double>(s);
    for (const char* k : {"ka", "k1", "k2", "k3", "k4", "ke"}) five.set(k, s, 0.15 * f);
    five.set("v_central", s, 3.0 * f);
  }
  batches.push_back(two);
  batches.push_back(four);
  batches.push_back(five);
  for (const ParameterBatch& all : batches) {
    SCOPED_TRACE(all.info().name + " with " + std::to_string(all.info().compartments.size()) +
                 " compartments");
    Problem base = base_problem(0.5, 45);
    std::vector<SimulationResult> chunks;
    chunks.push_back(simulate_range(base, all, 0, 130, false));
    chunks.push_back(simulate_range(base, all, 130, 170, true));
    const int C = chunks[0].compartments();
    TimeSummaryOptions exact, sketch;
    sketch.exact_values = 0;
    const TimeSummaryTable te = summarize(chunks, exact);
    EXPECT_TRUE(te.exact);
    expect_table_matches_direct(chunks, te, 4e-16);
    const TimeSummaryTable ts = summarize(chunks, sketch);
    EXPECT_FALSE(ts.exact);
    for (std::int64_t i = 0; i < chunks[0].times(); ++i)
      for (int c = 0; c < C; ++c) {
        const std::vector<double> v = column(chunks, i, c);
        const std::size_t row = static_cast<std::size_t>(i * C + c);
        EXPECT_EQ(ts.mean[row], te.mean[row]);  // the same sums in both modes
        for (std::size_t p = 0; p < 3; ++p) {
          const double want = percentile7(v, ts.percentiles[p]);
          EXPECT_LE(std::fabs(ts.quantiles[row * 3 + p] - want), std::ldexp(want, -8))
              << "time " << i << " compartment " << c;
        }
      }
  }
}

TEST(TimeSummary, RejectsBadOptionsAndMismatchedChunks) {
  EXPECT_THROW(TimeSummary({}, 3), InvalidArgument);
  EXPECT_THROW(TimeSummary({0.0, 1.0}, 0), InvalidArgument);
  TimeSummaryOptions o;
  o.percentiles = {50, 101};
  EXPECT_THROW(TimeSummary({0.0, 1.0}, 3, o), InvalidArgument);
  o.percentiles = {kNaN};
  EXPECT_THROW(TimeSummary({0.0, 1.0}, 3, o), InvalidArgument);
  o = {};
  o.window_binades = 0;
  EXPECT_THROW(TimeSummary({0.0, 1.0}, 3, o), InvalidArgument);
  o = {};
  o.exact_values = -1;
  EXPECT_THROW(TimeSummary({0.0, 1.0}, 3, o), InvalidArgument);

  const ParameterBatch all = population(4, 4);
  const SimulationResult r = simulate_range(base_problem(1.0, 6), all, 0, 4);
  TimeSummary other_times({0, 1, 2, 3, 4, 5, 7}, 3);
  try {
    other_times.add(r);
    ADD_FAILURE() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("chunk output time 6 is 6, but must be 7"),
              std::string::npos)
        << e.what();
  }
  TimeSummary two({0, 1, 2, 3, 4, 5, 6}, 2);
  EXPECT_THROW(two.add(r), InvalidArgument);
  TimeSummary ok(r.output_times(), 3);
  std::vector<double> m(4 * kMetricCount);
  EXPECT_THROW(ok.add(r, 3, 0.0, m.data()), InvalidArgument);
  EXPECT_THROW(subject_metrics(r, -1, 0.0, m.data()), InvalidArgument);
  EXPECT_THROW(subject_metrics(r, 1, 0.0, nullptr), InvalidArgument);
  EXPECT_EQ(ok.subjects(), 0);
  // A 1000-time, 3-compartment summary stays well under 150 MiB whatever the subject count.
  TimeSummary big(std::vector<double>(1000, 0.0), 3);
  EXPECT_LT(big.state_bytes(), std::size_t{64} << 20);
}

// ---- Exposure metrics -----------------------------------------------------------------------

// The test's own metrics of one subject: straightforward loops and std::log.
void direct_metrics(const SimulationResult& r, std::int64_t s, int c, double last_dose,
                    double* out) {
  const std::vector<double>& t = r.output_times();
  double cmax = r.concentration(s, 0, c), tmax = t[0], auc = 0.0;
  double cmin = std::numeric_limits<double>::infinity();
  for (std::int64_t i = 0; i < r.times(); ++i) {
    const double x = r.concentration(s, i, c);
    if (x > cmax) {
      cmax = x;
      tmax = t[static_cast<std::size_t>(i)];
    }
    if ((std::isnan(last_dose) || t[static_cast<std::size_t>(i)] >= last_dose) && x < cmin)
      cmin = x;
    if (i > 0) {
      const double a = r.concentration(s, i - 1, c);
      const double dt = t[static_cast<std::size_t>(i)] - t[static_cast<std::size_t>(i - 1)];
      // log(a / x) as log1p((a - x) / x): accurate also when a / x is close to 1
      auc += (x > 0 && x < a) ? (a - x) * dt / std::log1p((a - x) / x) : (a + x) * dt / 2;
    }
  }
  out[0] = cmax;
  out[1] = tmax;
  out[2] = auc;
  out[3] = std::isinf(cmin) ? kNaN : cmin;
}

TEST(Metrics, MatchDirectComputationOnAPopulation) {
  const ParameterBatch all = population(500, 17);
  const Problem base = base_problem(0.25, 200);  // doses at 0, 12, 24; output to t = 50
  for (bool conc : {true, false}) {
    const SimulationResult r = simulate_range(base, all, 0, 500, conc);
    for (const double last : {24.0, kNaN, 60.0, 23.9}) {
      for (int c = 0; c < 3; ++c) {
        std::vector<double> m(500 * kMetricCount), f(500 * kMetricCount);
        subject_metrics(r, c, last, m.data(), 2);
        TimeSummary sum(r.output_times(), 3);
        sum.add(r, c, last, f.data());
        for (std::int64_t s = 0; s < 500; ++s) {
          double want[4];
          direct_metrics(r, s, c, last, want);
          const double* got = m.data() + s * kMetricCount;
          // amount * (1 / volume): within one rounding of the test's amount / volume
          EXPECT_NEAR(got[0], want[0], 2.3e-16 * want[0]) << "cmax, subject " << s;
          EXPECT_EQ(got[1], want[1]) << "tmax, subject " << s;
          EXPECT_NEAR(got[2], want[2], 1e-13 * want[2]) << "auc, subject " << s;
          if (std::isnan(want[3]))
            EXPECT_TRUE(std::isnan(got[3]));
          else
            EXPECT_NEAR(got[3], want[3], 2.3e-16 * want[3]) << "cmin, subject " << s;
          for (int k = 0; k < kMetricCount; ++k) {
            const double a = got[k], b = f[static_cast<std::size_t>(s * kMetricCount + k)];
            EXPECT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << "fused, metric " << k;
          }
        }
      }
    }
  }
}

TEST(Metrics, ClosedFormsTiesAndZeros) {
  // Two-compartment model: an IV bolus of 100 into the central compartment (V = 10, ke = 0.3)
  // and nothing absorbed (ka = 0): the depot holds its dose of 50 for ever, a constant.
  Problem p;
  p.grid = {0.5, 40};  // t = 0 .. 20
  DoseEvent iv, oral;
  iv.compartment = 1;
  iv.amount = 100.0;
  oral.amount = 50.0;
  oral.time = 2.0;  // the depot is 0 before t = 2
  p.doses = {iv, oral};
  p.parameters = ParameterBatch(ModelKind::TwoCompartment, 1);
  p.parameters.set_all("ka", 0.0);
  p.parameters.set_all("ke", 0.3);
  p.parameters.set_all("v_central", 10.0);
  p.parameters.set_all("v_depot", 2.0);
  const SimulationResult r = simulate(p);
  double m[kMetricCount];
  // Central: c(t) = 10 exp(-0.3 t); the log trapezoid is exact for an exponential:
  // AUC(0, 20) = 10 (1 - exp(-6)) / 0.3. Cmax at t = 0, Cmin at the end.
  subject_metrics(r, 1, 2.0, m);
  EXPECT_NEAR(m[0], 10.0, 1e-14);
  EXPECT_EQ(m[1], 0.0);
  EXPECT_NEAR(m[2], 10.0 * (1.0 - std::exp(-6.0)) / 0.3, 1e-12);
  EXPECT_NEAR(m[3], 10.0 * std::exp(-6.0), 1e-14);
  // Depot: 0 until t = 2, then 25 (ties): Tmax is the first time of the maximum; the AUC is
  // linear across the jump (0 -> 25 over [1.5, 2]) and flat after: 25 * 0.5 / 2 + 25 * 18.
  subject_metrics(r, 0, 2.0, m);
  EXPECT_EQ(m[0], 25.0);
  EXPECT_EQ(m[1], 2.0);
  EXPECT_NEAR(m[2], 25.0 * 0.25 + 25.0 * 18.0, 1e-12);
  EXPECT_EQ(m[3], 25.0);  // minimum over t >= 2
  subject_metrics(r, 0, kNaN, m);
  EXPECT_EQ(m[3], 0.0);  // no dose: the whole run, zeros included
  subject_metrics(r, 0, 20.5, m);
  EXPECT_TRUE(std::isnan(m[3]));  // no output time at or after the last dose
  EXPECT_EQ(last_dose_time(p.doses), 2.0);
  DoseEvent rep;
  rep.time = 1.0;
  rep.every = 4.0;
  rep.repeat = 3;
  EXPECT_EQ(last_dose_time({rep, iv}), 13.0);
  EXPECT_TRUE(std::isnan(last_dose_time({})));
  EXPECT_EQ(metric_names(), (std::vector<std::string>{"cmax", "tmax", "auc", "cmin"}));
}

TEST(Metrics, LogDownPiecesByHand) {
  // One-step pieces checked by hand on a fast decline, a slow decline (the series regime) and
  // an increase: central of a two-compartment model sampled at two times.
  Problem p;
  DoseEvent iv;
  iv.compartment = 1;
  iv.amount = 100.0;
  p.doses = {iv};
  p.parameters = ParameterBatch(ModelKind::TwoCompartment, 3);
  p.parameters.set_all("ka", 0.0);
  p.parameters.set_all("v_central", 4.0);
  p.parameters.set("ke", 0, 1.5);   // ratio e^1.5 per step
  p.parameters.set("ke", 1, 1e-4);  // ratio 1 + 1e-4 per step
  p.parameters.set("ke", 2, 0.0);   // constant
  p.grid = {1.0, 1};
  const SimulationResult r = simulate(p);
  double m[3 * kMetricCount];
  subject_metrics(r, 1, kNaN, m);
  for (int s = 0; s < 3; ++s) {
    const double a = r.concentration(s, 0, 1), b = r.concentration(s, 1, 1);
    const double want = s < 2 ? (a - b) / std::log1p((a - b) / b) : a;
    EXPECT_NEAR(m[s * kMetricCount + 2], want, 1e-14 * want) << "subject " << s;
  }
  // For the exponential the piece is the exact integral 25 (1 - e^-k) / k (up to the
  // rounding of the simulated values, amplified by 1 / (1 - e^-k) for the slow decline).
  EXPECT_NEAR(m[2], 25.0 * (1 - std::exp(-1.5)) / 1.5, 1e-13);
  EXPECT_NEAR(m[kMetricCount + 2], 25.0 * -std::expm1(-1e-4) / 1e-4, 1e-10);
}

}  // namespace
}  // namespace pkscan
