// The output path through `pkscan run` and `pkscan fit`: it is resolved against the current
// directory while inputs are resolved against the run file's folder, it never replaces an input,
// a path that failed the up-front checks works once its cause is gone, a commit left half done
// is completed by the next run, and the file-name limit is applied at its boundary (the
// one-line errors themselves: the bad_input_*cases.cpp tables).
#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <pkscan/error.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/output/temp_files.hpp>
#include <string>
#include <vector>

#include "support/cli_test_support.hpp"

namespace pkscan::cli::test {
namespace {

const char* const kDataset =
    "ID,TIME,AMT,CMT,EVID,DV\n1,0,100,1,1,.\n1,2,.,2,0,3.1\n1,6,.,2,0,2.2\n";
const char* const kDatasetRun =
    "subjects:\n"
    "  dataset: d.csv\n"
    "  parameters: {ka: 1, ke: 0.2, k12: 0.3, k21: 0.1, v_central: 10, v_peripheral: 20}\n";
const char* const kGridRun =
    "time: {dt: 0.25, steps: 8}\n"
    "subjects:\n"
    "  parameters: {ka: 1.2, k12: 0.4, k21: 0.11, ke: 0.25, v_central: 20, v_peripheral: 70}\n"
    "doses:\n"
    "  - {compartment: depot, time: 0, amount: 100}\n";

// Runs the scope in `dir` as the current directory.
class InDirectory {
 public:
  explicit InDirectory(const fs::path& dir) : old_(fs::current_path()) { fs::current_path(dir); }
  InDirectory(const InDirectory&) = delete;
  InDirectory& operator=(const InDirectory&) = delete;
  ~InDirectory() {
    std::error_code ec;
    fs::current_path(old_, ec);
  }

 private:
  fs::path old_;
};

bool one_line_error(const CliResult& r) {
  return r.err.rfind("pkscan: error: ", 0) == 0 &&
         std::count(r.err.begin(), r.err.end(), '\n') == 1;
}

// The dataset is read relative to the run file's folder (sub/d.csv), the output relative to the
// current directory: `sub/d.csv` from the parent folder is the dataset, `d.csv` is not.
TEST(OutputPath, ComparedWithInputsAsFilesWhateverFolderEachIsRelativeTo) {
  TempDir dir;
  fs::create_directory(dir.path() / "sub");
  write_text(dir.file("sub/d.csv"), kDataset);
  write_text(dir.file("sub/run.yaml"), kDatasetRun);
  const InDirectory cwd(dir.path());
  const CliResult bad = run_pkscan({"run", "sub/run.yaml", "--output", "sub/d.csv"});
  EXPECT_EQ(bad.status, 2) << describe(bad);
  EXPECT_TRUE(one_line_error(bad)) << describe(bad);
  EXPECT_NE(bad.err.find("--output: \"sub/d.csv\" is the same file as subjects.dataset"),
            std::string::npos)
      << describe(bad);
  EXPECT_EQ(read_text(dir.file("sub/d.csv")), kDataset);
  EXPECT_EQ(list_tree(dir.path()), (std::vector<std::string>{"sub", "sub/d.csv", "sub/run.yaml"}));

  const CliResult good = run_pkscan({"run", "sub/run.yaml", "--output", "d.csv"});
  ASSERT_EQ(good.status, 0) << describe(good);
  EXPECT_EQ(read_text(dir.file("sub/d.csv")), kDataset);
  const std::vector<std::string> lines = split_lines(read_text(dir.file("d.csv")));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], std::string(kCsvHeader) + ",dv,pred");
  EXPECT_EQ(split_csv(lines[1])[8], "3.1");
}

// A directory at the output path or at a companion's is found before anything runs, and the
// path works once it is gone.
TEST(OutputPath, APathThatFailedTheChecksWorksOnceTheCauseIsGone) {
  for (const char* blocker : {"out.csv", "out.summary.csv", "out.metrics.csv"}) {
    SCOPED_TRACE(blocker);
    TempDir dir;
    write_text(dir.file("run.yaml"), kGridRun);
    fs::create_directory(dir.file(blocker));
    const CliResult bad = run_pkscan({"run", dir.file("run.yaml"), "-o", dir.file("out.csv")});
    EXPECT_EQ(bad.status, 2) << describe(bad);
    EXPECT_TRUE(one_line_error(bad)) << describe(bad);
    EXPECT_NE(bad.err.find(std::string(blocker) + "\""), std::string::npos) << describe(bad);
    EXPECT_NE(bad.err.find("is a directory"), std::string::npos) << describe(bad);
    EXPECT_EQ(list_tree(dir.path()), (std::vector<std::string>{blocker, "run.yaml"}));
    fs::remove(dir.file(blocker));
    const CliResult good = run_pkscan({"run", dir.file("run.yaml"), "-o", dir.file("out.csv")});
    ASSERT_EQ(good.status, 0) << describe(good);
    EXPECT_EQ(split_lines(read_text(dir.file("out.csv"))).size(), 10u);
    EXPECT_EQ(list_tree(dir.path()), (std::vector<std::string>{"out.csv", "run.yaml"}));
  }
}

