// The example of docs/api.md: a population, a regimen and a time grid built in code, one call,
// amounts and concentrations back. Built and run by the tests (test name api_example).
#include <cmath>
#include <cstdio>
#include <pkscan/pkscan.hpp>
#include <utility>
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
    // Fitting (docs/api.md, "Fitting"): a dataset prepared once, predictions, the likelihood
    // and their exact first and second derivatives.
    const pkscan::ModelInfo& m = pkscan::model_info(pkscan::ModelKind::ThreeCompartment);
    pkscan::Dataset data = pkscan::parse_dataset(
        "ID,TIME,AMT,CMT,EVID,DV\n1,0,100,1,1,.\n1,1,.,2,0,2.1\n1,6,.,2,0,1.4\n", "data.csv", m);
    pkscan::Predictor pred(std::move(data), pkscan::ModelKind::ThreeCompartment);
    auto ws = pred.make_workspace();
    std::vector<double> p;  // the model's defaults (NaN: required, or the unused alternative)
    for (const pkscan::ParameterInfo& info : m.parameters) p.push_back(info.default_value);
    for (const auto& [name, value] : {std::pair<const char*, double>{"ka", 1.2},
                                      {"cl", 5.0},
                                      {"q", 8.0},
                                      {"v_central", 20.0},
                                      {"v_peripheral", 70.0}})
      p[static_cast<std::size_t>(pkscan::parameter_index(m, name))] = value;
    std::vector<double> ipred(pred.observations(0)), pjac(ipred.size() * pred.parameters());
    pred.predict_gradient(0, p.data(), ipred.data(), pjac.data(), *ws);
    const pkscan::ErrorModel err{pkscan::ErrorModelKind::Proportional};
    double sigma = 0.1, dsigma = 0;
    std::vector<double> grad(pred.parameters());
    const double ll = pred.log_likelihood(0, p.data(), err, &sigma, grad.data(), &dsigma, *ws);
    const int cols[2] = {pkscan::parameter_index(m, "cl"), pkscan::parameter_index(m, "v_central")};
    std::vector<double> hess(ipred.size() * 2 * 2), g2(3), h2(3 * 3);
    pred.predict_hessian(0, p.data(), cols, 2, ipred.data(), pjac.data(), hess.data(), *ws);
    const double ll2 =
        pred.log_likelihood_hessian(0, p.data(), cols, 2, err, &sigma, g2.data(), h2.data(), *ws);
    std::printf("log-likelihood %.6f (%.6f), d2/dCL2 %.6g, d2 IPRED(1 h)/dCL dV %.6g\n", ll, ll2,
                h2[0], hess[1]);
    if (ll != ll2 || !std::isfinite(h2[0])) return 1;
    std::printf("ran %s on %s\n", pkscan::to_string(r.summary().method).c_str(),
                pkscan::to_string(r.summary().device).c_str());
    return r.summary().non_finite_subjects == 0 ? 0 : 1;
  } catch (const pkscan::Error& e) {  // bad input: InvalidArgument, DomainError, ...
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
}
