// Predictor: predictions against simulate_dataset(), exact gradients against central finite
// differences of predict(), the log-likelihood against a direct computation in the test, the
// all-subjects calls against the per-subject ones, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <limits>
#include <memory>
#include <pkscan/pkscan.hpp>
#include <pkscan/predictor.hpp>
#include <random>
#include <string>
#include <vector>

#include "support/datasets.hpp"
#include "support/expect_close.hpp"

// Counting allocations: the Predictor's repeated path must not allocate. On glibc, malloc (under
// operator new, std::vector and Eigen's heap matrices) is wrapped to count the calls made while
// g_count_mallocs is set; otherwise it only forwards to glibc.
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
extern "C" void* __libc_malloc(std::size_t size);
namespace {
volatile bool g_count_mallocs = false;
volatile long g_mallocs = 0;
}  // namespace
extern "C" void* malloc(std::size_t size) {
  if (g_count_mallocs) g_mallocs = g_mallocs + 1;
  return __libc_malloc(size);
}
#define PKSCAN_TEST_COUNTS_MALLOC 1
#endif

namespace pkscan {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using test::parameter_names;
using test::parse_for;

std::shared_ptr<const ModelInfo> builtin(ModelKind k) {
  return std::shared_ptr<const ModelInfo>(std::shared_ptr<const ModelInfo>(), &model_info(k));
}

// The `linear` model used throughout: depot -> central <-> peripheral, elimination from central,
// and a second elimination from the peripheral sharing the rate `ke` (one parameter, two flows).
std::shared_ptr<const ModelInfo> linear_model() {
  return make_linear_model({"depot", "central", "peripheral"}, {{"depot", "central", "ka"},
                                                                {"central", "peripheral", "k12"},
                                                                {"peripheral", "central", "k21"},
                                                                {"central", "", "ke"},
                                                                {"peripheral", "", "ke"}});
}

// A parameter row: the model's defaults, then `values` by name.
std::vector<double> row_of(const ModelInfo& m,
                           const std::vector<std::pair<std::string, double>>& v) {
  std::vector<double> r;
  for (const ParameterInfo& p : m.parameters) r.push_back(p.default_value);
  for (const auto& [name, value] : v) {
    const int c = parameter_index(m, name);
    if (c < 0) ADD_FAILURE() << "no parameter " << name << " in " << m.name;
    if (c >= 0) r[static_cast<std::size_t>(c)] = value;
  }
  return r;
}

// Typical values for every model: micro constants or clearances, with F != 1 and lag > 0 on the
// dosed compartments (depot, central) and non-default values elsewhere.
std::vector<double> typical_row(const ModelInfo& m, bool clearances) {
  std::vector<std::pair<std::string, double>> v = {
      {"ka", 1.3},         {"v_depot", 1.5},   {"v_central", 20.0},  {"f_depot", 0.7},
      {"lag_depot", 0.37}, {"f_central", 0.8}, {"lag_central", 0.25}};
  const int n = static_cast<int>(m.compartments.size());
  if (m.kind == ModelKind::Linear) {
    v = {{"ka", 1.3},
         {"k12", 0.4},
         {"k21", 0.15},
         {"ke", 0.22},
         {"v_depot", 1.5},
         {"v_central", 20.0},
         {"v_peripheral", 70.0},
         {"f_depot", 0.7},
         {"lag_depot", 0.37},
         {"f_central", 0.8},
         {"lag_central", 0.25},
         {"f_peripheral", 0.9},
         {"lag_peripheral", 0.1}};
    return row_of(m, v);
  }
  if (clearances)
    v.emplace_back("cl", 4.4);
  else
    v.emplace_back("ke", 0.22);
  if (n >= 3) {
    if (clearances) {
      v.emplace_back("q", 8.0);
    } else {
      v.emplace_back("k12", 0.4);
      v.emplace_back("k21", 0.15);
    }
  }
  if (m.kind == ModelKind::ThreeCompartment) {
    v.emplace_back("v_peripheral", 70.0);
    v.emplace_back("f_peripheral", 0.9);
    v.emplace_back("lag_peripheral", 0.1);
  }
  if (m.kind == ModelKind::FourCompartment) {
    v.emplace_back("v_peripheral1", 50.0);
    v.emplace_back("v_peripheral2", 90.0);
    if (clearances) {
      v.emplace_back("q2", 6.0);
    } else {
      v.emplace_back("k13", 0.3);
      v.emplace_back("k31", 0.05);
    }
    v.emplace_back("f_peripheral2", 0.9);
    v.emplace_back("lag_peripheral1", 0.1);
  }
  return row_of(m, v);
}

// Seven subjects covering every event kind, with observations away from every time that moves
// with a parameter (lagged arrivals: + 0.37 into the depot, + 0.25 into central; infusion ends
// at arrival + F AMT / RATE with F 0.8). KA is a dataset column on subject 7 (per-record values).
// Observations of the depot and (when the model has one) CMT 3 cover other volumes. DV is
// present except on the observation whose prediction is 0 (after the reset of subject 2).
std::string rich_csv(int compartments) {
  const std::string p = compartments >= 3 ? "3" : "2";  // a third compartment when there is one
  std::string csv = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,DV,KA\n";
  // 1: oral boluses with ADDL (0.37, 12.37, 24.37), an EVID 2 record, depot and CMT 3 samples.
  csv +=
      "1,0,100,.,1,1,12,2,.,.,.\n1,0.7,.,.,0,2,.,.,.,1.1,.\n1,1.9,.,.,0,2,.,.,.,2.4,.\n"
      "1,2.2,.,.,0,1,.,.,.,3.5,.\n1,5.3,.,.,0," +
      p +
      ",.,.,.,0.9,.\n1,8,.,.,2,.,.,.,.,.,.\n1,13.1,.,.,0,2,.,.,.,1.8,.\n"
      "1,20.2,.,.,0,2,.,.,.,1.2,.\n1,26,.,.,0,2,.,.,.,2.2,.\n1,30.5,.,.,0,2,.,.,.,1.5,.\n";
  // 2: infusion into central with F (arrives 0.25, ends 3.45), reset at 9, EVID 4 dose at 11.
  csv +=
      "2,0,200,50,1,2,.,.,.,.,.\n2,1.1,.,.,0,2,.,.,.,2.1,.\n2,2.6,.,.,0,2,.,.,.,5.5,.\n"
      "2,4.4,.,.,0,2,.,.,.,6.2,.\n2,7.9,.,.,0,2,.,.,.,3.3,.\n2,9,.,.,3,.,.,.,.,.,.\n"
      "2,10.3,.,.,0,2,.,.,.,.,.\n2,11,80,.,4,1,.,.,.,.,.\n2,12.2,.,.,0,2,.,.,.,1.9,.\n"
      "2,15.8,.,.,0,2,.,.,.,2.5,.\n";
  // 3: SS=1 bolus into the depot, II 12, ADDL 1 (arrivals 0.37, 12.37).
  csv +=
      "3,0,100,.,1,1,12,1,1,.,.\n3,1,.,.,0,2,.,.,.,4.1,.\n3,4.7,.,.,0,2,.,.,.,3.9,.\n"
      "3,11.1,.,.,0,2,.,.,.,2.8,.\n3,14,.,.,0,2,.,.,.,4.4,.\n3,20.9,.,.,0,2,.,.,.,3.1,.\n";
  // 4: a bolus, then SS=2 infusion shorter than II (arrives 6.25, ends 7.85).
  csv +=
      "4,0,50,.,1,1,.,.,.,.,.\n4,3.1,.,.,0,2,.,.,.,1.3,.\n4,6,120,60,1,2,12,.,2,.,.\n"
      "4,6.9,.,.,0,2,.,.,.,3.6,.\n4,9.5,.,.,0,2,.,.,.,2.7,.\n4,15.2,.,.,0,2,.,.,.,1.6,.\n";
  // 5: SS=1 infusion longer than II: D = 0.8 * 290 / 10 = 23.2 > II 8; infusions started
  // 8 and 16 h before run on (ends 7.45, 15.45), its own ends at 23.45.
  csv +=
      "5,0,290,10,1,2,8,.,1,.,.\n5,1.3,.,.,0,2,.,.,.,9.5,.\n5,5.2,.,.,0,2,.,.,.,10.1,.\n"
      "5,9.9,.,.,0,2,.,.,.,9.9,.\n5,17.6,.,.,0,2,.,.,.,8.7,.\n5,26,.,.,0,2,.,.,.,6.6,.\n";
  // 6: SS=1 constant infusion (AMT 0, II 0) into central.
  csv += "6,0,0,5,1,2,0,.,1,.,.\n6,2,.,.,0,2,.,.,.,1.1,.\n6,5,.,.,0,2,.,.,.,1.2,.\n";
  // 7: KA from the dataset on some records (the row's ka elsewhere).
  csv +=
      "7,0,100,.,1,1,.,.,.,.,.\n7,1.5,.,.,0,2,.,.,.,2.9,1.7\n7,3,.,.,0,2,.,.,.,3.3,.\n"
      "7,4,60,.,1,1,.,.,.,.,.\n7,6.2,.,.,0,2,.,.,.,3.7,0.6\n7,9,.,.,0,2,.,.,.,2.6,.\n";
  return csv;
}

struct Case {
  std::string name;
  std::shared_ptr<const ModelInfo> model;
  bool clearances;
};

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (ModelKind k :
       {ModelKind::TwoCompartment, ModelKind::ThreeCompartment, ModelKind::FourCompartment})
    for (bool cl : {false, true})
      cases.push_back({to_string(k) + (cl ? "/clearances" : "/micro"), builtin(k), cl});
  cases.push_back({"linear", linear_model(), false});
  return cases;
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Jacobian of every subject against central differences of predict(), for every column.
void check_gradients(const Predictor& pr, const std::vector<double>& row, const std::string& what,
                     int* checked) {
  const int np = pr.parameters();
  auto ws = pr.make_workspace();
  const ModelInfo& m = pr.model();
  for (std::int64_t s = 0; s < pr.subjects(); ++s) {
    const std::size_t n = static_cast<std::size_t>(pr.observations(s));
    std::vector<double> pred(n), jac(n * static_cast<std::size_t>(np)), base(n), up(n), down(n);
    pr.predict_gradient(s, row.data(), pred.data(), jac.data(), *ws);
    pr.predict(s, row.data(), base.data(), *ws);
    for (std::size_t i = 0; i < n; ++i)
      EXPECT_EQ(pred[i], base[i]) << what << " subject " << s + 1 << " obs " << i;
    const double scale = max_abs(base);
    for (int c = 0; c < np; ++c) {
      const std::string name = m.parameters[static_cast<std::size_t>(c)].name;
      const double v = row[static_cast<std::size_t>(c)];
      if (std::isnan(v)) {  // an unused alternative: derivative 0
        for (std::size_t i = 0; i < n; ++i)
          EXPECT_EQ(jac[i * static_cast<std::size_t>(np) + static_cast<std::size_t>(c)], 0.0)
              << what << " subject " << s + 1 << " d/d" << name;
        continue;
      }
      const double mag = std::max(std::fabs(v), 0.05);
      const double h = 1e-5 * mag;
      // Central differences; at a lower bound (a lag of 0) the second-order one-sided formula
      // (-3 f(v) + 4 f(v + h) - f(v + 2h)) / 2h.
      const bool one_sided = v - h < 0.0;
      std::vector<double> r = row;
      r[static_cast<std::size_t>(c)] = v + h;
      pr.predict(s, r.data(), up.data(), *ws);
      r[static_cast<std::size_t>(c)] = one_sided ? v + 2.0 * h : v - h;
      pr.predict(s, r.data(), down.data(), *ws);
      const double atol = 1e-8 * scale / mag;
      for (std::size_t i = 0; i < n; ++i) {
        const double fd = one_sided ? (-3.0 * base[i] + 4.0 * up[i] - down[i]) / (2.0 * h)
                                    : (up[i] - down[i]) / (2.0 * h);
        const double got = jac[i * static_cast<std::size_t>(np) + static_cast<std::size_t>(c)];
        PKSCAN_EXPECT_CLOSE(fd, got, 1e-6, atol,
                            what << " subject " << s + 1 << " obs " << i << " d pred / d " << name);
        ++*checked;
      }
    }
  }
}

// ---- Predictions equal simulate_dataset(), bit for bit. ----

void expect_same_as_simulate(const Dataset& d, const std::shared_ptr<const ModelInfo>& m,
                             const ParameterBatch& b, const std::string& what) {
  const DatasetResult ref = simulate_dataset(d, m->kind, b);
  const Predictor pr(d, m);
  ASSERT_EQ(pr.observations(), ref.rows()) << what;
  auto ws = pr.make_workspace();
  std::vector<double> all(static_cast<std::size_t>(pr.observations()));
  for (std::int64_t s = 0; s < pr.subjects(); ++s)
    pr.predict(s, b.row(s), all.data() + pr.observation_offset(s), *ws);
  // One event solver serves both (engine/events/solver.hpp): the same bits, not just close.
  for (std::size_t i = 0; i < all.size(); ++i)
    ASSERT_EQ(std::memcmp(&ref.prediction[i], &all[i], sizeof(double)), 0)
        << what << " row " << i << ": " << ref.prediction[i] << " vs " << all[i];
}

TEST(PredictorPredictions, EqualSimulateDatasetOnTheExamples) {
  const ModelInfo& m3 = model_info(ModelKind::ThreeCompartment);
  {
    // config/examples/datasets/population.yaml
    const Dataset d =
        read_dataset(std::string(PKSCAN_SOURCE_DIR) + "/config/examples/datasets/population.csv",
                     parameter_names(m3), 3);
    ParameterBatch b(ModelKind::ThreeCompartment, 3);
    b.set_all("ka", 0.9);
    b.set_all("k12", 0.4);
    b.set_all("k21", 0.11);
    b.set_all("v_central", 20);
    b.set_all("v_peripheral", 70);
    b.set("ke", 0, 0.2);
    b.set("ke", 1, 0.15);
    b.set("ke", 2, 0.25);
    expect_same_as_simulate(d, builtin(ModelKind::ThreeCompartment), b, "population.csv");
  }
  {
    // config/examples/datasets/torsten_2_ss.yaml
    const Dataset d =
        read_dataset(std::string(PKSCAN_SOURCE_DIR) + "/config/examples/datasets/torsten_2_ss.csv",
                     parameter_names(m3), 3);
    ParameterBatch b(ModelKind::ThreeCompartment, 1);
    b.set_all("cl", 5);
    b.set_all("q", 8);
    b.set_all("v_central", 20);
    b.set_all("v_peripheral", 70);
    b.set_all("ka", 1.2);
    expect_same_as_simulate(d, builtin(ModelKind::ThreeCompartment), b, "torsten_2_ss.csv");
  }
  {
    const Dataset d =
        read_dataset(std::string(PKSCAN_SOURCE_DIR) + "/tests/data/datasets/two_subjects.csv",
                     parameter_names(m3), 3);
    ParameterBatch b(ModelKind::ThreeCompartment, 2);
    b.set_all("cl", 5);
    b.set_all("q", 8);
    b.set_all("v_central", 20);
    b.set_all("v_peripheral", 70);
    expect_same_as_simulate(d, builtin(ModelKind::ThreeCompartment), b, "two_subjects.csv");
  }
  for (const Case& c : all_cases()) {
    const Dataset d = parse_for(*c.model, rich_csv(static_cast<int>(c.model->compartments.size())));
    ParameterBatch b(c.model, static_cast<std::int64_t>(d.subjects.size()));
    const std::vector<double> row = typical_row(*c.model, c.clearances);
    for (int col = 0; col < b.parameters(); ++col) {
      const std::string& name = c.model->parameters[static_cast<std::size_t>(col)].name;
      for (std::int64_t s = 0; s < b.subjects(); ++s)
        b.set(name, s, row[static_cast<std::size_t>(col)]);
    }
    expect_same_as_simulate(d, c.model, b, "rich dataset, " + c.name);
  }
}

// A random NONMEM dataset: every record kind, random times, doses, compartments and KA cells.
std::string random_csv(std::mt19937_64& rng, int compartments, int subjects) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto pick = [&](int n) { return static_cast<int>(u(rng) * n) % n; };
  auto num = [](double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", x);
    return std::string(buf);
  };
  std::string csv = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,KA\n";
  for (int s = 1; s <= subjects; ++s) {
    double t = 0.0;
    const int records = 5 + pick(20);
    for (int j = 0; j < records; ++j) {
      if (j > 0 && pick(4) != 0) t += 0.1 + 4.0 * u(rng);
      const std::string id = std::to_string(s) + "," + num(t) + ",";
      const std::string ka = pick(4) == 0 ? num(0.3 + 2.0 * u(rng)) : ".";
      const std::string cmt = std::to_string(1 + pick(compartments));
      const int kind = j == 0 ? 1 : pick(10);
      if (kind <= 4 && j > 0) {  // observation
        csv += id + ".,.,0," + (pick(5) == 0 ? "." : cmt) + ",.,.,.," + ka + "\n";
      } else if (kind == 5) {
        csv += id + ".,.,2,.,.,.,.," + ka + "\n";
      } else if (kind == 6) {
        csv += id + ".,.,3,.,.,.,.," + ka + "\n";
      } else {  // a dose: bolus or infusion, maybe ADDL, maybe SS, maybe EVID 4
        const bool infusion = pick(3) == 0;
        const double amt = 10.0 + 200.0 * u(rng);
        const double rate = infusion ? amt / (0.2 + 20.0 * u(rng)) : 0.0;
        const int ss = pick(5) == 0 ? 1 + pick(2) : 0;
        const int addl = pick(3) == 0 ? 1 + pick(4) : 0;
        const double ii = (ss > 0 || addl > 0) ? 2.0 + 10.0 * u(rng) : 0.0;
        const int evid = kind == 7 ? 4 : 1;
        csv += id + num(amt) + "," + (infusion ? num(rate) : ".") + "," + std::to_string(evid) +
               "," + (pick(5) == 0 ? "." : cmt) + "," + (ii > 0 ? num(ii) : ".") + "," +
               (addl > 0 ? std::to_string(addl) : ".") + "," + (ss > 0 ? std::to_string(ss) : ".") +
               "," + ka + "\n";
      }
    }
    csv += std::to_string(s) + "," + num(t + 1.0 + 5.0 * u(rng)) + ",.,.,0,.,.,.,.,.\n";
  }
  return csv;
}

