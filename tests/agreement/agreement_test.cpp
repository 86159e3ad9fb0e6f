// One agreement suite for every compute path: each (method, device) runs the same scenarios and
// is compared with the reference scan of the same precision, plus float32 against float64; on
// the same scenarios, the event engine (the scenario written as a NONMEM dataset: simulate_dataset
// with every CPU method, and the Predictor) against the exact grid, and the fused summary against
// summarising the reference.
//
// Tolerance table (relative to each value, with an absolute floor relative to the subject's
// peak amount for values that decayed towards zero):
//   batched cpu   float64 0       (bit-identical: the scan's arithmetic in every SIMD clone, no
//                                  contraction: -ffp-contract=off, grid/lanes.hpp)
//   power cpu     float64 1e-10   (products reordered by repeated squaring)
//   device code   (the Gpu/ cases) on CUDA, and on Thrust's OpenMP host system (built into
//                 pkscan_device_host_tests with PKSCAN_DEVICE_HOST_SYSTEM): batched float64 0,
//                 power float64 1e-10, and batched and sparse power give the CPU path's bits in
//                 both precisions (kernels/grid.hpp on both sides, no contraction: --fmad=false)
//   any path      float32 within 1e-5 of the float64 reference, relative to the peak
//   datasets      simulate_dataset (scan, batched, power: the same bits) against the exact grid
//                 reference: kEventVsGrid (two exact solutions, different arithmetic: the event
//                 engine's eigendecomposition against the grid's matrix exponential)
//   Predictor     predict() gives simulate_dataset's predictions bit for bit (0)
//   datasets on the device (Gpu/DeviceDatasets, Gpu/DeviceEventModels: the event walk): the
//                 CPU's rows, bit for bit on the host system (kernels/event_step.hpp and
//                 kernels/steady_state.hpp on both sides); on CUDA 1e-10
//                 relative (exp and expm1 are CUDA's), floor 1e-3 of the subject's peaks
//   Predictor on the device (Gpu/DevicePredictor: the event walk): the CPU Predictor's
//                 predictions and log-likelihoods, bit for bit on the host system
//                 (kernels/event_step.hpp and kernels/steady_state.hpp on both sides); on CUDA the
//                 same tolerance as the datasets' (log-likelihood sums 1e-8); closed forms 1e-12;
//                 gradients and Jacobians (plain loops, not Eigen's products) within 1e-9 of the
//                 CPU's relative to the row's largest value (or 1e-6 of the matrix's)
//   fused         Engine::summarize_into (batched cpu, fused) gives the bits of the reference
//                 run summarised by TimeSummary::add: means, percentiles, metrics, statuses (0)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <pkscan/pkscan.hpp>
#include <pkscan/population_run.hpp>
#include <pkscan/predictor.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>

#include "device/copy_timing.hpp"
#include "support/expect_close.hpp"
#include "support/predictor_support.hpp"

namespace pkscan {
namespace {

struct Scenario {
  std::string name;
  std::int64_t subjects;
  double dt;
  std::int64_t steps;
  Discretization disc;
  int regimen;  // 0 bolus, 1 repeated oral, 2 infusions (partial steps), 3 everything
  bool sparse;
  ModelKind model = ModelKind::ThreeCompartment;
};

struct Path {
  Method method;
  Device device;
  double rtol;
  bool bits_as_cpu = false;  // the same method on device cpu gives the same bits (sparse power)
};

std::string path_name(const Path& p) {
  std::string m = to_string(p.method), d = to_string(p.device);
  m[0] = static_cast<char>(std::toupper(m[0]));
  d[0] = static_cast<char>(std::toupper(d[0]));
  return m + "_" + d;
}

// Test names and failure messages show the path and the scenario by name.
void PrintTo(const Path& p, std::ostream* os) { *os << path_name(p); }
void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

std::uint32_t seed() {
  const char* s = std::getenv("PKSCAN_TEST_SEED");
  return s ? static_cast<std::uint32_t>(std::strtoul(s, nullptr, 10)) : 7u;
}

Problem build(const Scenario& sc) {
  Problem p;
  p.discretization = sc.disc;
  p.grid = {sc.dt, sc.steps};
  if (sc.model == ModelKind::Linear) {
    // A declared model: gut -> central -> (periph <->), plus a second elimination from periph.
    p.parameters = ParameterBatch(
        make_linear_model({"gut", "central", "periph"}, {{"gut", "central", "ka"},
                                                         {"central", "periph", "k12"},
                                                         {"periph", "central", "k21"},
                                                         {"central", "", "ke"},
                                                         {"periph", "", "kp"}}),
        sc.subjects);
  } else {
    p.parameters = ParameterBatch(sc.model, sc.subjects);
  }
  std::mt19937 rng(seed() + static_cast<std::uint32_t>(sc.subjects * 131 + sc.steps));
  std::lognormal_distribution<double> bsv(0.0, 0.3);
  for (std::int64_t s = 0; s < sc.subjects; ++s) {
    const double f = bsv(rng);
    p.parameters.set("ka", s, 0.8 * f);
    p.parameters.set("ke", s, 0.15 * f);
    p.parameters.set("v_central", s, 20.0 * f);
    if (sc.model != ModelKind::TwoCompartment) {
      p.parameters.set("k12", s, 0.3 * f);
      p.parameters.set("k21", s, 0.1 / f);
    }
    if (sc.model == ModelKind::ThreeCompartment) p.parameters.set("v_peripheral", s, 60.0);
    if (sc.model == ModelKind::Linear) p.parameters.set("kp", s, 0.01 * f);
    if (sc.model == ModelKind::FourCompartment) {
      p.parameters.set("k13", s, 0.05 * f);
      p.parameters.set("k31", s, 0.02);
      p.parameters.set("v_peripheral1", s, 60.0);
      p.parameters.set("v_peripheral2", s, 200.0);
    }
  }
  auto dose = [](int cmt, double t, double amt, double rate, double every, std::int64_t repeat) {
    DoseEvent d;
    d.compartment = cmt;
    d.time = t;
    d.amount = amt;
    d.rate = rate;
    d.every = every;
    d.repeat = repeat;
    return d;
  };
  const double horizon = sc.dt * static_cast<double>(sc.steps);
  const double every = sc.dt * std::max<std::int64_t>(1, sc.steps / 12);
  switch (sc.regimen) {
    case 0:
      p.doses = {dose(1, 0.0, 500.0, 0, 0, 0)};
      break;
    case 1:
      p.doses = {dose(0, 0.0, 100.0, 0, every, 11)};
      break;
    case 2:
      p.doses = {dose(1, sc.dt * 3, 300.0, 300.0 / (sc.dt * 7.3), 0, 0),
                 dose(1, sc.dt * 5, 50.0, 50.0 / (sc.dt * 0.4), 0, 0),
                 dose(0, sc.dt * 2, 80.0, 80.0 / (sc.dt * 2.5), every, 5)};
      break;
    default:
      p.doses = {dose(0, 0.0, 100.0, 0, every, 11),
                 dose(1, sc.dt * 3, 300.0, 300.0 / (sc.dt * 7.3), every, 3),
                 dose(sc.model == ModelKind::TwoCompartment ? 1 : 2, horizon / 2, 40.0, 0, 0, 0)};
      break;
  }
  if (sc.sparse) {
    std::set<std::int64_t> out = {3};  // one early output inside the first breakpoints
    for (std::int64_t i = 1; i <= 16; ++i) out.insert(i * sc.steps / 16);
    p.output = OutputTimes::at_steps(std::vector<std::int64_t>(out.begin(), out.end()));
  }
  return p;
}

const std::vector<Scenario>& scenarios() {
  static const std::vector<Scenario> all = [] {
    std::vector<Scenario> v;
    const struct {
      const char* n;
      std::int64_t s;
    } sizes[] = {{"OneSubject", 1}, {"FewSubjects", 5}, {"ManySubjects", 203}};
    const struct {
      const char* n;
      double dt;
      std::int64_t steps;
    } horizons[] = {{"Short", 0.25, 60}, {"Long", 0.5, 20000}};
    const char* reg[] = {"Bolus", "Repeated", "Infusions", "Mixed"};
    for (const auto& sz : sizes)
      for (const auto& h : horizons)
        for (int r = 0; r < 4; ++r)
          for (Discretization d : {Discretization::Exact, Discretization::Euler})
            for (bool sparse : {false, true}) {
              if (sz.s == 203 && h.steps == 20000 && !sparse) continue;  // keep the suite quick
              std::string name = std::string(sz.n) + "_" + h.n + "_" + reg[r] + "_" +
                                 (d == Discretization::Exact ? "Exact" : "Euler") + "_" +
                                 (sparse ? "Sparse" : "Dense");
              v.push_back({name, sz.s, h.dt, h.steps, d, r, sparse});
            }
    // The other built-in models on a few scenarios.
    for (ModelKind m : {ModelKind::TwoCompartment, ModelKind::FourCompartment, ModelKind::Linear})
      for (bool sparse : {false, true}) {
        const std::string mn = m == ModelKind::TwoCompartment    ? "TwoCpt"
                               : m == ModelKind::FourCompartment ? "FourCpt"
                                                                 : "Linear";
        v.push_back({mn + "_ManySubjects_Mixed_Exact_" + (sparse ? "Sparse" : "Dense"), 29, 0.25,
                     400, Discretization::Exact, 3, sparse, m});
        v.push_back({mn + "_OneSubject_Infusions_Euler_" + (sparse ? "Sparse" : "Dense"), 1, 0.25,
                     400, Discretization::Euler, 2, sparse, m});
      }
    return v;
  }();
  return all;
}

SimulateOptions opts(Method m, Device d, Precision p) {
  SimulateOptions o;
  o.method = m;
  o.device = d;
  o.precision = p;
  o.threads = 2;
  o.concentrations = false;
  return o;
}

// A chunk summarised the reference way (TimeSummary::add), with its metrics of compartment mc.
struct Summarised {
  TimeSummaryTable table;
  std::vector<double> metrics;
};

Summarised summarise(const SimulationResult& r, const TimeSummaryOptions& to, int mc, double last) {
  TimeSummary summary(r.output_times(), r.compartments(), to);
  Summarised out;
  out.metrics.resize(static_cast<std::size_t>(r.subjects() * kMetricCount));
  summary.add(r, mc, last, out.metrics.data());
  out.table = summary.finish();
  return out;
}

bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0;
}

// The same means, percentiles and metrics, bit for bit, and the same counts.
void expect_same_summary(const TimeSummaryTable& got, const std::vector<double>& got_metrics,
                         const Summarised& want) {
  EXPECT_TRUE(same_bits(got.mean, want.table.mean)) << "means";
  EXPECT_TRUE(same_bits(got.quantiles, want.table.quantiles)) << "percentiles";
  EXPECT_TRUE(same_bits(got_metrics, want.metrics)) << "metrics";
  EXPECT_EQ(got.count, want.table.count);
  EXPECT_EQ(got.excluded, want.table.excluded);
}

class BackendAgreement : public ::testing::TestWithParam<std::tuple<Path, Scenario>> {
 protected:
  void SetUp() override {
    std::string why;
    const Path& path = std::get<0>(GetParam());
    if (!is_backend_available(path.method, path.device, &why)) GTEST_SKIP() << why;
  }
};

TEST_P(BackendAgreement, MatchesReferenceFloat64) {
  const auto& [path, sc] = GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed()));
  const Problem p = build(sc);
  const SimulationResult ref = simulate(p, opts(Method::Scan, Device::Cpu, Precision::Float64));
  const SimulationResult got = simulate(p, opts(path.method, path.device, Precision::Float64));
  EXPECT_EQ(got.summary().method, path.method);
  EXPECT_EQ(got.summary().device, path.device);
  ASSERT_EQ(got.times(), ref.times());
  for (std::int64_t s = 0; s < ref.subjects(); ++s) {
    double peak = 0.0;
    for (std::int64_t i = 0; i < ref.times(); ++i)
      for (int c = 0; c < ref.compartments(); ++c) peak = std::max(peak, ref.amount(s, i, c));
    int failures = 0;
    for (std::int64_t i = 0; i < ref.times() && failures < 5; ++i)
      for (int c = 0; c < ref.compartments(); ++c) {
        const auto ok = test::close_to(ref.amount(s, i, c), got.amount(s, i, c), path.rtol,
                                       path.rtol * 1e-3 * peak);
        if (!ok) ++failures;
        EXPECT_TRUE(ok) << "subject " << s << " time index " << i << " compartment " << c;
      }
    EXPECT_EQ(got.status()[static_cast<std::size_t>(s)], ref.status()[static_cast<std::size_t>(s)]);
  }
}

