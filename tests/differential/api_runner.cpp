// The differential suite's C++ surface: loads run files through the config library
// (pkscan::config::load_run_file), simulates them through the public API (pkscan::simulate or
// pkscan::simulate_dataset) and prints every amount, one per line, with %.17g.
//
//   diff_api RUN.yaml...
//
// For each file, in order: "grid FILE SUBJECTS TIMES COMPARTMENTS" or "dataset FILE ROWS
// COMPARTMENTS", then the amounts in row-major order (subject, time, compartment / row,
// compartment); or "error FILE MESSAGE" when pkscan rejects the file. One process for all the
// cases of a test run (starting a process per case costs more than the simulations).
#include <cstdio>
#include <pkscan/config/load.hpp>
#include <pkscan/pkscan.hpp>

namespace {

void run_one(const char* file) {
  const pkscan::config::RunSpec spec = pkscan::config::load_run_file(file);
  if (spec.dataset) {
    const pkscan::DatasetResult r =
        pkscan::simulate_dataset(*spec.dataset, spec.problem.parameters, spec.options);
    std::printf("dataset %s %lld %d\n", file, static_cast<long long>(r.rows()), r.compartments);
    for (const double a : r.amounts) std::printf("%.17g\n", a);
    return;
  }
  const pkscan::SimulationResult r = pkscan::simulate(spec.problem, spec.options);
  std::printf("grid %s %lld %lld %d\n", file, static_cast<long long>(r.subjects()),
              static_cast<long long>(r.times()), r.compartments());
  for (std::int64_t s = 0; s < r.subjects(); ++s)
    for (std::int64_t t = 0; t < r.times(); ++t)
      for (int c = 0; c < r.compartments(); ++c) std::printf("%.17g\n", r.amount(s, t, c));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: diff_api RUN.yaml...\n");
    return 2;
  }
  for (int i = 1; i < argc; ++i) {
    try {
      run_one(argv[i]);
    } catch (const pkscan::Error& e) {
      std::printf("error %s %s\n", argv[i], e.what());
    }
  }
  return 0;
}
