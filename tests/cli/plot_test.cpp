// `pkscan plot`: PNGs of the asked size from single- and multi-subject CSVs, summary CSVs, HDF5
// results and on a log axis; bad input is exit status 2 with one line, a missing gnuplot 3, a
// failing gnuplot 1 with its error line; no temporary file is ever left behind.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <pkscan/output/sink.hpp>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

#include "cli/plot_test_support.hpp"
#include "support/cli_test_support.hpp"

namespace pkscan::cli::test {
namespace {

// The CSV of one subject: a one-compartment-like curve in the contract's columns.
std::string single_subject_csv() {
  std::string s =
      "id,time,amount_depot,amount_central,amount_peripheral,conc_depot,conc_central,"
      "conc_peripheral\n";
  const double c[] = {0, 2.5, 3.75, 3.25, 2.5, 1.75, 1.25, 0.875};
  for (int i = 0; i < 8; ++i) {
    const std::string t = std::to_string(i);
    const std::string v = std::to_string(c[i]);
    s += "1," + t + ",0," + v + ",0,0," + v + ",0\n";
  }
  return s;
}

// `subjects` subjects with 5 times each, id 1..subjects, plus a replicate column.
std::string multi_subject_csv(int subjects) {
  std::string s =
      "id,time,amount_depot,amount_central,amount_peripheral,conc_depot,conc_central,"
      "conc_peripheral,replicate\n";
  for (int id = 1; id <= subjects; ++id)
    for (int t = 0; t < 5; ++t) {
      const std::string v = std::to_string((t + 1) * 0.5 * id);
      s += std::to_string(id) + "," + std::to_string(t) + ",1," + v + ",0.5,1," + v + ",0.25,1\n";
    }
  return s;
}

// A summary CSV as the CSV sink writes it (percentiles 5, 50, 95), with a zero first row.
std::string summary_csv() {
  std::string s =
      "time,mean_conc_depot,mean_conc_central,mean_conc_peripheral,"
      "p5_conc_depot,p5_conc_central,p5_conc_peripheral,"
      "p50_conc_depot,p50_conc_central,p50_conc_peripheral,"
      "p95_conc_depot,p95_conc_central,p95_conc_peripheral\n";
  for (int t = 0; t < 6; ++t) {
    const double m = t == 0 ? 0 : 4.0 / t;
    s += std::to_string(t * 0.5);
    for (int rep = 0; rep < 3; ++rep) s += "," + std::to_string(m);  // mean
    for (double f : {0.5, 1.0, 2.0})                                 // p5, p50, p95
      for (int c = 0; c < 3; ++c) s += "," + std::to_string(m * f);
    s += "\n";
  }
  return s;
}

TEST(Plot, SingleSubjectCsv) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  write_text(dir.file("one.csv"), single_subject_csv());
  expect_png(dir, {dir.file("one.csv"), "-o", dir.file("one.png")}, dir.file("one.png"), 800, 500,
             "1 subject, conc_central");
}

TEST(Plot, MultiSubjectCsvOfTheAskedSize) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  write_text(dir.file("pop.csv"), multi_subject_csv(4));
  expect_png(dir,
             {dir.file("pop.csv"), "-o", dir.file("pop.png"), "--width", "640", "--height", "360",
              "--compartment", "peripheral", "--title", "it's {a} title_with^specials @x"},
             dir.file("pop.png"), 640, 360, "4 subjects, conc_peripheral");
}

TEST(Plot, MoreSubjectsThanTheLimitAreTruncated) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  write_text(dir.file("pop.csv"), multi_subject_csv(12));
  expect_png(dir, {dir.file("pop.csv"), "-o", dir.file("pop.png"), "--max-subjects", "5"},
             dir.file("pop.png"), 800, 500, "first 5 of 12 subjects, conc_central");
}

TEST(Plot, SummaryCsvDrawsMedianAndBand) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  write_text(dir.file("pop.summary.csv"), summary_csv());
  expect_png(dir, {dir.file("pop.summary.csv"), "-o", dir.file("s.png")}, dir.file("s.png"), 800,
             500, "median and percentiles 5-95, conc_central");
}

TEST(Plot, SummaryNextToTheTrajectoriesIsPreferred) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  write_text(dir.file("pop.csv"), multi_subject_csv(3));
  write_text(dir.file("pop.summary.csv"), summary_csv());
  expect_png(dir, {dir.file("pop.csv"), "-o", dir.file("s.png")}, dir.file("s.png"), 800, 500,
             "median and percentiles 5-95");
}

