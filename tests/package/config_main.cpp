// Consumer of the installed pkscan package's `config` component (tests/package): parses a run
// file held in memory, simulates it and checks the central amount against the Bateman function.
// Returns 0 when every value agrees, 1 on a mismatch, 2 on a pkscan error.
#include <cmath>
#include <cstdio>
#include <pkscan/config/load.hpp>
#include <pkscan/pkscan.hpp>
#include <string>

int main() {
  const double ka = 0.9;
  const double ke = 0.15;
  const double dose = 80.0;
  const std::string run =
      "model: two_compartment\n"
      "time: {dt: 0.25, steps: 96}\n"
      "subjects:\n"
      "  parameters: {ka: 0.9, ke: 0.15, v_central: 4}\n"
      "doses:\n"
      "  - {compartment: depot, time: 0, amount: 80}\n";
  try {
    const pkscan::config::RunSpec spec = pkscan::config::parse_run_config(run, "inline.yaml");
    const pkscan::SimulationResult r = pkscan::simulate(spec.problem, spec.options);
    int mismatches = 0;
    for (std::int64_t i = 0; i < r.times(); ++i) {
      const double t = 0.25 * static_cast<double>(i);
      const double expected = dose * ka / (ka - ke) * (std::exp(-ke * t) - std::exp(-ka * t));
      if (!(std::abs(r.amount(0, i, 1) - expected) <= 1e-9 * dose)) ++mismatches;
    }
    std::printf("pkscan config consumer: %lld values, %d mismatches\n",
                static_cast<long long>(r.times()), mismatches);
    return mismatches == 0 && r.times() == 97 ? 0 : 1;
  } catch (const pkscan::Error& e) {
    std::fprintf(stderr, "config consumer: pkscan error: %s\n", e.what());
    return 2;
  }
}
