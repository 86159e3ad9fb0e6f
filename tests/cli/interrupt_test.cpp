// Interrupted runs: real `pkscan run` processes (the built program, PKSCAN_BINARY) writing a
// population run over the results of another run get SIGINT, SIGTERM or SIGKILL at random
// (seeded) moments. After each: the exit status is 0 (it finished first) or 128 + the signal,
// the visible files are byte for byte either the earlier run's complete set or the new run's
// complete set (never a mix, never a partial file), and no temporary file or commit journal is
// left (after SIGKILL: once the next run to the same path has run). CSV (main file, summary,
// metrics; the two runs write different sets, so stale companions must go) and HDF5.
// PKSCAN_TEST_SEED overrides the seed of the signal moments.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <pkscan/output/temp_files.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/cli_test_support.hpp"

extern char** environ;

namespace pkscan::cli::test {
namespace {

using Clock = std::chrono::steady_clock;
using Files = std::map<std::string, std::string>;  // visible name -> bytes

// A population run: `summaries` adds the summary and metrics files (CSV) or groups (HDF5).
std::string run_yaml(int seed, int count, bool summaries, const std::string& times) {
  return "model: three_compartment\n"
         "time: {dt: 0.25, steps: 192}\n"
         "subjects:\n"
         "  population:\n"
         "    count: " +
         std::to_string(count) +
         "\n"
         "    seed: " +
         std::to_string(seed) +
         "\n"
         "    typical: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}\n"
         "    iiv: {cl: 0.09, v_central: 0.04, ka: 0.16}\n"
         "doses:\n"
         "  - {compartment: depot, time: 0, amount: 100, every: 12, repeat: 3}\n"
         "output:\n"
         "  times: " +
         times + "\n" + (summaries ? "  summaries: {percentiles: [5, 50, 95]}\n" : "");
}

struct Outcome {
  bool exited = false;  // else killed by a signal
  int code = -1;        // exit status or signal number
  std::string err;      // the process's stderr
};

// Starts `pkscan run FILE --output OUT -q`, stdout and stderr into `log`.
pid_t start(const std::string& file, const std::string& out, const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<std::string> args = {PKSCAN_BINARY, "run", file, "--output", out, "-q"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, PKSCAN_BINARY, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "cannot start " << PKSCAN_BINARY;
  return rc == 0 ? pid : -1;
}

// Waits for `pid` until `until`; true (and `o` filled) when it ended by then.
bool wait_until(pid_t pid, Clock::time_point until, const std::string& log, Outcome& o) {
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  o.exited = WIFEXITED(status);
  o.code = o.exited ? WEXITSTATUS(status) : WTERMSIG(status);
  o.err = read_text(log);
  return true;
}

// Waits (at most 120 s, then SIGKILL and a failure) for `pid`.
Outcome wait_for(pid_t pid, const std::string& log) {
  Outcome o;
  if (!wait_until(pid, Clock::now() + std::chrono::seconds(120), log, o)) {
    ADD_FAILURE() << "pkscan did not end within 120 s";
    ::kill(pid, SIGKILL);
    wait_until(pid, Clock::now() + std::chrono::seconds(10), log, o);
  }
  return o;
}

Outcome run_to_end(const std::string& file, const std::string& out, const std::string& log) {
  const pid_t pid = start(file, out, log);
  return pid > 0 ? wait_for(pid, log) : Outcome{};
}

// The visible files of `dir` with their bytes.
Files visible_files(const fs::path& dir) {
  Files f;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name[0] != '.') f[name] = read_text(e.path().string());
  }
  return f;
}

std::string names(const Files& f) {
  std::string s;
  for (const auto& [name, bytes] : f) s += name + " (" + std::to_string(bytes.size()) + " B) ";
  return s.empty() ? "(none)" : s;
}

struct Tally {
  int finished = 0, kept_old = 0, got_new = 0, killed = 0, cut_commits = 0;
  double max_latency = 0;  // seconds from SIGINT/SIGTERM to the end of the process
};

// Trials of one format (extension ".csv" or ".h5").
void interrupt_trials(const std::string& ext, std::mt19937& rng, Tally& tally) {
  TempDir work, results, refs;
  // A: summaries, few output times; B: no summaries or parameter table, more output times,
  // bigger. The CSV sets differ (A: main, summary, metrics, parameters; B: main only), so each
  // commit must also remove files.
  const std::string a = work.file("a.yaml"), b = work.file("b.yaml"), c = work.file("c.yaml");
  write_text(a, run_yaml(1, 20000, true, "[0, 6, 12, 24, 36, 48]"));
  write_text(b,
             run_yaml(2, 24000, false, "[0, 3, 6, 12, 18, 24, 36, 48]") + "  parameters: false\n");
  write_text(c, run_yaml(3, 100, false, "[0, 48]") + "  parameters: false\n");  // after SIGKILL
  const std::string log = work.file("log.txt");

  // Reference sets (and the duration of a run), each written to its own directory.
  Files set[2];
  double seconds[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    TempDir ref;
    const auto t0 = Clock::now();
    const Outcome o = run_to_end(k == 0 ? a : b, ref.file("out" + ext), log);
    seconds[k] = std::chrono::duration<double>(Clock::now() - t0).count();
    ASSERT_TRUE(o.exited && o.code == 0) << o.err;
    set[k] = visible_files(ref.path());
  }
  ASSERT_EQ(set[0].size(), ext == ".csv" ? 4u : 1u) << names(set[0]);
  ASSERT_EQ(set[1].size(), 1u) << names(set[1]);
  ASSERT_NE(set[0], set[1]);

  const int kSignals[] = {SIGINT, SIGTERM, SIGKILL};
  const std::string out = results.file("out" + ext);
  for (int trial = 0; trial < 9; ++trial) {
    const int sig = kSignals[trial % 3];
    const int from = trial % 2, to = 1 - from;  // A over B, then B over A, ...
    // Moments over the whole run, a little past its end (it may run faster than it did); the
    // last three trials near its end, where the files are synced and committed.
    std::uniform_real_distribution<double> moment(trial < 6 ? 0.0 : 0.85 * seconds[to],
                                                  (trial < 6 ? 1.1 : 1.3) * seconds[to]);
    const double delay = moment(rng);
    SCOPED_TRACE(ext + " trial " + std::to_string(trial) + ": signal " + std::to_string(sig) +
                 " after " + std::to_string(delay) + " s (the run took " +
                 std::to_string(seconds[to]) + " s), run " + (to == 0 ? "A over B" : "B over A"));
    // The earlier results, as the earlier run left them.
    fs::remove_all(results.path());
    fs::create_directory(results.path());
    for (const auto& [name, bytes] : set[from]) write_text(results.file(name), bytes);

    const auto started = Clock::now();
    const pid_t pid = start(to == 0 ? a : b, out, log);
    ASSERT_GT(pid, 0);
    Outcome o;
    double latency = 0;
    if (wait_until(pid,
                   started + std::chrono::duration_cast<Clock::duration>(
                                 std::chrono::duration<double>(delay)),
                   log, o)) {
      // It ended before the moment: later moments are drawn over this (shorter) duration, so
      // that a slow reference run on a loaded machine does not leave every run uninterrupted.
      seconds[to] =
          std::min(seconds[to], std::chrono::duration<double>(Clock::now() - started).count());
    } else {
      const auto sent = Clock::now();
      ::kill(pid, sig);
      o = wait_for(pid, log);
      latency = std::chrono::duration<double>(Clock::now() - sent).count();
    }

    const Files now = visible_files(results.path());
    const bool old_whole = now == set[from];
    const bool new_whole = now == set[to];
    // SIGKILL between two renames of a commit (a window of microseconds) leaves the commit's
    // journal, which marks the set as inconsistent until the next run completes the commit.
    const bool journal = fs::exists(results.file(".out" + ext + ".pkscan-commit"));
    if (journal) ++tally.cut_commits;
    EXPECT_TRUE(old_whole || new_whole || (sig == SIGKILL && journal))
        << "a mix or a partial file: " << names(now) << "; earlier set " << names(set[from])
        << "; new set " << names(set[to]);
    if (o.exited && o.code == 0) {
      ++tally.finished;
      EXPECT_TRUE(new_whole) << "exit status 0 without the new results";
    } else if (sig == SIGKILL) {
      ++tally.killed;
      EXPECT_TRUE(!o.exited && o.code == SIGKILL) << o.code << " " << o.err;
    } else {
      // 128 + the signal; killed by the signal itself only before main() set up the handling
      // thread, when there was nothing to clean up yet.
      EXPECT_TRUE((o.exited && o.code == 128 + sig) || (!o.exited && o.code == sig))
          << (o.exited ? "exit status " : "signal ") << o.code << ": " << o.err;
      if (o.exited) {
        // Acted on at once, in the middle of a computation or a write (generous bound for a
        // loaded 2-core machine; typically a few milliseconds).
        EXPECT_LT(latency, 3.0);
        tally.max_latency = std::max(tally.max_latency, latency);
        EXPECT_EQ(o.err,
                  std::string("pkscan: stopped by ") +
                      (sig == SIGINT ? "SIGINT (exit status 130)" : "SIGTERM (exit status 143)") +
                      "; no partial output left\n");
      }
      old_whole ? ++tally.kept_old : ++tally.got_new;
    }
    if (sig != SIGKILL || (o.exited && o.code == 0)) {
      EXPECT_EQ(temp_files(results.path()), std::vector<std::string>{});
      continue;
    }
    if (journal) {
      // Killed between two renames: completing the commit (what the next run does first) gives
      // exactly the new set.
      EXPECT_TRUE(output::recover_commit(out));
      EXPECT_EQ(visible_files(results.path()), set[to]) << "after the roll forward";
    }
    // SIGKILL: its temporary files may be left; the next run to the same path removes them.
    const Outcome next = run_to_end(c, out, log);
    EXPECT_TRUE(next.exited && next.code == 0) << next.err;
    EXPECT_EQ(temp_files(results.path()), std::vector<std::string>{});
    const Files after = visible_files(results.path());
    ASSERT_EQ(after.size(), 1u) << names(after);  // companions of the killed run's set removed
    EXPECT_EQ(after.begin()->first, "out" + ext);
  }
}

// A run writes its files as one unit: the companions an earlier run left at the same stem that
// this run does not write are removed (plot would pair them with the new file).
TEST(Interrupt, RunRemovesTheCompanionsItDoesNotWrite) {
  TempDir dir;
  const std::string out = dir.file("r.csv");
  write_text(dir.file("pop.yaml"), run_yaml(1, 50, true, "[0, 24]"));
  write_text(dir.file("traj.yaml"), run_yaml(1, 50, false, "[0, 24]"));
  write_text(dir.file("only.yaml"), run_yaml(1, 50, true, "[0, 24]") + "  trajectories: false\n");
  const std::string grid = (examples_dir() / "three_compartment.yaml").string();
  auto files = [&] {
    std::vector<std::string> n;
    for (const std::string& f : list_tree(dir.path()))
      if (f.find(".yaml") == std::string::npos) n.push_back(f);
    return n;
  };
  const std::vector<std::string> all = {"r.csv", "r.metrics.csv", "r.parameters.csv",
                                        "r.summary.csv"};
  for (const std::string& run : {grid, dir.file("traj.yaml"), dir.file("only.yaml")}) {
    SCOPED_TRACE(run);
    CliResult r = run_pkscan({"run", dir.file("pop.yaml"), "--output", out, "-q"});
    ASSERT_EQ(r.status, 0) << describe(r);
    ASSERT_EQ(files(), all);
    r = run_pkscan({"run", run, "--output", out, "-q"});
    ASSERT_EQ(r.status, 0) << describe(r);
    if (run == dir.file("only.yaml"))
      EXPECT_EQ(files(),
                (std::vector<std::string>{"r.metrics.csv", "r.parameters.csv", "r.summary.csv"}));
    else if (run == dir.file("traj.yaml"))  // a population: its parameter table
      EXPECT_EQ(files(), (std::vector<std::string>{"r.csv", "r.parameters.csv"}));
    else
      EXPECT_EQ(files(), std::vector<std::string>{"r.csv"});
  }
}

// A run that fails while writing (here: the file size limit, with SIGXFSZ ignored, so the
// write fails with EFBIG as on a full disk) exits with status 1 and one line, leaves the earlier
// results byte for byte and no temporary file.
TEST(Interrupt, FailedWriteLeavesEarlierResultsWhole) {
  for (const std::string ext : {".csv", ".h5"}) {
    SCOPED_TRACE(ext);
    TempDir dir;
    write_text(dir.file("old.yaml"), run_yaml(1, 20, true, "[0, 24]"));
    write_text(dir.file("new.yaml"), run_yaml(2, 4000, true, "[0, 3, 6, 12, 18, 24, 36, 48]"));
    fs::create_directory(dir.file("r"));
    const std::string out = dir.file("r/out" + ext);
    const CliResult old = run_pkscan({"run", dir.file("old.yaml"), "--output", out, "-q"});
    ASSERT_EQ(old.status, 0) << describe(old);
    const Files before = visible_files(dir.file("r"));
    const std::string log = dir.file("log.txt");
    // 200 blocks of 512 bytes: the new files are larger.
    std::vector<std::string> args = {"/bin/sh",
                                     "-c",
                                     "ulimit -f 200; trap '' XFSZ; exec \"$0\" run \"$1\" "
                                     "--output \"$2\" -q",
                                     PKSCAN_BINARY,
                                     dir.file("new.yaml"),
                                     out};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, "/bin/sh", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ASSERT_EQ(rc, 0);
    const Outcome o = wait_for(pid, log);
    EXPECT_TRUE(o.exited && o.code == 1) << (o.exited ? "exit status " : "signal ") << o.code;
    EXPECT_EQ(o.err.rfind("pkscan: error: ", 0), 0u) << o.err;
    EXPECT_NE(o.err.find("File too large"), std::string::npos) << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
    EXPECT_EQ(visible_files(dir.file("r")), before);
    EXPECT_EQ(temp_files(dir.file("r")), std::vector<std::string>{});
  }
}

TEST(Interrupt, RandomSignalsLeaveEarlierOrNewResultsWholeAndNoTemporaryFiles) {
  unsigned seed = 20261124;
  if (const char* s = std::getenv("PKSCAN_TEST_SEED")) seed = static_cast<unsigned>(std::atol(s));
  SCOPED_TRACE("seed " + std::to_string(seed) + " (PKSCAN_TEST_SEED)");
  std::mt19937 rng(seed);
  int interrupted = 0;
  for (const std::string ext : {".csv", ".h5"}) {
    Tally t;
    interrupt_trials(ext, rng, t);
    std::cout << "[ interrupt ] " << ext << ": " << t.finished << " finished, " << t.kept_old
              << " interrupted with the earlier results kept, " << t.got_new
              << " interrupted after the commit, " << t.killed << " killed (SIGKILL; "
              << t.cut_commits << " in a commit); SIGINT/SIGTERM acted on within "
              << t.max_latency * 1000 << " ms\n";
    interrupted += t.kept_old + t.killed;
  }
  // The moments cover the runs: many of the 18 trials are interrupted before the end (about 11
  // on average; the bound keeps the test from passing without interrupting anything).
  EXPECT_GE(interrupted, 4);
}

}  // namespace
}  // namespace pkscan::cli::test
