// Datasets with exact event times: published references, an independent ODE integration,
// steady state, NONMEM ordering conventions, and agreement of every CPU method.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <pkscan/pkscan.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/datasets.hpp"

namespace pkscan {
namespace {

Dataset data_of(const std::string& csv, ModelKind m = ModelKind::ThreeCompartment) {
  return test::parse_for(model_info(m), csv);
}

ParameterBatch torsten(double cl, double q, double v2, double v3, double ka, std::int64_t n = 1) {
  ParameterBatch b(ModelKind::ThreeCompartment, n);
  b.set_all("cl", cl);
  b.set_all("q", q);
  b.set_all("v_central", v2);
  b.set_all("v_peripheral", v3);
  b.set_all("ka", ka);
  return b;
}

struct Table {
  std::vector<double> t;
  std::vector<std::vector<double>> a;
};

Table read_table(const std::string& name) {
  std::ifstream in(std::string(PKSCAN_SOURCE_DIR) + "/tests/data/reference/" + name);
  Table tb;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::stringstream ss(line);
    std::string f;
    std::vector<double> v;
    while (std::getline(ss, f, ',')) v.push_back(std::stod(f));
    tb.t.push_back(v[0]);
    tb.a.push_back({v[1], v[2], v[3]});
  }
  return tb;
}

// One dose line plus an observation row at every table time.
std::string dataset_for(const Table& tb, const std::string& dose_row) {
  std::string csv = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,DV\n" + dose_row + "\n";
  for (double t : tb.t) csv += "1," + std::to_string(t) + ",.,.,0,2,.,.,.,.\n";
  return csv;
}

double check_table(const DatasetResult& r, const Table& tb, double rtol) {
  double worst = 0.0;
  EXPECT_EQ(r.rows(), static_cast<std::int64_t>(tb.t.size()));
  for (std::size_t i = 0; i < tb.t.size(); ++i)
    for (int c = 0; c < 3; ++c) {
      const double want = tb.a[i][static_cast<std::size_t>(c)];
      const double got = r.amounts[i * 3 + static_cast<std::size_t>(c)];
      const double err = want == 0.0 ? std::fabs(got) : std::fabs(got - want) / std::fabs(want);
      worst = std::max(worst, err);
      EXPECT_LE(err, rtol) << "t=" << tb.t[i] << " cmt " << c << " want " << want << " got " << got;
    }
  return worst;
}

TEST(DatasetReference, Torsten1aBolusIntoDepot) {
  const Table tb = read_table("torsten_1a_bolus_depot.csv");
  const DatasetResult r = simulate_dataset(data_of(dataset_for(tb, "1,0,1000,.,1,1,.,.,.,.")),
                                           torsten(5, 8, 20, 70, 1.2));
  std::printf("torsten 1a (dataset): worst relative error %.3g\n", check_table(r, tb, 1e-6));
}

TEST(DatasetReference, Torsten1bInfusionIntoCentral) {
  const Table tb = read_table("torsten_1b_infusion_central.csv");
  const DatasetResult r = simulate_dataset(data_of(dataset_for(tb, "1,0,1200,700,1,2,.,.,.,.")),
                                           torsten(5, 8, 35, 105, 1.2));
  std::printf("torsten 1b (dataset): worst relative error %.3g\n", check_table(r, tb, 1e-6));
}

TEST(DatasetReference, Torsten1cInfusionIntoDepot) {
  const Table tb = read_table("torsten_1c_infusion_depot.csv");
  const DatasetResult r = simulate_dataset(data_of(dataset_for(tb, "1,0,1200,1200,1,1,.,.,.,.")),
                                           torsten(5, 8, 35, 105, 1.2));
  std::printf("torsten 1c (dataset): worst relative error %.3g\n", check_table(r, tb, 1e-6));
}

TEST(DatasetReference, Torsten2SteadyStateBolus) {
  const Table tb = read_table("torsten_2_ss_bolus.csv");
  const DatasetResult r = simulate_dataset(data_of(dataset_for(tb, "1,0,1200,.,1,1,12,10,1,.")),
                                           torsten(5, 8, 20, 70, 1.2));
  std::printf("torsten 2 (dataset, SS=1): worst relative error %.3g\n", check_table(r, tb, 1e-6));
}

// ---- An independent integration: classical RK4 with small steps between events. ----
struct Rk4Case {
  // piecewise: ka, k12, k21, ke, changes at t_change (carry-backward semantics handled by caller)
  std::function<void(double, double*)> rates;  // rates at time t (right-continuous)
};

// Integrates x' = A(t) x + r(t) from t0 to t1 where A and r are constant on [t0, t1).
void rk4(double ka, double k12, double k21, double ke, const double r[3], double t0, double t1,
         double x[3]) {
  auto f = [&](const double* y, double* d) {
    d[0] = -ka * y[0] + r[0];
    d[1] = ka * y[0] - (k12 + ke) * y[1] + k21 * y[2] + r[1];
    d[2] = k12 * y[1] - k21 * y[2] + r[2];
  };
  const int steps = std::max(1, static_cast<int>(std::ceil((t1 - t0) / 2e-3)));
  const double h = (t1 - t0) / steps;
  for (int i = 0; i < steps; ++i) {
    double k1[3], k2[3], k3[3], k4[3], y[3];
    f(x, k1);
    for (int c = 0; c < 3; ++c) y[c] = x[c] + 0.5 * h * k1[c];
    f(y, k2);
    for (int c = 0; c < 3; ++c) y[c] = x[c] + 0.5 * h * k2[c];
    f(y, k3);
    for (int c = 0; c < 3; ++c) y[c] = x[c] + h * k3[c];
    f(y, k4);
    for (int c = 0; c < 3; ++c) x[c] += h / 6.0 * (k1[c] + 2 * k2[c] + 2 * k3[c] + k4[c]);
  }
}

TEST(DatasetExact, IrregularScheduleMatchesOdeIntegration) {
  // Doses at irregular times: oral boluses with F = 0.7 and lag 0.37 into the depot, two
  // overlapping infusions into central (one starting between observations), ke changing at
  // t = 20.3 (KE column: the record's value applies over the interval ending at it).
  const std::string csv =
      "ID,TIME,AMT,RATE,EVID,CMT,KE\n"
      "1,0,100,.,1,1,0.2\n"
      "1,1.13,.,.,0,2,0.2\n"
      "1,2.71,250,37.5,1,2,0.2\n"
      "1,3.3,.,.,0,2,0.2\n"
      "1,5.05,80,.,1,1,0.2\n"
      "1,6.9,120,100,1,2,0.2\n"
      "1,7.77,.,.,0,2,0.2\n"
      "1,11.1,.,.,0,3,0.2\n"
      "1,20.3,.,.,0,2,0.2\n"
      "1,26.6,.,.,0,1,0.35\n"
      "1,33.01,.,.,0,2,0.35\n";
  ParameterBatch b(ModelKind::ThreeCompartment, 1);
  b.set_all("ka", 0.9);
  b.set_all("k12", 0.3);
  b.set_all("k21", 0.12);
  b.set_all("v_central", 10);
  b.set_all("v_peripheral", 30);
  b.set_all("f_depot", 0.7);
  b.set_all("lag_depot", 0.37);
  const DatasetResult r = simulate_dataset(data_of(csv), b);

  // The same schedule integrated independently: arrival times and infusion windows by hand.
  struct Bolus {
    double t, amt;
  };
  const std::vector<Bolus> bolus = {{0.37, 70.0}, {5.42, 56.0}};
  struct Inf {
    double t0, t1, rate;
  };
  const std::vector<Inf> inf = {{2.71, 2.71 + 250.0 / 37.5, 37.5}, {6.9, 8.1, 100.0}};
  std::vector<double> cuts = {0.0, 20.3};
  for (const Bolus& x : bolus) cuts.push_back(x.t);
  for (const Inf& x : inf) cuts.push_back(x.t0), cuts.push_back(x.t1);
  for (double t : r.time) cuts.push_back(t);
  std::sort(cuts.begin(), cuts.end());
  double x[3] = {0, 0, 0};
  std::size_t row = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < cuts.size(); ++i) {
    const double t = cuts[i];
    if (i > 0 && t > cuts[i - 1]) {
      const double mid = 0.5 * (cuts[i - 1] + t);
      double rr[3] = {0, 0, 0};
      for (const Inf& q : inf)
        if (mid > q.t0 && mid < q.t1) rr[1] += q.rate;
      const double ke = t <= 20.3 ? 0.2 : 0.35;
      rk4(0.9, 0.3, 0.12, ke, rr, cuts[i - 1], t, x);
    }
    if (i + 1 < cuts.size() && cuts[i + 1] == t) continue;  // apply arrivals once per time
    for (const Bolus& q : bolus)
      if (q.t == t) x[0] += q.amt;
    while (row < r.time.size() && r.time[row] == t) {
      for (int c = 0; c < 3; ++c) {
        const double got = r.amounts[row * 3 + static_cast<std::size_t>(c)];
        const double err = std::fabs(got - x[c]) / std::max(std::fabs(x[c]), 1e-300);
        worst = std::max(worst, err);
        EXPECT_LE(err, 1e-9) << "t=" << t << " cmt " << c << " rk4 " << x[c] << " pkscan " << got;
      }
      ++row;
    }
  }
  EXPECT_EQ(row, r.time.size());
  std::printf("irregular schedule vs RK4: worst relative error %.3g\n", worst);
  EXPECT_EQ(r.compartment[5], 0);  // CMT 1 on the observation record at t = 26.6
  EXPECT_EQ(r.compartment[3], 2);  // CMT 3 at t = 11.1
  EXPECT_EQ(r.compartment[0], 1);  // CMT 2
}