TEST(PredictorPredictions, EqualSimulateDatasetOnRandomDatasets) {
  std::mt19937_64 rng(20240611);
  for (int round = 0; round < 3; ++round)
    for (const Case& c : all_cases()) {
      const int n = static_cast<int>(c.model->compartments.size());
      const Dataset d = parse_for(*c.model, random_csv(rng, n, 25));
      ParameterBatch b(c.model, static_cast<std::int64_t>(d.subjects.size()));
      std::uniform_real_distribution<double> u(0.5, 1.5);
      const std::vector<double> row = typical_row(*c.model, c.clearances);
      for (std::int64_t s = 0; s < b.subjects(); ++s)
        for (int col = 0; col < b.parameters(); ++col) {
          const double v = row[static_cast<std::size_t>(col)];
          const ParameterInfo& info = c.model->parameters[static_cast<std::size_t>(col)];
          // Random values; some lags 0 and some F 1, as in real data.
          double x = std::isnan(v) ? v : v * u(rng);
          if (info.role == ParameterRole::Lag && u(rng) < 0.8) x = 0.0;
          if (info.role == ParameterRole::Bioavailability && u(rng) < 0.8) x = 1.0;
          b.set(info.name, s, x);
        }
      expect_same_as_simulate(d, c.model, b,
                              "random round " + std::to_string(round) + ", " + c.name);
    }
}

