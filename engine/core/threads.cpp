// The thread-count rule and the public loop over subjects (pkscan/threads.hpp).
#include <pkscan/error.hpp>
#include <pkscan/threads.hpp>
#include <string>

#include "core/parallel.hpp"

namespace pkscan {

int default_threads() noexcept {
#if defined(_OPENMP)
  const int t = omp_get_max_threads();
  return t > 0 ? t : 1;
#else
  return 1;
#endif
}

int resolve_threads(int threads) noexcept { return threads > 0 ? threads : default_threads(); }

void parallel_for(std::int64_t n, int threads,
                  const std::function<void(std::int64_t i, int worker)>& body, int chunk) {
  if (n < 0)
    throw InvalidArgument("parallel_for: n is " + std::to_string(n) + ", but must be >= 0");
  if (chunk < 1)
    throw InvalidArgument("parallel_for: chunk is " + std::to_string(chunk) + ", but must be >= 1");
  detail::parallel_for(
      n, resolve_threads(threads), chunk, [] { return detail::thread_index(); },
      [&](std::int64_t i, int worker) { body(i, worker); });
}

}  // namespace pkscan
