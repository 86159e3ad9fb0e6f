// `pkscan` under an MPI launcher (see mpi_main.hpp).
#include "mpi_main.hpp"

#include <mpi.h>

#include <chrono>
#include <iostream>
#include <pkscan/mpi/run.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "signals.hpp"

namespace pkscan::cli {

namespace {

// How long a rank whose run failed waits for rank 0 to stop the run (rank 0 receives the
// error with the rank's next chunk and stops every rank within a chunk's time) before it
// stops the run itself.
constexpr auto kWaitForRankZero = std::chrono::seconds(10);

std::string first_line(const std::string& s) {
  const std::size_t end = s.find('\n');
  return end == std::string::npos ? s : s.substr(0, end);
}

}  // namespace

int run_mpi(const std::vector<std::string>& args) {
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    error_line(std::cerr, "MPI could not be initialized");
    return kExitFailure;
  }
  int rank = 0;
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const RunFunction runner = [](const config::RunSpec& spec, const std::string& path,
                                const PopulationRunOptions& options) {
    return mpi::run(spec, path, options, MPI_COMM_WORLD);
  };
  const bool split = !args.empty() && args[0] == "run";
  if (rank == 0 || size == 1) {
    const int rc = run_cli(args, std::cout, std::cerr, runner);
    std::cout.flush();
    std::cerr.flush();
    if (rc != kExitOk && size > 1 && split) MPI_Abort(MPI_COMM_WORLD, rc);
    MPI_Finalize();
    return rc;
  }
  quiet_termination_signals();  // rank 0 says how the run ended
  if (!split) {                 // validate, plot, fit, vpc, --help: rank 0's
    MPI_Finalize();
    return kExitOk;
  }
  std::ostringstream out;
  std::ostringstream err;
  const int rc = run_cli(args, out, err, runner);
  if (rc == kExitOk) {
    MPI_Finalize();
    return rc;
  }
  // Rank 0 prints the error (sent to it) and stops every rank; should it not, this rank does.
  std::this_thread::sleep_for(kWaitForRankZero);
  std::string line = first_line(err.str());
  const std::string lead = "pkscan: error: ";
  if (line.compare(0, lead.size(), lead) == 0) line = line.substr(lead.size());
  error_line(std::cerr, "rank " + std::to_string(rank) + ": " + line);
  MPI_Abort(MPI_COMM_WORLD, rc);
  return rc;
}

}  // namespace pkscan::cli
