// The exact path against published reference tables (Torsten's test outputs, copied to
// tests/data/reference): amounts of depot, central and peripheral, to the printed digits.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <pkscan/config/load.hpp>
#include <pkscan/pkscan.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace pkscan {
namespace {

struct Row {
  double t;
  double a[3];
};

std::vector<Row> read_table(const std::string& name) {
  std::ifstream in(std::string(PKSCAN_SOURCE_DIR) + "/tests/data/reference/" + name);
  EXPECT_TRUE(in.good()) << name;
  std::vector<Row> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::stringstream ss(line);
    Row r{};
    char comma;
    ss >> r.t >> comma >> r.a[0] >> comma >> r.a[1] >> comma >> r.a[2];
    rows.push_back(r);
  }
  return rows;
}

// Clearance parameterization of the reference README: ke = CL/V2, k12 = Q/V2, k21 = Q/V3.
Problem torsten_problem(double cl, double q, double v2, double v3, double ka, DoseEvent dose,
                        const std::vector<Row>& rows) {
  Problem p;
  p.grid = {0.25, 16};
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, 1);
  p.parameters.set_all("ka", ka);
  p.parameters.set_all("ke", cl / v2);
  p.parameters.set_all("k12", q / v2);
  p.parameters.set_all("k21", q / v3);
  p.parameters.set_all("v_central", v2);
  p.parameters.set_all("v_peripheral", v3);
  p.doses = {dose};
  std::vector<std::int64_t> steps;
  for (const Row& r : rows) steps.push_back(std::lround(r.t / 0.25));
  p.output = OutputTimes::at_steps(steps);
  return p;
}

// Worst relative error against the printed value; values printed as 0 must come out as 0
// within 1e-9 of the table's largest value.
double worst_error(const SimulationResult& r, const std::vector<Row>& rows) {
  double peak = 0.0;
  for (const Row& row : rows)
    for (double v : row.a) peak = std::max(peak, std::fabs(v));
  double worst = 0.0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    for (int c = 0; c < 3; ++c) {
      const double want = rows[i].a[c];
      const double got = r.amount(0, static_cast<std::int64_t>(i), c);
      const double err =
          want == 0.0 ? std::fabs(got) / (peak * 1e-3) : std::fabs(got - want) / std::fabs(want);
      worst = std::max(worst, err);
      EXPECT_LE(err, 1e-6) << "t=" << rows[i].t << " compartment " << c << " want " << want
                           << " got " << got;
    }
  }
  return worst;
}

DoseEvent dose(int cmt, double amount, double rate) {
  DoseEvent d;
  d.compartment = cmt;
  d.amount = amount;
  d.rate = rate;
  return d;
}

SimulateOptions reference_options() {
  SimulateOptions o;
  o.method = Method::Scan;
  o.device = Device::Cpu;
  return o;
}

TEST(TorstenReference, Case1aBolusIntoDepot) {
  const auto rows = read_table("torsten_1a_bolus_depot.csv");
  ASSERT_EQ(rows.size(), 10u);
  const Problem p = torsten_problem(5, 8, 20, 70, 1.2, dose(0, 1000, 0), rows);
  const double worst = worst_error(simulate(p, reference_options()), rows);
  RecordProperty("worst_relative_error", std::to_string(worst));
  std::printf("torsten 1a: worst relative error %.3g\n", worst);
}

TEST(TorstenReference, Case1bInfusionIntoCentralEndingInsideAStep) {
  const auto rows = read_table("torsten_1b_infusion_central.csv");
  ASSERT_EQ(rows.size(), 10u);
  const Problem p = torsten_problem(5, 8, 35, 105, 1.2, dose(1, 1200, 700), rows);
  const double worst = worst_error(simulate(p, reference_options()), rows);
  RecordProperty("worst_relative_error", std::to_string(worst));
  std::printf("torsten 1b: worst relative error %.3g\n", worst);
}

TEST(TorstenReference, Case1cInfusionIntoDepot) {
  const auto rows = read_table("torsten_1c_infusion_depot.csv");
  ASSERT_EQ(rows.size(), 10u);
  const Problem p = torsten_problem(5, 8, 35, 105, 1.2, dose(0, 1200, 1200), rows);
  const double worst = worst_error(simulate(p, reference_options()), rows);
  RecordProperty("worst_relative_error", std::to_string(worst));
  std::printf("torsten 1c: worst relative error %.3g\n", worst);
}

TEST(TorstenReference, Case1bFromTheExampleRunFile) {
  const auto rows = read_table("torsten_1b_infusion_central.csv");
  const config::RunSpec spec = config::load_run_file(std::string(PKSCAN_SOURCE_DIR) +
                                                     "/config/examples/torsten_1b_infusion.yaml");
  SimulateOptions o = spec.options;
  const SimulationResult r = simulate(spec.problem, o);
  ASSERT_EQ(r.times(), 10);
  worst_error(r, rows);
}

TEST(TorstenReference, Float32Case1aWithinOneInTenToTheFive) {
  const auto rows = read_table("torsten_1a_bolus_depot.csv");
  const Problem p = torsten_problem(5, 8, 20, 70, 1.2, dose(0, 1000, 0), rows);
  SimulateOptions o = reference_options();
  o.precision = Precision::Float32;
  const SimulationResult r = simulate(p, o);
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (int c = 0; c < 3; ++c)
      EXPECT_NEAR(r.amount(0, static_cast<std::int64_t>(i), c), rows[i].a[c], 1e-5 * 1000.0);
}

}  // namespace
}  // namespace pkscan