// ---- Gradients. ----

TEST(PredictorGradient, MatchesFiniteDifferencesForEveryParameterOfEveryModel) {
  int checked = 0;
  for (const Case& c : all_cases()) {
    const Predictor pr(
        parse_for(*c.model, rich_csv(static_cast<int>(c.model->compartments.size()))), c.model);
    check_gradients(pr, typical_row(*c.model, c.clearances), c.name, &checked);
  }
  std::printf("gradient entries checked against finite differences: %d\n", checked);
  EXPECT_GT(checked, 2000);
}

// Steady states of lagged SS records (lag_depot 0.37, lag_central 0.25), with observations
// between the record and the arrival of its dose: the state there is the steady state advanced
// by II - lag, which moves with the lag, F and the rates. Bolus (SS=1, and SS=2 on top of an
// earlier dose), infusions shorter and longer than II (implied infusions still running at the
// record), an infusion ending between the last implied arrival and the record (II 3, D 3.2 * F),
// a lag of II or more (II 0.3 < 0.37: no advance) and a record with a KA cell.
std::string ss_lag_csv() {
  std::string csv = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,DV,KA\n";
  csv +=
      "1,4,100,.,1,1,12,1,1,.,.\n1,4.1,.,.,0,2,.,.,.,3.1,.\n1,4.3,.,.,0,1,.,.,.,2.2,.\n"
      "1,6.6,.,.,0,2,.,.,.,4.1,.\n1,15.5,.,.,0,2,.,.,.,2.9,.\n";
  csv +=
      "2,0,50,.,1,2,.,.,.,.,.\n2,2,100,.,1,1,8,.,2,.,.\n2,2.2,.,.,0,2,.,.,.,3.3,.\n"
      "2,5.9,.,.,0,2,.,.,.,3.9,.\n";
  csv +=
      "3,3,90,45,1,2,6,2,1,.,.\n3,3.1,.,.,0,2,.,.,.,4.4,.\n3,4.4,.,.,0,2,.,.,.,5.1,.\n"
      "3,9.7,.,.,0,2,.,.,.,4.6,.\n";
  csv += "4,5,300,10,1,2,9,1,1,.,.\n4,5.1,.,.,0,2,.,.,.,12.1,.\n4,11.3,.,.,0,2,.,.,.,13.3,.\n";
  csv += "5,1,40,10,1,2,3,.,1,.,.\n5,1.2,.,.,0,2,.,.,.,2.5,.\n5,3.3,.,.,0,2,.,.,.,2.1,.\n";
  csv += "6,2,20,.,1,1,0.3,.,1,.,.\n6,2.2,.,.,0,2,.,.,.,6.1,.\n6,2.9,.,.,0,2,.,.,.,5.5,.\n";
  csv += "7,1,100,.,1,1,12,.,1,.,0.8\n7,1.2,.,.,0,2,.,.,.,1.9,.\n7,3,.,.,0,2,.,.,.,3.1,.\n";
  return csv;
}

