// The thread-count rule through the program (pkscan/threads.hpp, docs/performance.md "Threads"):
// OMP_NUM_THREADS and the affinity mask are honoured, --threads overrides both. The program is
// started as a separate process, since OpenMP reads its environment when the process starts.
#include <gtest/gtest.h>
#include <sched.h>
#include <stdio.h>
#include <sys/wait.h>

#include <array>
#include <string>

#include "support/cli_test_support.hpp"

namespace pkscan::cli::test {
namespace {

struct Shell {
  int status = -1;
  std::string text;  // stdout and stderr
};

Shell shell(const std::string& command) {
  Shell r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) {
    ADD_FAILURE() << "popen failed: " << command;
    return r;
  }
  std::array<char, 4096> buf{};
  std::size_t got = 0;
  while ((got = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.text.append(buf.data(), got);
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// The thread count of `pkscan run FILE -v -q [args]` under the environment prefix `env`.
int threads_used(const std::string& env, const std::string& file, const std::string& args) {
  const TempDir dir;
  const Shell r =
      shell(env + " " + PKSCAN_BINARY + " run " + std::string(PKSCAN_SOURCE_DIR) +
            "/config/examples/" + file + " -v -q -o " + dir.file("out.csv") + " " + args);
  EXPECT_EQ(r.status, 0) << r.text;
  const std::string key = "on cpu (";
  const std::size_t at = r.text.find(key);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no thread count in: " << r.text;
    return -1;
  }
  return std::stoi(r.text.substr(at + key.size()));
}

int cpus_in_affinity_mask() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set);
}

// The grid run has work for 3 threads: a grid call uses at most one thread per 32768
// subject-steps (engine/core/parallel.hpp), and the example's 1200 rows (200 subjects x 2
// replicates x 3 sweep points) x 96 steps are 115200.
const char* const kRuns[] = {"population/population.yaml", "datasets/population.yaml"};

TEST(ThreadsCli, OmpNumThreadsIsHonouredAndThreadsOptionOverridesIt) {
  for (const char* file : kRuns) {
    SCOPED_TRACE(file);
    EXPECT_EQ(threads_used("env -u OMP_NUM_THREADS", file, ""), cpus_in_affinity_mask());
    EXPECT_EQ(threads_used("env OMP_NUM_THREADS=1", file, ""), 1);
    EXPECT_EQ(threads_used("env OMP_NUM_THREADS=3", file, ""), 3);
    EXPECT_EQ(threads_used("env OMP_NUM_THREADS=1", file, "--threads 2"), 2);
    EXPECT_EQ(threads_used("env -u OMP_NUM_THREADS", file, "-j 3"), 3);
  }
}

TEST(ThreadsCli, TheAffinityMaskIsHonoured) {
  if (cpus_in_affinity_mask() < 2) GTEST_SKIP() << "this process may use one CPU only";
  if (shell("command -v taskset").status != 0) GTEST_SKIP() << "no taskset on this machine";
  for (const char* file : kRuns) {
    SCOPED_TRACE(file);
    EXPECT_EQ(threads_used("env -u OMP_NUM_THREADS taskset -c 0", file, ""), 1);
    EXPECT_EQ(threads_used("env -u OMP_NUM_THREADS taskset -c 0", file, "--threads 2"), 2);
  }
}

TEST(ThreadsCli, ABadThreadCountIsAnError) {
  const CliResult r =
      run_pkscan({"run", std::string(PKSCAN_SOURCE_DIR) + "/config/examples/three_compartment.yaml",
                  "--threads", "-1"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_NE(r.err.find("--threads"), std::string::npos) << describe(r);
}

}  // namespace
}  // namespace pkscan::cli::test
