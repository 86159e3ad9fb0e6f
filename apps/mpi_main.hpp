#pragma once
// `pkscan` started by an MPI launcher (built with MPI): `pkscan run` split over the ranks
// (pkscan/mpi/run.hpp), every other command on rank 0 alone.
#include <string>
#include <vector>

namespace pkscan::cli {

// MPI_Init, the command, MPI_Finalize; the process's exit status. An error on rank 0 is
// printed there and stops every rank (MPI_Abort with the exit status); an error on another rank
// reaches rank 0, which prints it, naming the rank.
int run_mpi(const std::vector<std::string>& args);

}  // namespace pkscan::cli