TEST(PredictorGradient, LaggedSteadyStatesMatchFiniteDifferences) {
  int checked = 0;
  for (const Case& c : all_cases()) {
    const Predictor pr(parse_for(*c.model, ss_lag_csv()), c.model);
    check_gradients(pr, typical_row(*c.model, c.clearances), c.name, &checked);
  }
  std::printf("steady-state gradient entries checked: %d\n", checked);
  EXPECT_GT(checked, 1000);
}

TEST(PredictorGradient, OverriddenColumnsHaveNoDerivativeWhereTheyGovern) {
  // KE from the dataset on every record: d/d ke is 0 everywhere; KA on the middle record only.
  const ModelInfo& m = model_info(ModelKind::TwoCompartment);
  const Dataset d = parse_for(m,
                              "ID,TIME,AMT,EVID,CMT,KE,KA\n1,0,100,1,1,0.3,.\n1,2,.,0,2,0.3,0.8\n"
                              "1,5,.,0,2,0.3,.\n");
  const Predictor pr(d, ModelKind::TwoCompartment);
  const std::vector<double> row = row_of(m, {{"ka", 1.1}, {"ke", 0.2}, {"v_central", 10}});
  int checked = 0;
  check_gradients(pr, row, "overrides", &checked);
  auto ws = pr.make_workspace();
  std::vector<double> pred(2), jac(2 * static_cast<std::size_t>(pr.parameters()));
  pr.predict_gradient(0, row.data(), pred.data(), jac.data(), *ws);
  const int ke = parameter_index(m, "ke"), ka = parameter_index(m, "ka");
  EXPECT_EQ(jac[static_cast<std::size_t>(ke)], 0.0);
  EXPECT_EQ(jac[static_cast<std::size_t>(pr.parameters() + ke)], 0.0);
  // ka governs only (2, 5]: no effect at t = 2, an effect at t = 5.
  EXPECT_EQ(jac[static_cast<std::size_t>(ka)], 0.0);
  EXPECT_NE(jac[static_cast<std::size_t>(pr.parameters() + ka)], 0.0);
  // The closed form at t = 2 (ka 0.8, ke 0.3, F 1): Bateman, no dependence on the row's ka.
  const double want = 100.0 * 0.8 / (0.8 - 0.3) * (std::exp(-0.3 * 2) - std::exp(-0.8 * 2)) / 10;
  EXPECT_NEAR(pred[0], want, 1e-12 * want);
}