// The device code on the host system runs kernels/grid.hpp with the host's arithmetic, as the CPU
// paths do: the same bits, in both precisions. (Dense power runs the batched kernel on a device,
// so its twin there is the reference scan, checked above with tolerance 0.)
TEST_P(BackendAgreement, SameBitsAsTheCpuPath) {
  const auto& [path, sc] = GetParam();
  if (!path.bits_as_cpu) GTEST_SKIP() << "no bit-identity claim for this path";
  if (path.method == Method::Power && !sc.sparse) GTEST_SKIP() << "dense power: see above";
  const Problem p = build(sc);
  for (Precision prec : {Precision::Float64, Precision::Float32}) {
    const SimulationResult cpu = simulate(p, opts(path.method, Device::Cpu, prec));
    const SimulationResult dev = simulate(p, opts(path.method, path.device, prec));
    if (prec == Precision::Float64) {
      ASSERT_EQ(cpu.amounts_f64().size(), dev.amounts_f64().size());
      EXPECT_EQ(std::memcmp(cpu.amounts_f64().data(), dev.amounts_f64().data(),
                            cpu.amounts_f64().size() * sizeof(double)),
                0);
    } else {
      ASSERT_EQ(cpu.amounts_f32().size(), dev.amounts_f32().size());
      EXPECT_EQ(std::memcmp(cpu.amounts_f32().data(), dev.amounts_f32().data(),
                            cpu.amounts_f32().size() * sizeof(float)),
                0);
    }
    EXPECT_EQ(dev.status(), cpu.status());
  }
}

TEST_P(BackendAgreement, Float32WithinOneInTenToTheFiveOfFloat64) {
  const auto& [path, sc] = GetParam();
  const Problem p = build(sc);
  const SimulationResult ref = simulate(p, opts(Method::Scan, Device::Cpu, Precision::Float64));
  const SimulationResult got = simulate(p, opts(path.method, path.device, Precision::Float32));
  ASSERT_FALSE(got.amounts_f32().empty());
  for (std::int64_t s = 0; s < ref.subjects(); ++s) {
    double peak = 0.0;
    for (std::int64_t i = 0; i < ref.times(); ++i)
      for (int c = 0; c < ref.compartments(); ++c) peak = std::max(peak, ref.amount(s, i, c));
    double worst = 0.0;
    for (std::int64_t i = 0; i < ref.times(); ++i)
      for (int c = 0; c < ref.compartments(); ++c)
        worst = std::max(worst, std::fabs(ref.amount(s, i, c) - got.amount(s, i, c)));
    EXPECT_LE(worst, 1e-5 * peak) << "subject " << s;
  }
}

// ---- The event engine and the Predictor on the same scenarios ------------------------------

// Two exact solutions of the same system by different arithmetic (measured worst: 5.8e-12).
constexpr double kEventVsGrid = 1e-10;

// The scenario as a NONMEM dataset: each subject's doses (ADDL/II for repeats, RATE for
// infusions; CMT 1-based) and an observation record at every output time, after the doses at
// the same time (the grid's outputs include the doses given at that time).
std::string dataset_csv(const Problem& p, const SimulationResult& ref) {
  struct Row {
    double time;
    int kind;  // 0 dose, 1 observation
    std::string text;
  };
  std::vector<Row> rows;
  auto num = [](double v) {
    std::ostringstream o;
    o.precision(17);
    o << v;
    return o.str();
  };
  for (const DoseEvent& d : p.doses)
    rows.push_back({d.time, 0,
                    num(d.time) + "," + num(d.amount) + "," + num(d.rate) + "," +
                        std::to_string(d.compartment + 1) + ",1," + std::to_string(d.repeat) + "," +
                        num(d.repeat > 0 ? d.every : 0.0)});
  for (double t : ref.output_times())
    rows.push_back({t, 1, num(t) + ",.,.," + std::to_string(ref.compartments()) + ",0,.,."});
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.time < b.time || (a.time == b.time && a.kind < b.kind);
  });
  std::string csv = "ID,TIME,AMT,RATE,CMT,EVID,ADDL,II\n";
  for (std::int64_t s = 0; s < ref.subjects(); ++s)
    for (const Row& r : rows) csv += std::to_string(s + 1) + "," + r.text + "\n";
  return csv;
}

// A scenario as a NONMEM dataset, with its exact grid reference.
struct ScenarioDataset {
  Problem p;
  SimulationResult ref;
  Dataset data;
};
ScenarioDataset scenario_dataset(const Scenario& sc) {
  ScenarioDataset d{build(sc), {}, {}};
  d.ref = simulate(d.p, opts(Method::Scan, Device::Cpu, Precision::Float64));
  d.data = parse_dataset(dataset_csv(d.p, d.ref), "agreement.csv", d.p.parameters.info());
  return d;
}

// Every amount of `events` against the grid reference within kEventVsGrid (floor: 1e-3 of the
// subject's peak); returns the worst relative difference.
double expect_events_match_grid(const SimulationResult& ref, const DatasetResult& events) {
  double worst = 0.0;
  for (std::int64_t s = 0; s < ref.subjects(); ++s) {
    double peak = 0.0;
    for (std::int64_t i = 0; i < ref.times(); ++i)
      for (int c = 0; c < ref.compartments(); ++c) peak = std::max(peak, ref.amount(s, i, c));
    for (std::int64_t i = 0; i < ref.times(); ++i)
      for (int c = 0; c < ref.compartments(); ++c) {
        const double want = ref.amount(s, i, c);
        const double got =
            events
                .amounts[static_cast<std::size_t>((s * ref.times() + i) * ref.compartments() + c)];
        worst = std::max(worst, std::fabs(got - want) / std::max(std::fabs(want), 1e-3 * peak));
        PKSCAN_EXPECT_CLOSE(want, got, kEventVsGrid, kEventVsGrid * 1e-3 * peak,
                            "subject " << s << " time index " << i << " compartment " << c);
      }
  }
  return worst;
}

// The paths that are not grid backends, once per scenario.
class EngineAgreement : public ::testing::TestWithParam<Scenario> {};

TEST_P(EngineAgreement, DatasetsAndThePredictorMatchTheExactGrid) {
  const Scenario& sc = GetParam();
  if (sc.disc != Discretization::Exact) GTEST_SKIP() << "the event engine is exact";
  const ScenarioDataset sd = scenario_dataset(sc);
  const Problem& p = sd.p;
  const SimulationResult& ref = sd.ref;
  const Dataset& data = sd.data;
  SimulateOptions o;
  o.method = Method::Scan;
  const DatasetResult events = simulate_dataset(data, p.parameters, o);
  ASSERT_EQ(events.rows(), ref.subjects() * ref.times());
  const double worst = expect_events_match_grid(ref, events);
  std::ostringstream w;
  w << std::scientific << worst;
  RecordProperty("worst_relative_difference", w.str());
  // Every CPU method of the event engine gives the same bits.
  for (Method m : {Method::Batched, Method::Power}) {
    o.method = m;
    const DatasetResult other = simulate_dataset(data, p.parameters, o);
    EXPECT_EQ(std::memcmp(other.amounts.data(), events.amounts.data(),
                          events.amounts.size() * sizeof(double)),
              0)
        << to_string(m);
  }
  // The Predictor: simulate_dataset's predictions, bit for bit.
  const Predictor predictor(data, p.parameters.info_ptr());
  const std::unique_ptr<Predictor::Workspace> ws = predictor.make_workspace();
  for (std::int64_t s = 0; s < ref.subjects(); ++s) {
    std::vector<double> pred(static_cast<std::size_t>(predictor.observations(s)));
    predictor.predict(s, p.parameters.row(s), pred.data(), *ws);
    EXPECT_EQ(std::memcmp(pred.data(), events.prediction.data() + predictor.observation_offset(s),
                          pred.size() * sizeof(double)),
              0)
        << "subject " << s;
  }
}

// ---- The fused summary on the same scenarios ----------------------------------------------

TEST_P(EngineAgreement, FusedSummaryEqualsSummarisingTheReference) {
  const Scenario& sc = GetParam();
  const Problem p = build(sc);
  SimulateOptions o = opts(Method::Scan, Device::Cpu, Precision::Float64);
  Engine engine;
  const SimulationResult shape = engine.simulate(p, o);
  TimeSummaryOptions to;
  to.exact_values = 0;  // the sketch from the start, as the fused path needs
  to.percentiles = {0, 5, 50, 95, 100};
  const int mc = std::min(1, shape.compartments() - 1);
  const double last = last_dose_time(p.doses);
  const std::size_t nm = static_cast<std::size_t>(shape.subjects() * kMetricCount);
  const Summarised want = summarise(shape, to, mc, last);

  o.method = Method::Batched;
  TimeSummary got_sum(shape.output_times(), shape.compartments(), to);
  std::vector<double> got_metrics(nm);
  SimulationResult r;
  ASSERT_TRUE(engine.summarize_into(p, o, got_sum, mc, last, got_metrics.data(), r))
      << "the fused path ran";
  expect_same_summary(got_sum.finish(), got_metrics, want);
  EXPECT_EQ(r.status(), shape.status());
  // The parts' times (RunSummary::fused_*): each measured, together within the call's threads'
  // time; a later plain simulation clears them.
  const RunSummary& rs = r.summary();
  EXPECT_GT(rs.fused_recurrence_seconds, 0.0);
  EXPECT_GT(rs.fused_sums_seconds, 0.0);
  EXPECT_GT(rs.fused_metrics_seconds, 0.0);
  EXPECT_LE(rs.fused_recurrence_seconds + rs.fused_sums_seconds + rs.fused_metrics_seconds,
            rs.threads * rs.scan_seconds * 1.02 + 1e-6);
  engine.simulate_into(p, o, r);
  EXPECT_EQ(r.summary().fused_recurrence_seconds, 0.0);
  EXPECT_EQ(r.summary().fused_sums_seconds + r.summary().fused_metrics_seconds, 0.0);
}

