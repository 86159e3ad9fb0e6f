// Consumer of the installed pkscan package's `output` component (tests/package): simulates two
// subjects, writes them as a CSV result (write_csv) and as an HDF5 result (make_sink), reads both
// back (read_result) and checks that every concentration of the central compartment comes back
// unchanged. Usage: output_consumer DIR (where the files are written).
// Returns 0 when every value agrees, 1 on a mismatch, 2 on a pkscan error.
#include <cstdio>
#include <memory>
#include <pkscan/output/output.hpp>
#include <pkscan/output/read.hpp>
#include <pkscan/output/sink.hpp>
#include <pkscan/pkscan.hpp>
#include <string>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: output_consumer DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  pkscan::Problem p;
  p.grid = {0.5, 24};
  p.parameters = pkscan::ParameterBatch(pkscan::ModelKind::TwoCompartment, 2);
  p.parameters.set_all("ka", 1.1);
  p.parameters.set_all("ke", 0.2);
  p.parameters.set_all("v_central", 8.0);
  p.parameters.set("ke", 1, 0.35);
  p.doses.push_back({0, 0.0, 50.0});
  try {
    const pkscan::SimulationResult r = pkscan::simulate(p);
    const pkscan::ModelInfo& model = p.parameters.info();
    pkscan::output::write_csv(r, model, dir + "/result.csv");
    pkscan::RunLayout layout;
    layout.model = p.parameters.info_ptr();
    layout.times = r.output_times();
    layout.rows = r.subjects();
    const std::unique_ptr<pkscan::ResultSink> sink =
        pkscan::output::make_sink(dir + "/result.h5", layout);
    pkscan::Chunk chunk;
    chunk.result = &r;
    chunk.parameters = p.parameters.values().data();
    sink->write(chunk);
    sink->commit();
    int mismatches = 0;
    for (const char* file : {"/result.csv", "/result.h5"}) {
      const pkscan::output::Curves c = pkscan::output::read_result(dir + file, "", 10, 10);
      if (c.compartment != "central" || c.total != 2 || c.subjects.size() != 2) ++mismatches;
      for (std::size_t s = 0; s < c.subjects.size(); ++s)
        for (std::size_t i = 0; i < c.subjects[s].y.size(); ++i)
          if (c.subjects[s].t[i] != r.output_times()[i] ||
              c.subjects[s].y[i] !=
                  r.concentration(static_cast<std::int64_t>(s), static_cast<std::int64_t>(i), 1))
            ++mismatches;
    }
    std::printf("pkscan output consumer: CSV and HDF5 read back, %d mismatches\n", mismatches);
    return mismatches == 0 ? 0 : 1;
  } catch (const pkscan::Error& e) {
    std::fprintf(stderr, "output consumer: pkscan error: %s\n", e.what());
    return 2;
  }
}