// A commit journal next to the trajectories means a commit was cut short (SIGKILL between two
// renames): the summary may come from another run, so only the trajectories are drawn; a run
// to the same path then completes the commit and removes the journal.
TEST(Plot, SummaryOfAnInterruptedCommitIsNotPaired) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  write_text(dir.file("pop.csv"), multi_subject_csv(3));
  write_text(dir.file("pop.summary.csv"), summary_csv());
  write_text(dir.file(".pop.csv.pkscan-commit"), "pkscan-commit 1\nowner other-host 1\nend\n");
  const CliResult r = run_pkscan({"plot", dir.file("pop.csv"), "-o", dir.file("s.png")});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_NE(r.out.find("(800x500, 3 subjects, conc_central)"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir.file("s.png")));
}

TEST(Plot, LogScaleSkipsNonPositiveValues) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  write_text(dir.file("pop.summary.csv"), summary_csv());  // first row is all zeros
  write_text(dir.file("one.csv"), single_subject_csv());   // first concentration is 0
  expect_png(dir, {dir.file("pop.summary.csv"), "-o", dir.file("s.png"), "--log"},
             dir.file("s.png"), 800, 500, "median and percentiles 5-95, conc_central, log scale");
  expect_png(dir, {dir.file("one.csv"), "-o", dir.file("o.png"), "--log", "--height", "300"},
             dir.file("o.png"), 800, 300, "1 subject, conc_central, log scale");
}

TEST(Plot, ReplacesAnExistingImage) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  write_text(dir.file("one.csv"), single_subject_csv());
  write_text(dir.file("one.png"), "old");
  expect_png(dir, {dir.file("one.csv"), "-o", dir.file("one.png"), "--width", "300"},
             dir.file("one.png"), 300, 500, "1 subject");
}

// An HDF5 result written by the sink: with a summary (median and band) and without (subjects).
void write_h5(const std::string& path, bool with_summary) {
  Problem p;
  p.grid = {0.5, 12};
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, 3);
  for (const char* k : {"ka", "k12", "k21", "ke"}) p.parameters.set_all(k, 0.3);
  p.parameters.set("ka", 1, 1.1);
  p.parameters.set_all("v_central", 10);
  p.parameters.set_all("v_peripheral", 30);
  p.doses.push_back({0, 0.0, 100.0});
  const SimulationResult r = simulate(p);
  RunLayout l;
  l.model = p.parameters.info_ptr();
  l.times = r.output_times();
  l.rows = 3;
  const std::unique_ptr<ResultSink> sink = output::make_sink(path, l);
  Chunk c;
  c.result = &r;
  c.parameters = p.parameters.values().data();
  sink->write(c);
  if (with_summary) {
    TimeSummaryTable t;
    t.times = l.times;
    t.percentiles = {10, 50, 90};
    t.compartments = 3;
    t.count = 3;
    for (std::size_t i = 0; i < t.times.size(); ++i)
      for (int k = 0; k < 3; ++k) {
        t.mean.push_back(1.0 + static_cast<double>(i));
        for (double f : {0.5, 1.0, 1.5}) t.quantiles.push_back(f * (1.0 + static_cast<double>(i)));
      }
    sink->write_summary(t);
  }
  sink->commit();
}

TEST(Plot, Hdf5WithAndWithoutSummary) {
  REQUIRE_GNUPLOT();
  TempDir dir;
  write_h5(dir.file("s.h5"), true);
  write_h5(dir.file("t.hdf5"), false);
  expect_png(dir, {dir.file("s.h5"), "-o", dir.file("s.png")}, dir.file("s.png"), 800, 500,
             "median and percentiles 10-90, conc_central");
  expect_png(dir, {dir.file("t.hdf5"), "-o", dir.file("t.png"), "--log", "--max-subjects", "2"},
             dir.file("t.png"), 800, 500, "first 2 of 3 subjects, conc_central, log scale");
}

// ---- Errors -------------------------------------------------------------------------------------

