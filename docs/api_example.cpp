// The example of docs/api.md: a population, a regimen and a time grid built in code, one call,
// amounts and concentrations back. Built and run by the tests (test name api_example).
#include <cstdio>
#include <pkscan/pkscan.hpp>
#include <vector>

int main() {
  // Three subjects of the three-compartment model (depot -> central <-> peripheral).
  pkscan::Problem problem;
  problem.grid = {0.25, 96};  // dt = 0.25 h, 96 steps: t = 0 .. 24 h
  problem.parameters = pkscan::ParameterBatch(pkscan::ModelKind::ThreeCompartment, 3);
  const double ka[] = {1.2, 1.0, 0.8};
  for (int s = 0; s < 3; ++s) problem.parameters.set("ka", s, ka[s]);
  problem.parameters.set_all("k12", 0.4);
  problem.parameters.set_all("k21", 0.11);
  problem.parameters.set_all("ke", 0.25);
  problem.parameters.set_all("v_central", 20.0);
  problem.parameters.set_all("v_peripheral", 70.0);

  // 100 into the depot at t = 0 and every 12 h after (3 more), and a 2 h infusion of 50.
  pkscan::DoseEvent oral;
  oral.compartment = 0;  // depot
  oral.amount = 100.0;
  oral.every = 12.0;
  oral.repeat = 3;
  pkscan::DoseEvent infusion;
  infusion.compartment = 1;  // central
  infusion.time = 2.0;
  infusion.amount = 50.0;
  infusion.rate = 25.0;
  problem.doses = {oral, infusion};

  try {
    const pkscan::SimulationResult r = pkscan::simulate(problem);  // method and device: auto
    const int central = 1;
    for (std::int64_t i = 0; i < r.times(); i += 24)
      std::printf("t=%5.2f  subject 1: central amount %8.4f, concentration %7.4f\n",
                  r.output_times()[static_cast<std::size_t>(i)], r.amount(0, i, central),
                  r.concentration(0, i, central));

    // Exact derivatives on the grid, euler discretization (docs/api.md, "On a time grid").
    problem.discretization = pkscan::Discretization::Euler;
    pkscan::GridGradient g(problem);  // problem.discretization == Euler
    std::vector<double> conc(g.output_steps().size() * g.compartments());
    std::vector<double> jac(conc.size() * g.parameters());
    g.evaluate(problem.parameters.row(0), conc.data(), jac.data());  // jac may be nullptr
    const std::size_t last = (g.output_steps().size() - 1) * g.compartments() + central;
    const int ke = pkscan::parameter_index(problem.parameters.info(), "ke");
    std::printf("euler at 24 h: subject 1 central concentration %7.4f, d/d ke %8.4f\n", conc[last],
                jac[last * g.parameters() + ke]);
    // Bad input names the value it is about (docs/api.md, "Errors"): a dose off the grid.
    pkscan::Problem bad = problem;
    bad.doses[1].time = 2.1;  // dt is 0.25
    try {
      pkscan::check(bad);
      return 1;  // not reached: check() rejects it
    } catch (const pkscan::DomainError& e) {
      std::printf("%s\nfield %s, rule: %s\n", e.what(), e.field().c_str(), e.rule().c_str());
      if (e.field() != "doses[1].time") return 1;
    }
    std::printf("ran %s on %s\n", pkscan::to_string(r.summary().method).c_str(),
                pkscan::to_string(r.summary().device).c_str());
    return r.summary().non_finite_subjects == 0 ? 0 : 1;
  } catch (const pkscan::Error& e) {  // bad input: InvalidArgument, DomainError, ...
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
