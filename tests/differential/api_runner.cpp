// The differential suite's C++ surface: loads a run file through the config library
// (pkscan::config::load_run_file), simulates it through the public API (pkscan::simulate or
// pkscan::simulate_dataset) and prints every amount, one per line, with %.17g.
//
//   diff_api RUN.yaml
//
// First line: "grid SUBJECTS TIMES COMPARTMENTS" or "dataset ROWS COMPARTMENTS", then the amounts
// in row-major order (subject, time, compartment / row, compartment). Exit status 2 on a pkscan
// error (the message on stderr).
#include <cstdio>
#include <pkscan/config/load.hpp>
#include <pkscan/pkscan.hpp>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: diff_api RUN.yaml\n");
    return 2;
  }
  try {
    const pkscan::config::RunSpec spec = pkscan::config::load_run_file(argv[1]);
    if (spec.dataset) {
      const pkscan::DatasetResult r = pkscan::simulate_dataset(
          *spec.dataset, spec.problem.model, spec.problem.parameters, spec.options);
      std::printf("dataset %lld %d\n", static_cast<long long>(r.rows()), r.compartments);
      for (const double a : r.amounts) std::printf("%.17g\n", a);
      return 0;
    }
    const pkscan::SimulationResult r = pkscan::simulate(spec.problem, spec.options);
    std::printf("grid %lld %lld %d\n", static_cast<long long>(r.subjects()),
                static_cast<long long>(r.times()), r.compartments());
    for (std::int64_t s = 0; s < r.subjects(); ++s)
      for (std::int64_t t = 0; t < r.times(); ++t)
        for (int c = 0; c < r.compartments(); ++c) std::printf("%.17g\n", r.amount(s, t, c));
    return 0;
  } catch (const pkscan::Error& e) {
    std::fprintf(stderr, "diff_api: %s\n", e.what());
    return 2;
  }
}
