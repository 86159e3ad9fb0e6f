// Temporary output files and their commit as one unit (output/include/pkscan/output/
// temp_files.hpp, output.hpp): names recognisable as pkscan's and as belonging to a target, a
// unit's files moved into place together with the stale companions removed, nothing changed by
// a unit destroyed uncommitted, orphans of processes that are gone removed (and only those), an
// interrupted commit completed by the next unit to the same path, discard_temp_files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <pkscan/error.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/output/temp_files.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/files.hpp"
#include "support/scratch_dir.hpp"

namespace pkscan::output {
namespace {

namespace fs = std::filesystem;

using Scratch = pkscan::test::ScratchDir;

using test::read_text;
using test::write_text;

void write(AtomicFile& f, const std::string& text) { f.write(text.data(), text.size()); }

// The host part of this process's temporary names, taken from a real one.
std::string host_tag(const Scratch& dir) {
  AtomicFile f(dir.file("probe.csv"));
  const std::string prefix = temp_prefix(dir.file("probe.csv"));
  const std::string rest = f.temp_path().substr(prefix.size());  // HOST.PID.XXXXXX
  return rest.substr(0, rest.find('.'));
}

// The pid of a process that has ended (forked, exited, reaped).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

TEST(TempFiles, NamesAreHiddenAndNameTargetHostAndProcess) {
  Scratch dir;
  const std::string target = dir.file("result.csv");
  std::string temp;
  {
    AtomicFile f(target);
    temp = f.temp_path();
    const std::string prefix = dir.file(".result.csv.pkscan-tmp.");
    EXPECT_EQ(temp_prefix(target), prefix);
    ASSERT_EQ(temp.compare(0, prefix.size(), prefix), 0) << temp;
    EXPECT_NE(temp.find("." + std::to_string(::getpid()) + "."), std::string::npos) << temp;
    EXPECT_TRUE(fs::exists(temp));
    const std::vector<std::string> reg = registered_temp_files();
    EXPECT_NE(std::find(reg.begin(), reg.end(), temp), reg.end());
    struct stat st {};
    ASSERT_EQ(::stat(temp.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);
  }
  EXPECT_FALSE(fs::exists(temp));  // destroyed uncommitted: removed
  const std::vector<std::string> reg = registered_temp_files();
  EXPECT_EQ(std::find(reg.begin(), reg.end(), temp), reg.end());
  EXPECT_EQ(commit_journal_path(target), dir.file(".result.csv.pkscan-commit"));
  EXPECT_EQ(temp_prefix("bare.csv"), ".bare.csv.pkscan-tmp.");
}

TEST(OutputUnit, CommitMovesEveryFileAndRemovesStaleCompanions) {
  Scratch dir;
  write_text(dir.file("r.csv"), "old main\n");
  write_text(dir.file("r.summary.csv"), "old summary\n");
  write_text(dir.file("r.metrics.csv"), "old metrics\n");
  {
    OutputUnit unit(dir.file("r.csv"));
    write(unit.add(dir.file("r.csv")), "new main\n");
    write(unit.add(dir.file("r.summary.csv")), "new summary\n");
    unit.remove_on_commit(dir.file("r.metrics.csv"));
    unit.remove_on_commit(dir.file("r.never-there.csv"));  // missing is fine
    // Nothing visible changes before commit().
    EXPECT_EQ(read_text(dir.file("r.csv")), "old main\n");
    EXPECT_EQ(read_text(dir.file("r.summary.csv")), "old summary\n");
    EXPECT_TRUE(fs::exists(dir.file("r.metrics.csv")));
    unit.commit();
    EXPECT_THROW(unit.commit(), InvalidArgument);
  }
  EXPECT_EQ(read_text(dir.file("r.csv")), "new main\n");
  EXPECT_EQ(read_text(dir.file("r.summary.csv")), "new summary\n");
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"r.csv", "r.summary.csv"}));
}

TEST(OutputUnit, DestroyedUncommittedLeavesEarlierFilesWhole) {
  Scratch dir;
  write_text(dir.file("r.csv"), "old main\n");
  write_text(dir.file("r.summary.csv"), "old summary\n");
  {
    OutputUnit unit(dir.file("r.csv"));
    write(unit.add(dir.file("r.csv")), "new main\n");
    unit.remove_on_commit(dir.file("r.summary.csv"));
    EXPECT_EQ(dir.names().size(), 3u);  // the two targets and one temporary file
  }
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"r.csv", "r.summary.csv"}));
  EXPECT_EQ(read_text(dir.file("r.csv")), "old main\n");
  EXPECT_EQ(read_text(dir.file("r.summary.csv")), "old summary\n");
}

