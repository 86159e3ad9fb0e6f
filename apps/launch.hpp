#pragma once
// Whether an MPI launcher (mpirun, mpiexec, srun) started this process, read from the
// environment it sets, before MPI is initialized (and in a build without MPI).
#include <cstdlib>
#include <string>

namespace pkscan::cli {

struct Launch {
  bool mpi = false;  // a launcher's variables are set
  int size = 1;      // processes it started (1 when it does not say)
  int rank = 0;      // this one's rank
};

inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (*end == '\0' && x >= 0 && x < (1L << 30)) ? static_cast<int>(x) : fallback;
}

// Open MPI's mpirun (OMPI_COMM_WORLD_*), PMI-1/2 launchers (MPICH's mpiexec, srun --mpi=pmi2:
// PMI_*) and PMIx launchers (srun --mpi=pmix: PMIX_RANK; their size is known once MPI runs).
inline Launch launched_by_mpi() {
  Launch l;
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    l.mpi = true;
    l.size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    l.rank = env_int("OMPI_COMM_WORLD_RANK", 0);
  } else if (std::getenv("PMI_SIZE") != nullptr) {
    l.mpi = true;
    l.size = env_int("PMI_SIZE", 1);
    l.rank = env_int("PMI_RANK", 0);
  } else if (std::getenv("PMIX_RANK") != nullptr) {
    l.mpi = true;
    l.rank = env_int("PMIX_RANK", 0);
  }
  return l;
}

}  // namespace pkscan::cli
