// Consumer of the installed pkscan package (tests/package): simulates a one-compartment model
// with first-order absorption through the public API and checks the central amount against the
// Bateman function. Returns 0 when every value agrees, 1 on a mismatch, 2 on a pkscan error.
#include <cmath>
#include <cstdio>
#include <pkscan/pkscan.hpp>

int main() {
  const double ka = 1.3;
  const double ke = 0.2;
  const double dose = 100.0;
  const double v_central = 12.5;

  pkscan::Problem problem;
  problem.grid = {0.5, 48};  // t = 0, 0.5, ..., 24
  problem.parameters = pkscan::ParameterBatch(pkscan::ModelKind::TwoCompartment,
                                              2);  // depot -> central (NONMEM ADVAN2)
  problem.parameters.set_all("ka", ka);
  problem.parameters.set_all("ke", ke);
  problem.parameters.set_all("v_central", v_central);
  problem.parameters.set("ke", 1, 2.0 * ke);  // a second subject that eliminates faster
  pkscan::DoseEvent oral;                     // bolus into the depot at t = 0
  oral.compartment = 0;
  oral.amount = dose;
  problem.doses = {oral};

  try {
    const pkscan::SimulationResult r = pkscan::simulate(problem);
    int mismatches = 0;
    double worst = 0.0;
    for (std::int64_t s = 0; s < 2; ++s) {
      const double k = s == 0 ? ke : 2.0 * ke;
      for (std::int64_t i = 0; i < r.times(); ++i) {
        const double t = 0.5 * static_cast<double>(i);
        // Bateman: amount in central after an oral bolus, and the concentration.
        const double expected = dose * ka / (ka - k) * (std::exp(-k * t) - std::exp(-ka * t));
        const double got = r.amount(s, i, 1);
        const double err = std::abs(got - expected);
        worst = std::fmax(worst, err);
        if (!(err <= 1e-9 * dose) ||
            !(std::abs(r.concentration(s, i, 1) - expected / v_central) <= 1e-9 * dose))
          ++mismatches;
      }
    }
    std::printf("pkscan %s consumer: %lld values, largest error %.3g, %d mismatches (%s on %s)\n",
                PKSCAN_VERSION_STRING, 2LL * static_cast<long long>(r.times()), worst, mismatches,
                pkscan::to_string(r.summary().method).c_str(),
                pkscan::to_string(r.summary().device).c_str());
    return mismatches == 0 && r.times() == 49 ? 0 : 1;
  } catch (const pkscan::Error& e) {
    std::fprintf(stderr, "consumer: pkscan error: %s\n", e.what());
    return 2;
  }
}