// A commit that failed half way (here: over a companion that was a non-empty directory) leaves
// its journal; while the cause stays, runs to the path fail up front (exit 2); once it is gone,
// the next run completes the old commit, writes its own result and leaves nothing else.
TEST(OutputPath, ACommitLeftHalfDoneIsCompletedByTheNextRun) {
  TempDir dir;
  const std::string out = dir.file("out.csv");
  write_text(dir.file("run.yaml"), kGridRun);
  fs::create_directory(dir.file("out.summary.csv"));
  write_text(dir.file("out.summary.csv/x"), "x");
  {
    output::OutputUnit unit(out);
    output::AtomicFile& main = unit.add(out);
    main.write("old\n", 4);
    output::AtomicFile& summary = unit.add(dir.file("out.summary.csv"));
    summary.write("old summary\n", 12);
    EXPECT_THROW(unit.commit(), Error);
  }
  ASSERT_TRUE(fs::exists(output::commit_journal_path(out)));

  const CliResult blocked = run_pkscan({"run", dir.file("run.yaml"), "-o", out});
  EXPECT_EQ(blocked.status, 2) << describe(blocked);
  EXPECT_NE(blocked.err.find("out.summary.csv\" (a file that the result"), std::string::npos)
      << describe(blocked);

  fs::remove_all(dir.file("out.summary.csv"));
  const CliResult good = run_pkscan({"run", dir.file("run.yaml"), "-o", out});
  ASSERT_EQ(good.status, 0) << describe(good);
  EXPECT_EQ(split_lines(read_text(out))[0], kCsvHeader);
  EXPECT_TRUE(temp_files(dir.path()).empty()) << "journal or temporary files left";
  // The old commit's summary went into place, and the new run (no summaries) removed it.
  EXPECT_EQ(list_tree(dir.path()), (std::vector<std::string>{"out.csv", "run.yaml"}));
}

// The limit on a name, at its boundary: the longest companion (STEM.summary.csv,
// STEM.metrics.csv: 8 bytes more than the result's name) may have exactly NAME_MAX bytes.
TEST(OutputPath, CompanionNamesMayUseTheWholeFileNameLimit) {
  TempDir dir;
  const long limit = ::pathconf(dir.path().c_str(), _PC_NAME_MAX);
  if (limit != NAME_MAX) GTEST_SKIP() << "the file system's name limit is " << limit;
  write_text(dir.file("run.yaml"), kGridRun);
  // STEM.parameters.csv, the longest companion, 11 bytes longer: limit bytes.
  const std::size_t fits = static_cast<std::size_t>(limit) - 11;
  const std::string ok = dir.file(std::string(fits - 4, 'a') + ".csv");
  const CliResult good = run_pkscan({"run", dir.file("run.yaml"), "-o", ok});
  ASSERT_EQ(good.status, 0) << describe(good);
  EXPECT_EQ(split_lines(read_text(ok)).size(), 10u);

  const std::string over = dir.file(std::string(fits - 3, 'b') + ".csv");
  const CliResult bad = run_pkscan({"run", dir.file("run.yaml"), "-o", over});
  EXPECT_EQ(bad.status, 2) << describe(bad);
  EXPECT_TRUE(one_line_error(bad)) << describe(bad);
  EXPECT_NE(bad.err.find("needs a name of " + std::to_string(limit + 1) + " bytes"),
            std::string::npos)
      << describe(bad);
  EXPECT_FALSE(fs::exists(over));
  EXPECT_EQ(list_tree(dir.path()).size(), 2u) << "run.yaml and the first result only";
}

// The bound the name check uses for the commit's own names holds for the names really made:
// a temporary file and the journal of a long target name.
TEST(OutputPath, TemporaryAndJournalNamesStayWithinTheirBound) {
  TempDir dir;
  for (const std::size_t n : {5u, 127u, 128u, 129u, 250u}) {
    const std::string target = dir.file(std::string(n - 4, 'n') + ".csv");
    const std::size_t bound = output::longest_temp_name(target);
    EXPECT_LE(bound, 191u) << n;
    const output::AtomicFile f(target);
    EXPECT_LE(fs::path(f.temp_path()).filename().string().size(), bound) << n;
    EXPECT_LE(fs::path(output::commit_journal_path(target)).filename().string().size(), bound) << n;
  }
}

// `pkscan fit` writes its estimates under the same rules: not over its dataset, not over a
// directory, checked before fitting.
TEST(OutputPath, FitNeverWritesOverItsDatasetOrADirectory) {
  TempDir dir;
  write_text(dir.file("d.csv"), kDataset);
  fs::create_directory(dir.file("est.csv"));
  for (const std::string& output :
       {dir.file("d.csv"), dir.path().string() + "/./d.csv", dir.file("est.csv")}) {
    SCOPED_TRACE(output);
    const CliResult r =
        run_pkscan({"fit", dir.file("d.csv"), "--model", "three_compartment", "--estimate", "ke",
                    "--init", "ke=0.2", "--fix",
                    "ka=1,k12=0.3,k21=0.1,v_central=10,v_peripheral=20", "--output", output});
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_TRUE(one_line_error(r)) << describe(r);
    EXPECT_NE(r.err.find("--output: \"" + output + "\""), std::string::npos) << describe(r);
    EXPECT_EQ(read_text(dir.file("d.csv")), kDataset);
    EXPECT_EQ(list_tree(dir.path()), (std::vector<std::string>{"d.csv", "est.csv"}));
  }
}

}  // namespace
}  // namespace pkscan::cli::test
