// pkscan/threads.hpp: the thread-count rule and the shared loop over subjects.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <pkscan/error.hpp>
#include <pkscan/pkscan.hpp>
#include <pkscan/threads.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace pkscan {
namespace {

TEST(Threads, ExplicitCountWinsAndZeroMeansTheDefault) {
  EXPECT_GE(default_threads(), 1);
  EXPECT_EQ(resolve_threads(0), default_threads());
  EXPECT_EQ(resolve_threads(3), 3);
  EXPECT_EQ(resolve_threads(1), 1);
}

TEST(Threads, EveryIndexRunsOnceOnAnyThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    for (int chunk : {1, 7}) {
      const std::int64_t n = 1000;
      std::vector<std::atomic<int>> hits(n);
      std::mutex m;
      std::set<int> workers;
      parallel_for(
          n, threads,
          [&](std::int64_t i, int worker) {
            hits[static_cast<std::size_t>(i)]++;
            const std::lock_guard<std::mutex> lock(m);
            workers.insert(worker);
          },
          chunk);
      for (std::int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[static_cast<std::size_t>(i)].load(), 1)
            << "i " << i << " threads " << threads;
      EXPECT_GE(*workers.begin(), 0);
      EXPECT_LT(*workers.rbegin(), threads) << "a worker index outside [0, threads)";
    }
  }
}

TEST(Threads, TheLowestFailingIndexDecidesTheError) {
  // Indices 37 and 411 fail; whatever the thread count and chunk, the error of 37 is thrown,
  // and every index below it has run.
  for (int threads : {1, 2, 4}) {
    for (int chunk : {1, 16}) {
      std::vector<std::atomic<int>> hits(500);
      try {
        parallel_for(
            500, threads,
            [&](std::int64_t i, int) {
              hits[static_cast<std::size_t>(i)]++;
              if (i == 411) throw DomainError("subject 411");
              if (i == 37) throw std::runtime_error("subject 37");
            },
            chunk);
        FAIL() << "no exception";
      } catch (const std::runtime_error& e) {
        EXPECT_STREQ(e.what(), "subject 37") << "threads " << threads << " chunk " << chunk;
      }
      for (std::size_t i = 0; i <= 37; ++i) EXPECT_EQ(hits[i].load(), 1) << "i " << i;
    }
  }
}

// A call on a time grid uses at most one thread per 16384 units of work, a unit being a
// subject-step or a value written (docs/performance.md, "Threads"): a small call wakes no
// thread, a large one uses the threads it is given.
TEST(Threads, AGridCallUsesThreadsByItsWork) {
  auto threads_of = [](std::int64_t subjects, std::int64_t steps, bool dense = true) {
    Problem p;
    p.grid = {0.5, steps};
    p.parameters = ParameterBatch(ModelKind::TwoCompartment, subjects);
    p.parameters.set_all("ka", 1.0);
    p.parameters.set_all("ke", 0.2);
    p.parameters.set_all("v_central", 10.0);
    DoseEvent d;
    d.amount = 100.0;
    p.doses = {d};
    SimulateOptions o;
    o.method = Method::Batched;
    o.device = Device::Cpu;
    if (!dense) p.output = OutputTimes::at_steps({steps});
    o.threads = 2;
    return simulate(p, o).summary().threads;
  };
  // Two compartments: dense output writes 2 values per subject-step.
  EXPECT_EQ(threads_of(10, 1000), 1);         // 10 x (1000 steps + 2002 values) = 30020
  EXPECT_EQ(threads_of(11, 1000), 2);         // 33022: two threads' worth
  EXPECT_EQ(threads_of(11, 1000, false), 1);  // 11022: the final state only
  EXPECT_EQ(threads_of(16, 2045, false), 1);  // 16 x (2045 + 2) = 32752: just under two
  EXPECT_EQ(threads_of(16, 2046, false), 2);  // 32768
  EXPECT_EQ(threads_of(64, 2048, false), 2);  // eight threads' worth, two given
}

TEST(Threads, NothingToDoAndBadArguments) {
  int calls = 0;
  parallel_for(0, 2, [&](std::int64_t, int) { ++calls; });
  EXPECT_EQ(calls, 0);
  EXPECT_THROW(parallel_for(-1, 2, [](std::int64_t, int) {}), InvalidArgument);
  EXPECT_THROW(parallel_for(
                   10, 2, [](std::int64_t, int) {}, 0),
               InvalidArgument);
}

}  // namespace
}  // namespace pkscan
