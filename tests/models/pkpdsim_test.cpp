// PKPDsim's published ADVAN table (tests/data/reference): CL 10, V 50, KA 0.5, Q 5, V2 100, Q2 3,
// V3 150; 100 at t = 0, 12, ..., 120 as oral (depot), bolus (central) or 1 h infusion (central);
// central concentration at t = 23. one/two/three disposition compartments are pkscan's
// two_compartment, three_compartment and four_compartment models, in the clearance
// parameterization. Compared with the printed 3 decimals and with the exact column (5 digits).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <pkscan/pkscan.hpp>
#include <string>

namespace pkscan {
namespace {

enum Route { kOral, kBolus, kInfusion };

double central_conc_at_23(ModelKind model, Route route) {
  Problem p;
  p.grid = {0.5, 46};  // t = 23 is the last grid point
  p.parameters = ParameterBatch(model, 1);
  p.parameters.set_all("ka", 0.5);
  p.parameters.set_all("cl", 10.0);
  p.parameters.set_all("v_central", 50.0);
  if (model == ModelKind::ThreeCompartment) {
    p.parameters.set_all("q", 5.0);
    p.parameters.set_all("v_peripheral", 100.0);
  }
  if (model == ModelKind::FourCompartment) {
    p.parameters.set_all("q", 5.0);
    p.parameters.set_all("v_peripheral1", 100.0);
    p.parameters.set_all("q2", 3.0);
    p.parameters.set_all("v_peripheral2", 150.0);
  }
  DoseEvent d;
  d.compartment = route == kOral ? 0 : 1;
  d.amount = 100.0;
  d.every = 12.0;
  d.repeat = 10;
  if (route == kInfusion) d.duration = 1.0;
  p.doses = {d};
  p.output = OutputTimes::at_steps({46});
  SimulateOptions o;
  o.method = Method::Scan;
  o.device = Device::Cpu;
  return simulate(p, o).concentration(0, 0, 1);
}

struct Row {
  const char* name;
  ModelKind model;
  Route route;
  double printed;  // NaN: not printed by PKPDsim
  double exact;
};

class PkpdsimTable : public ::testing::TestWithParam<Row> {};

TEST_P(PkpdsimTable, CentralConcentrationAt23) {
  const Row& row = GetParam();
  const double got = central_conc_at_23(row.model, row.route);
  if (!std::isnan(row.printed)) {
    EXPECT_NEAR(got, row.printed, 0.0005 + 1e-12) << "printed 3 decimals";
  }
  EXPECT_NEAR(got, row.exact, 0.5e-5 + 1e-12) << "exact column, 5 decimals";
  RecordProperty("value", std::to_string(got));
}

INSTANTIATE_TEST_SUITE_P(
    Advan, PkpdsimTable,
    ::testing::Values(Row{"OneCptBolus", ModelKind::TwoCompartment, kBolus, NAN, 0.24171},
                      Row{"OneCptInfusion", ModelKind::TwoCompartment, kInfusion, 0.268, 0.26758},
                      Row{"OneCptOral", ModelKind::TwoCompartment, kOral, 0.389, 0.38919},
                      Row{"TwoCptBolus", ModelKind::ThreeCompartment, kBolus, 0.212, 0.21218},
                      Row{"TwoCptInfusion", ModelKind::ThreeCompartment, kInfusion, 0.225, 0.22484},
                      Row{"TwoCptOral", ModelKind::ThreeCompartment, kOral, 0.302, 0.30176},
                      Row{"ThreeCptBolus", ModelKind::FourCompartment, kBolus, 0.169, 0.16874},
                      Row{"ThreeCptInfusion", ModelKind::FourCompartment, kInfusion, 0.177,
                          0.17686},
                      Row{"ThreeCptOral", ModelKind::FourCompartment, kOral, 0.236, 0.23627}),
    [](const ::testing::TestParamInfo<Row>& info) { return std::string(info.param.name); });

TEST(Parameterization, ClearancesEqualMicroConstants) {
  Problem a;
  a.grid = {0.25, 40};
  a.parameters = ParameterBatch(ModelKind::ThreeCompartment, 1);
  a.parameters.set_all("ka", 1.2);
  a.parameters.set_all("cl", 5.0);
  a.parameters.set_all("q", 8.0);
  a.parameters.set_all("v_central", 20.0);
  a.parameters.set_all("v_peripheral", 70.0);
  DoseEvent d;
  d.amount = 1000.0;
  a.doses = {d};
  Problem b = a;
  b.parameters = ParameterBatch(ModelKind::ThreeCompartment, 1);
  b.parameters.set_all("ka", 1.2);
  b.parameters.set_all("ke", 5.0 / 20.0);
  b.parameters.set_all("k12", 8.0 / 20.0);
  b.parameters.set_all("k21", 8.0 / 70.0);
  b.parameters.set_all("v_central", 20.0);
  b.parameters.set_all("v_peripheral", 70.0);
  const SimulationResult ra = simulate(a), rb = simulate(b);
  for (std::int64_t i = 0; i < ra.times(); ++i)
    for (int c = 0; c < 3; ++c) EXPECT_NEAR(ra.amount(0, i, c), rb.amount(0, i, c), 1e-12 * 1000);
}

TEST(Parameterization, MixingMicroConstantsAndClearancesIsAnError) {
  Problem p;
  p.grid = {1.0, 4};
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, 1);
  for (const char* k : {"ka", "ke", "cl", "k12", "k21"}) p.parameters.set_all(k, 0.1);
  p.parameters.set_all("v_central", 1.0);
  p.parameters.set_all("v_peripheral", 1.0);
  try {
    simulate(p);
    ADD_FAILURE() << "no exception";
  } catch (const DomainError& e) {
    EXPECT_NE(std::string(e.what()).find("ke and cl are both given"), std::string::npos)
        << e.what();
  }
  p.parameters.set_all("cl", NAN);
  p.parameters.set_all("k21", NAN);
  try {
    simulate(p);
    ADD_FAILURE() << "no exception";
  } catch (const DomainError& e) {
    EXPECT_NE(std::string(e.what()).find("k12 and k21"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pkscan

namespace pkscan {
namespace {

// The same table through `linear` models declared flow by flow (the other way to state a model).
std::shared_ptr<const ModelInfo> linear_disposition(int peripherals) {
  std::vector<std::string> comps = {"depot", "central"};
  std::vector<FlowSpec> flows = {{"depot", "central", "ka"}, {"central", "", "ke"}};
  if (peripherals >= 1) {
    comps.push_back("p1");
    flows.push_back({"central", "p1", "k12"});
    flows.push_back({"p1", "central", "k21"});
  }
  if (peripherals >= 2) {
    comps.push_back("p2");
    flows.push_back({"central", "p2", "k13"});
    flows.push_back({"p2", "central", "k31"});
  }
  return make_linear_model(comps, flows);
}

double linear_conc_at_23(int peripherals, Route route) {
  Problem p;
  p.grid = {0.5, 46};
  p.parameters = ParameterBatch(linear_disposition(peripherals), 1);
  p.parameters.set_all("ka", 0.5);
  p.parameters.set_all("ke", 10.0 / 50.0);
  p.parameters.set_all("v_central", 50.0);
  if (peripherals >= 1) {
    p.parameters.set_all("k12", 5.0 / 50.0);
    p.parameters.set_all("k21", 5.0 / 100.0);
  }
  if (peripherals >= 2) {
    p.parameters.set_all("k13", 3.0 / 50.0);
    p.parameters.set_all("k31", 3.0 / 150.0);
  }
  DoseEvent d;
  d.compartment = route == kOral ? 0 : 1;
  d.amount = 100.0;
  d.every = 12.0;
  d.repeat = 10;
  if (route == kInfusion) d.duration = 1.0;
  p.doses = {d};
  p.output = OutputTimes::at_steps({46});
  return simulate(p).concentration(0, 0, 1);
}

TEST(PkpdsimLinear, EveryRowThroughALinearModel) {
  const struct {
    int peripherals;
    Route route;
    double exact;
  } rows[] = {{0, kBolus, 0.24171}, {0, kInfusion, 0.26758}, {0, kOral, 0.38919},
              {1, kBolus, 0.21218}, {1, kInfusion, 0.22484}, {1, kOral, 0.30176},
              {2, kBolus, 0.16874}, {2, kInfusion, 0.17686}, {2, kOral, 0.23627}};
  for (const auto& r : rows)
    EXPECT_NEAR(linear_conc_at_23(r.peripherals, r.route), r.exact, 0.5e-5)
        << r.peripherals << " peripherals, route " << r.route;
}

// A chain of n compartments with equal rates k (each flows to the next, the last eliminates):
// after a bolus D into the first, compartment j holds D (k t)^j / j! exp(-k t) (Erlang).
TEST(LinearModel, TransitChainsMatchTheErlangClosedForm) {
  for (int n : {1, 5, 6}) {
    std::vector<std::string> comps;
    std::vector<FlowSpec> flows;
    for (int j = 0; j < n; ++j) comps.push_back("c" + std::to_string(j));
    for (int j = 0; j + 1 < n; ++j) flows.push_back({comps[j], comps[j + 1], "k"});
    flows.push_back({comps[static_cast<std::size_t>(n - 1)], "", "k"});
    Problem p;
    p.grid = {0.1, 200};
    p.parameters = ParameterBatch(make_linear_model(comps, flows), 3);
    p.parameters.set_all("k", 0.7);
    DoseEvent d;
    d.amount = 100.0;
    p.doses = {d};
    const SimulationResult r = simulate(p);  // auto: batched and power are compiled for 2-4
    EXPECT_EQ(r.compartments(), n);
    for (std::int64_t i = 0; i < r.times(); i += 7) {
      const double t = r.output_times()[static_cast<std::size_t>(i)];
      double fact = 1.0;
      for (int j = 0; j < n; ++j) {
        if (j > 0) fact *= j;
        const double want = 100.0 * std::pow(0.7 * t, j) / fact * std::exp(-0.7 * t);
        EXPECT_NEAR(r.amount(2, i, j), want, 1e-12 * 100.0)
            << "n=" << n << " t=" << t << " j=" << j;
      }
    }
    SimulateOptions batched;
    batched.method = Method::Batched;
    batched.device = Device::Cpu;
    if (n > 4) {
      EXPECT_THROW(simulate(p, batched), BackendUnavailable);
    }
  }
}

TEST(LinearModel, BadDeclarationsAreInvalidArguments) {
  EXPECT_THROW(make_linear_model({}, {}), InvalidArgument);
  EXPECT_THROW(make_linear_model({"a", "a"}, {}), InvalidArgument);
  EXPECT_THROW(make_linear_model({"a", "b"}, {{"a", "c", "k"}}), InvalidArgument);
  EXPECT_THROW(make_linear_model({"a", "b"}, {{"a", "a", "k"}}), InvalidArgument);
  EXPECT_THROW(make_linear_model({"a", "b"}, {{"a", "b", "v_b"}}), InvalidArgument);
  EXPECT_THROW(make_linear_model({"a", "b"}, {{"a", "b", "k"}, {"a", "b", "k2"}}), InvalidArgument);
  EXPECT_THROW(make_linear_model({"1a"}, {}), InvalidArgument);
  EXPECT_THROW(make_linear_model({"a", "b", "c", "d", "e", "f", "g"}, {}), InvalidArgument);
  try {
    make_linear_model({"gut", "central"}, {{"gut", "centrl", "ka"}});
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("\"centrl\" is not a declared compartment"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace pkscan
