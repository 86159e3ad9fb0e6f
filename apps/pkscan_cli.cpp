#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "launch.hpp"
#include "signals.hpp"
#if PKSCAN_HAS_MPI
#include "mpi_main.hpp"
#endif

int main(int argc, char** argv) {
  // First, before any thread exists: SIGINT, SIGTERM, ... remove the temporary files and end
  // the program with 128 + the signal number (signals.hpp).
  pkscan::cli::handle_termination_signals();
  pkscan::cli::skip_hdf5_exit_handler();
  std::ios::sync_with_stdio(false);
  std::vector<std::string> args(argv + 1, argv + argc);
  const pkscan::cli::Launch launch = pkscan::cli::launched_by_mpi();
#if PKSCAN_HAS_MPI
  if (launch.mpi) return pkscan::cli::run_mpi(args);
#else
  // Every copy would write the whole study to the same files.
  if (launch.size > 1) {
    if (launch.rank == 0)
      pkscan::cli::error_line(
          std::cerr, "started by an MPI launcher with " + std::to_string(launch.size) +
                         " processes, but this pkscan was built without MPI (install "
                         "libopenmpi-dev and configure with -DPKSCAN_MPI=ON), so each would run "
                         "the whole study; run it without mpirun");
    return pkscan::cli::kExitBadInput;
  }
#endif
  return pkscan::cli::run_cli(args, std::cout, std::cerr);
}