// ---- Steady state: the state one interval later equals the state now. ----
void expect_periodic(const std::string& dose, const char* what) {
  // SS=1 dose at t = 0 (II 12, ADDL 4), observations at 0, 12, 24 and mid-interval 3, 15.
  const std::string csv = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS\n" + dose +
                          "\n1,0,.,.,0,2,.,.,.\n1,3,.,.,0,2,.,.,.\n1,12,.,.,0,2,.,.,.\n"
                          "1,15,.,.,0,2,.,.,.\n1,24,.,.,0,2,.,.,.\n";
  const DatasetResult r = simulate_dataset(data_of(csv), torsten(5, 8, 20, 70, 1.2));
  ASSERT_EQ(r.rows(), 5);
  for (int c = 0; c < 3; ++c) {
    const double a0 = r.amounts[0 * 3 + static_cast<std::size_t>(c)];
    const double a12 = r.amounts[2 * 3 + static_cast<std::size_t>(c)];
    const double a24 = r.amounts[4 * 3 + static_cast<std::size_t>(c)];
    const double m3 = r.amounts[1 * 3 + static_cast<std::size_t>(c)];
    const double m15 = r.amounts[3 * 3 + static_cast<std::size_t>(c)];
    EXPECT_NEAR(a12, a0, 1e-10 * std::max(1.0, std::fabs(a0))) << what << " cmt " << c;
    EXPECT_NEAR(a24, a0, 1e-10 * std::max(1.0, std::fabs(a0))) << what << " cmt " << c;
    EXPECT_NEAR(m15, m3, 1e-10 * std::max(1.0, std::fabs(m3))) << what << " cmt " << c;
  }
  EXPECT_GT(r.amounts[1], 0.0) << what;
}