TEST(OutputUnit, DroppedFileIsRemovedAtCommit) {
  Scratch dir;
  write_text(dir.file("r.summary.csv"), "old summary\n");
  OutputUnit unit(dir.file("r.csv"));
  write(unit.add(dir.file("r.csv")), "main\n");
  AtomicFile& summary = unit.add(dir.file("r.summary.csv"));
  unit.drop(summary);
  EXPECT_EQ(dir.names().size(), 2u);  // r.summary.csv and the main's temporary file
  unit.commit();
  EXPECT_EQ(dir.names(), std::vector<std::string>{"r.csv"});
}

TEST(OutputUnit, FilesMustShareTheMainFilesDirectory) {
  Scratch dir;
  fs::create_directory(dir.file("sub"));
  OutputUnit unit(dir.file("r.csv"));
  EXPECT_THROW(unit.add(dir.file("sub/r.summary.csv")), InvalidArgument);
  EXPECT_THROW(unit.remove_on_commit(dir.file("sub/r.metrics.csv")), InvalidArgument);
  unit.add(dir.file("r.csv"));
  EXPECT_THROW(unit.add(dir.file("r.csv")), InvalidArgument);
  EXPECT_THROW(commit_temp_files(dir.file("r.csv"), {{dir.file("x"), dir.file("sub/y")}}, {}),
               InvalidArgument);
}

TEST(TempFiles, OrphansOfEndedProcessesAreRemovedAndNothingElse) {
  Scratch dir;
  const std::string host = host_tag(dir);
  const std::string gone = std::to_string(dead_pid());
  const std::string alive = std::to_string(::getppid());
  const std::string me = std::to_string(::getpid());
  const std::string p = ".r.csv.pkscan-tmp.";
  const std::vector<std::string> orphans = {
      p + host + "." + gone + ".aB3xYz",  // its process ended
      p + host + "." + me + ".Qw12eR",    // this pid, but not this process's file (pid reuse)
  };
  const std::vector<std::string> kept = {
      p + host + "." + alive + ".aB3xYz",    // owner alive
      p + "other-host." + gone + ".aB3xYz",  // another host: never touched
      p + host + "." + gone + ".toolong7",   // not a pkscan name (7 random characters)
      ".r.csv.pkscan-tmp.garbage",           // not a pkscan name
      ".r2.csv.pkscan-tmp." + host + "." + gone + ".aB3xYz",  // another target
      "r.csv.tmp.aB3xYz",                                     // an older pkscan's name: left alone
      "r.csv",
  };
  for (const std::string& n : orphans) write_text(dir.file(n), "orphan");
  for (const std::string& n : kept) write_text(dir.file(n), "keep");
  EXPECT_EQ(remove_orphaned_temp_files(dir.file("r.csv")), orphans.size());
  std::vector<std::string> want = kept;
  std::sort(want.begin(), want.end());
  EXPECT_EQ(dir.names(), want);
  // Creating a file for the target sweeps too.
  write_text(dir.file(orphans[0]), "orphan");
  {
    AtomicFile f(dir.file("r.csv"));
    EXPECT_FALSE(fs::exists(dir.file(orphans[0])));
  }
  EXPECT_EQ(dir.names(), want);
}