TEST(PredictorGradient, MatchesFiniteDifferencesWithCloseAndEqualEigenvalues) {
  // ka close to and equal to ke (two_compartment: eigenvalues -ka and -ke), and a linear model
  // with two identical independent compartments (a repeated eigenvalue, V = I); short and long
  // intervals, an infusion running over both.
  const ModelInfo& m = model_info(ModelKind::TwoCompartment);
  const Predictor pr(parse_for(m,
                               "ID,TIME,AMT,RATE,EVID,CMT\n1,0,100,.,1,1\n1,0.001,.,.,0,2\n"
                               "1,0.01,.,.,0,2\n1,1,50,20,1,1\n1,1.3,.,.,0,2\n1,3,.,.,0,2\n"
                               "1,40,.,.,0,2\n"),
                     ModelKind::TwoCompartment);
  int checked = 0;
  for (double ka : {0.3, 0.3 + 1e-9, 0.3 + 1e-5, 0.3 + 1e-3, 0.31, 0.5})
    check_gradients(pr, row_of(m, {{"ka", ka}, {"ke", 0.3}, {"v_central", 5}, {"f_depot", 0.9}}),
                    "ka " + std::to_string(ka), &checked);
  const auto twin = make_linear_model({"a", "b"}, {{"a", "", "k"}, {"b", "", "k"}}, "a");
  const Predictor lin(parse_for(*twin,
                                "ID,TIME,AMT,RATE,EVID,CMT\n1,0,100,.,1,1\n1,0.5,60,30,1,2\n"
                                "1,1,.,.,0,1\n1,1.5,.,.,0,2\n1,4,.,.,0,2\n"),
                      twin);
  check_gradients(lin, row_of(*twin, {{"k", 0.4}, {"v_b", 3}}), "twin", &checked);
  EXPECT_GT(checked, 100);
}

TEST(PredictorGradient, MatchesFiniteDifferencesOnTheFallbackPath) {
  // A cycle depot -> central -> peripheral -> depot has complex eigenvalues: no real
  // eigendecomposition, so K, G and their derivatives come from block exponentials.
  const auto cyc =
      make_linear_model({"depot", "central", "peripheral"}, {{"depot", "central", "k1"},
                                                             {"central", "peripheral", "k2"},
                                                             {"peripheral", "depot", "k3"},
                                                             {"central", "", "ke"}});
  const Predictor pr(parse_for(*cyc,
                               "ID,TIME,AMT,RATE,EVID,CMT,II,SS\n1,0,100,.,1,1,12,1\n"
                               "1,1,.,.,0,2,.,.\n1,2,40,10,1,2,.,.\n1,3.3,.,.,0,2,.,.\n"
                               "1,7.1,.,.,0,3,.,.\n1,12,.,.,0,2,.,.\n"),
                     cyc);
  int checked = 0;
  check_gradients(pr,
                  row_of(*cyc, {{"k1", 1.0},
                                {"k2", 1.0},
                                {"k3", 1.0},
                                {"ke", 0.1},
                                {"v_central", 4},
                                {"f_depot", 0.8},
                                {"lag_depot", 0.2},
                                {"f_central", 0.7},
                                {"lag_central", 0.3}}),
                  "cycle", &checked);
  EXPECT_GT(checked, 50);
}