TEST(SteadyState, BolusIsPeriodic) { expect_periodic("1,0,1200,.,1,1,12,4,1", "bolus"); }
TEST(SteadyState, InfusionShorterThanIntervalIsPeriodic) {
  expect_periodic("1,0,1200,400,1,2,12,4,1", "infusion 3 h, II 12");
}
TEST(SteadyState, InfusionLongerThanIntervalIsPeriodic) {
  expect_periodic("1,0,1200,40,1,2,12,4,1", "infusion 30 h, II 12");
}
TEST(SteadyState, InfusionOfExactlyTheIntervalIsPeriodic) {
  expect_periodic("1,0,1200,100,1,2,12,4,1", "infusion 12 h, II 12");
}

TEST(SteadyState, ConstantInfusionIsTheEquilibrium) {
  // SS=1, AMT 0, RATE 10, II 0: at the record's time the equilibrium of a constant infusion,
  // central = R / ke (the infusion ends there: steady_state_test.cpp).
  const DatasetResult r = simulate_dataset(
      data_of("ID,TIME,AMT,RATE,EVID,CMT,II,SS\n1,50,0,10,1,2,0,1\n1,50,.,.,0,2,.,.\n"),
      torsten(5, 8, 20, 70, 1.2));
  EXPECT_NEAR(r.amounts[1], 10.0 / (5.0 / 20.0), 1e-9 * 40.0);
}

