// GridGradient (euler grid problems): concentrations bit-identical to simulate()'s scan, the
// derivatives against a closed form of the euler recurrence and against central differences of
// simulate() itself, and the domain errors.
#include <gtest/gtest.h>

#include <cmath>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

namespace pkscan {
namespace {

DoseEvent dose(int cmt, double t, double amt, double duration = 0.0, double every = 0.0,
               std::int64_t repeat = 0) {
  DoseEvent d;
  d.compartment = cmt;
  d.time = t;
  d.amount = amt;
  d.duration = duration;
  d.every = every;
  d.repeat = repeat;
  return d;
}

struct Case {
  const char* name;
  ModelKind model;
  std::vector<std::pair<const char*, double>> params;
};

// Three models, micro constants and clearances; boluses, repeated doses and infusions whose
// ends fall inside a step (partial-step inputs).
std::vector<Case> cases() {
  return {
      {"two_micro", ModelKind::TwoCompartment, {{"ka", 1.3}, {"ke", 0.21}, {"v_central", 11.0}}},
      {"two_clearance",
       ModelKind::TwoCompartment,
       {{"ka", 0.9}, {"cl", 2.4}, {"v_central", 14.0}, {"v_depot", 2.0}}},
      {"three_clearance",
       ModelKind::ThreeCompartment,
       {{"ka", 1.1}, {"cl", 3.9}, {"v_central", 18.0}, {"q", 2.2}, {"v_peripheral", 45.0}}},
      {"four_micro",
       ModelKind::FourCompartment,
       {{"ka", 0.8},
        {"ke", 0.17},
        {"k12", 0.3},
        {"k21", 0.12},
        {"k13", 0.05},
        {"k31", 0.02},
        {"v_central", 9.0},
        {"v_peripheral1", 20.0},
        {"v_peripheral2", 60.0}}},
  };
}

Problem make(const Case& c, OutputTimes out) {
  Problem p;
  p.discretization = Discretization::Euler;
  p.grid = {0.25, 120};
  p.parameters = ParameterBatch(c.model, 1);
  for (const auto& [name, v] : c.params) p.parameters.set_all(name, v);
  p.doses = {dose(0, 0.0, 100.0, 0.0, 12.0, 1), dose(1, 2.0, 40.0, 1.3), dose(1, 20.0, 25.0, 0.6)};
  p.output = std::move(out);
  return p;
}

std::vector<double> scan_concentrations(const Problem& p) {
  SimulateOptions o;
  o.method = Method::Scan;
  o.device = Device::Cpu;
  o.concentrations = true;
  const SimulationResult r = simulate(p, o);
  EXPECT_EQ(r.status()[0], SubjectStatus::Ok);
  std::vector<double> v;
  for (std::int64_t t = 0; t < r.times(); ++t)
    for (int c = 0; c < r.compartments(); ++c) v.push_back(r.concentration(0, t, c));
  return v;
}

TEST(GridGradient, ConcentrationsAreTheScansBitForBit) {
  for (const Case& c : cases())
    for (const OutputTimes& out :
         {OutputTimes::every_step(), OutputTimes::at_steps({0, 5, 8, 9, 47, 80, 120}),
          OutputTimes::at_steps({3, 60})}) {
      const Problem p = make(c, out);
      const GridGradient g(p);
      const std::vector<double> want = scan_concentrations(p);
      ASSERT_EQ(want.size(), g.output_steps().size() * static_cast<std::size_t>(g.compartments()));
      std::vector<double> conc(want.size()), jac(want.size() * g.parameters());
      g.evaluate(p.parameters.row(0), conc.data(), jac.data());
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(conc[i], want[i]) << c.name << " " << i;
      std::vector<double> conc2(want.size());
      g.evaluate(p.parameters.row(0), conc2.data(), nullptr);
      EXPECT_EQ(conc, conc2) << c.name;
    }
}

TEST(GridGradient, DerivativesMatchCentralDifferencesOfSimulate) {
  for (const Case& c : cases()) {
    const Problem p = make(c, OutputTimes::at_steps({1, 4, 9, 30, 47, 48, 49, 81, 119}));
    const GridGradient g(p);
    const int np = g.parameters();
    const std::size_t m = g.output_steps().size() * static_cast<std::size_t>(g.compartments());
    std::vector<double> conc(m), jac(m * np);
    g.evaluate(p.parameters.row(0), conc.data(), jac.data());
    int checked = 0;
    for (const auto& [name, v] : c.params) {
      const int col = [&] {
        for (int j = 0; j < np; ++j)
          if (p.parameters.info().parameters[static_cast<std::size_t>(j)].name == name) return j;
        return -1;
      }();
      ASSERT_GE(col, 0) << name;
      const double h = 1e-6 * v;
      Problem up = p, dn = p;
      up.parameters.set_all(name, v + h);
      dn.parameters.set_all(name, v - h);
      const std::vector<double> cu = scan_concentrations(up), cd = scan_concentrations(dn);
      for (std::size_t i = 0; i < m; ++i) {
        const double fd = (cu[i] - cd[i]) / (2 * h);
        const double scale = std::max(1e-3, std::fabs(conc[i]) / v);
        EXPECT_NEAR(jac[i * np + col], fd, 2e-7 * scale) << c.name << " d/d" << name << " " << i;
        ++checked;
      }
    }
    EXPECT_GT(checked, 0);
  }
}

TEST(GridGradient, OneCompartmentEulerClosedForm) {
  // A bolus D into the central compartment, no depot input: x_t = D (1 - ke dt)^t, so
  // conc = D (1 - ke dt)^t / V, d/d ke = -D t dt (1 - ke dt)^(t-1) / V, d/d V = -conc / V.
  Problem p;
  p.discretization = Discretization::Euler;
  p.grid = {0.1, 200};
  p.parameters = ParameterBatch(ModelKind::TwoCompartment, 1);
  const double ka = 0.7, ke = 0.3, v = 7.5, D = 50.0, dt = 0.1;
  p.parameters.set_all("ka", ka);
  p.parameters.set_all("ke", ke);
  p.parameters.set_all("v_central", v);
  p.doses = {dose(1, 0.0, D)};
  const GridGradient g(p);
  const int np = g.parameters(), n = g.compartments();
  const auto& names = p.parameters.info().parameters;
  auto col = [&](const std::string& s) {
    for (int j = 0; j < np; ++j)
      if (names[static_cast<std::size_t>(j)].name == s) return j;
    return -1;
  };
  std::vector<double> conc(201 * 2), jac(201 * 2 * np);
  g.evaluate(p.parameters.row(0), conc.data(), jac.data());
  for (int t = 0; t <= 200; ++t) {
    const double q = 1.0 - ke * dt;
    const double c = D * std::pow(q, t) / v;
    const std::size_t i = static_cast<std::size_t>(t * n + 1);
    EXPECT_NEAR(conc[i], c, 1e-13 * D / v) << t;
    EXPECT_NEAR(jac[i * np + col("ke")], t == 0 ? 0.0 : -D * t * dt * std::pow(q, t - 1) / v,
                1e-12 * D / v)
        << t;
    EXPECT_NEAR(jac[i * np + col("v_central")], -c / v, 1e-13 * D / (v * v)) << t;
    EXPECT_EQ(jac[i * np + col("ka")], 0.0) << t;  // the depot stays empty
  }
}

TEST(GridGradient, RejectsRowsAndProblemsSimulateRejects) {
  const Case c = cases()[0];
  const Problem p = make(c, OutputTimes::every_step());
  const GridGradient g(p);
  std::vector<double> conc(121 * 2), jac(121 * 2 * g.parameters());
  std::vector<double> row(p.parameters.row(0), p.parameters.row(0) + g.parameters());
  const auto& names = p.parameters.info().parameters;
  auto set = [&](const std::string& s, double value) {
    std::vector<double> r = row;
    for (std::size_t j = 0; j < names.size(); ++j)
      if (names[j].name == s) r[j] = value;
    return r;
  };
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, double>>{{"ke", -0.1},
                                                   {"v_central", 0.0},
                                                   {"ka", NAN},
                                                   {"ka", INFINITY},
                                                   {"f_depot", 0.5},
                                                   {"lag_depot", 1.0},
                                                   {"ke", 5.0} /* 1 - 5 * 0.25 < 0 */}) {
    const std::vector<double> r = set(name, value);
    EXPECT_THROW(g.evaluate(r.data(), conc.data(), jac.data()), DomainError) << name << value;
  }
  Problem exact = p;
  exact.discretization = Discretization::Exact;
  EXPECT_THROW(GridGradient{exact}, InvalidArgument);
  Problem bad = p;
  bad.doses.push_back(dose(1, 0.3, 1.0));  // off the grid
  EXPECT_THROW(GridGradient{bad}, DomainError);
}

}  // namespace
}  // namespace pkscan
