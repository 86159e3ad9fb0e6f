#pragma once
// Threads inside the library: one rule for the thread count (pkscan/threads.hpp) and one loop
// over subjects with a deterministic error (parallel_for below).
//
// Exceptions and OpenMP: an exception leaving a parallel region calls std::terminate, and one
// that skips a worksharing loop on one thread deadlocks the others at its barrier. Bodies run
// guarded, every thread still reaches every loop, and an exception is rethrown after the region.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <pkscan/threads.hpp>
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace pkscan::detail {

// Work a thread of a grid call should get before another thread is woken, counted as
// subject-steps plus values written: several times what waking a thread of the pool costs
// (docs/performance.md, "Thresholds").
constexpr double kGridWorkPerThread = 16384.0;

// The threads a call with `work` units of work uses out of `threads` (resolved): one per
// `per_thread` units, at least 1. Small calls do not pay for waking threads, and a busy machine
// does not make them wait for a descheduled one at a barrier.
inline int threads_for_work(int threads, double work, double per_thread) noexcept {
  const double want = std::max(1.0, std::floor(work / per_thread));
  return want >= static_cast<double>(threads) ? threads : static_cast<int>(want);
}

// The first exception of a region (whichever thread captured it first).
class RegionError {
 public:
  template <class F>
  void guard(F&& f) noexcept {
    try {
      f();
    } catch (...) {
      capture();
    }
  }
  // True once some body has failed (later bodies may skip their work).
  bool failed() const noexcept { return static_cast<bool>(error_); }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void capture() noexcept {
#pragma omp critical(pkscan_region_error)
    if (!error_) error_ = std::current_exception();
  }
  std::exception_ptr error_;
};

// The exception of the lowest failing index of a loop: the same error for any thread count and
// schedule. Indices above a failed one may skip their work (skip(i)); lower ones still run.
class LowestError {
 public:
  explicit LowestError(std::int64_t none = std::numeric_limits<std::int64_t>::max()) noexcept
      : lowest_(none) {}
  bool skip(std::int64_t i) const noexcept { return i > lowest_.load(std::memory_order_relaxed); }
  template <class F>
  void guard(std::int64_t i, F&& f) noexcept {
    try {
      f();
    } catch (...) {
      capture(i);
    }
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void capture(std::int64_t i) noexcept {
#pragma omp critical(pkscan_lowest_error)
    if (!error_ || i < lowest_.load(std::memory_order_relaxed)) {
      error_ = std::current_exception();
      lowest_.store(i, std::memory_order_relaxed);
    }
  }
  std::atomic<std::int64_t> lowest_;
  std::exception_ptr error_;
};

// The index of the calling thread in its OpenMP team (0 outside a parallel region).
inline int thread_index() noexcept {
#if defined(_OPENMP)
  return omp_get_thread_num();
#else
  return 0;
#endif
}

// Runs body(i, state) for every i in [0, n) on `threads` OpenMP threads (a resolved count, not
// 0), dynamically in chunks of `chunk`, with one `state` per thread made by make_state() inside
// the thread (a workspace, a solver, scratch buffers). Errors as LowestError: the exception of
// the lowest failing index is rethrown; a failing make_state() counts as index -1.
template <class MakeState, class Body>
void parallel_for(std::int64_t n, int threads, int chunk, MakeState&& make_state, Body&& body) {
  if (n <= 0) return;
  const int team = static_cast<int>(std::min<std::int64_t>(threads < 1 ? 1 : threads, n));
  static_cast<void>(team);  // read by the OpenMP pragma only
  LowestError error;
#pragma omp parallel num_threads(team) if (team > 1)
  {
    // Every thread reaches the loop, even one whose state could not be made (index -1 then
    // makes every index skip).
    std::optional<decltype(make_state())> state;
    error.guard(-1, [&] { state.emplace(make_state()); });
#pragma omp for schedule(dynamic, chunk)
    for (std::int64_t i = 0; i < n; ++i)
      if (state && !error.skip(i)) error.guard(i, [&] { body(i, *state); });
  }
  error.rethrow();
}

}  // namespace pkscan::detail