// ---- Few subjects: partial lane groups -----------------------------------------------------

// The batched path runs 3 subjects and up in lane groups of 8 (float64) or 16 (float32), two
// groups to a block, and one or two subjects with the per-subject loop: every count from 1 to
// 35 (a partial group alone, one full group and a partial one, whole and partial blocks) gives
// the scan's bits, in both precisions, dense and sparse, for every built-in model size.
TEST(FewSubjects, BatchedGivesTheScansBitsForEveryCount) {
  for (ModelKind m :
       {ModelKind::TwoCompartment, ModelKind::ThreeCompartment, ModelKind::FourCompartment})
    for (bool sparse : {false, true})
      for (std::int64_t n = 1; n <= 35; ++n) {
        const Problem p = build({"few", n, 0.25, 90, Discretization::Exact, 3, sparse, m});
        for (Precision prec : {Precision::Float64, Precision::Float32}) {
          SCOPED_TRACE(std::to_string(n) + " subjects, model " +
                       std::to_string(static_cast<int>(m)) + (sparse ? " sparse " : " dense ") +
                       (prec == Precision::Float64 ? "float64" : "float32"));
          const SimulationResult ref = simulate(p, opts(Method::Scan, Device::Cpu, prec));
          const SimulationResult got = simulate(p, opts(Method::Batched, Device::Cpu, prec));
          ASSERT_EQ(got.summary().method, Method::Batched);
          ASSERT_EQ(got.times(), ref.times());
          int differ = 0;
          for (std::int64_t s = 0; s < n; ++s)
            for (std::int64_t i = 0; i < ref.times(); ++i)
              for (int c = 0; c < ref.compartments(); ++c) {
                const double a = ref.amount(s, i, c), b = got.amount(s, i, c);
                differ += std::memcmp(&a, &b, sizeof a) != 0;
              }
          EXPECT_EQ(differ, 0);
          EXPECT_EQ(got.status(), ref.status());
        }
      }
}

// ---- Subjects whose amounts overflow ---------------------------------------------------------

class OverflowStatus : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    std::string why;
    if (!is_backend_available(GetParam().method, GetParam().device, &why)) GTEST_SKIP() << why;
  }
};

// Bolus doses of A into the depot and into the central compartment, with little leaving the
// central one: where ka = 20 the depot empties into it within the first step and the central
// amount, about 1.96 A, passes the largest finite value when A is just over half of it (1e308 in
// float64, 2e38 in float32); where ka = 0 every amount stays at most A. 37 subjects fill two
// 16-lane blocks and part of a third (float32: one 32-lane block and part of another), with the
// overflowing ones in every block and at every lane position. A subject is NonFinite exactly
// when its amounts leave the range, and its first output (the doses) is exact either way.
TEST_P(OverflowStatus, MarksExactlyTheSubjectsWhoseAmountsLeaveTheRange) {
  const Path& path = GetParam();
  Problem p;
  p.discretization = Discretization::Exact;
  p.grid = {1.0, 50};
  const std::int64_t n = 37;
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, n);
  auto transfers = [](std::int64_t s) { return s % 7 == 2 || s % 5 == 4; };
  for (std::int64_t s = 0; s < n; ++s) {
    p.parameters.set("ka", s, transfers(s) ? 20.0 : 0.0);
    p.parameters.set("ke", s, 0.01);
    p.parameters.set("k12", s, 0.01);
    p.parameters.set("k21", s, 0.01);
    p.parameters.set("v_central", s, 20.0);
    p.parameters.set("v_peripheral", s, 60.0);
  }
  struct Case {
    double amount;
    Precision precision;
    bool overflows;  // whether the subjects with ka = 20 leave the range
  };
  for (const Case& c :
       {Case{1e308, Precision::Float64, true}, Case{2e38, Precision::Float64, false},
        Case{2e38, Precision::Float32, true}}) {
    SCOPED_TRACE(std::to_string(c.amount) +
                 (c.precision == Precision::Float64 ? " float64" : " float32"));
    DoseEvent depot, central;
    depot.amount = c.amount;
    central.compartment = 1;
    central.amount = c.amount;
    p.doses = {depot, central};
    const SimulationResult r = simulate(p, opts(path.method, path.device, c.precision));
    const double rounded = c.precision == Precision::Float64
                               ? c.amount
                               : static_cast<double>(static_cast<float>(c.amount));
    for (std::int64_t s = 0; s < n; ++s) {
      const bool out = c.overflows && transfers(s);
      EXPECT_EQ(r.status()[static_cast<std::size_t>(s)],
                out ? SubjectStatus::NonFinite : SubjectStatus::Ok)
          << "subject " << s;
      EXPECT_EQ(r.amount(s, 0, 0), rounded) << "subject " << s;
      EXPECT_EQ(r.amount(s, 0, 1), rounded) << "subject " << s;
      EXPECT_EQ(std::isfinite(r.amount(s, 1, 1)), !out) << "subject " << s;
      EXPECT_EQ(std::isfinite(r.amount(s, 50, 0)), !out) << "subject " << s;
    }
  }
}

// ---- What a device run reports about its time -----------------------------------------------

using DeviceTiming = OverflowStatus;  // the same skip when the path is not available

// A device run's summary splits its time into kernels and transfers, timed by the device; a CPU
// run's has none. The copy ceilings of `pkscan-bench --device cuda` are measured on the same
// device.
TEST_P(DeviceTiming, SplitsKernelAndTransferSeconds) {
  const Path& path = GetParam();
  const auto& all = scenarios();
  const auto sc = std::find_if(all.begin(), all.end(), [](const Scenario& s) {
    return s.name == "ManySubjects_Short_Mixed_Exact_Dense";
  });
  ASSERT_NE(sc, all.end());
  const Problem p = build(*sc);
  const SimulationResult dev = simulate(p, opts(path.method, path.device, Precision::Float64));
  const RunSummary& rs = dev.summary();
  EXPECT_EQ(rs.device, Device::Cuda);
  EXPECT_GT(rs.device_kernel_seconds, 0.0);
  EXPECT_GT(rs.device_transfer_seconds, 0.0);
  // Both are parts of the call: here one chunk on CUDA, and on the host system (small chunks)
  // nothing overlaps. (In general one chunk's kernel overlaps another's copies.)
  EXPECT_LE(rs.device_kernel_seconds, rs.scan_seconds);
  EXPECT_LE(rs.device_transfer_seconds, rs.scan_seconds);
  const SimulationResult cpu = simulate(p, opts(path.method, Device::Cpu, Precision::Float64));
  EXPECT_EQ(cpu.summary().device_kernel_seconds, 0.0);
  EXPECT_EQ(cpu.summary().device_transfer_seconds, 0.0);

  const detail::DeviceCopySeconds c = detail::measure_device_copies(std::size_t{1} << 20, 3);
  EXPECT_GT(c.device_to_device, 0.0);
  EXPECT_GT(c.device_to_host, 0.0);
  EXPECT_LT(c.device_to_device, 1.0);  // 1 MiB
  EXPECT_LT(c.device_to_host, 1.0);
}

// One Engine called again and again, as fitting code calls it: the device keeps the schedule it
// was given last and the buffers of the largest call, and reuses them only when they still
// fit. Regimens of the same shape (the same packed size) but other doses, then more subjects,
// then fewer: every call gives the CPU path's bits.
TEST_P(DeviceTiming, ReusesItsScheduleAndBuffersOnlyWhileTheyFit) {
  const Path& path = GetParam();
  const auto& all = scenarios();
  auto named = [&](const char* name) {
    const auto sc =
        std::find_if(all.begin(), all.end(), [&](const Scenario& s) { return s.name == name; });
    return sc == all.end() ? Problem{} : build(*sc);
  };
  const Problem a = named("ManySubjects_Short_Mixed_Exact_Sparse");
  const Problem b = [&] {  // the same shape, other amounts
    Problem q = a;
    for (DoseEvent& d : q.doses)
      if (d.rate == 0.0) d.amount *= 1.5;  // boluses only: infusions keep their durations
    return q;
  }();
  const Problem few = named("FewSubjects_Short_Mixed_Exact_Sparse");
  ASSERT_GT(a.parameters.subjects(), few.parameters.subjects());
  Engine dev;
  SimulationResult r;
  for (const Problem* p : {&a, &b, &a, &few, &a, &few}) {
    dev.simulate_into(*p, opts(path.method, path.device, Precision::Float64), r);
    const SimulationResult cpu = simulate(*p, opts(path.method, Device::Cpu, Precision::Float64));
    ASSERT_EQ(r.amounts_f64().size(), cpu.amounts_f64().size());
    EXPECT_EQ(std::memcmp(r.amounts_f64().data(), cpu.amounts_f64().data(),
                          cpu.amounts_f64().size() * sizeof(double)),
              0)
        << "call with " << p->parameters.subjects() << " subjects";
  }
}