TEST(SteadyState, Ss2AddsToTheCurrentState) {
  const std::string base = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS\n1,0,500,.,1,2,.,.,0\n";
  const DatasetResult a =
      simulate_dataset(data_of(base + "1,5,.,.,0,2,.,.,.\n"), torsten(5, 8, 20, 70, 1.2));
  const DatasetResult ss = simulate_dataset(
      data_of("ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS\n1,5,300,.,1,1,12,.,1\n1,5,.,.,0,2,.,.,.\n"),
      torsten(5, 8, 20, 70, 1.2));
  const DatasetResult both = simulate_dataset(
      data_of(base + "1,5,300,.,1,1,12,.,2\n1,5,.,.,0,2,.,.,.\n"), torsten(5, 8, 20, 70, 1.2));
  for (int c = 0; c < 3; ++c)
    EXPECT_NEAR(both.amounts[static_cast<std::size_t>(c)],
                a.amounts[static_cast<std::size_t>(c)] + ss.amounts[static_cast<std::size_t>(c)],
                1e-9 * 1000);
}

// ---- NONMEM conventions ----
TEST(Conventions, ObservationAtTheArrivalTimeOfALaggedDoseSeesIt) {
  ParameterBatch b = torsten(5, 8, 20, 70, 1.2);
  b.set_all("lag_depot", 1.5);
  const DatasetResult r =
      simulate_dataset(data_of("ID,TIME,AMT,EVID,CMT\n1,0,100,1,1\n1,1.5,.,0,1\n"), b);
  ASSERT_EQ(r.rows(), 1);
  EXPECT_DOUBLE_EQ(r.amounts[0], 100.0);
}

TEST(Conventions, RecordsAtTheSameTimeAreProcessedInFileOrder) {
  const DatasetResult r =
      simulate_dataset(data_of("ID,TIME,AMT,EVID,CMT\n1,2,.,0,2\n1,2,50,1,2\n1,2,.,0,2\n"),
                       torsten(5, 8, 20, 70, 1.2));
  ASSERT_EQ(r.rows(), 2);
  EXPECT_EQ(r.amounts[1], 0.0);   // observation before the dose record
  EXPECT_EQ(r.amounts[4], 50.0);  // after it
}

TEST(Conventions, BioavailabilityWithFixedRateScalesTheDuration) {
  // 100 at rate 10 with F = 0.5: 50 enters over 5 h (not 10): by t = 5 the infusion has ended.
  ParameterBatch b(ModelKind::ThreeCompartment, 1);
  for (const char* k : {"ka", "k12", "k21", "ke"}) b.set_all(k, 0.0);
  b.set_all("v_central", 1);
  b.set_all("v_peripheral", 1);
  b.set_all("f_central", 0.5);
  const DatasetResult r = simulate_dataset(
      data_of(
          "ID,TIME,AMT,RATE,EVID,CMT\n1,0,100,10,1,2\n1,2.5,.,.,0,2\n1,5,.,.,0,2\n1,9,.,.,0,2\n"),
      b);
  EXPECT_NEAR(r.amounts[1], 25.0, 1e-12);
  EXPECT_NEAR(r.amounts[4], 50.0, 1e-12);
  EXPECT_NEAR(r.amounts[7], 50.0, 1e-12);
}

TEST(Conventions, ResetClearsStateAndInfusions) {
  const DatasetResult r =
      simulate_dataset(data_of("ID,TIME,AMT,RATE,EVID,CMT\n1,0,100,10,1,2\n1,2,.,.,3,.\n1,2,.,.,0,"
                               "2\n1,4,.,.,0,2\n1,4,30,.,4,2\n1,4,.,.,0,2\n"),
                       torsten(5, 8, 20, 70, 1.2));
  ASSERT_EQ(r.rows(), 3);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(r.amounts[static_cast<std::size_t>(c)], 0.0);
  for (int c = 0; c < 3; ++c)
    EXPECT_EQ(r.amounts[3 + static_cast<std::size_t>(c)], 0.0);  // infusion stopped
  EXPECT_EQ(r.amounts[7], 30.0);
}