// ---- Log-likelihood. ----

constexpr double kLog2Pi = 1.8378770664093454836;

// The log-likelihood of subject s computed here from predict() and the dataset's DV.
double direct_log_likelihood(const Predictor& pr, std::int64_t s, const std::vector<double>& row,
                             const ErrorModel& e, const double* sigma) {
  auto ws = pr.make_workspace();
  std::vector<double> pred(static_cast<std::size_t>(pr.observations(s)));
  pr.predict(s, row.data(), pred.data(), *ws);
  double ll = 0.0;
  std::size_t obs = 0;
  for (const DatasetRecord& r : pr.dataset().subjects[static_cast<std::size_t>(s)].records) {
    if (r.evid != 0) continue;
    const double f = pred[obs++];
    if (r.mdv || std::isnan(r.dv)) continue;
    double sd = 0.0;
    double y = r.dv, mu = f, jacobian = 0.0;
    if (e.log_scale) {
      y = std::log(r.dv);
      mu = std::log(f);
      jacobian = -std::log(r.dv);
      sd = sigma[0];
    } else if (e.kind == ErrorModelKind::Additive) {
      sd = sigma[0];
    } else if (e.kind == ErrorModelKind::Proportional) {
      sd = sigma[0] * f;
    } else {
      sd = std::sqrt(sigma[0] * sigma[0] + sigma[1] * sigma[1] * f * f);
    }
    ll += -0.5 * kLog2Pi - std::log(sd) - 0.5 * (y - mu) * (y - mu) / (sd * sd) + jacobian;
  }
  return ll;
}

TEST(PredictorLogLikelihood, MatchesTheDirectComputationAndFiniteDifferences) {
  const ModelInfo& m = model_info(ModelKind::ThreeCompartment);
  const Predictor pr(parse_for(m, rich_csv(3)), ModelKind::ThreeCompartment);
  const std::vector<double> row = typical_row(m, true);
  const int np = pr.parameters();
  struct Err {
    ErrorModel e;
    std::vector<double> sigma;
  };
  const std::vector<Err> errors = {{{ErrorModelKind::Additive, false}, {0.7}},
                                   {{ErrorModelKind::Proportional, false}, {0.2}},
                                   {{ErrorModelKind::Combined, false}, {0.3, 0.15}},
                                   {{ErrorModelKind::Additive, true}, {0.25}}};
  auto ws = pr.make_workspace();
  int checked = 0;
  for (const Err& err : errors) {
    const std::string what = err.e.parameter_names()[0] + (err.e.log_scale ? " log" : "") +
                             " kind " + std::to_string(static_cast<int>(err.e.kind));
    // Subject 2's observation after the reset predicts 0: no DV there, so the log scale works.
    for (std::int64_t s = 0; s < pr.subjects(); ++s) {
      std::vector<double> grad(static_cast<std::size_t>(np)), sgrad(err.sigma.size());
      const double ll =
          pr.log_likelihood(s, row.data(), err.e, err.sigma.data(), grad.data(), sgrad.data(), *ws);
      const double want = direct_log_likelihood(pr, s, row, err.e, err.sigma.data());
      PKSCAN_EXPECT_CLOSE(want, ll, 1e-12, 1e-12, what << " subject " << s + 1);
      // Without gradients: the same value.
      EXPECT_EQ(ll,
                pr.log_likelihood(s, row.data(), err.e, err.sigma.data(), nullptr, nullptr, *ws));
      for (int c = 0; c < np; ++c) {
        const double v = row[static_cast<std::size_t>(c)];
        if (std::isnan(v)) {
          EXPECT_EQ(grad[static_cast<std::size_t>(c)], 0.0);
          continue;
        }
        const double h = 1e-5 * std::max(std::fabs(v), 0.05);
        std::vector<double> r = row;
        r[static_cast<std::size_t>(c)] = v + h;
        const double up = direct_log_likelihood(pr, s, r, err.e, err.sigma.data());
        r[static_cast<std::size_t>(c)] = v - h;
        const double down = direct_log_likelihood(pr, s, r, err.e, err.sigma.data());
        PKSCAN_EXPECT_CLOSE((up - down) / (2 * h), grad[static_cast<std::size_t>(c)], 1e-6,
                            1e-7 * (1.0 + std::fabs(ll)) / std::max(std::fabs(v), 0.05),
                            what << " subject " << s + 1 << " d ll / d "
                                 << m.parameters[static_cast<std::size_t>(c)].name);
        ++checked;
      }
      for (std::size_t j = 0; j < err.sigma.size(); ++j) {
        const double h = 1e-6 * err.sigma[j];
        std::vector<double> sg = err.sigma;
        sg[j] = err.sigma[j] + h;
        const double up = direct_log_likelihood(pr, s, row, err.e, sg.data());
        sg[j] = err.sigma[j] - h;
        const double down = direct_log_likelihood(pr, s, row, err.e, sg.data());
        PKSCAN_EXPECT_CLOSE((up - down) / (2 * h), sgrad[j], 1e-6, 1e-9,
                            what << " subject " << s + 1 << " d ll / d sigma " << j);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 300);
}

// ---- All subjects at once. ----

TEST(PredictorAll, EqualsThePerSubjectCallsOnOneAndTwoThreads) {
  for (const Case& c : all_cases()) {
    const Predictor pr(
        parse_for(*c.model, rich_csv(static_cast<int>(c.model->compartments.size()))), c.model);
    const std::size_t np = static_cast<std::size_t>(pr.parameters());
    const std::size_t n = static_cast<std::size_t>(pr.subjects());
    std::vector<double> params;
    for (std::size_t s = 0; s < n; ++s) {  // a different row per subject
      std::vector<double> row = typical_row(*c.model, c.clearances);
      row[static_cast<std::size_t>(parameter_index(*c.model, "ka"))] *= 1.0 + 0.05 * double(s);
      params.insert(params.end(), row.begin(), row.end());
    }
    auto ws = pr.make_workspace();
    std::vector<double> one(static_cast<std::size_t>(pr.observations()));
    std::vector<double> one_jac(one.size() * np), one_g(one.size());
    for (std::size_t s = 0; s < n; ++s) {
      const std::size_t off =
          static_cast<std::size_t>(pr.observation_offset(static_cast<std::int64_t>(s)));
      pr.predict(static_cast<std::int64_t>(s), params.data() + s * np, one.data() + off, *ws);
      pr.predict_gradient(static_cast<std::int64_t>(s), params.data() + s * np, one_g.data() + off,
                          one_jac.data() + off * np, *ws);
    }
    const ErrorModel e{ErrorModelKind::Combined, false};
    const double sigma[2] = {0.3, 0.1};
    double sum = 0.0;
    std::vector<double> per(n), grad(n * np), sgrad_sum(2, 0.0);
    for (std::size_t s = 0; s < n; ++s) {
      double sg[2];
      per[s] = pr.log_likelihood(static_cast<std::int64_t>(s), params.data() + s * np, e, sigma,
                                 grad.data() + s * np, sg, *ws);
      sum += per[s];
      sgrad_sum[0] += sg[0];
      sgrad_sum[1] += sg[1];
    }
    for (int threads : {1, 2}) {
      std::vector<double> all(one.size());
      pr.predict_all(params.data(), all.data(), threads);
      for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], one[i]) << c.name << threads;
      std::vector<double> all_g(one.size()), all_jac(one_jac.size());
      pr.predict_gradient_all(params.data(), all_g.data(), all_jac.data(), threads);
      for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all_g[i], one[i]) << c.name;
      for (std::size_t i = 0; i < all_jac.size(); ++i) ASSERT_EQ(all_jac[i], one_jac[i]) << c.name;
      std::vector<double> per_all(n), grad_all(n * np), sgrad_all(2);
      const double total = pr.log_likelihood_all(params.data(), e, sigma, per_all.data(),
                                                 grad_all.data(), sgrad_all.data(), threads);
      EXPECT_EQ(total, sum) << c.name << " threads " << threads;
      for (std::size_t s = 0; s < n; ++s) EXPECT_EQ(per_all[s], per[s]) << c.name;
      for (std::size_t i = 0; i < grad.size(); ++i) ASSERT_EQ(grad_all[i], grad[i]) << c.name;
      EXPECT_EQ(sgrad_all[0], sgrad_sum[0]) << c.name;
      EXPECT_EQ(sgrad_all[1], sgrad_sum[1]) << c.name;
      EXPECT_EQ(pr.log_likelihood_all(params.data(), e, sigma, nullptr, nullptr, nullptr, threads),
                sum);
    }
  }
}

