// Consumer of the installed pkscan package's `config` component (tests/package): parses a run
// file held in memory, simulates it and checks the central amount against the Bateman function;
// then runs it as `pkscan run` does (config::run, docs/api.md) into a CSV file in the folder given
// as the first argument, and checks the file's central concentrations (amount / v_central)
// against the same function. Returns 0 when every value agrees, 1 on a mismatch, 2 on a pkscan
// error.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <pkscan/config/load.hpp>
#include <pkscan/config/run.hpp>
#include <pkscan/pkscan.hpp>
#include <sstream>
#include <string>

int main(int argc, char** argv) {
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
    if (mismatches != 0 || r.times() != 97) return 1;

    // The run of the run file, written as the program writes it.
    const std::string path = std::string(argc > 1 ? argv[1] : ".") + "/consumer_run.csv";
    const pkscan::config::RunReport report = pkscan::config::run(spec, path);
    std::ifstream csv(path);
    std::string line;
    std::getline(csv, line);  // id,time,amount_depot,amount_central,conc_depot,conc_central
    int rows = 0;
    while (std::getline(csv, line)) {
      std::istringstream fields(line);
      std::string id, t, amount_depot, amount_central, conc_depot, conc_central;
      std::getline(fields, id, ',');
      std::getline(fields, t, ',');
      std::getline(fields, amount_depot, ',');
      std::getline(fields, amount_central, ',');
      std::getline(fields, conc_depot, ',');
      std::getline(fields, conc_central, ',');
      const double time = std::stod(t);
      const double expected =
          dose * ka / (ka - ke) * (std::exp(-ke * time) - std::exp(-ka * time)) / 4.0;
      if (!(std::abs(std::stod(conc_central) - expected) <= 1e-9 * dose)) ++mismatches;
      ++rows;
    }
    std::printf(
        "pkscan config consumer: config::run wrote %d rows (%lld subject x %lld times), "
        "%d mismatches\n",
        rows, static_cast<long long>(report.rows), static_cast<long long>(report.times),
        mismatches);
    return mismatches == 0 && rows == 97 && report.kind == pkscan::config::RunKind::Grid ? 0 : 1;
  } catch (const pkscan::Error& e) {
    std::fprintf(stderr, "config consumer: pkscan error: %s\n", e.what());
    return 2;
  }
}