TEST(Conventions, InvalidRecordParametersNameTheIdAndLine) {
  try {
    simulate_dataset(data_of("ID,TIME,AMT,EVID,CMT,KE\n7,0,100,1,1,0.1\n7,1,.,0,2,-0.2\n"), [] {
      ParameterBatch b(ModelKind::ThreeCompartment, 1);
      for (const char* k : {"ka", "k12", "k21"}) b.set_all(k, 0.1);
      b.set_all("v_central", 1);
      b.set_all("v_peripheral", 1);
      return b;
    }());
    ADD_FAILURE() << "no exception";
  } catch (const DomainError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("test.csv:3"), std::string::npos) << m;
    EXPECT_NE(m.find("ID \"7\""), std::string::npos) << m;
    EXPECT_NE(m.find("ke is -0.2"), std::string::npos) << m;
  }
}

// The batch carries the model; simulate_dataset checks only that it has a row per subject.
TEST(Conventions, TheBatchHasOneRowPerDatasetSubject) {
  const Dataset one = data_of("ID,TIME,AMT,EVID,CMT\n1,0,100,1,1\n1,1,.,0,2\n");
  try {
    simulate_dataset(one, torsten(5, 8, 20, 70, 1.2, 2));
    ADD_FAILURE() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "simulate_dataset: the parameter batch has 2 subjects, but must have 1 (one per "
              "dataset subject)");
  }
  EXPECT_THROW(check_dataset(one, torsten(5, 8, 20, 70, 1.2, 2)), InvalidArgument);
  EXPECT_EQ(simulate_dataset(one, torsten(5, 8, 20, 70, 1.2)).rows(), 1);
}

TEST(DatasetMethods, EveryCpuMethodGivesTheSameResult) {
  std::string csv = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS\n";
  for (int id = 1; id <= 40; ++id) {
    const std::string s = std::to_string(id);
    csv += s + ",0," + std::to_string(100 + id) + ",.,1,1," + std::to_string(6 + id % 5) + ",6," +
           (id % 3 ? "0" : "1") + "\n";
    for (int k = 1; k <= 12; ++k)
      csv += s + "," + std::to_string(k * 3.7 + 0.01 * id) + ",.,.,0,2,.,.,.\n";
  }
  ParameterBatch b = torsten(5, 8, 20, 70, 1.2, 40);
  for (int s = 0; s < 40; ++s) b.set("ka", s, 0.5 + 0.03 * s);
  const Dataset d = data_of(csv);
  SimulateOptions o;
  o.method = Method::Scan;
  const DatasetResult ref = simulate_dataset(d, b, o);
  for (Method m : {Method::Batched, Method::Power, Method::Auto}) {
    o.method = m;
    o.threads = 2;
    const DatasetResult r = simulate_dataset(d, b, o);
    ASSERT_EQ(r.amounts.size(), ref.amounts.size());
    for (std::size_t i = 0; i < r.amounts.size(); ++i)
      ASSERT_EQ(r.amounts[i], ref.amounts[i]) << to_string(m);
    EXPECT_EQ(r.summary.threads, 2) << to_string(m);
  }
  EXPECT_EQ(ref.rows(), 40 * 12);
  EXPECT_EQ(ref.summary.threads, 1);
  // The threads that ran: no more than the subjects.
  o.method = Method::Batched;
  o.threads = 2;
  const Dataset one = data_of(
      "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS\n1,0,100,.,1,1,.,.,.\n"
      "1,2,.,.,0,2,.,.,.\n");
  EXPECT_EQ(simulate_dataset(one, torsten(5, 8, 20, 70, 1.2, 1), o).summary.threads, 1);
}

}  // namespace
}  // namespace pkscan