// ---- No allocation on the repeated path. ----

TEST(PredictorWorkspace, RepeatedEvaluationsDoNotAllocate) {
#ifndef PKSCAN_TEST_COUNTS_MALLOC
  GTEST_SKIP() << "allocations are counted only with glibc";
#else
  // The rich dataset (every event kind, steady states with running infusions) on the fast
  // path, and a model with complex eigenvalues on the fallback path.
  const auto cyc =
      make_linear_model({"depot", "central", "peripheral"}, {{"depot", "central", "k1"},
                                                             {"central", "peripheral", "k2"},
                                                             {"peripheral", "depot", "k3"},
                                                             {"central", "", "ke"}});
  struct Run {
    std::shared_ptr<const ModelInfo> model;
    std::vector<double> row;
  };
  const std::vector<Run> runs = {{builtin(ModelKind::ThreeCompartment),
                                  typical_row(model_info(ModelKind::ThreeCompartment), true)},
                                 {cyc, row_of(*cyc, {{"k1", 1.0},
                                                     {"k2", 1.0},
                                                     {"k3", 1.0},
                                                     {"ke", 0.1},
                                                     {"v_central", 4},
                                                     {"f_central", 0.8},
                                                     {"lag_depot", 0.2}})}};
  for (const Run& run : runs) {
    // (KA is a covariate column for the cycle model, which has no parameter of that name.)
    const Predictor pr(parse_for(*run.model, rich_csv(3)), run.model);
    // The counter works: making a workspace allocates.
    g_mallocs = 0;
    g_count_mallocs = true;
    auto ws = pr.make_workspace();
    g_count_mallocs = false;
    ASSERT_GT(g_mallocs, 0) << "malloc calls are not being counted";
    const std::size_t np = static_cast<std::size_t>(pr.parameters());
    std::vector<double> out(64), jac(64 * np), grad(np);
    const ErrorModel e{ErrorModelKind::Combined, false};
    const double sigma[2] = {0.3, 0.1};
    double sg[2];
    for (int pass = 0; pass < 2; ++pass) {
      g_mallocs = 0;
      g_count_mallocs = pass == 1;  // the first pass warms the workspace up
      for (std::int64_t s = 0; s < pr.subjects(); ++s) {
        pr.predict(s, run.row.data(), out.data(), *ws);
        pr.predict_gradient(s, run.row.data(), out.data(), jac.data(), *ws);
        pr.log_likelihood(s, run.row.data(), e, sigma, grad.data(), sg, *ws);
      }
      g_count_mallocs = false;
    }
    EXPECT_EQ(g_mallocs, 0) << run.model->name;
  }
#endif
}

// ---- Bad input. ----