// Device auto takes the GPU (here: whatever system device 'cuda' runs on) for much work whose
// output stays small, and the CPU for trajectories that would cross the bus, and for little work
// (docs/performance.md, "How auto chooses").
TEST_P(DeviceTiming, AutoTakesTheDeviceForMuchWorkWithSmallOutput) {
  const Path& path = GetParam();
  auto device_for = [&](std::int64_t subjects, std::int64_t steps, std::int64_t outputs) {
    Problem p;
    p.grid = {0.5, steps};
    p.parameters = ParameterBatch(ModelKind::ThreeCompartment, subjects);
    std::vector<std::int64_t> at;
    for (std::int64_t i = 1; i <= outputs; ++i) at.push_back(i * steps / outputs);
    if (outputs > 0) p.output = OutputTimes::at_steps(at);  // otherwise every step (dense)
    SimulateOptions o;
    o.method = path.method;
    o.device = Device::Auto;
    return resolve_path(p, o).device;
  };
  EXPECT_EQ(device_for(1'000'000, 1000, 1), Device::Cuda);   // final state
  EXPECT_EQ(device_for(1'000'000, 1000, 50), Device::Cuda);  // 50 times of 1000 steps
  EXPECT_EQ(device_for(1'000'000, 1000, 0), Device::Cpu);    // dense
  EXPECT_EQ(device_for(1'000'000, 1000, 100), Device::Cpu);  // 1 step in 10 reported
  EXPECT_EQ(device_for(100'000, 100, 1), Device::Cuda);      // 1e7 subject-steps
  EXPECT_EQ(device_for(100'000, 99, 1), Device::Cpu);        // less work
  EXPECT_EQ(device_for(50'000, 1000, 1), Device::Cpu);       // too few subjects to fill it
  EXPECT_EQ(device_for(1, 10'000'000, 1000), Device::Cpu);   // one subject: one device thread
}

// ---- The device summary -----------------------------------------------------------------------

// Engine::summarize_into on the device summarises the trajectories where they are (device
// memory) and gives the bits of the same trajectories simulated on the CPU and summarised by
// TimeSummary::add: means, percentiles, metrics, statuses, counts, in both precisions. (Dense
// power runs the batched kernel on the device, whose bits are the scan's.)
using DeviceSummary = BackendAgreement;

TEST_P(DeviceSummary, GivesTheBitsOfSummarisingTheCpuPath) {
  const Path& path = std::get<0>(GetParam());
  const Scenario& sc = std::get<1>(GetParam());
  const Problem p = build(sc);
  Engine engine;
  const Method cpu_method = path.method == Method::Power && !sc.sparse ? Method::Scan : path.method;
  for (Precision precision : {Precision::Float64, Precision::Float32}) {
    SCOPED_TRACE(precision == Precision::Float64 ? "float64" : "float32");
    const SimulationResult ref = engine.simulate(p, opts(cpu_method, Device::Cpu, precision));
    if (ref.times() * ref.compartments() > 2000)
      GTEST_SKIP() << "the device sketch of " << ref.times() * ref.compartments()
                   << " rows (16 KiB each) does not fit the test vehicle's 64 MiB";
    TimeSummaryOptions to;
    to.exact_values = 0;  // the sketch from the start, as the summarising paths need
    to.percentiles = {0, 5, 50, 95, 100};
    const int mc = std::min(1, ref.compartments() - 1);
    const double last = last_dose_time(p.doses);
    const std::size_t nm = static_cast<std::size_t>(ref.subjects() * kMetricCount);
    const Summarised want = summarise(ref, to, mc, last);

    TimeSummary got_sum(ref.output_times(), ref.compartments(), to);
    std::vector<double> got_metrics(nm);
    SimulationResult r;
    ASSERT_TRUE(engine.summarize_into(p, opts(path.method, path.device, precision), got_sum, mc,
                                      last, got_metrics.data(), r))
        << "the device summarised";
    EXPECT_EQ(r.summary().device, Device::Cuda);
    EXPECT_GT(r.summary().device_kernel_seconds, 0.0);
    expect_same_summary(got_sum.finish(), got_metrics, want);
    EXPECT_EQ(r.status(), ref.status());
  }
}

// Many subjects in several calls on one summary, each call in several chunks of whole blocks of
// 1024 subjects (the test vehicle's small chunks), with a call of the CPU's fused path between
// them (its sketches and the device's are merged by finish()); values that span more than the
// sketch's 2-binade window, so the window moves up between and within chunks; subjects left out
// (a volume of 1e-320 makes every concentration infinite, or 0 * inf NaN) in some blocks. The
// result is the bits of one TimeSummary::add of the CPU's trajectories.
TEST_P(DeviceTiming, SummarisesManyBlocksInChunksAndCallsLikeTheCpu) {
  const Path& path = GetParam();
  const std::int64_t calls[] = {2048 + 1024, 1024, 2500};  // device, CPU fused, device
  std::int64_t n = 0;
  for (std::int64_t c : calls) n += c;
  Problem all;
  all.grid = {0.5, 40};
  all.parameters = ParameterBatch(ModelKind::ThreeCompartment, n);
  std::mt19937 rng(seed());
  std::lognormal_distribution<double> bsv(0.0, 1.0);
  for (std::int64_t s = 0; s < n; ++s) {
    const double f = bsv(rng);
    all.parameters.set("ka", s, 0.8 * f);
    all.parameters.set("ke", s, 0.15 * f);
    all.parameters.set("k12", s, 0.3);
    all.parameters.set("k21", s, 0.1);
    all.parameters.set("v_central", s, s % 997 == 3 ? 1e-320 : 20.0 * f);
    all.parameters.set("v_peripheral", s, 60.0 * f);
  }
  DoseEvent oral;
  oral.amount = 100.0;
  oral.every = 6.0;
  oral.repeat = 2;
  all.doses = {oral};
  auto part = [&](std::int64_t first, std::int64_t count) {
    Problem q = all;
    q.parameters = ParameterBatch(ModelKind::ThreeCompartment, count);
    const std::int64_t cols = all.parameters.parameters();
    std::copy(all.parameters.row(first), all.parameters.row(first) + count * cols,
              q.parameters.mutable_values());
    return q;
  };
  for (Precision precision : {Precision::Float64, Precision::Float32}) {
    SCOPED_TRACE(precision == Precision::Float64 ? "float64" : "float32");
    Engine engine;
    const SimulationResult ref = engine.simulate(all, opts(Method::Scan, Device::Cpu, precision));
    TimeSummaryOptions to;
    to.exact_values = 0;
    to.window_binades = 2;
    const double last = last_dose_time(all.doses);
    const std::size_t nm = static_cast<std::size_t>(n * kMetricCount);
    const Summarised want = summarise(ref, to, 1, last);
    ASSERT_GT(want.table.excluded, 0);

    TimeSummary got_sum(ref.output_times(), ref.compartments(), to);
    std::vector<double> got_metrics(nm);
    std::int64_t first = 0;
    for (int k = 0; k < 3; ++k) {
      SimulationResult r;
      const SimulateOptions o =
          opts(Method::Batched, k == 1 ? Device::Cpu : path.device, precision);
      ASSERT_TRUE(engine.summarize_into(part(first, calls[k]), o, got_sum, 1, last,
                                        got_metrics.data() + first * kMetricCount, r))
          << "call " << k;
      EXPECT_EQ(r.summary().device, o.device);
      for (std::int64_t s = 0; s < calls[k]; ++s)
        EXPECT_EQ(r.status()[static_cast<std::size_t>(s)],
                  ref.status()[static_cast<std::size_t>(first + s)]);
      first += calls[k];
    }
    expect_same_summary(got_sum.finish(), got_metrics, want);
  }
}

// The population driver (`pkscan run` with `trajectories: false`) summarising on the device: a
// sweep of typical subjects given an IV bolus into the central compartment of two_compartment,
// in chunks of 1024 rows. C = D/V exp(-CL/V t), and the log-down trapezoid AUC over [0, T] is
// exact for one exponential: D/CL (1 - exp(-CL/V T)). The summary and the metrics are also the
// bits of the same run on the CPU (its fused path).
class KeepingSink final : public ResultSink {
 public:
  void write(const Chunk& c) override {
    for (std::int64_t s = 0; s < c.result->subjects(); ++s)
      for (int k = 0; k < kMetricCount; ++k) metrics.push_back(c.metrics[s * kMetricCount + k]);
    devices.push_back(c.result->summary().device);
  }
  void write_summary(const TimeSummaryTable& t) override { summary = t; }
  void commit() override { committed = true; }
  std::vector<double> metrics;
  std::vector<Device> devices;
  TimeSummaryTable summary;
  bool committed = false;
};

TEST_P(DeviceTiming, APopulationRunSummarisedOnTheDeviceGivesClosedFormAucAndTheCpusBits) {
  const Path& path = GetParam();
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
  run.options.method = path.method;
  PopulationRunOptions options;
  options.chunk_rows = 1024;
  KeepingSink dev, cpu;
  run.options.device = path.device;
  run_population(run, dev, options);
  run.options.device = Device::Cpu;
  run.options.method = Method::Batched;
  run_population(run, cpu, options);
  ASSERT_TRUE(dev.committed);
  ASSERT_EQ(dev.devices.size(), 3u);
  for (Device used : dev.devices) EXPECT_EQ(used, Device::Cuda);
  ASSERT_EQ(dev.metrics.size(), std::size_t{3000} * kMetricCount);
  for (std::size_t r = 0; r < 3000; ++r) {
    const double cl = r < 1500 ? 2.0 : 8.0;
    EXPECT_NEAR(dev.metrics[r * kMetricCount + 2], 100.0 / cl * (1.0 - std::exp(-cl / 20.0 * 24.0)),
                1e-9 * 100.0 / cl)
        << "row " << r;
  }
  EXPECT_EQ(dev.summary.count, 3000);
  EXPECT_TRUE(same_bits(dev.metrics, cpu.metrics));
  EXPECT_TRUE(same_bits(dev.summary.mean, cpu.summary.mean));
  EXPECT_TRUE(same_bits(dev.summary.quantiles, cpu.summary.quantiles));
}

#if defined(PKSCAN_DEVICE_HOST_SYSTEM)
}  // namespace
}  // namespace pkscan
extern std::size_t pkscan_device_host_memory;  // device_host_main.cpp
namespace pkscan {
namespace {

// The device summary when device memory is short (the host system with a few MiB of "device
// memory"): the sketch and two slots of one block of 1024 subjects fit, two blocks do not, so
// 5000 subjects run in chunks of whole blocks and give the CPU's bits; with less memory than
// the sketch and a block per slot, the call fails with a message that says so, and the
// summary is left as it was (a later call with enough memory gives the same bits).
// With the default chunk size a summaries-only population run on the device makes one call for
// up to 2^20 subjects (each call copies the sketch both ways): here one call, where 64 MiB of
// trajectories (1601 times) would make three; the CPU's bits. (The host system with 512 MiB of
// "device memory": the sketch of 3202 rows and a block of subjects per slot need more than 64.)
TEST_P(DeviceTiming, ASummariesOnlyPopulationRunCallsTheDeviceOnceWithTheDefaultChunks) {
  const Path& path = GetParam();
  struct Restore {
    std::size_t was = pkscan_device_host_memory;
    ~Restore() { pkscan_device_host_memory = was; }
  } restore;
  pkscan_device_host_memory = std::size_t{512} << 20;
  PopulationRun run;
  run.problem.grid = {0.015, 1600};
  DoseEvent d;
  d.compartment = 1;
  d.amount = 100.0;
  run.problem.doses = {d};
  PopulationSpec pop(ModelKind::TwoCompartment, 3000, 9);
  pop.set_typical("cl", 5.0);
  pop.set_typical("v_central", 20.0);
  pop.set_typical("ka", 1.0);
  pop.iiv = {pop.column("cl")};
  pop.omega = Eigen::MatrixXd::Constant(1, 1, 0.09);  // log-normal, sd 0.3
  run.population = pop;
  run.summaries = true;
  run.trajectories = false;
  KeepingSink dev, cpu;
  run_population(run, cpu, PopulationRunOptions{});
  run.options.device = path.device;
  run.options.method = path.method;
  run_population(run, dev, PopulationRunOptions{});
  ASSERT_TRUE(dev.committed);
  EXPECT_EQ(dev.devices.size(), 1u);
  for (Device used : dev.devices) EXPECT_EQ(used, Device::Cuda);
  EXPECT_EQ(dev.summary.count, 3000);
  EXPECT_TRUE(same_bits(dev.metrics, cpu.metrics));
  EXPECT_TRUE(same_bits(dev.summary.mean, cpu.summary.mean));
  EXPECT_TRUE(same_bits(dev.summary.quantiles, cpu.summary.quantiles));
}

TEST_P(DeviceTiming, SummarisesInWholeBlocksWhenMemoryIsShort) {
  const Path& path = GetParam();
  struct Restore {
    std::size_t was = pkscan_device_host_memory;
    ~Restore() { pkscan_device_host_memory = was; }
  } restore;
  Problem p;
  p.grid = {0.5, 40};
  const std::int64_t n = 5000;
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, n);
  std::mt19937 rng(seed());
  std::lognormal_distribution<double> bsv(0.0, 0.5);
  for (std::int64_t s = 0; s < n; ++s) {
    const double f = bsv(rng);
    p.parameters.set("ka", s, 0.8 * f);
    p.parameters.set("ke", s, 0.15 * f);
    p.parameters.set("k12", s, 0.3);
    p.parameters.set("k21", s, 0.1);
    p.parameters.set("v_central", s, 20.0 * f);
    p.parameters.set("v_peripheral", s, 60.0);
  }
  DoseEvent oral;
  oral.amount = 100.0;
  p.doses = {oral};
  const SimulationResult ref = simulate(p, opts(Method::Scan, Device::Cpu, Precision::Float64));
  TimeSummaryOptions to;
  to.exact_values = 0;
  const double last = last_dose_time(p.doses);
  const std::size_t nm = static_cast<std::size_t>(n * kMetricCount);
  const Summarised want = summarise(ref, to, 1, last);

  // 123 rows: a sketch of 2.0 MB; about 1.2 kB a subject in a slot.
  TimeSummary got_sum(ref.output_times(), ref.compartments(), to);
  std::vector<double> got_metrics(nm);
  SimulationResult r;
  pkscan_device_host_memory = std::size_t{1} << 20;  // less than the sketch
  {
    Engine small;
    try {
      small.summarize_into(p, opts(path.method, path.device, Precision::Float64), got_sum, 1, last,
                           got_metrics.data(), r);
      ADD_FAILURE() << "the call ran with 1 MiB";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("the summary's sketch and one block of subjects"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(got_sum.subjects(), 0);
  }
  pkscan_device_host_memory = std::size_t{7} << 20;  // a block per slot, not two
  Engine engine;
  ASSERT_TRUE(engine.summarize_into(p, opts(path.method, path.device, Precision::Float64), got_sum,
                                    1, last, got_metrics.data(), r));
  EXPECT_EQ(r.summary().device, Device::Cuda);
  expect_same_summary(got_sum.finish(), got_metrics, want);
}
#endif

// ---- Datasets on the device (simulate_dataset with device 'cuda') --------------------------

// CUDA's exp and expm1 are not glibc's (within an ulp or two); the host system runs glibc's.
#ifdef PKSCAN_DEVICE_HOST_SYSTEM
constexpr double kDeviceEvents = 0.0;  // the CPU's bits (kernels/event_step.hpp on both sides)
#else
constexpr double kDeviceEvents = 1e-10;  // relative, floor 1e-3 of the subject's peaks
#endif

// simulate_dataset on device 'cuda' against device 'cpu': the same index columns and statuses;
// amounts, concentrations and predictions within kDeviceEvents (the same bits when it is 0).
void expect_device_rows_like_cpu(const Dataset& d, const ParameterBatch& b,
                                 const std::string& what) {
  SimulateOptions o;
  o.method = Method::Batched;
  const DatasetResult cpu = simulate_dataset(d, b, o);
  o.device = Device::Cuda;
  const DatasetResult dev = simulate_dataset(d, b, o);
  EXPECT_EQ(dev.summary.device, Device::Cuda) << what;
  ASSERT_EQ(dev.rows(), cpu.rows()) << what;
  EXPECT_EQ(dev.subject, cpu.subject) << what;
  EXPECT_EQ(dev.record, cpu.record) << what;
  EXPECT_EQ(dev.compartment, cpu.compartment) << what;
  EXPECT_EQ(std::memcmp(dev.time.data(), cpu.time.data(), cpu.time.size() * sizeof(double)), 0)
      << what;
  EXPECT_EQ(dev.status, cpu.status) << what;
  EXPECT_EQ(dev.summary.non_finite_subjects, cpu.summary.non_finite_subjects) << what;
  const int n = cpu.compartments;
  if (kDeviceEvents == 0.0) {
    for (std::vector<double> DatasetResult::*v :
         {&DatasetResult::amounts, &DatasetResult::concentrations, &DatasetResult::prediction})
      EXPECT_EQ(std::memcmp((dev.*v).data(), (cpu.*v).data(), (cpu.*v).size() * sizeof(double)), 0)
          << what;
    return;
  }
  // Floors relative to the subject's peak amount, concentration and prediction.
  std::vector<double> peak(3 * d.subjects.size(), 0.0);
  const auto at = [&](std::int64_t r, int what_peak) -> double& {
    return peak[3 * static_cast<std::size_t>(cpu.subject[static_cast<std::size_t>(r)]) +
                static_cast<std::size_t>(what_peak)];
  };
  for (std::int64_t r = 0; r < cpu.rows(); ++r) {
    for (int c = 0; c < n; ++c) {
      const std::size_t i = static_cast<std::size_t>(r * n + c);
      at(r, 0) = std::max(at(r, 0), std::fabs(cpu.amounts[i]));
      at(r, 1) = std::max(at(r, 1), std::fabs(cpu.concentrations[i]));
    }
    at(r, 2) = std::max(at(r, 2), std::fabs(cpu.prediction[static_cast<std::size_t>(r)]));
  }
  for (std::int64_t r = 0; r < cpu.rows(); ++r) {
    for (int c = 0; c < n; ++c) {
      const std::size_t i = static_cast<std::size_t>(r * n + c);
      PKSCAN_EXPECT_CLOSE(cpu.amounts[i], dev.amounts[i], kDeviceEvents,
                          kDeviceEvents * 1e-3 * at(r, 0),
                          what << " amount, row " << r << " compartment " << c);
      PKSCAN_EXPECT_CLOSE(cpu.concentrations[i], dev.concentrations[i], kDeviceEvents,
                          kDeviceEvents * 1e-3 * at(r, 1),
                          what << " concentration, row " << r << " compartment " << c);
    }
    const std::size_t ur = static_cast<std::size_t>(r);
    PKSCAN_EXPECT_CLOSE(cpu.prediction[ur], dev.prediction[ur], kDeviceEvents,
                        kDeviceEvents * 1e-3 * at(r, 2), what << " prediction, row " << r);
  }
}

// Cases of device 'cuda' datasets (skipped when device 'cuda' is not available).
template <class Param>
class OnDevice : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    std::string why;
    if (!is_backend_available(Method::Batched, Device::Cuda, &why)) GTEST_SKIP() << why;
  }
};
using DeviceDatasets = OnDevice<Scenario>;

// The agreement scenarios as datasets: the device's rows against the exact grid reference (an
// independent solution: the grid's matrix exponential) and against the CPU's rows.
TEST_P(DeviceDatasets, MatchTheExactGridAndTheCpu) {
  const Scenario& sc = GetParam();
  if (sc.disc != Discretization::Exact) GTEST_SKIP() << "the event engine is exact";
  const ScenarioDataset sd = scenario_dataset(sc);
  SimulateOptions o;
  o.device = Device::Cuda;
  const DatasetResult dev = simulate_dataset(sd.data, sd.p.parameters, o);
  ASSERT_EQ(dev.rows(), sd.ref.subjects() * sd.ref.times());
  expect_events_match_grid(sd.ref, dev);
  expect_device_rows_like_cpu(sd.data, sd.p.parameters, sc.name);
}

// Models of 1 to 6 compartments for the event walk (compiled for each count).
struct EventModel {
  std::string name;
  std::shared_ptr<const ModelInfo> model;
  bool clearances = false;
  bool declared = false;  // not one of the Predictor tests' models (no typical row)
};

void PrintTo(const EventModel& m, std::ostream* os) { *os << m.name; }

std::vector<EventModel> event_models() {
  std::vector<EventModel> v;
  for (const Case& c : all_cases()) {
    std::string name = c.name;
    std::replace(name.begin(), name.end(), '/', '_');
    v.push_back({name, c.model, c.clearances});
  }
  v.push_back({"linear1", make_linear_model({"central"}, {{"central", "", "ke"}}), false, true});
  v.push_back(
      {"linear5",
       make_linear_model({"depot", "central", "p1", "p2", "p3"}, {{"depot", "central", "ka"},
                                                                  {"central", "p1", "k12"},
                                                                  {"p1", "central", "k21"},
                                                                  {"central", "p2", "k13"},
                                                                  {"p2", "central", "k31"},
                                                                  {"p2", "p3", "k34"},
                                                                  {"p3", "", "k40"},
                                                                  {"central", "", "ke"}}),
       false, true});
  v.push_back(
      {"linear6",
       make_linear_model({"depot", "central", "p1", "p2", "p3", "p4"}, {{"depot", "central", "ka"},
                                                                        {"central", "p1", "k12"},
                                                                        {"p1", "central", "k21"},
                                                                        {"central", "p2", "k13"},
                                                                        {"p2", "central", "k31"},
                                                                        {"central", "p3", "k14"},
                                                                        {"p3", "central", "k41"},
                                                                        {"p1", "p4", "k25"},
                                                                        {"p4", "", "k50"},
                                                                        {"central", "", "ke"}}),
       false, true});
  return v;
}

// A random row: the Predictor tests' typical values (built-in models) or rates of 0.05 to 1.5 and
// volumes of 5 to 50 (declared models), times 0.5 to 1.5; most lags 0 and F 1, as in real data.
std::vector<double> random_event_row(const EventModel& em, std::mt19937_64& rng) {
  const ModelInfo& m = *em.model;
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const bool builtin_model = !em.declared;
  const std::vector<double> typical =
      builtin_model ? typical_row(m, em.clearances) : std::vector<double>(m.parameters.size());
  std::vector<double> row(m.parameters.size());
  for (std::size_t c = 0; c < row.size(); ++c) {
    const ParameterRole role = m.parameters[c].role;
    double x = typical[c];
    if (!builtin_model) {
      if (role == ParameterRole::Rate) x = 0.05 + 1.45 * u(rng);
      if (role == ParameterRole::Volume) x = 5.0 + 45.0 * u(rng);
      if (role == ParameterRole::Lag) x = 0.1 + 0.4 * u(rng);
      if (role == ParameterRole::Bioavailability) x = 0.6 + 0.4 * u(rng);
    }
    if (!std::isnan(x)) x *= 0.5 + u(rng);
    if (role == ParameterRole::Lag && u(rng) < 0.8) x = 0.0;
    if (role == ParameterRole::Bioavailability && u(rng) < 0.8) x = 1.0;
    row[c] = x;
  }
  return row;
}

using DeviceEventModels = OnDevice<EventModel>;

// Subject s's parameters: `row`, one value per model column.
void set_row(ParameterBatch& b, std::int64_t s, const std::vector<double>& row) {
  for (int c = 0; c < b.parameters(); ++c)
    b.set(b.info().parameters[static_cast<std::size_t>(c)].name, s,
          row[static_cast<std::size_t>(c)]);
}

// Random datasets with every record kind (boluses, infusions, ADDL, SS=1 and 2, EVID 2, 3 and
// 4, per-record KA), 300 subjects in several chunks, and the rich dataset (lags, F, steady-state
// infusions longer than II, constant infusions): the CPU's rows.
TEST_P(DeviceEventModels, GiveTheCpusRowsOnRandomDatasets) {
  const EventModel& em = GetParam();
  const int n = static_cast<int>(em.model->compartments.size());
  const bool has_ka = parameter_index(*em.model, "ka") >= 0;
  std::mt19937_64 rng(seed() + static_cast<std::uint32_t>(n));
  for (int round = 0; round < 2; ++round) {
    const Dataset d = parse_for(*em.model, random_csv(rng, n, round == 0 ? 300 : 20, has_ka));
    ParameterBatch b(em.model, static_cast<std::int64_t>(d.subjects.size()));
    for (std::int64_t s = 0; s < b.subjects(); ++s) set_row(b, s, random_event_row(em, rng));
    expect_device_rows_like_cpu(d, b, em.name + " random round " + std::to_string(round));
    SimulateOptions o;
    o.device = Device::Cuda;
    EXPECT_LE(simulate_dataset(d, b, o).summary.device_host_subjects, b.subjects() / 10)
        << "most subjects on the device";
  }
  if (!em.declared) {
    const Dataset d = parse_for(*em.model, rich_csv(n));
    ParameterBatch b(em.model, static_cast<std::int64_t>(d.subjects.size()));
    const std::vector<double> row = typical_row(*em.model, em.clearances);
    for (std::int64_t s = 0; s < b.subjects(); ++s) set_row(b, s, row);
    expect_device_rows_like_cpu(d, b, em.name + " rich dataset");
  }
}

// Records of subject `id` whose events are far from the order the records make them in: a bolus
// with 200 additional doses every hour, then 100 observations (each placed before most of the
// doses: about 15,000 moves of the insertion sort for 301 events).
std::string long_addl_csv(int id) {
  std::string csv = std::to_string(id) + ",0,10,.,1,2,1,.,.,.,200\n";
  for (int k = 0; k < 100; ++k)
    csv += std::to_string(id) + "," + std::to_string(k) + ".5,.,.,0,2,.,.,.,.,.\n";
  return csv;
}

// Close and equal eigenvalues (rows without a fast eigendecomposition) and more infusions at
// once than the walk holds (both left to the host's solver, counted), events far from their
// records' order (sorted on the device), volumes from the dataset
// that change between a subject's records, a subject without observations, a steady state that
// does not exist (NonFinite), methods power and auto (the same kernel), an invalid dataset cell
// (the CPU's message) and method scan (CPU only).
TEST_P(DeviceEventModels, GiveTheCpusFallbacksVolumesStatusesAndErrors) {
  const EventModel& em = GetParam();
  if (em.name != "two_compartment_micro") GTEST_SKIP() << "one model is enough";
  const ModelInfo& m = *em.model;
  const std::string csv =
      "ID,TIME,AMT,RATE,EVID,CMT,II,SS,KA,v_central,ADDL\n"
      "1,0,100,.,1,1,.,.,.,.,.\n1,1,.,.,0,2,.,.,.,.,.\n1,5,.,.,0,2,.,.,.,5,.\n"
      "1,9,.,.,0,2,.,.,0.2,30,.\n1,12,.,.,0,2,.,.,.,.,.\n"
      "2,0,100,.,1,1,12,1,.,.,.\n2,1,.,.,0,2,.,.,.,.,.\n"
      "3,0,50,10,1,2,.,.,.,.,.\n3,2,.,.,0,2,.,.,0.2000001,.,.\n3,7,.,.,0,2,.,.,.,12,.\n"
      "4,0,70,.,1,1,.,.,.,.,.\n"
      "5,0,80,.,1,2,.,.,.,.,.\n5,3,.,.,0,2,.,.,.,40,.\n5,6,.,.,0,2,.,.,.,8,.\n"
      "5,7,.,.,0,1,.,.,.,.,.\n"
      "6,0,10,0.1,1,2,1,.,.,.,60\n6,50,.,.,0,2,.,.,.,.,.\n6,61,.,.,0,2,.,.,.,.,.\n" +
      long_addl_csv(7);
  const Dataset d = parse_for(m, csv);
  ParameterBatch b(em.model, 7);
  b.set_all("ka", 0.2);  // = ke: equal eigenvalues
  b.set_all("ke", 0.2);
  b.set_all("v_central", 10.0);
  b.set("ke", 1, 0.0);  // no elimination: the SS=1 steady state does not exist
  b.set("ka", 4, 0.7);
  b.set("ka", 5, 0.7);
  b.set("ka", 6, 0.7);
  expect_device_rows_like_cpu(d, b, "fallbacks and volumes");
  SimulateOptions o;
  o.device = Device::Cuda;
  const DatasetResult batched = simulate_dataset(d, b, o);
  // On the host's solver: IDs 1, 3 and 4 (equal eigenvalues) and 6 (at 61 h, 61 infusions of
  // 100 h running: more than the walk's lists hold). ID 7's events, far from the order its
  // records make them in, are sorted on the device (the walk's heapsort).
  EXPECT_EQ(batched.summary.device_host_subjects, 4);
  EXPECT_EQ(batched.status[1], SubjectStatus::NonFinite);  // on the device
  EXPECT_EQ(batched.status[3], SubjectStatus::Ok);
  EXPECT_GT(batched.prediction.back(), 0.0);
  // Subject 5's central concentrations use the volume of each record: 40, then 8.
  EXPECT_EQ(batched.concentrations[2 * 7 + 1], batched.amounts[2 * 7 + 1] / 40.0);
  EXPECT_EQ(batched.concentrations[2 * 8 + 1], batched.amounts[2 * 8 + 1] / 8.0);
  EXPECT_GT(batched.amounts[2 * 8 + 1], 0.0);
  for (Method method : {Method::Power, Method::Auto}) {
    o.method = method;
    const DatasetResult other = simulate_dataset(d, b, o);
    EXPECT_EQ(std::memcmp(other.amounts.data(), batched.amounts.data(),
                          batched.amounts.size() * sizeof(double)),
              0)
        << to_string(method);
  }
  o.method = Method::Batched;
  b.set("ke", 2, -1.0);
  std::string cpu_message, device_message;
  try {
    simulate_dataset(d, b);
  } catch (const DomainError& e) {
    cpu_message = e.what();
  }
  try {
    simulate_dataset(d, b, o);
  } catch (const DomainError& e) {
    device_message = e.what();
  }
  EXPECT_FALSE(cpu_message.empty());
  EXPECT_EQ(device_message, cpu_message);
  o.method = Method::Scan;
  EXPECT_THROW(simulate_dataset(d, b, o), BackendUnavailable);
}

// ---- The Predictor on the device (Predictor::set_device(Device::Cuda): the event walk). ----

using DevicePredictor = OnDevice<EventModel>;

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The largest finite magnitude of v.
double peak_of(const std::vector<double>& v) {
  double peak = 0.0;
  for (double x : v)
    if (std::isfinite(x)) peak = std::max(peak, std::fabs(x));
  return peak;
}

// The device's sensitivities against the CPU's: relative kDeviceGradient, with a floor of
// kDeviceGradient times the largest magnitude of the row (rows of `width` values), or of
// `scale` (1e-6 of the whole matrix's: a row that is all rounding noise of a derivative that is
// nearly 0). NaN where the CPU has NaN.
constexpr double kDeviceGradient = 1e-9;
void expect_rows_close(const std::vector<double>& cpu, const std::vector<double>& dev,
                       std::size_t width, const std::string& what, double scale) {
  ASSERT_EQ(cpu.size(), dev.size());
  double worst = 0.0;
  for (std::size_t r0 = 0; r0 < cpu.size(); r0 += width) {
    double peak = scale;
    for (std::size_t i = r0; i < r0 + width; ++i)
      if (std::isfinite(cpu[i])) peak = std::max(peak, std::fabs(cpu[i]));
    for (std::size_t i = r0; i < r0 + width; ++i) {
      if (std::isnan(cpu[i])) {
        EXPECT_TRUE(std::isnan(dev[i])) << what << " value " << i;
        continue;
      }
      const double err = std::fabs(dev[i] - cpu[i]);
      const double bound = kDeviceGradient * (std::fabs(cpu[i]) + peak);
      worst = std::max(worst, err / (std::fabs(cpu[i]) + peak + 1e-300));
      EXPECT_LE(err, bound) << what << " value " << i << ": " << cpu[i] << " " << dev[i];
    }
  }
  if (std::getenv("PKSCAN_PRINT_WORST")) std::printf("%s: worst %.3g\n", what.c_str(), worst);
}

// Every observation record of `d` gets a DV (so that it enters the likelihood).
void give_dv(Dataset& d, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.1, 5.0);
  for (DatasetSubject& sub : d.subjects)
    for (DatasetRecord& r : sub.records)
      if (r.evid == 0) {
        r.dv = u(rng);
        r.mdv = false;
      }
}

// The device Predictor's predict_all and log_likelihood_all (without and with gradients)
// against the CPU Predictor's: the CPU's bits on the host system (the walk is the CPU solver's
// arithmetic, kernels/event_step.hpp and kernels/steady_state.hpp on both sides); on CUDA
// kDeviceEvents relative with a floor of 1e-3 of it times the subject's peak prediction. Returns
// how many subjects the device left to the host (unknown from outside: counted by comparing
// nothing; the caller checks the predictions only).
void expect_device_predictor_like_cpu(const Dataset& d, const std::shared_ptr<const ModelInfo>& m,
                                      const std::vector<double>& params, const std::string& what,
                                      std::int64_t min_gradient_subjects) {
  Predictor cpu(d, m);
  Predictor dev(d, m);
  dev.set_device(Device::Cuda);
  ASSERT_EQ(dev.device(), Device::Cuda);
  const std::size_t obs = static_cast<std::size_t>(cpu.observations());
  std::vector<double> pc(obs), pd(obs, -7.0);
  cpu.predict_all(params.data(), pc.data());
  dev.predict_all(params.data(), pd.data());
  const Predictor::DeviceCall call = dev.last_device_call();
  EXPECT_EQ(call.device_subjects + call.host_subjects, dev.subjects()) << what;
  // Most subjects are walked on the device (rows with close eigenvalues are rare here).
  EXPECT_GE(call.device_subjects, dev.subjects() * 3 / 5) << what;
  if (kDeviceEvents == 0.0) {
    EXPECT_EQ(std::memcmp(pd.data(), pc.data(), obs * sizeof(double)), 0) << what;
  } else {
    for (std::int64_t s = 0; s < cpu.subjects(); ++s) {
      const std::size_t o0 = static_cast<std::size_t>(cpu.observation_offset(s));
      const std::size_t o1 = o0 + static_cast<std::size_t>(cpu.observations(s));
      double peak = 0.0;
      for (std::size_t o = o0; o < o1; ++o) peak = std::max(peak, std::fabs(pc[o]));
      for (std::size_t o = o0; o < o1; ++o)
        PKSCAN_EXPECT_CLOSE(pc[o], pd[o], kDeviceEvents, kDeviceEvents * 1e-3 * peak,
                            what << " prediction " << o);
    }
  }
  const std::size_t n = static_cast<std::size_t>(cpu.subjects());
  const std::size_t np = static_cast<std::size_t>(cpu.parameters());
  for (ErrorModelKind kind : {ErrorModelKind::Additive, ErrorModelKind::Combined}) {
    ErrorModel error;
    error.kind = kind;
    const double sigma[2] = {0.3, 0.2};
    std::vector<double> lc(n), ld(n), sgc(2), sgd(2);
    const double tc =
        cpu.log_likelihood_all(params.data(), error, sigma, lc.data(), nullptr, sgc.data());
    const double td =
        dev.log_likelihood_all(params.data(), error, sigma, ld.data(), nullptr, sgd.data());
    // The observations are in the likelihood.
    EXPECT_GT(std::count_if(lc.begin(), lc.end(), [](double v) { return v < 0.0; }), 0) << what;
    if (kDeviceEvents == 0.0) {
      EXPECT_TRUE(same_bits(td, tc)) << what << ": " << td << " " << tc;
      EXPECT_EQ(std::memcmp(ld.data(), lc.data(), n * sizeof(double)), 0) << what;
      EXPECT_EQ(std::memcmp(sgd.data(), sgc.data(), 2 * sizeof(double)), 0) << what;
    } else if (!std::isnan(tc)) {
      PKSCAN_EXPECT_CLOSE(tc, td, 1e-8, 0.0, what << " log-likelihood");
    }
    // With gradients: the device's sensitivities (the solver's, in plain loops instead of
    // Eigen's products): the log-likelihood's bits (it depends on the predictions only), its
    // gradient within kDeviceGradient of the CPU's, relative to the subject's largest component.
    std::vector<double> gc(n * np), gd(n * np);
    const double tgc =
        cpu.log_likelihood_all(params.data(), error, sigma, nullptr, gc.data(), nullptr);
    const double tgd =
        dev.log_likelihood_all(params.data(), error, sigma, nullptr, gd.data(), nullptr);
    if (kDeviceEvents == 0.0) {
      EXPECT_TRUE(same_bits(tgd, tgc)) << what;
    }
    expect_rows_close(gc, gd, np, what + " log-likelihood gradient", 1e-6 * peak_of(gc));
  }
  // predict_gradient_all: the predictions as predict_all's, the Jacobian close to the CPU's.
  std::vector<double> jc(obs * np), jd(obs * np), qc(obs), qd(obs);
  cpu.predict_gradient_all(params.data(), qc.data(), jc.data());
  dev.predict_gradient_all(params.data(), qd.data(), jd.data());
  const Predictor::DeviceCall gcall = dev.last_device_call();
  if (std::getenv("PKSCAN_PRINT_WORST"))
    std::printf("%s: sensitivities of %lld of %lld subjects on the device\n", what.c_str(),
                static_cast<long long>(gcall.device_subjects),
                static_cast<long long>(dev.subjects()));
  EXPECT_GE(gcall.device_subjects, min_gradient_subjects) << what;
  if (kDeviceEvents == 0.0) {
    EXPECT_EQ(std::memcmp(qd.data(), pc.data(), obs * sizeof(double)), 0) << what;
  }
  for (std::int64_t s = 0; s < cpu.subjects(); ++s) {
    const std::size_t o0 = static_cast<std::size_t>(cpu.observation_offset(s)) * np;
    const std::size_t o1 = o0 + static_cast<std::size_t>(cpu.observations(s)) * np;
    const std::vector<double> c(jc.begin() + static_cast<std::ptrdiff_t>(o0),
                                jc.begin() + static_cast<std::ptrdiff_t>(o1));
    const std::vector<double> d(jd.begin() + static_cast<std::ptrdiff_t>(o0),
                                jd.begin() + static_cast<std::ptrdiff_t>(o1));
    expect_rows_close(c, d, o1 - o0, what + " Jacobian of subject " + std::to_string(s),
                      1e-6 * peak_of(jc));
  }
}

std::vector<double> rows_of(const ParameterBatch& b) {
  std::vector<double> rows;
  for (std::int64_t s = 0; s < b.subjects(); ++s)
    rows.insert(rows.end(), b.row(s), b.row(s) + b.parameters());
  return rows;
}

// Random datasets with every record kind (as GiveTheCpusRowsOnRandomDatasets) and the rich
// dataset, through the Predictor on the device: the CPU Predictor's predictions and
// log-likelihoods, for models of 1 to 6 compartments.
TEST_P(DevicePredictor, GivesTheCpusPredictionsAndLikelihoodsOnRandomDatasets) {
  const EventModel& em = GetParam();
  const int n = static_cast<int>(em.model->compartments.size());
  const bool has_ka = parameter_index(*em.model, "ka") >= 0;
  std::mt19937_64 rng(seed() + 100 + static_cast<std::uint32_t>(n));
  for (int round = 0; round < 2; ++round) {
    Dataset d = parse_for(*em.model, random_csv(rng, n, round == 0 ? 300 : 20, has_ka));
    give_dv(d, rng);
    ParameterBatch b(em.model, static_cast<std::int64_t>(d.subjects.size()));
    for (std::int64_t s = 0; s < b.subjects(); ++s) set_row(b, s, random_event_row(em, rng));
    expect_device_predictor_like_cpu(d, em.model, rows_of(b),
                                     em.name + " random round " + std::to_string(round),
                                     b.subjects() * 9 / 10);
  }
  if (!em.declared) {
    Dataset d = parse_for(*em.model, rich_csv(n));
    give_dv(d, rng);
    ParameterBatch b(em.model, static_cast<std::int64_t>(d.subjects.size()));
    const std::vector<double> row = typical_row(*em.model, em.clearances);
    for (std::int64_t s = 0; s < b.subjects(); ++s) set_row(b, s, row);
    expect_device_predictor_like_cpu(d, em.model, rows_of(b), em.name + " rich dataset",
                                     b.subjects());
  }
}

// One compartment against closed forms (independent of the solver): an IV bolus at steady state
// (SS=1) with ADDL doses, an infusion at steady state with a lag, and a constant infusion at
// steady state (SS=1, II 0: the equilibrium rate / CL).
TEST_P(DevicePredictor, GivesClosedFormsOfOneCompartmentSteadyStates) {
  const EventModel& em = GetParam();
  if (em.name != "linear1") GTEST_SKIP() << "one model is enough";
  const std::shared_ptr<const ModelInfo>& m = em.model;
  const std::string csv =
      "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,DV\n"
      "1,0,100,.,1,1,12,2,1,.\n1,3,.,.,0,1,.,.,.,1\n1,30,.,.,0,1,.,.,.,1\n"
      "2,0,60,20,1,1,24,.,1,.\n2,0.5,.,.,0,1,.,.,.,1\n2,2,.,.,0,1,.,.,.,1\n2,8,.,.,0,1,.,.,.,1\n"
      "3,0,0,5,1,1,0,.,1,.\n3,0,.,.,0,1,.,.,.,1\n3,4,.,.,0,1,.,.,.,1\n";
  const Dataset d = parse_for(*m, csv);
  ParameterBatch b(m, 3);
  const double ke = 0.15, v = 20.0, lag = 1.0;
  b.set_all("ke", ke);
  b.set_all(m->parameters[static_cast<std::size_t>(m->volume_parameter[0])].name, v);
  b.set("lag_central", 1, lag);
  Predictor dev(d, m);
  dev.set_device(Device::Cuda);
  std::vector<double> pred(static_cast<std::size_t>(dev.observations()));
  dev.predict_all(rows_of(b).data(), pred.data());
  auto e = [&](double t) { return std::exp(-ke * t); };
  // Subject 1: steady state of 100 every 12 h, then doses at 12 and 24 (ADDL 2).
  const double acc = 1.0 / (1.0 - e(12.0));
  EXPECT_NEAR(pred[0], 100.0 / v * e(3.0) * acc, 1e-12 * pred[0]);
  EXPECT_NEAR(pred[1], 100.0 / v * e(6.0) * acc, 1e-12 * pred[1]);  // 30 = 24 + 6
  // Its gradient: C = D/V e^(-ke t) / (1 - e^(-ke ii)), dC/dke = -C (t + ii e^(-ke ii) acc),
  // dC/dV = -C / V (the steady state's closed-form derivative on the device).
  const std::size_t np = static_cast<std::size_t>(dev.parameters());
  std::vector<double> pg(pred.size()), jac(pred.size() * np);
  dev.predict_gradient_all(rows_of(b).data(), pg.data(), jac.data());
  const std::size_t c_ke = static_cast<std::size_t>(parameter_index(*m, "ke"));
  const std::size_t c_v = static_cast<std::size_t>(m->volume_parameter[0]);
  for (std::size_t i = 0; i < 2; ++i) {
    const double t = i == 0 ? 3.0 : 6.0;
    EXPECT_NEAR(jac[i * np + c_ke], -pred[i] * (t + 12.0 * e(12.0) * acc), 1e-11 * pred[i] * t);
    EXPECT_NEAR(jac[i * np + c_v], -pred[i] / v, 1e-12 * pred[i] / v);
  }
  // Subject 2: 60 at 20 per h (3 h) every 24 h at steady state, each arriving 1 h late.
  // Within an interval starting at the arrival: rising for 3 h, then decaying.
  const double r = 20.0, dur = 3.0, k = ke;
  const double c_end = r / (k * v) * (1.0 - e(dur)) / (1.0 - e(24.0));  // at the end of one
  auto ss2 = [&](double since_arrival) {
    if (since_arrival < dur)
      return c_end * e(24.0 - dur) * e(since_arrival) + r / (k * v) * (1.0 - e(since_arrival));
    return c_end * e(since_arrival - dur);
  };
  EXPECT_NEAR(pred[2], ss2(24.0 - lag + 0.5), 1e-12 * pred[2]);  // 0.5 h before this arrival
  EXPECT_NEAR(pred[3], ss2(2.0 - lag), 1e-12 * pred[3]);
  EXPECT_NEAR(pred[4], ss2(8.0 - lag), 1e-12 * pred[4]);
  // Subject 3: a constant infusion of 5 per h at equilibrium: 5 / (ke V), then it stops at 0.
  EXPECT_NEAR(pred[5], 5.0 / (ke * v), 1e-12 * pred[5]);
  EXPECT_NEAR(pred[6], 5.0 / (ke * v) * e(4.0), 1e-12 * pred[6]);
}

// The device's sensitivities against the closed form of a lagged IV bolus (one compartment):
// C = F D / V exp(-ke (t - lag)), dC/dke = -(t - lag) C, dC/dV = -C / V, dC/dlag = ke C,
// dC/dF = C / F; and a log-likelihood gradient that follows from it.
TEST_P(DevicePredictor, GivesTheClosedFormGradientOfALaggedBolus) {
  const EventModel& em = GetParam();
  if (em.name != "linear1") GTEST_SKIP() << "one model is enough";
  const std::shared_ptr<const ModelInfo>& m = em.model;
  const Dataset d = parse_for(*m,
                              "ID,TIME,AMT,EVID,CMT,DV\n1,0,100,1,1,.\n1,5,.,0,1,2\n"
                              "1,10,.,0,1,1\n");
  const int c_ke = parameter_index(*m, "ke"), c_v = m->volume_parameter[0];
  const int c_f = m->f_parameter[0], c_lag = m->lag_parameter[0];
  ParameterBatch b(m, 1);
  const double ke = 0.2, v = 12.0, f = 0.8, lag = 1.5;
  b.set("ke", 0, ke);
  b.set(m->parameters[static_cast<std::size_t>(c_v)].name, 0, v);
  b.set(m->parameters[static_cast<std::size_t>(c_f)].name, 0, f);
  b.set(m->parameters[static_cast<std::size_t>(c_lag)].name, 0, lag);
  Predictor dev(d, m);
  dev.set_device(Device::Cuda);
  const std::size_t np = static_cast<std::size_t>(dev.parameters());
  std::vector<double> pred(2), jac(2 * np);
  dev.predict_gradient_all(rows_of(b).data(), pred.data(), jac.data());
  EXPECT_EQ(dev.last_device_call().device_subjects, 1);
  const double t[2] = {5.0, 10.0};
  for (std::size_t i = 0; i < 2; ++i) {
    const double c = f * 100.0 / v * std::exp(-ke * (t[i] - lag));
    const double* jr = jac.data() + i * np;
    EXPECT_NEAR(pred[i], c, 1e-13 * c);
    EXPECT_NEAR(jr[c_ke], -(t[i] - lag) * c, 1e-12 * c * t[i]) << i;
    EXPECT_NEAR(jr[c_v], -c / v, 1e-12 * c / v) << i;
    EXPECT_NEAR(jr[c_lag], ke * c, 1e-12 * c) << i;
    EXPECT_NEAR(jr[c_f], c / f, 1e-12 * c / f) << i;
  }
  // Additive error (sigma 0.5): d ll / d p = sum (DV - C) / sigma^2 dC/dp.
  const ErrorModel error{ErrorModelKind::Additive};
  const double sigma = 0.5, dv[2] = {2.0, 1.0};
  std::vector<double> g(np);
  dev.log_likelihood_all(rows_of(b).data(), error, &sigma, nullptr, g.data(), nullptr);
  for (int col : {c_ke, c_v, c_lag, c_f}) {
    double want = 0.0;
    for (std::size_t i = 0; i < 2; ++i)
      want += (dv[i] - pred[i]) / (sigma * sigma) * jac[i * np + static_cast<std::size_t>(col)];
    EXPECT_NEAR(g[static_cast<std::size_t>(col)], want, 1e-12 * std::fabs(want) + 1e-15) << col;
  }
}

// What the walk leaves to the host's solver (equal eigenvalues: no fast eigendecomposition; more
// infusions running at once than its lists hold), a steady state that does not exist (NaN),
// subjects without observations, the CPU's message for an invalid value, and switching back to
// the CPU.
TEST_P(DevicePredictor, LeavesWhatItCannotWalkToTheHostAndReportsTheCpusErrors) {
  const EventModel& em = GetParam();
  if (em.name != "two_compartment_micro") GTEST_SKIP() << "one model is enough";
  const std::shared_ptr<const ModelInfo>& m = em.model;
  std::string csv =
      "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,DV\n"
      "1,0,100,.,1,1,.,.,.,.\n1,1,.,.,0,2,.,.,.,1\n1,9,.,.,0,2,.,.,.,2\n"
      "2,0,100,.,1,1,12,.,1,.\n2,1,.,.,0,2,.,.,.,1\n"
      "3,0,70,.,1,1,.,.,.,.\n"
      "4,0,10,0.1,1,2,1,60,.,.\n4,50,.,.,0,2,.,.,.,1\n4,61,.,.,0,2,.,.,.,1\n"
      "5,0,80,.,1,2,.,.,.,.\n5,3,.,.,0,2,.,.,.,1\n";
  const Dataset d = parse_for(*m, csv);
  ParameterBatch b(m, 5);
  b.set_all("ka", 1.1);
  b.set_all("ke", 0.2);
  b.set_all("v_central", 10.0);
  b.set("ka", 0, 0.2);  // = ke: equal eigenvalues
  b.set("ke", 1, 0.0);  // no elimination: the SS=1 steady state does not exist
  std::vector<double> rows = rows_of(b);
  expect_device_predictor_like_cpu(d, m, rows, "fallbacks", 3);
  Predictor dev(d, m);
  dev.set_device(Device::Cuda);
  std::vector<double> pred(static_cast<std::size_t>(dev.observations()));
  dev.predict_all(rows.data(), pred.data());
  EXPECT_EQ(dev.last_device_call().host_subjects, 2);  // subjects 1 and 4
  EXPECT_EQ(dev.last_device_call().device_subjects, 3);
  EXPECT_TRUE(std::isnan(pred[2]));  // subject 2
  EXPECT_GT(pred[4], 0.0);           // subject 4 at 61 h: 50 infusions of 100 h running
  // An invalid value: the CPU's DomainError.
  rows[2 * rows.size() / 5 + static_cast<std::size_t>(parameter_index(*m, "ke"))] = -1.0;
  std::string cpu_message, device_message;
  try {
    Predictor(d, m).predict_all(rows.data(), pred.data());
  } catch (const DomainError& e) {
    cpu_message = e.what();
  }
  try {
    dev.predict_all(rows.data(), pred.data());
  } catch (const DomainError& e) {
    device_message = e.what();
  }
  EXPECT_NE(cpu_message.find("ke"), std::string::npos) << cpu_message;
  EXPECT_EQ(device_message, cpu_message);
  dev.set_device(Device::Auto);
  EXPECT_EQ(dev.device(), Device::Cpu);
  dev.set_device(Device::Cuda);
  EXPECT_EQ(dev.device(), Device::Cuda);
  dev.set_device(Device::Cpu);
  EXPECT_EQ(dev.device(), Device::Cpu);
}

std::vector<Path> cpu_paths() {
  return {{Method::Scan, Device::Cpu, 0.0},
          {Method::Batched, Device::Cpu, 0.0},
          {Method::Power, Device::Cpu, 1e-10}};
}

// The same claims on both systems: the device code is built without FMA contraction on CUDA too
// (--fmad=false), so it gives the CPU paths' bits.
std::vector<Path> gpu_paths() {
  return {{Method::Batched, Device::Cuda, 0.0, true}, {Method::Power, Device::Cuda, 1e-10, true}};
}

std::string test_name(const ::testing::TestParamInfo<std::tuple<Path, Scenario>>& info) {
  return path_name(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
}

// CPU and CUDA paths are separate instantiations so ctest can label the CUDA ones `gpu`.
INSTANTIATE_TEST_SUITE_P(Cpu, BackendAgreement,
                         ::testing::Combine(::testing::ValuesIn(cpu_paths()),
                                            ::testing::ValuesIn(scenarios())),
                         test_name);
INSTANTIATE_TEST_SUITE_P(Cpu, EngineAgreement, ::testing::ValuesIn(scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           return info.param.name;
                         });
INSTANTIATE_TEST_SUITE_P(Cpu, OverflowStatus, ::testing::ValuesIn(cpu_paths()),
                         [](const ::testing::TestParamInfo<Path>& info) {
                           return path_name(info.param);
                         });
INSTANTIATE_TEST_SUITE_P(Gpu, OverflowStatus, ::testing::ValuesIn(gpu_paths()),
                         [](const ::testing::TestParamInfo<Path>& info) {
                           return path_name(info.param);
                         });
INSTANTIATE_TEST_SUITE_P(Gpu, DeviceTiming, ::testing::ValuesIn(gpu_paths()),
                         [](const ::testing::TestParamInfo<Path>& info) {
                           return path_name(info.param);
                         });
INSTANTIATE_TEST_SUITE_P(Gpu, DeviceSummary,
                         ::testing::Combine(::testing::ValuesIn(gpu_paths()),
                                            ::testing::ValuesIn(scenarios())),
                         test_name);
INSTANTIATE_TEST_SUITE_P(Gpu, BackendAgreement,
                         ::testing::Combine(::testing::ValuesIn(gpu_paths()),
                                            ::testing::ValuesIn(scenarios())),
                         test_name);

INSTANTIATE_TEST_SUITE_P(Gpu, DeviceDatasets, ::testing::ValuesIn(scenarios()),
                         [](const ::testing::TestParamInfo<Scenario>& info) {
                           return info.param.name;
                         });
INSTANTIATE_TEST_SUITE_P(Gpu, DevicePredictor, ::testing::ValuesIn(event_models()),
                         [](const ::testing::TestParamInfo<EventModel>& info) {
                           return info.param.name;
                         });
INSTANTIATE_TEST_SUITE_P(Gpu, DeviceEventModels, ::testing::ValuesIn(event_models()),
                         [](const ::testing::TestParamInfo<EventModel>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace pkscan