namespace pkscan {
namespace {

// Review finding: a lagged dose record must still end its parameter interval at its own time.
TEST(Conventions, ALaggedDoseRecordEndsItsParameterInterval) {
  const ModelInfo& m = model_info(ModelKind::TwoCompartment);
  const Dataset d = parse_dataset(
      "ID,TIME,AMT,EVID,CMT,KE,LAG_CENTRAL\n1,0,100,1,2,0,0\n1,5,50,1,2,0.5,1\n1,10,.,0,2,0,0\n",
      "lag.csv", m);
  ParameterBatch b(ModelKind::TwoCompartment, 1);
  b.set_all("ka", 1.0);
  b.set_all("v_central", 1.0);
  const DatasetResult r = simulate_dataset(d, b);
  // KE 0.5 governs (0, 5] (record 2), KE 0 governs (5, 10]; the 50 arrives at t = 6.
  EXPECT_NEAR(r.amounts[1], 100.0 * std::exp(-2.5) + 50.0, 1e-12);
}

// Review finding: a steady state that does not exist (no elimination) is NonFinite, not a
// finite wrong value.
TEST(SteadyState, WithoutEliminationTheSubjectIsNonFinite) {
  const ModelInfo& m = model_info(ModelKind::TwoCompartment);
  ParameterBatch b(ModelKind::TwoCompartment, 1);
  b.set_all("ka", 1.0);
  b.set_all("ke", 0.0);
  b.set_all("v_central", 1.0);
  for (const char* rec : {"1,0,100,.,1,1,12,1", "1,0,0,10,1,2,0,1"}) {
    const Dataset d = parse_dataset(
        std::string("ID,TIME,AMT,RATE,EVID,CMT,II,SS\n") + rec + "\n1,1,.,.,0,2,.,.\n", "ss.csv",
        m);
    const DatasetResult r = simulate_dataset(d, b);
    EXPECT_EQ(r.status[0], SubjectStatus::NonFinite) << rec;
    EXPECT_EQ(r.summary.non_finite_subjects, 1) << rec;
  }
}

// Review finding: a linear model's parameter names keep their case through dataset columns.
TEST(LinearDataset, UpperCaseRateNamesMatchDatasetColumns) {
  const auto m =
      make_linear_model({"gut", "Central"}, {{"gut", "Central", "KA"}, {"Central", "", "ke"}});
  const Dataset d = parse_dataset(
      "ID,TIME,AMT,EVID,CMT,ka,V_CENTRAL\n1,0,100,1,1,1.5,2\n1,2,.,0,2,1.5,2\n", "lin.csv", *m);
  ASSERT_EQ(d.parameter_columns, (std::vector<std::string>{"KA", "v_Central"}));
  ParameterBatch b(m, 1);
  b.set_all("ke", 0.0);
  const DatasetResult r = simulate_dataset(d, b);
  EXPECT_NEAR(r.amounts[1], 100.0 * (1.0 - std::exp(-3.0)), 1e-10);
  EXPECT_NEAR(r.concentrations[1], r.amounts[1] / 2.0, 1e-12);
  EXPECT_THROW(make_linear_model({"a", "A"}, {}), InvalidArgument);
  EXPECT_THROW(make_linear_model({"a", "b"}, {{"a", "b", "k"}, {"b", "", "K"}}), InvalidArgument);
  EXPECT_THROW(make_linear_model({"a", "b"}, {{"a", "b", "rate"}}), InvalidArgument);
}

}  // namespace
}  // namespace pkscan

