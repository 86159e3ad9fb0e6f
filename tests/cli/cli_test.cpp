// The command line on good input: every example run file runs and writes the contract CSV,
// numbers round-trip, --output / output.times behave as the contract says, help and version
// work, and an unavailable device is exit status 3 (docs/cli.md).
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <pkscan/config/load.hpp>
#include <pkscan/pkscan.hpp>
#include <regex>
#include <string>
#include <vector>

#include "support/cli_test_support.hpp"

namespace pkscan::cli::test {
namespace {

// A small run whose numbers have many significant digits (dt 0.1 is not a binary fraction,
// the rates are irregular), two subjects with different parameters, bolus and infusion.
constexpr const char* kRoundTripYaml = R"(model: three_compartment
discretization: exact
time:
  dt: 0.1
  steps: 40
subjects:
  parameters:
    ka: [1.37, 0.913]
    k12: 0.417
    k21: 0.1093
    ke: 0.2571
    v_central: 19.3
    v_peripheral: 71.1
    v_depot: 1.7
doses:
  - {compartment: depot, time: 0, amount: 100}
  - {compartment: depot, time: 1.2, amount: 33.3, every: 0.7, repeat: 2}
  - {compartment: central, time: 0.5, amount: 10, rate: 7.3}
output:
  path: @DIR@/from_file.csv
  times: all
@EXTRA@)";

std::string round_trip_yaml(const TempDir& dir, const std::string& extra) {
  return replace_all(replace_all(kRoundTripYaml, "@DIR@", dir.path().string()), "@EXTRA@", extra);
}

// Parses a whole CSV field as double; fails the test if any character is left over.
double parse_double(const std::string& field, const std::string& context) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(field.c_str(), &end);
  EXPECT_TRUE(!field.empty() && end == field.c_str() + field.size() && errno == 0)
      << context << ": \"" << field << "\" is not a complete double";
  return v;
}

// Parses a whole CSV field as float; fails the test if any character is left over.
float parse_float(const std::string& field, const std::string& context) {
  errno = 0;
  char* end = nullptr;
  const float v = std::strtof(field.c_str(), &end);
  EXPECT_TRUE(!field.empty() && end == field.c_str() + field.size() && errno == 0)
      << context << ": \"" << field << "\" is not a complete float";
  return v;
}

// Number of output times of a loaded problem.
std::int64_t output_time_count(const Problem& p) {
  return p.output.all ? p.grid.steps + 1 : static_cast<std::int64_t>(p.output.steps.size());
}

