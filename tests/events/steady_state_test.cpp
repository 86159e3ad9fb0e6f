// NONMEM's steady state (SS=1/2 dose records) against the same regimen given explicitly: 300
// doses every II with the same F and lag, no SS record, long converged. The state must agree at
// every time of the cycles after the record, including those between the record and the arrival
// of its lagged dose, for every CPU method and the Predictor. Plus the constant infusion that
// ends at the record's time, and the parameter values a steady state uses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <pkscan/pkscan.hpp>
#include <pkscan/predictor.hpp>
#include <string>
#include <vector>

#include "support/datasets.hpp"

namespace pkscan {
namespace {

Dataset data_of(const std::string& csv) {
  return test::parse_for(model_info(ModelKind::ThreeCompartment), csv, "ss.csv");
}

std::string num(double v) {
  char b[40];
  std::snprintf(b, sizeof b, "%.17g", v);
  return b;
}

constexpr double kIi = 12.0;
constexpr int kImplied = 300;           // explicit doses before the record
constexpr double kT0 = kImplied * kIi;  // the SS record's time

struct SsCase {
  std::string name;
  int cmt;      // 1 depot, 2 central
  double amt;   // AMT
  double rate;  // RATE (0: bolus)
  double f;     // f_<compartment>
  double lag;   // lag_<compartment>
  int ss;       // 1 or 2
};

ParameterBatch params(const SsCase& c) {
  ParameterBatch b(ModelKind::ThreeCompartment, 1);
  b.set_all("cl", 5);
  b.set_all("q", 8);
  b.set_all("v_central", 20);
  b.set_all("v_peripheral", 70);
  b.set_all("ka", 1.2);
  const std::string cmt = c.cmt == 1 ? "depot" : "central";
  b.set_all("f_" + cmt, c.f);
  b.set_all("lag_" + cmt, c.lag);
  return b;
}

// Observation times: every 0.25 h from the record over three intervals, offset by 0.1 h so that
// none falls on an arrival or an infusion end (where the order of equal times decides).
std::vector<double> obs_times() {
  std::vector<double> t;
  for (int j = 0; j <= static_cast<int>(3 * kIi / 0.25); ++j) t.push_back(kT0 + 0.1 + 0.25 * j);
  return t;
}

// A bolus into central 5 h before the record (kept by SS=2, zeroed by SS=1), then the SS
// record with ADDL 2 (doses go on for the observed intervals), then the observations.
std::string ss_dataset(const SsCase& c) {
  std::string csv = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS\n";
  csv += "1," + num(kT0 - 5) + ",70,.,1,2,.,.,.\n";
  csv += "1," + num(kT0) + "," + num(c.amt) + "," + num(c.rate) + ",1," + std::to_string(c.cmt) +
         "," + num(kIi) + ",2," + std::to_string(c.ss) + "\n";
  for (double t : obs_times()) csv += "1," + num(t) + ",.,.,0,2,.,.,.\n";
  return csv;
}

// The same regimen given explicitly: the first of 300 + 3 doses at 0, every II.
std::string explicit_dataset(const SsCase& c) {
  std::string csv = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS\n";
  csv += "1,0," + num(c.amt) + "," + num(c.rate) + ",1," + std::to_string(c.cmt) + "," + num(kIi) +
         "," + std::to_string(kImplied + 2) + ",.\n";
  if (c.ss == 2) csv += "1," + num(kT0 - 5) + ",70,.,1,2,.,.,.\n";
  for (double t : obs_times()) csv += "1," + num(t) + ",.,.,0,2,.,.,.\n";
  return csv;
}

class SteadyStateExplicit : public ::testing::TestWithParam<SsCase> {};

TEST_P(SteadyStateExplicit, EqualsTheRegimenGivenExplicitly) {
  const SsCase& c = GetParam();
  const ParameterBatch b = params(c);
  const DatasetResult want = simulate_dataset(data_of(explicit_dataset(c)), b);
  const Dataset ss = data_of(ss_dataset(c));
  ASSERT_EQ(want.rows(), static_cast<std::int64_t>(obs_times().size()));
  double peak = 0.0;
  for (double a : want.amounts) peak = std::max(peak, std::fabs(a));
  ASSERT_GT(peak, 0.0);
  double worst = 0.0;
  std::vector<double> first;
  for (Method method : {Method::Scan, Method::Batched, Method::Power}) {
    SimulateOptions o;
    o.method = method;
    const DatasetResult got = simulate_dataset(ss, b, o);
    ASSERT_EQ(got.rows(), want.rows());
    for (std::size_t i = 0; i < got.amounts.size(); ++i) {
      const double err = std::fabs(got.amounts[i] - want.amounts[i]) / peak;
      worst = std::max(worst, err);
      EXPECT_LE(err, 1e-10) << to_string(method) << " t=" << got.time[i / 3] << " cmt " << i % 3
                            << ": SS " << got.amounts[i] << ", explicit " << want.amounts[i];
    }
    if (first.empty())
      first = got.amounts;
    else
      EXPECT_EQ(got.amounts, first) << to_string(method) << " differs from scan";
  }
  // The Predictor: the same predictions (central concentrations).
  const Predictor pr(ss, ModelKind::ThreeCompartment);
  std::vector<double> pred(static_cast<std::size_t>(pr.observations()));
  pr.predict_all(b.row(0), pred.data(), 1);
  const DatasetResult ref = simulate_dataset(ss, b);
  for (std::size_t i = 0; i < pred.size(); ++i)
    EXPECT_NEAR(pred[i], ref.prediction[i], 1e-12 * std::fabs(ref.prediction[i]) + 1e-300)
        << "Predictor row " << i;
  RecordProperty("worst", std::to_string(worst));
}

std::vector<SsCase> cases() {
  std::vector<SsCase> out;
  struct Dose {
    const char* name;
    int cmt;
    double amt, rate;
  };
  // Bolus into the depot; infusions into central of 3 h (< II), 30 h (> II) and exactly II,
  // and into the depot of 5 h.
  const Dose doses[] = {{"bolus_depot", 1, 100, 0},
                        {"inf3h_central", 2, 120, 40},
                        {"inf30h_central", 2, 300, 10},
                        {"inf12h_central", 2, 120, 10},
                        {"inf5h_depot", 1, 100, 20}};
  // Lags below II: none, short, one that ends the infusion after the next record (9 + 3 > 12),
  // and one just below II.
  const double lags[] = {0.0, 0.37, 10.5, 11.9};
  for (const Dose& d : doses)
    for (double lag : lags)
      for (double f : {1.0, 0.8})
        for (int ss : {1, 2}) {
          std::string name = std::string(d.name) + "_lag" +
                             std::to_string(static_cast<int>(lag * 100)) + "_f" +
                             std::to_string(static_cast<int>(f * 10)) + "_ss" + std::to_string(ss);
          out.push_back({name, d.cmt, d.amt, d.rate, f, lag, ss});
        }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, SteadyStateExplicit, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// A lag of II or more: NONMEM's advance II - ALAG is not positive, so nothing is advanced: the
// state at the record's time is the steady state just after a dose arrived (the explicit
// regimen's state right after an arrival), and the record's own dose arrives at its lagged time.
TEST(SteadyState, LagOfAnIntervalOrMoreGivesThePostDoseState) {
  for (double lag : {12.0, 12.5, 30.0}) {
    SCOPED_TRACE("lag " + std::to_string(lag));
    SsCase c{"", 1, 100, 0, 1.0, lag, 1};
    ParameterBatch b = params(c);
    // Explicit (lag 0): the state right after the dose at kT0.
    ParameterBatch b0 = params({"", 1, 100, 0, 1.0, 0.0, 1});
    const DatasetResult want = simulate_dataset(
        data_of("ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS\n1,0,100,.,1,1,12,300,.\n1," + num(kT0) +
                ",.,.,0,2,.,.,.\n"),
        b0);
    const DatasetResult got = simulate_dataset(
        data_of("ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS\n1," + num(kT0) + ",100,.,1,1,12,.,1\n1," +
                num(kT0) + ",.,.,0,2,.,.,.\n1," + num(kT0 + lag + 0.5) + ",.,.,0,2,.,.,.\n"),
        b);
    ASSERT_EQ(got.rows(), 2);
    for (int i = 0; i < 3; ++i)
      EXPECT_NEAR(got.amounts[static_cast<std::size_t>(i)],
                  want.amounts[static_cast<std::size_t>(i)], 1e-10 * 200);
    // The record's own dose arrives at kT0 + lag: 100 more in the depot than the free decay.
    const DatasetResult decay = simulate_dataset(
        data_of("ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS\n1," + num(kT0) + ",100,.,1,1,12,.,1\n1," +
                num(kT0 + lag - 0.01) + ",.,.,0,1,.,.,.\n1," + num(kT0 + lag) + ",.,.,0,1,.,.,.\n"),
        b);
    ASSERT_EQ(decay.rows(), 2);
    EXPECT_NEAR(decay.amounts[3] - decay.amounts[0] * std::exp(-1.2 * 0.01), 100.0, 1e-8);
  }
}

// SS=1 constant infusion (AMT 0, RATE > 0, II 0): the equilibrium at the record's time, then the
// infusion ends there (NONMEM: "The infusion terminates at the event time of the SS dose
// record"). Explicitly: an infusion of the same rate running from 0 and ending at the record's
// time, long enough to reach the equilibrium.
TEST(SteadyState, ConstantInfusionEndsAtTheRecordTime) {
  const double rate = 10.0;
  const ParameterBatch b = params({"", 2, 0, 0, 1.0, 0.0, 1});
  std::string obs;
  for (double t : {kT0, kT0 + 0.5, kT0 + 3.0, kT0 + 20.0, kT0 + 100.0})
    obs += "1," + num(t) + ",.,.,0,2,.,.\n";
  const DatasetResult got =
      simulate_dataset(data_of("ID,TIME,AMT,RATE,EVID,CMT,II,SS\n1," + num(kT0) + ",0," +
                               num(rate) + ",1,2,0,1\n" + obs),
                       b);
  const DatasetResult want =
      simulate_dataset(data_of("ID,TIME,AMT,RATE,EVID,CMT,II,SS\n1,0," + num(rate * kT0) + "," +
                               num(rate) + ",1,2,.,.\n" + obs),
                       b);
  ASSERT_EQ(got.rows(), 5);
  // The equilibrium: central = R / ke = 10 / (5 / 20) = 40.
  EXPECT_NEAR(got.amounts[1], 40.0, 1e-9 * 40.0);
  for (std::size_t i = 0; i < got.amounts.size(); ++i)
    EXPECT_NEAR(got.amounts[i], want.amounts[i], 1e-9 * 200.0) << "row " << i / 3;
  EXPECT_LT(got.amounts[4 * 3 + 1], 0.5 * got.amounts[1]);  // decays after the record
}

// With time-varying parameter columns, the steady state uses the SS record's own values, not
// those of another record at the same time (which govern the interval ending there).
TEST(SteadyState, UsesTheSsRecordsOwnParameterValues) {
  ParameterBatch b(ModelKind::ThreeCompartment, 1);  // micro constants: KE comes from the data
  b.set_all("ka", 1.2);
  b.set_all("k12", 0.4);
  b.set_all("k21", 8.0 / 70.0);
  b.set_all("ke", 0.25);
  b.set_all("v_central", 20);
  b.set_all("v_peripheral", 70);
  const std::string head = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,KE\n";
  std::string after;
  for (double t : {kT0, kT0 + 1.3, kT0 + 7.0}) after += "1," + num(t) + ",.,.,0,2,.,.,.,0.4\n";
  // An observation with KE 0.1 first at the record's time, then the SS record with KE 0.4.
  const DatasetResult got = simulate_dataset(
      data_of(head + "1,0,50,.,1,2,.,.,.,0.1\n1," + num(kT0) + ",.,.,0,2,.,.,.,0.1\n1," + num(kT0) +
              ",100,.,1,1,12,1,1,0.4\n" + after),
      b);
  // Every record with KE 0.4 (SS=1 replaces whatever came before).
  const DatasetResult want =
      simulate_dataset(data_of(head + "1," + num(kT0) + ",100,.,1,1,12,1,1,0.4\n" + after), b);
  ASSERT_EQ(got.rows(), 4);
  ASSERT_EQ(want.rows(), 3);
  for (std::size_t i = 0; i < want.amounts.size(); ++i)
    EXPECT_EQ(got.amounts[3 + i], want.amounts[i]) << "row " << i / 3 << " cmt " << i % 3;
  // And the Predictor.
  const Predictor pr(
      data_of(head + "1,0,50,.,1,2,.,.,.,0.1\n1," + num(kT0) + ",.,.,0,2,.,.,.,0.1\n1," + num(kT0) +
              ",100,.,1,1,12,1,1,0.4\n" + after),
      ModelKind::ThreeCompartment);
  std::vector<double> pred(4);
  pr.predict_all(b.row(0), pred.data(), 1);
  for (std::size_t i = 1; i < 4; ++i)
    EXPECT_NEAR(pred[i], got.prediction[i], 1e-12 * std::fabs(got.prediction[i]));
}

}  // namespace
}  // namespace pkscan