namespace pkscan {
namespace {

// NONMEM (SS data item help): with SS=1 "infusions in progress or pending additional doses are
// cancelled"; a reset event (EVID 3/4) resets the whole system the same way.
TEST(Conventions, ResetAndSs1CancelPendingAdditionalDoses) {
  const ModelInfo& m = model_info(ModelKind::TwoCompartment);
  ParameterBatch b(ModelKind::TwoCompartment, 1);
  b.set_all("ka", 1.0);
  b.set_all("ke", 0.0);  // amounts only move by doses: easy to count
  b.set_all("v_central", 1.0);
  // 100 into central at 0, 6, 12, 18 (ADDL 3); reset at 8; observe at 13 and 19.
  const Dataset reset = parse_dataset(
      "ID,TIME,AMT,EVID,CMT,II,ADDL\n1,0,100,1,2,6,3\n1,8,.,3,.,.,.\n1,13,.,0,2,.,.\n1,19,.,0,2,.,."
      "\n",
      "r.csv", m);
  const DatasetResult r = simulate_dataset(reset, b);
  EXPECT_EQ(r.amounts[1], 0.0);  // the doses at 12 and 18 were cancelled by the reset
  EXPECT_EQ(r.amounts[3], 0.0);
  // A later dose record's own additional doses are not cancelled: EVID 4 at 8 with ADDL.
  const Dataset reset_dose = parse_dataset(
      "ID,TIME,AMT,EVID,CMT,II,ADDL\n1,0,100,1,2,6,3\n1,8,10,4,2,5,1\n1,13,.,0,2,.,.\n1,19,.,0,2,.,"
      ".\n",
      "r4.csv", m);
  const DatasetResult r4 = simulate_dataset(reset_dose, b);
  EXPECT_EQ(r4.amounts[1], 20.0);  // 10 at 8 and 10 at 13 (its own ADDL), none of the 100s
  EXPECT_EQ(r4.amounts[3], 20.0);
}

// A subject of bolus doses (ADDL, F, time-varying parameters) and observations, without lags,
// is walked as its plan lists its events; a record the walk cannot take (a reset after the last
// observation, which changes nothing reported) sends the same subject through the general walk:
// the same bits. And a lag, which moves the doses, is still honoured.
TEST(DatasetMethods, TheBolusWalkGivesTheGeneralWalksBits) {
  const ModelInfo& m = model_info(ModelKind::ThreeCompartment);
  const std::string one =
      "1,0,100,1,1,6,3,0.8,5,.\n1,1,.,0,2,.,.,0.8,5,.\n1,2.5,.,0,2,.,.,0.8,5,.\n"
      "1,7,50,1,2,.,.,1,7,.\n1,7,.,0,3,.,.,1,7,.\n1,13,.,0,2,.,.,1,6,.\n"
      "1,20,.,0,2,.,.,1,6,.\n";
  const std::string two = "2,0,10,1,2,.,.,1,5,.\n2,4,.,0,2,.,.,1,5,.\n";
  const std::string header = "ID,TIME,AMT,EVID,CMT,II,ADDL,F_DEPOT,CL,LAG_DEPOT\n";
  const Dataset bolus = parse_dataset(header + one + two, "bolus.csv", m);
  const Dataset general = parse_dataset(
      header + one + "1,30,.,3,.,.,.,1,6,.\n" + two + "2,30,.,3,.,.,.,1,5,.\n", "g.csv", m);
  ParameterBatch b = torsten(5.0, 8.0, 20.0, 70.0, 1.2, 2);
  const DatasetResult rb = simulate_dataset(bolus, b);
  const DatasetResult rg = simulate_dataset(general, b);
  ASSERT_EQ(rb.amounts.size(), rg.amounts.size());
  for (std::size_t i = 0; i < rb.amounts.size(); ++i) EXPECT_EQ(rb.amounts[i], rg.amounts[i]) << i;
  for (std::size_t i = 0; i < rb.prediction.size(); ++i)
    EXPECT_EQ(rb.prediction[i], rg.prediction[i]) << i;
  // A lag on the depot (subject 1's first record) delays its doses: the walk must not ignore it.
  const Dataset lagged =
      parse_dataset(header + "1,0,100,1,1,6,3,0.8,5,0.5\n1,1,.,0,2,.,.,0.8,5,0.5\n", "lag.csv", m);
  const ParameterBatch single = torsten(5.0, 8.0, 20.0, 70.0, 1.2, 1);
  const DatasetResult rl = simulate_dataset(lagged, single);
  const Dataset unlagged =
      parse_dataset(header + "1,0,100,1,1,6,3,0.8,5,0\n1,1,.,0,2,.,.,0.8,5,0\n", "nolag.csv", m);
  const DatasetResult ru = simulate_dataset(unlagged, single);
  // Central after 1 h: from a dose that entered the depot 0.5 h later, less than without lag.
  EXPECT_LT(rl.amounts[1], ru.amounts[1]);
  EXPECT_GT(rl.amounts[1], 0.0);
}

}  // namespace
}  // namespace pkscan