TEST(PredictorErrors, BadInputThrowsAndNeverCrashes) {
  const ModelInfo& m = model_info(ModelKind::ThreeCompartment);
  const Predictor pr(parse_for(m, rich_csv(3)), ModelKind::ThreeCompartment);
  auto ws = pr.make_workspace();
  std::vector<double> row = typical_row(m, true);
  std::vector<double> out(64), jac(64 * 20);
  EXPECT_THROW(pr.predict(-1, row.data(), out.data(), *ws), InvalidArgument);
  EXPECT_THROW(pr.predict(pr.subjects(), row.data(), out.data(), *ws), InvalidArgument);
  EXPECT_THROW(pr.predict(0, nullptr, out.data(), *ws), InvalidArgument);
  // A workspace of another predictor.
  const Predictor other(parse_for(m, rich_csv(3)), ModelKind::ThreeCompartment);
  auto ws_other = other.make_workspace();
  EXPECT_THROW(pr.predict(0, row.data(), out.data(), *ws_other), InvalidArgument);
  // Invalid values: a negative clearance, both ke and cl, a missing volume, a NaN lag.
  const int cl = parameter_index(m, "cl"), ke = parameter_index(m, "ke");
  for (auto [col, v] :
       std::vector<std::pair<int, double>>{{cl, -1.0},
                                           {ke, 0.2},
                                           {parameter_index(m, "v_central"), kNaN},
                                           {parameter_index(m, "lag_depot"), kNaN},
                                           {parameter_index(m, "v_peripheral"), 0.0}}) {
    std::vector<double> bad = row;
    bad[static_cast<std::size_t>(col)] = v;
    EXPECT_THROW(pr.predict(0, bad.data(), out.data(), *ws), DomainError) << col;
    EXPECT_THROW(pr.predict_gradient(0, bad.data(), out.data(), jac.data(), *ws), DomainError);
    std::vector<double> all(static_cast<std::size_t>(pr.subjects() * pr.parameters()));
    for (std::int64_t s = 0; s < pr.subjects(); ++s)
      std::copy(bad.begin(), bad.end(), all.begin() + s * pr.parameters());
    std::vector<double> preds(static_cast<std::size_t>(pr.observations()));
    EXPECT_THROW(pr.predict_all(all.data(), preds.data(), 2), DomainError);
    std::vector<double> jacs(preds.size() * static_cast<std::size_t>(pr.parameters()));
    EXPECT_THROW(pr.predict_gradient_all(all.data(), preds.data(), jacs.data(), 2), DomainError);
    EXPECT_THROW(pr.predict_gradient_all(all.data(), preds.data(), nullptr, 2), InvalidArgument);
  }
  try {
    std::vector<double> bad = row;
    bad[static_cast<std::size_t>(cl)] = -1.0;
    pr.predict(1, bad.data(), out.data(), *ws);
    ADD_FAILURE() << "no exception";
  } catch (const DomainError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("test.csv:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ID \"2\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("cl is -1"), std::string::npos) << msg;
  }
  // The workspace still works after an exception.
  EXPECT_NO_THROW(pr.predict(0, row.data(), out.data(), *ws));
  // Sigma must be finite and > 0; the log scale takes the additive model only.
  const double zero = 0.0, neg[2] = {0.1, -0.1}, ok[2] = {0.1, 0.1};
  EXPECT_THROW(pr.log_likelihood(0, row.data(), {ErrorModelKind::Additive, false}, &zero, nullptr,
                                 nullptr, *ws),
               DomainError);
  EXPECT_THROW(pr.log_likelihood(0, row.data(), {ErrorModelKind::Combined, false}, neg, nullptr,
                                 nullptr, *ws),
               DomainError);
  EXPECT_THROW(
      pr.log_likelihood_all(std::vector<double>(64 * 20, 1.0).data(),
                            {ErrorModelKind::Additive, false}, &zero, nullptr, nullptr, nullptr),
      DomainError);
  EXPECT_THROW(pr.log_likelihood(0, row.data(), {ErrorModelKind::Proportional, true}, ok, nullptr,
                                 nullptr, *ws),
               InvalidArgument);
  EXPECT_THROW(pr.log_likelihood(0, row.data(), {ErrorModelKind::Additive, false}, nullptr, nullptr,
                                 nullptr, *ws),
               InvalidArgument);
  // A DV <= 0 on the log scale.
  const Predictor zero_dv(parse_for(m, "ID,TIME,AMT,EVID,CMT,DV\n1,0,100,1,1,.\n1,1,.,0,2,0\n"),
                          ModelKind::ThreeCompartment);
  auto wz = zero_dv.make_workspace();
  EXPECT_THROW(zero_dv.log_likelihood(0, row.data(), {ErrorModelKind::Additive, true}, ok, nullptr,
                                      nullptr, *wz),
               DomainError);
  // Datasets that do not fit the model: CMT 3 in a two-compartment model, a KE column with
  // model `linear` that has no ke, the `linear` kind without its description.
  const Dataset three = parse_for(m, "ID,TIME,AMT,EVID,CMT\n1,0,100,1,3\n1,1,.,0,2\n");
  EXPECT_THROW(Predictor(three, ModelKind::TwoCompartment), InvalidArgument);
  const Dataset with_k12 =
      parse_for(m, "ID,TIME,AMT,EVID,CMT,K12\n1,0,100,1,1,0.3\n1,1,.,0,2,0.3\n");
  EXPECT_THROW(Predictor(with_k12, ModelKind::TwoCompartment), InvalidArgument);
  EXPECT_THROW(Predictor(three, ModelKind::Linear), InvalidArgument);
  EXPECT_THROW(Predictor(three, std::shared_ptr<const ModelInfo>()), InvalidArgument);
}

}  // namespace
}  // namespace pkscan