TEST(PlotErrors, BadInputIsExitStatus2) {
  TempDir dir;
  const std::string png = dir.file("x.png");
  write_text(dir.file("garbage.csv"), "hello,world\n1,2\n");
  write_text(dir.file("empty.csv"), "");
  write_text(dir.file("nodata.csv"), "id,time,amount_central,conc_central\n");
  write_text(dir.file("badnum.csv"), "id,time,amount_central,conc_central\n1,0,1,1\n1,0.5,1,abc\n");
  write_text(dir.file("short.csv"), "id,time,amount_central,conc_central\n1,0,1\n");
  write_text(dir.file("one.csv"), single_subject_csv());
  write_text(dir.file("fake.h5"), "not hdf5 at all");
  write_text(dir.file("zeros.csv"), "id,time,amount_central,conc_central\n1,0,0,0\n1,1,0,0\n");
  expect_error(dir, {dir.file("missing.csv"), "-o", png}, 2,
               "cannot read the result file: No such file or directory");
  expect_error(dir, {dir.file("garbage.csv"), "-o", png}, 2, "but a pkscan result starts with");
  expect_error(dir, {dir.file("empty.csv"), "-o", png}, 2, "the file is empty");
  expect_error(dir, {dir.file("nodata.csv"), "-o", png}, 2, "no data rows");
  expect_error(dir, {dir.file("badnum.csv"), "-o", png}, 2,
               "line 3: column conc_central is \"abc\", but must be a number");
  expect_error(dir, {dir.file("short.csv"), "-o", png}, 2, "line 2 has 3 fields");
  expect_error(dir, {dir.file("one.csv"), "-o", png, "--compartment", "gut"}, 2,
               "--compartment is \"gut\", but must be one of: depot, central, peripheral");
  expect_error(dir, {dir.file("one.csv"), "-o", dir.file("x.jpg")}, 2, "must end in .png");
  expect_error(dir, {dir.file("one.csv"), "-o", dir.file("no/such/dir/x.png")}, 2,
               "--output: cannot create");
  expect_error(dir, {dir.file("one.csv"), "-o", png, "--width", "5"}, 2, "--width");
  expect_error(dir, {dir.file("one.csv")}, 2, "--output");
  expect_error(dir, {dir.file("fake.h5"), "-o", png}, 2, "not an HDF5 file");
  expect_error(dir, {dir.file("missing.h5"), "-o", png}, 2, "cannot read the result file");
  expect_error(dir, {dir.file("zeros.csv"), "-o", png, "--log"}, 2,
               "no positive concentrations of central to draw on a log axis");
}

TEST(PlotErrors, TruncatedHdf5IsBadInputAndHdf5PrintsNothing) {
  TempDir dir;
  write_h5(dir.file("ok.h5"), true);
  const std::string bytes = read_text(dir.file("ok.h5"));
  write_text(dir.file("cut.h5"), bytes.substr(0, bytes.size() / 3));  // valid signature only
  ::testing::internal::CaptureStderr();
  const CliResult r = run_pkscan({"plot", dir.file("cut.h5"), "-o", dir.file("x.png")});
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // nothing from HDF5 itself
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_NE(r.err.find("HDF5"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
}

TEST(PlotErrors, MissingGnuplotIsExitStatus3) {
  TempDir dir;
  write_text(dir.file("one.csv"), single_subject_csv());
  {
    const ScopedEnv named("PKSCAN_GNUPLOT", dir.file("nowhere/gnuplot").c_str());
    expect_error(dir, {dir.file("one.csv"), "-o", dir.file("x.png")}, 3,
                 "pkscan: error: gnuplot not found; install gnuplot-nox");
  }
  {
    const ScopedEnv unnamed("PKSCAN_GNUPLOT", nullptr);
    const ScopedEnv path("PATH", dir.file("empty-bin").c_str());
    expect_error(dir, {dir.file("one.csv"), "-o", dir.file("x.png")}, 3,
                 "pkscan: error: gnuplot not found; install gnuplot-nox\n");
  }
}

TEST(PlotErrors, FailingGnuplotIsExitStatus1WithItsErrorLine) {
  TempDir dir;
  write_text(dir.file("one.csv"), single_subject_csv());
  const std::string fake = dir.file("fake-gnuplot");
  write_text(fake,
             "#!/bin/sh\n"
             "echo '' >&2\n"
             "echo '         plot $x' >&2\n"
             "echo '\"plot.gp\" line 3: fake failure for the test' >&2\n"
             "echo 'second line' >&2\n"
             "exit 1\n");
  ASSERT_EQ(::chmod(fake.c_str(), 0755), 0);
  const ScopedEnv named("PKSCAN_GNUPLOT", fake.c_str());
  expect_error(dir, {dir.file("one.csv"), "-o", dir.file("x.png")}, 1,
               "gnuplot failed: \"plot.gp\" line 3: fake failure for the test\n");
  // A gnuplot that succeeds without writing the image is a failure too.
  write_text(fake, "#!/bin/sh\nexit 0\n");
  expect_error(dir, {dir.file("one.csv"), "-o", dir.file("x.png")}, 1,
               "gnuplot failed: it wrote no image");
}

TEST(PlotErrors, UnknownCommandListsPlot) {
  const CliResult r = run_pkscan({"plott"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find(", plot"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pkscan::cli::test
