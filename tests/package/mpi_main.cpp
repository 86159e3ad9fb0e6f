// Consumer of the installed pkscan package's `mpi` component (tests/package), started with
// `mpirun -np 2 mpi_consumer FOLDER`: runs a population run file held in memory split over
// MPI_COMM_WORLD (pkscan::mpi::run, chunks of 1024 subjects, so that both ranks simulate) into
// FOLDER/mpi_run.csv; rank 0 then runs it in one process (pkscan::config::run) into
// FOLDER/one_run.csv and compares the two runs' trajectories and summaries byte for byte.
// Returns 0 when they are equal, 1 when not, 2 on a pkscan error.
#include <mpi.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <pkscan/config/load.hpp>
#include <pkscan/config/run.hpp>
#include <pkscan/mpi/run.hpp>
#include <pkscan/pkscan.hpp>
#include <string>

namespace {

std::string contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string folder = argc > 1 ? argv[1] : ".";
  const std::string run =
      "model: two_compartment\n"
      "time: {dt: 1, steps: 24}\n"
      "subjects:\n"
      "  population:\n"
      "    count: 3000\n"
      "    seed: 11\n"
      "    typical: {ka: 0.9, ke: 0.15, v_central: 4}\n"
      "    iiv: {ke: 0.09, v_central: 0.04}\n"
      "doses:\n"
      "  - {compartment: depot, time: 0, amount: 80}\n"
      "output:\n"
      "  summaries: true\n";
  int rc = 0;
  try {
    const pkscan::config::RunSpec spec = pkscan::config::parse_run_config(run, "inline.yaml");
    pkscan::PopulationRunOptions options;
    options.chunk_rows = 1024;
    const pkscan::config::RunReport split =
        pkscan::mpi::run(spec, folder + "/mpi_run.csv", options, MPI_COMM_WORLD);
    if (rank == 0) {
      pkscan::config::run(spec, folder + "/one_run.csv", options);
      for (const char* part : {".csv", ".summary.csv"}) {
        const std::string a = contents(folder + "/mpi_run" + part);
        const std::string b = contents(folder + "/one_run" + part);
        const bool same = !a.empty() && a == b;
        std::printf("pkscan mpi consumer: %d ranks, run%s %zu bytes, %s\n", size, part, a.size(),
                    same ? "the same as one process" : "DIFFERENT from one process");
        if (!same) rc = 1;
      }
    } else {
      std::printf("pkscan mpi consumer: rank %d simulated %lld rows\n", rank,
                  static_cast<long long>(split.rows));
      if (split.rows <= 0) rc = 1;
    }
  } catch (const pkscan::Error& e) {
    std::fprintf(stderr, "pkscan mpi consumer: rank %d: %s\n", rank, e.what());
    rc = 2;
  }
  MPI_Finalize();
  return rc;
}