// Checks the CSV at `csv_path` against pkscan::simulate of the same run file, loaded with
// load_run_file: header, row count and order, ids, times, and every number bit for bit
// (float64 read back with strtod; float32 read back with strtof, at most 9 significant digits).
void expect_csv_matches_simulate(const std::string& csv_path, const std::string& run_file) {
  ASSERT_TRUE(fs::exists(csv_path)) << csv_path << " was not written";
  const config::RunSpec spec = config::load_run_file(run_file);
  SimulateOptions options = spec.options;
  options.concentrations = false;  // as the CLI: concentrations divided at write time
  const SimulationResult result = simulate(spec.problem, options);
  const std::int64_t subjects = spec.problem.parameters.subjects();
  const std::int64_t times = output_time_count(spec.problem);
  ASSERT_EQ(result.subjects(), subjects);
  ASSERT_EQ(result.times(), times);
  const int n = result.compartments();
  ASSERT_EQ(n, 3);

  const std::vector<std::string> lines = split_lines(read_text(csv_path));
  ASSERT_FALSE(lines.empty()) << csv_path << " is empty";
  EXPECT_EQ(lines[0], kCsvHeader);
  ASSERT_EQ(static_cast<std::int64_t>(lines.size()) - 1, subjects * times)
      << "rows of " << csv_path << " (subjects " << subjects << " x times " << times << ")";

  const bool f32 = result.precision() == Precision::Float32;
  int failures = 0;
  for (std::int64_t s = 0; s < subjects && failures < 10; ++s) {
    for (std::int64_t t = 0; t < times && failures < 10; ++t) {
      const std::string& line = lines[static_cast<std::size_t>(1 + s * times + t)];
      const std::string where = csv_path + " subject " + std::to_string(s + 1) + " time index " +
                                std::to_string(t) + ": " + line;
      const std::vector<std::string> f = split_csv(line);
      if (f.size() != 8u) {
        ADD_FAILURE() << where << ": " << f.size() << " fields, want 8";
        ++failures;
        continue;
      }
      EXPECT_EQ(f[0], std::to_string(s + 1)) << where;
      EXPECT_EQ(parse_double(f[1], where), result.output_times()[static_cast<std::size_t>(t)])
          << where;
      for (int c = 0; c < n; ++c) {
        const std::string& a_text = f[static_cast<std::size_t>(2 + c)];
        const std::string& c_text = f[static_cast<std::size_t>(2 + n + c)];
        const std::string ctx = where + " compartment " + std::to_string(c);
        bool ok = true;
        if (f32) {
          const float a = static_cast<float>(result.amount(s, t, c));  // exact: stored as float
          const float conc = static_cast<float>(result.concentration(s, t, c));
          ok &= parse_float(a_text, ctx) == a;
          ok &= parse_float(c_text, ctx) == conc;
          ok &= significant_digits(a_text) <= 9 && significant_digits(c_text) <= 9;
          EXPECT_TRUE(ok) << ctx << ": amount \"" << a_text << "\" vs float " << a
                          << ", concentration \"" << c_text << "\" vs float " << conc
                          << " (float32 values must read back as the same float, <= 9 digits)";
        } else {
          const double a = result.amount(s, t, c);
          const double conc = result.concentration(s, t, c);
          ok &= parse_double(a_text, ctx) == a;
          ok &= parse_double(c_text, ctx) == conc;
          ok &= significant_digits(a_text) <= 17 && significant_digits(c_text) <= 17;
          EXPECT_TRUE(ok) << ctx << ": amount \"" << a_text << "\" vs " << a << ", concentration \""
                          << c_text << "\" vs " << conc
                          << " (float64 values must read back bit for bit, <= 17 digits)";
        }
        if (!ok) ++failures;
      }
    }
  }
}

std::vector<fs::path> example_files() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(examples_dir()))
    if (e.is_regular_file() && e.path().extension() == ".yaml") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

TEST(CliExamples, AtLeastOneExampleExists) {
  ASSERT_TRUE(fs::is_directory(examples_dir())) << examples_dir();
  EXPECT_GE(example_files().size(), 1u) << "no *.yaml in " << examples_dir();
}

TEST(CliExamples, EveryExampleRunsAndWritesTheContractCsv) {
  const std::vector<fs::path> files = example_files();
  ASSERT_GE(files.size(), 1u) << "no *.yaml in " << examples_dir();
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    TempDir dir;
    const std::string csv = dir.file("x.csv");
    const CliResult r = run_pkscan({"run", file.string(), "--output", csv});
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_EQ(r.err, "") << describe(r);
    EXPECT_EQ(list_tree(dir.path()), std::vector<std::string>{"x.csv"})
        << "only the output, no temporary files, may be left";
    EXPECT_TRUE(temp_files(dir.path()).empty());
    expect_csv_matches_simulate(csv, file.string());
  }
}

TEST(CliExamples, EveryExampleValidatesAndWritesNothing) {
  const std::vector<fs::path> files = example_files();
  ASSERT_GE(files.size(), 1u) << "no *.yaml in " << examples_dir();
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    const config::RunSpec spec = config::load_run_file(file.string());
    const bool existed = !spec.output_path.empty() && fs::exists(spec.output_path);
    const CliResult r = run_pkscan({"validate", file.string()});
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_EQ(r.err, "") << describe(r);
    EXPECT_NE(r.out.find(file.string()), std::string::npos) << describe(r);
    if (!spec.output_path.empty() && !existed) {
      EXPECT_FALSE(fs::exists(spec.output_path)) << "validate wrote " << spec.output_path;
    }
  }
}

TEST(Cli, ValidateWritesNoFile) {
  TempDir dir;
  const std::string run_file = dir.file("run.yaml");
  write_text(run_file, round_trip_yaml(dir, ""));
  const CliResult r = run_pkscan({"validate", run_file});
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.err, "") << describe(r);
  EXPECT_EQ(list_tree(dir.path()), std::vector<std::string>{"run.yaml"})
      << "validate must not create output.path or temporary files";
}

