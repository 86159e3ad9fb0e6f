// Errors about one value name it (Error::field(), value(), rule()): every part of check() on its
// own (pkscan/checks.hpp), the population checks (check_population_run, PopulationSampler) and
// the dataset checks. The run-file loader maps these paths to YAML nodes (tests/cli); here the
// paths, values and rules themselves are checked, each against the value planted in the input.
#include <gtest/gtest.h>

#include <functional>
#include <pkscan/checks.hpp>
#include <pkscan/dataset.hpp>
#include <pkscan/events.hpp>
#include <pkscan/pkscan.hpp>
#include <pkscan/population.hpp>
#include <pkscan/population_run.hpp>
#include <string>

namespace pkscan {
namespace {

Problem two_subjects() {
  Problem p;
  p.grid = {0.5, 8};
  p.parameters = ParameterBatch(ModelKind::TwoCompartment, 2);
  p.parameters.set_all("ka", 1.0);
  p.parameters.set_all("ke", 0.2);
  p.parameters.set_all("v_central", 10.0);
  DoseEvent d;
  d.amount = 100.0;
  p.doses = {d, d};
  p.doses[1].compartment = 1;
  return p;
}

struct Caught {
  std::string kind;  // "domain", "invalid", "other", "none"
  std::string what;
  std::string field;
  std::string value;
  std::string rule;
};

Caught caught(const std::function<void()>& f) {
  try {
    f();
  } catch (const DomainError& e) {
    return {"domain", e.what(), e.field(), e.value(), e.rule()};
  } catch (const InvalidArgument& e) {
    return {"invalid", e.what(), e.field(), e.value(), e.rule()};
  } catch (const Error& e) {
    return {"other", e.what(), e.field(), e.value(), e.rule()};
  }
  return {"none", "", "", "", ""};
}

// The part's own check and check() of the whole problem report the same field.
void expect_field(const Problem& p, const std::function<void()>& part, const std::string& kind,
                  const std::string& field, const std::string& value, const std::string& rule) {
  const Caught a = caught(part);
  EXPECT_EQ(a.kind, kind) << a.what;
  EXPECT_EQ(a.field, field) << a.what;
  EXPECT_EQ(a.value, value) << a.what;
  EXPECT_EQ(a.rule, rule) << a.what;
  if (!rule.empty()) {
    EXPECT_NE(a.what.find(" is " + value + ", but must be " + rule), std::string::npos) << a.what;
  }
  const Caught b = caught([&] { check(p); });
  EXPECT_EQ(b.field, field) << b.what;
  EXPECT_EQ(b.what, a.what);
}

TEST(FieldPath, TimeGrid) {
  Problem p = two_subjects();
  p.grid.dt = -1;
  expect_field(
      p, [&] { check_time_grid(p.grid); }, "domain", "grid.dt", "-1", "finite and > 0");
  p = two_subjects();
  p.grid.steps = 2'000'000'000;
  expect_field(
      p, [&] { check_time_grid(p.grid); }, "domain", "grid.steps", "2000000000",
      "in [1, 1000000000]");
  p = two_subjects();
  p.grid.dt = 1e305;
  p.grid.steps = 1'000'000;  // the last grid time overflows: a message, no single rule
  expect_field(
      p, [&] { check_time_grid(p.grid); }, "domain", "grid.steps", "1000000", "");
}

TEST(FieldPath, ParameterRows) {
  Problem p = two_subjects();
  p.parameters.set("ke", 1, -0.5);
  expect_field(
      p, [&] { check_parameter_rows(p.parameters, true); }, "domain", "parameters[1].ke", "-0.5",
      "finite and >= 0");
  p = two_subjects();
  p.parameters.set("v_central", 0, 0.0);
  expect_field(
      p, [&] { check_parameter_rows(p.parameters, true); }, "domain", "parameters[0].v_central",
      "0", "finite and > 0");
  p = two_subjects();
  p.parameters.set("f_depot", 1, 0.5);  // a grid run: every subject gets the same doses
  const Caught c = caught([&] { check_parameter_rows(p.parameters, true); });
  EXPECT_EQ(c.field, "parameters[1].f_depot");
  EXPECT_EQ(c.value, "0.5");
  EXPECT_EQ(c.rule.rfind("1 on a time grid", 0), 0u) << c.rule;
  EXPECT_EQ(caught([&] { check_parameter_rows(p.parameters, false); }).kind, "none");
  // Micro constants and clearances together: the first micro constant given, no single rule.
  p = two_subjects();
  p.parameters.set("cl", 0, 2.0);
  const Caught both = caught([&] { check_parameter_rows(p.parameters, true); });
  EXPECT_EQ(both.field, "parameters[0].ke");
  EXPECT_EQ(both.rule, "");
  EXPECT_NE(both.what.find("are both given"), std::string::npos) << both.what;
  // A missing parameter without a default.
  const ParameterBatch missing(ModelKind::TwoCompartment, 1);
  const ParameterViolation v = parameter_violation(missing.info(), missing.row(0));
  ASSERT_TRUE(v);
  EXPECT_EQ(missing.info().parameters[static_cast<std::size_t>(v.column)].name, "ka");
  EXPECT_EQ(v.value, "missing");
  EXPECT_EQ(v.rule, "given (it has no default)");
}

TEST(FieldPath, Doses) {
  Problem p = two_subjects();
  p.doses[1].time = 0.25;  // dt 0.5
  expect_field(
      p, [&] { check_doses(p.doses, 2, p.grid); }, "domain", "doses[1].time", "0.25",
      "on the time grid (a multiple of time.dt = 0.5)");
  p = two_subjects();
  p.doses[0].amount = -3;
  expect_field(
      p, [&] { check_doses(p.doses, 2, p.grid); }, "domain", "doses[0].amount", "-3",
      "finite and >= 0");
  p = two_subjects();
  p.doses[1].rate = 10;
  p.doses[1].duration = 2;
  expect_field(
      p, [&] { check_doses(p.doses, 2, p.grid); }, "invalid", "doses[1].duration", "2",
      "left out when rate is given (an infusion takes exactly one of rate and "
      "duration)");
  p = two_subjects();
  p.doses[0].repeat = 2;
  p.doses[0].every = 0.7;
  expect_field(
      p, [&] { check_doses(p.doses, 2, p.grid); }, "domain", "doses[0].every", "0.7",
      "a positive multiple of time.dt = 0.5");
  p = two_subjects();
  p.doses[1].compartment = 2;
  expect_field(
      p, [&] { check_doses(p.doses, 2, p.grid); }, "invalid", "doses[1].compartment", "2",
      "in [0, 2) (0-based)");
}

TEST(FieldPath, OutputTimesAndEuler) {
  Problem p = two_subjects();
  p.output = OutputTimes::at_steps({0, 4, 4});
  const Caught c = caught([&] { check_output_times(p.output, p.grid); });
  EXPECT_EQ(c.kind, "invalid");
  EXPECT_EQ(c.field, "output.steps[2]");
  EXPECT_EQ(caught([&] { check(p); }).field, "output.steps[2]");
  p = two_subjects();
  p.output = OutputTimes::at_steps({0, 9});  // 8 steps
  EXPECT_EQ(caught([&] { check_output_times(p.output, p.grid); }).field, "output.steps[1]");

  // K = I + A dt with dt = 10 and ka = 1: K[depot][depot] = -9 (closed form).
  p = two_subjects();
  p.discretization = Discretization::Euler;
  p.grid = {10.0, 4};
  const Caught e = caught([&] { check_euler_step(p.parameters, p.grid.dt); });
  EXPECT_EQ(e.field, "grid.dt");
  EXPECT_EQ(e.value, "10");
  EXPECT_NE(e.what.find("K[depot][depot] = -9"), std::string::npos) << e.what;
  EXPECT_EQ(caught([&] { check(p); }).what, e.what);
}

PopulationRun population_run() {
  PopulationRun run;
  PopulationSpec pop(ModelKind::TwoCompartment, 3, 1);
  pop.set_typical("ka", 1.0);
  pop.set_typical("cl", 2.0);
  pop.set_typical("v_central", 10.0);
  pop.iiv = {pop.column("cl"), pop.column("v_central")};
  pop.omega = Eigen::MatrixXd::Identity(2, 2) * 0.1;
  pop.covariate_names = {"wt"};
  pop.covariates = {70, 80, 90};
  pop.effects = {{pop.column("cl"), 0, CovariateModel::Power, 0.75, 70.0}};
  run.population = pop;
  run.problem = two_subjects();
  run.sweep.columns = {pop.column("ka")};
  run.sweep.values = {{0.5, 1.5}};
  return run;
}

TEST(FieldPath, PopulationRun) {
  EXPECT_EQ(caught([] { check_population_run(population_run()); }).kind, "none");
  PopulationRun r = population_run();
  r.sweep.values[0][1] = -1;
  Caught c = caught([&] { check_population_run(r); });
  EXPECT_EQ(c.field, "sweep.values[0][1]");
  EXPECT_EQ(c.value, "-1");
  EXPECT_EQ(c.rule, "finite and >= 0");
  r = population_run();
  r.sweep.columns = {r.population->column("lag_depot")};
  EXPECT_EQ(caught([&] { check_population_run(r); }).field, "sweep.columns[0]");
  r = population_run();
  r.population->iiv[1] = r.population->column("f_depot");
  EXPECT_EQ(caught([&] { check_population_run(r); }).field, "population.iiv[1]");
  r = population_run();
  r.population->effects[0].parameter = r.population->column("f_depot");
  EXPECT_EQ(caught([&] { check_population_run(r); }).field, "population.effects[0].parameter");
  r = population_run();
  r.population->set_typical("f_depot", 0.5);
  EXPECT_EQ(caught([&] { check_population_run(r); }).field,
            "population.typical[" + std::to_string(r.population->column("f_depot")) + "]");

  // PopulationSampler's rules name PopulationSpec's members.
  r = population_run();
  r.population->omega(1, 0) = r.population->omega(0, 1) = 0.2;  // |correlation| 2
  c = caught([&] { check_population_run(r); });
  EXPECT_EQ(c.field, "omega");
  EXPECT_NE(c.what.find("not positive definite"), std::string::npos) << c.what;
  r = population_run();
  r.population->omega(1, 1) = -0.1;
  c = caught([&] { check_population_run(r); });
  EXPECT_EQ(c.field, "omega[1][1]");
  EXPECT_EQ(c.rule, "a finite variance >= 0");
  r = population_run();
  r.population->omega(0, 0) = 0.0;  // eta of cl is 0, but its covariance is not
  r.population->omega(1, 0) = r.population->omega(0, 1) = 0.01;
  EXPECT_EQ(caught([&] { check_population_run(r); }).field, "omega[1][0]");
  r = population_run();
  r.population->covariates[2] = 0.0;  // subject 3, a power effect
  c = caught([&] { check_population_run(r); });
  EXPECT_EQ(c.field, "covariates[2][0]");
  EXPECT_NE(c.what.find("subject 3"), std::string::npos) << c.what;
  r = population_run();
  r.population->effects[0].reference = 0.0;
  c = caught([&] { check_population_run(r); });
  EXPECT_EQ(c.field, "effects[0].reference");
  EXPECT_EQ(c.rule, "finite and > 0 for a power effect");
}

// An arm's own output times follow check_output_times' rules at the arm's field; the layout's
// times are the union of the arms', arm_sampled says which each arm samples.
TEST(FieldPath, ArmOutputTimes) {
  PopulationRun r = population_run();
  r.problem.output = OutputTimes::at_steps({0, 8});
  r.arms.resize(2);
  r.arms[0].name = "a";
  r.arms[0].count = 1;
  r.arms[0].output = OutputTimes::at_steps({1, 2, 8});
  r.arms[1].name = "b";
  r.arms[1].count = 2;  // output times: problem.output
  EXPECT_EQ(caught([&] { check_population_run(r); }).kind, "none");
  const RunLayout l = population_layout(r);
  EXPECT_EQ(l.times, (std::vector<double>{0, 0.5, 1, 4}));
  EXPECT_EQ(l.arm_sampled, (std::vector<std::int8_t>{0, 1, 1, 1, 1, 0, 0, 1}));
  EXPECT_EQ(arm_times_of(l, 0), (std::vector<double>{0.5, 1, 4}));
  EXPECT_EQ(arm_times_of(l, 1), (std::vector<double>{0, 4}));
  EXPECT_EQ(caught([&] { arm_times_of(l, 2); }).kind, "invalid");

  r.arms[1].output = OutputTimes::at_steps({0, 4, 4});
  Caught c = caught([&] { check_population_run(r); });
  EXPECT_EQ(c.kind, "invalid");
  EXPECT_EQ(c.field, "arms[1].output.steps[2]");
  EXPECT_NE(c.what.find("arm b"), std::string::npos) << c.what;
  r.arms[1].output = OutputTimes::at_steps({0, 9});  // 8 steps
  c = caught([&] { check_population_run(r); });
  EXPECT_EQ(c.kind, "domain");
  EXPECT_EQ(c.field, "arms[1].output.steps[1]");
  r.arms[1].output = OutputTimes::at_steps({});
  EXPECT_EQ(caught([&] { check_population_run(r); }).field, "arms[1].output.steps");
  r.arms[1].output = OutputTimes::every_step();
  EXPECT_EQ(population_layout(r).times.size(), 9u);  // every grid time
}

TEST(FieldPath, DatasetValuesFromTheBatchNameTheirField) {
  const ModelInfo& m = model_info(ModelKind::TwoCompartment);
  const Dataset data = parse_dataset(
      "ID,TIME,AMT,CMT,EVID,KE\n1,0,100,1,1,0.2\n1,2,.,2,0,0.2\n2,0,100,1,1,-1\n", "d.csv", m);
  ParameterBatch b(ModelKind::TwoCompartment, 2);
  b.set_all("ka", 1.0);
  b.set_all("ke", 0.2);  // replaced by the dataset's KE column
  b.set_all("v_central", 10.0);
  Caught c = caught([&] { check_dataset(data, b); });
  EXPECT_EQ(c.kind, "domain");
  EXPECT_EQ(c.field, "") << c.what;  // from the dataset: its line is in the message
  EXPECT_NE(c.what.find("d.csv:4"), std::string::npos) << c.what;

  const Dataset plain =
      parse_dataset("ID,TIME,AMT,CMT,EVID\n1,0,100,1,1\n2,0,100,1,1\n", "d.csv", m);
  b.set("v_central", 1, -4.0);
  c = caught([&] { check_dataset(plain, b); });
  EXPECT_EQ(c.field, "parameters[1].v_central") << c.what;
  EXPECT_EQ(c.value, "-4");
  EXPECT_EQ(c.rule, "finite and > 0");
}

}  // namespace
}  // namespace pkscan
