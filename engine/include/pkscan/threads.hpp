#pragma once
/// @file threads.hpp
/// How many threads a pkscan call uses, and the loop over subjects that every parallel entry
/// point shares (docs/performance.md, "Threads").
///
/// One rule everywhere: a positive `threads` argument is used as given; `threads = 0` means the
/// process default, which is OpenMP's: `OMP_NUM_THREADS` when it is set, otherwise the CPUs of
/// the process's affinity mask (what `taskset`, cpusets and batch schedulers such as Slurm set),
/// or what the host program chose with `omp_set_num_threads`. Nothing sizes itself from the
/// hardware's CPU count behind the user's back.
#include <cstdint>
#include <functional>

namespace pkscan {

/// The threads a call with `threads = 0` uses (see the file comment); at least 1, and 1 when
/// pkscan was built without OpenMP. Called from inside an OpenMP parallel region of the host
/// program it answers for a nested region.
int default_threads() noexcept;

/// `threads` when it is > 0, otherwise default_threads().
int resolve_threads(int threads) noexcept;

/// Calls `body(i, worker)` for every i in [0, n) on up to resolve_threads(threads) threads
/// (never more than n), handing out indices in chunks of `chunk` as threads become free;
/// `worker` is the calling thread's index in [0, resolve_threads(threads)), for per-thread
/// scratch. Exceptions never leave a thread: when bodies throw, the indices above the lowest
/// failing one are skipped and the exception of the lowest failing i is rethrown after every
/// thread has finished, so the error a caller sees does not depend on the thread count.
/// @throws InvalidArgument when n < 0 or chunk < 1; otherwise what `body` throws.
void parallel_for(std::int64_t n, int threads,
                  const std::function<void(std::int64_t i, int worker)>& body, int chunk = 1);

}  // namespace pkscan