TEST(Cli, HelpExitsZeroAndMentionsExitStatuses) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--help"}, std::vector<std::string>{"run", "--help"},
        std::vector<std::string>{"validate", "--help"}}) {
    SCOPED_TRACE(args.size() == 1 ? args[0] : args[0] + " " + args[1]);
    const CliResult r = run_pkscan(args);
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_EQ(r.err, "") << describe(r);
    const std::size_t at = r.out.find("Exit status");
    ASSERT_NE(at, std::string::npos) << describe(r);
    const std::string statuses = r.out.substr(at);
    for (const char* code : {"0", "1", "2", "3"})
      EXPECT_TRUE(std::regex_search(statuses, std::regex(std::string("\\b") + code + "\\b")))
          << "exit status " << code << " not described: " << statuses;
    EXPECT_NE(statuses.find("bad input"), std::string::npos) << statuses;
    EXPECT_NE(statuses.find("not available"), std::string::npos) << statuses;
    // The usage line names the program (and the subcommand).
    const std::string usage =
        args.size() == 1 ? "Usage: pkscan [OPTIONS]" : "Usage: pkscan " + args[0];
    EXPECT_NE(r.out.find(usage), std::string::npos) << r.out;
  }
}

TEST(Cli, HelpRefersToNothingOutsideTheProject) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--help"}, std::vector<std::string>{"fit", "--help"},
        std::vector<std::string>{"plot", "--help"}}) {
    const CliResult r = run_pkscan(args);
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_EQ(r.out.find("shared/"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("../"), std::string::npos) << r.out;
  }
}

TEST(Cli, VersionExitsZeroAndPrintsTheVersion) {
  const CliResult r = run_pkscan({"--version"});
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.err, "") << describe(r);
  EXPECT_NE(r.out.find(PKSCAN_VERSION_STRING), std::string::npos) << describe(r);
}

TEST(Cli, NoSubcommandExitsTwoWithOneLine) {
  const CliResult r = run_pkscan({});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_EQ(r.out, "") << describe(r);
  EXPECT_EQ(r.err.rfind("pkscan: error: ", 0), 0u) << describe(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << describe(r);
  EXPECT_EQ(r.err.back(), '\n') << describe(r);
}

TEST(Cli, Float64NumbersRoundTrip) {
  TempDir dir;
  const std::string run_file = dir.file("run.yaml");
  write_text(run_file, round_trip_yaml(dir, "precision: float64\n"));
  const CliResult r = run_pkscan({"run", run_file});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.err, "") << describe(r);
  expect_csv_matches_simulate(dir.file("from_file.csv"), run_file);
  // At least some numbers need many digits (so the test would catch "%g"-style truncation).
  const std::vector<std::string> lines = split_lines(read_text(dir.file("from_file.csv")));
  ASSERT_GE(lines.size(), 3u);
  int max_digits = 0;
  for (const std::string& f : split_csv(lines[2]))
    max_digits = std::max(max_digits, significant_digits(f));
  EXPECT_GE(max_digits, 15) << lines[2];
  EXPECT_TRUE(temp_files(dir.path()).empty());
}

TEST(Cli, Float32NumbersRoundTripAsFloat) {
  TempDir dir;
  const std::string run_file = dir.file("run.yaml");
  write_text(run_file, round_trip_yaml(dir, "precision: float32\n"));
  const config::RunSpec spec = config::load_run_file(run_file);
  ASSERT_EQ(spec.options.precision, Precision::Float32);
  const CliResult r = run_pkscan({"run", run_file});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.err, "") << describe(r);
  expect_csv_matches_simulate(dir.file("from_file.csv"), run_file);
  EXPECT_TRUE(temp_files(dir.path()).empty());
}