// A commit cut short: the journal and the files still waiting stay, the earlier main file is
// untouched, and the next unit to the same path completes the commit first.
TEST(OutputUnit, CommitCutShortIsCompletedByTheNextRun) {
  Scratch dir;
  write_text(dir.file("r.csv"), "old main\n");
  write_text(dir.file("r.metrics.csv"), "old metrics\n");
  fs::create_directory(dir.file("r.summary.csv"));  // rename() over a non-empty directory fails
  write_text(dir.file("r.summary.csv/x"), "x");
  {
    OutputUnit unit(dir.file("r.csv"));
    write(unit.add(dir.file("r.csv")), "new main\n");
    write(unit.add(dir.file("r.summary.csv")), "new summary\n");
    unit.remove_on_commit(dir.file("r.metrics.csv"));
    try {
      unit.commit();
      ADD_FAILURE() << "commit() over a non-empty directory succeeded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("completes this commit"), std::string::npos) << e.what();
    }
  }
  // Journal and the two waiting files are still there; the main file is the old one.
  EXPECT_TRUE(fs::exists(commit_journal_path(dir.file("r.csv"))));
  EXPECT_EQ(read_text(dir.file("r.csv")), "old main\n");
  EXPECT_EQ(dir.names().size(), 6u) << "r.csv, r.metrics.csv, r.summary.csv/, journal, 2 temps";
  fs::remove_all(dir.file("r.summary.csv"));
  // This process's own journal from a unit it no longer has counts as a former process's.
  EXPECT_TRUE(recover_commit(dir.file("r.csv")));
  EXPECT_EQ(read_text(dir.file("r.csv")), "new main\n");
  EXPECT_EQ(read_text(dir.file("r.summary.csv")), "new summary\n");
  EXPECT_EQ(dir.names(), (std::vector<std::string>{"r.csv", "r.summary.csv"}));
  EXPECT_FALSE(recover_commit(dir.file("r.csv")));  // nothing left to do
}

// The journal's format, written as a process killed between two renames leaves it.
TEST(OutputUnit, JournalOfEndedProcessIsRolledForwardOfLiveProcessKept) {
  Scratch dir;
  const std::string host = host_tag(dir);
  for (const bool owner_alive : {false, true}) {
    SCOPED_TRACE(owner_alive ? "owner alive" : "owner gone");
    const std::string pid = std::to_string(owner_alive ? ::getppid() : dead_pid());
    const std::string t1 = ".r.csv.pkscan-tmp." + host + "." + pid + ".AAAAAA";
    write_text(dir.file("r.csv"), "old main\n");
    write_text(dir.file("r.metrics.csv"), "old metrics\n");
    write_text(dir.file("r.summary.csv"), "new summary\n");  // renamed before the kill
    write_text(dir.file(t1), "new main\n");
    const std::string journal = "pkscan-commit 1\nowner " + host + " " + pid + "\nrename " +
                                std::to_string(t1.size()) + ":" + t1 + " 5:r.csv\nremove " +
                                "13:r.metrics.csv\nend\n";
    write_text(commit_journal_path(dir.file("r.csv")), journal);
    if (owner_alive) {
      EXPECT_FALSE(recover_commit(dir.file("r.csv")));
      EXPECT_EQ(remove_orphaned_temp_files(dir.file("r.csv")), 0u);
      EXPECT_EQ(read_text(dir.file("r.csv")), "old main\n");
      EXPECT_EQ(dir.names().size(), 5u);
      continue;
    }
    { const OutputUnit unit(dir.file("r.csv")); }  // a new run to the same path
    EXPECT_EQ(read_text(dir.file("r.csv")), "new main\n");
    EXPECT_EQ(dir.names(), (std::vector<std::string>{"r.csv", "r.summary.csv"}));
  }
}

TEST(TempFiles, DirectoriesGoWithTheirFiles) {
  Scratch dir;
  const std::string target = dir.file("plot.png");
  const std::string d = create_temp_dir(target);
  ASSERT_EQ(d.compare(0, temp_prefix(target).size(), temp_prefix(target)), 0) << d;
  ASSERT_TRUE(fs::is_directory(d));
  write_text(d + "/plot.gp", "plot");
  remove_temp_file(d);
  EXPECT_TRUE(dir.names().empty());
  // A killed process's directory is an orphan like its files.
  const std::string orphan = dir.file(".plot.png.pkscan-tmp." + host_tag(dir) + "." +
                                      std::to_string(dead_pid()) + ".Zz9Zz9");
  fs::create_directory(orphan);
  write_text(orphan + "/plot.png", "png");
  const std::string live = create_temp_dir(target);  // sweeps the orphan
  EXPECT_EQ(dir.names().size(), 1u);
  EXPECT_GE(discard_temp_files(false), 1u);
  EXPECT_FALSE(fs::exists(live));
}

TEST(TempFiles, DiscardRemovesEveryRegisteredFile) {
  Scratch dir;
  AtomicFile a(dir.file("a.csv"));
  AtomicFile b(dir.file("b.csv"));
  write(b, "partial");
  EXPECT_EQ(dir.names().size(), 2u);
  EXPECT_GE(discard_temp_files(false), 2u);
  EXPECT_TRUE(dir.names().empty());
  EXPECT_TRUE(registered_temp_files().empty());
}

}  // namespace
}  // namespace pkscan::output
