#pragma once
// The agreement suite's shared parts (tests/agreement: every compute path against the reference
// scan; tests/device: the device paths against the CPU's): the scenarios and the paths, the
// reference summaries, the scenarios as NONMEM datasets, the models of the event walk.
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

#include "support/expect_close.hpp"
#include "support/predictor_support.hpp"

namespace pkscan {
namespace {

using test::same_bits;

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

inline std::string path_name(const Path& p) {
  std::string m = to_string(p.method), d = to_string(p.device);
  m[0] = static_cast<char>(std::toupper(m[0]));
  d[0] = static_cast<char>(std::toupper(d[0]));
  return m + "_" + d;
}

// Test names and failure messages show the path and the scenario by name.
inline void PrintTo(const Path& p, std::ostream* os) { *os << path_name(p); }
inline void PrintTo(const Scenario& s, std::ostream* os) { *os << s.name; }

inline std::uint32_t seed() {
  const char* s = std::getenv("PKSCAN_TEST_SEED");
  return s ? static_cast<std::uint32_t>(std::strtoul(s, nullptr, 10)) : 7u;
}

inline Problem build(const Scenario& sc) {
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

inline const std::vector<Scenario>& scenarios() {
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

inline SimulateOptions opts(Method m, Device d, Precision p) {
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

inline Summarised summarise(const SimulationResult& r, const TimeSummaryOptions& to, int mc,
                            double last) {
  TimeSummary summary(r.output_times(), r.compartments(), to);
  Summarised out;
  out.metrics.resize(static_cast<std::size_t>(r.subjects() * kMetricCount));
  summary.add(r, mc, last, out.metrics.data());
  out.table = summary.finish();
  return out;
}

// The same means, percentiles and metrics, bit for bit, and the same counts.
inline void expect_same_summary(const TimeSummaryTable& got, const std::vector<double>& got_metrics,
                                const Summarised& want) {
  EXPECT_TRUE(same_bits(got.mean, want.table.mean)) << "means";
  EXPECT_TRUE(same_bits(got.quantiles, want.table.quantiles)) << "percentiles";
  EXPECT_TRUE(same_bits(got_metrics, want.metrics)) << "metrics";
  EXPECT_EQ(got.count, want.table.count);
  EXPECT_EQ(got.excluded, want.table.excluded);
}

// Cases on one path (method, device), skipped when the path is not available here.
class OnPath : public ::testing::TestWithParam<Path> {
 protected:
  void SetUp() override {
    std::string why;
    if (!is_backend_available(GetParam().method, GetParam().device, &why)) GTEST_SKIP() << why;
  }
};

// Cases on one path and one scenario, skipped when the path is not available here.
class OnPathAndScenario : public ::testing::TestWithParam<std::tuple<Path, Scenario>> {
 protected:
  void SetUp() override {
    std::string why;
    const Path& path = std::get<0>(GetParam());
    if (!is_backend_available(path.method, path.device, &why)) GTEST_SKIP() << why;
  }
};

// ---- The scenarios as NONMEM datasets -----------------------------------------------------

// Two exact solutions of the same system by different arithmetic (measured worst: 5.8e-12).
constexpr double kEventVsGrid = 1e-10;

// The scenario as a NONMEM dataset: each subject's doses (ADDL/II for repeats, RATE for
// infusions; CMT 1-based) and an observation record at every output time, after the doses at
// the same time (the grid's outputs include the doses given at that time).
inline std::string dataset_csv(const Problem& p, const SimulationResult& ref) {
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
inline ScenarioDataset scenario_dataset(const Scenario& sc) {
  ScenarioDataset d{build(sc), {}, {}};
  d.ref = simulate(d.p, opts(Method::Scan, Device::Cpu, Precision::Float64));
  d.data = parse_dataset(dataset_csv(d.p, d.ref), "agreement.csv", d.p.parameters.info());
  return d;
}

// Every amount of `events` against the grid reference within kEventVsGrid (floor: 1e-3 of the
// subject's peak); returns the worst relative difference.
inline double expect_events_match_grid(const SimulationResult& ref, const DatasetResult& events) {
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

// CUDA's exp and expm1 are not glibc's (within an ulp or two); the host system runs glibc's.
#ifdef PKSCAN_DEVICE_HOST_SYSTEM
constexpr double kDeviceEvents = 0.0;  // the CPU's bits (kernels/event_step.hpp on both sides)
#else
constexpr double kDeviceEvents = 1e-10;  // relative, floor 1e-3 of the subject's peaks
#endif

// Cases of device 'cuda' datasets (skipped when device 'cuda' is not available).
template <class Param>
class OnDevice : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    std::string why;
    if (!is_backend_available(Method::Batched, Device::Cuda, &why)) GTEST_SKIP() << why;
  }
};

// Models of 1 to 6 compartments for the event walk (compiled for each count).
struct EventModel {
  std::string name;
  std::shared_ptr<const ModelInfo> model;
  bool clearances = false;
  bool declared = false;  // not one of the Predictor tests' models (no typical row)
};

inline void PrintTo(const EventModel& m, std::ostream* os) { *os << m.name; }

inline std::vector<EventModel> event_models() {
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
inline std::vector<double> random_event_row(const EventModel& em, std::mt19937_64& rng) {
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

// Subject s's parameters: `row`, one value per model column.
inline void set_row(ParameterBatch& b, std::int64_t s, const std::vector<double>& row) {
  for (int c = 0; c < b.parameters(); ++c)
    b.set(b.info().parameters[static_cast<std::size_t>(c)].name, s,
          row[static_cast<std::size_t>(c)]);
}

inline std::vector<Path> cpu_paths() {
  return {{Method::Scan, Device::Cpu, 0.0},
          {Method::Batched, Device::Cpu, 0.0},
          {Method::Power, Device::Cpu, 1e-10}};
}

// The same claims on both systems: the device code is built without FMA contraction on CUDA too
// (--fmad=false), so it gives the CPU paths' bits.
inline std::vector<Path> gpu_paths() {
  return {{Method::Batched, Device::Cuda, 0.0, true}, {Method::Power, Device::Cuda, 1e-10, true}};
}

// Test names: the path, the scenario or the model by name; a path and a scenario joined by "_".
struct ParamName {
  std::string operator()(const ::testing::TestParamInfo<Path>& info) const {
    return path_name(info.param);
  }
  std::string operator()(const ::testing::TestParamInfo<Scenario>& info) const {
    return info.param.name;
  }
  std::string operator()(const ::testing::TestParamInfo<EventModel>& info) const {
    return info.param.name;
  }
  std::string operator()(const ::testing::TestParamInfo<std::tuple<Path, Scenario>>& info) const {
    return path_name(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
  }
};

}  // namespace
}  // namespace pkscan