TEST(Cli, OutputOptionOverridesOutputPath) {
  TempDir dir;
  const std::string run_file = dir.file("run.yaml");
  write_text(run_file, round_trip_yaml(dir, ""));
  const std::string csv = dir.file("override.csv");
  const CliResult r = run_pkscan({"run", run_file, "--output", csv});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(fs::exists(csv)) << describe(r);
  EXPECT_FALSE(fs::exists(dir.file("from_file.csv"))) << "output.path was written despite --output";
  EXPECT_EQ(list_tree(dir.path()), (std::vector<std::string>{"override.csv", "run.yaml"}));
  expect_csv_matches_simulate(csv, run_file);
}

TEST(Cli, OutputTimesListWritesOnlyThoseTimes) {
  TempDir dir;
  const std::string csv = dir.file("out.csv");
  const std::string body = R"(time: {dt: 0.25, steps: 16}
subjects:
  parameters: {ka: [1.2, 0.8], k12: 0.4, k21: 0.11, ke: 0.25, v_central: 20, v_peripheral: 70}
doses:
  - {compartment: depot, time: 0, amount: 100}
  - {compartment: central, time: 0.5, amount: 20, duration: 1.75}
output:
  path: )" + csv + "\n";
  const std::string sparse_file = dir.file("sparse.yaml");
  write_text(sparse_file, body + "  times: [0, 1.5, 3]\n");
  const std::string full_file = dir.file("full.yaml");
  write_text(full_file, body + "  times: all\n");

  const CliResult r = run_pkscan({"run", sparse_file});
  ASSERT_EQ(r.status, 0) << describe(r);
  expect_csv_matches_simulate(csv, sparse_file);

  const std::vector<std::string> lines = split_lines(read_text(csv));
  ASSERT_EQ(lines.size(), 1u + 2u * 3u) << read_text(csv);
  const std::vector<std::string> want_ids = {"1", "1", "1", "2", "2", "2"};
  const std::vector<double> want_times = {0, 1.5, 3, 0, 1.5, 3};
  for (std::size_t i = 0; i < 6; ++i) {
    const std::vector<std::string> f = split_csv(lines[i + 1]);
    ASSERT_EQ(f.size(), 8u) << lines[i + 1];
    EXPECT_EQ(f[0], want_ids[i]) << lines[i + 1];
    EXPECT_EQ(parse_double(f[1], lines[i + 1]), want_times[i]) << lines[i + 1];
  }

  // The selected rows hold the same states as the full grid at steps 0, 6 and 12.
  const config::RunSpec full = config::load_run_file(full_file);
  SimulateOptions options = full.options;
  options.concentrations = false;
  const SimulationResult all = simulate(full.problem, options);
  const std::int64_t steps[] = {0, 6, 12};
  for (std::int64_t s = 0; s < 2; ++s) {
    for (std::int64_t k = 0; k < 3; ++k) {
      const std::vector<std::string> f = split_csv(lines[static_cast<std::size_t>(1 + s * 3 + k)]);
      for (int c = 0; c < 3; ++c) {
        const double want = all.amount(s, steps[k], c);
        const double got = parse_double(f[static_cast<std::size_t>(2 + c)], "sparse row");
        EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::fabs(want)))
            << "subject " << s + 1 << " step " << steps[k] << " compartment " << c;
      }
    }
  }
}

TEST(Cli, UnavailableDeviceExitsThreeWithOneLineNamingCuda) {
  if (cuda_device_count() > 0)
    GTEST_SKIP() << "a CUDA device is present; device: cuda is available";
  TempDir dir;
  const std::string run_file = dir.file("run.yaml");
  write_text(run_file, round_trip_yaml(dir, "engine: {device: cuda}\n"));
  const CliResult r = run_pkscan({"run", run_file});
  EXPECT_EQ(r.status, 3) << describe(r);
  EXPECT_EQ(r.out, "") << describe(r);
  EXPECT_EQ(r.err.rfind("pkscan: error: ", 0), 0u) << describe(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << describe(r);
  EXPECT_NE(r.err.find("cuda"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find(run_file), std::string::npos) << describe(r);
  EXPECT_EQ(list_tree(dir.path()), std::vector<std::string>{"run.yaml"}) << "no output may be left";

  const CliResult v = run_pkscan({"validate", run_file});
  EXPECT_EQ(v.status, 3) << describe(v);
}

}  // namespace
}  // namespace pkscan::cli::test
