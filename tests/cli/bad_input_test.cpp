// The command line on bad input (docs/cli.md, exit statuses): every case exits
// with 2 (bad input) or 3 (method/device unavailable), prints exactly one line
// `pkscan: error: FILE:LINE:COLUMN: ...` naming the key and the accepted values, and leaves no
// output file and no temporary file behind. Cases whose run file is at fault are run with both
// `pkscan run` and `pkscan validate`.
//
// Each case is a run file (written to a fresh temporary directory as run.yaml; `@DIR@` in its
// text is that directory) and the command-line arguments (`@FILE@` = the run file, `@DIR@` =
// the directory). The base run file used by most cases is
//
//   1 time: {dt: 0.25, steps: 8}
//   2 subjects:
//   3   parameters: {ka: 1.2, k12: 0.4, k21: 0.11, ke: 0.25, v_central: 20, v_peripheral: 70}
//   4 doses:
//   5   - {compartment: depot, time: 0, amount: 100}
//   6 output: {path: @DIR@/out.csv}
//
// and each case changes one thing in it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <ostream>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

#include "support/bad_input_cases.hpp"
#include "support/cli_test_support.hpp"

namespace pkscan::cli::test {
namespace {

// Parses "LINE:COLUMN: " right after `file` + ":" in `err`; returns "" when absent.
std::string location_after(const std::string& err, const std::string& file) {
  const std::size_t at = err.find(file + ":");
  if (at == std::string::npos) return "";
  std::size_t p = at + file.size() + 1;
  const std::size_t start = p;
  auto digits = [&] {
    const std::size_t from = p;
    while (p < err.size() && std::isdigit(static_cast<unsigned char>(err[p]))) ++p;
    return p > from;
  };
  if (!digits() || p >= err.size() || err[p] != ':') return "";
  ++p;
  if (!digits() || err.compare(p, 2, ": ") != 0) return "";
  return err.substr(start, p - start);
}

// Runs `pkscan command` on case `c` (`command` empty: the case's own arguments) and checks the
// exit status, the one-line message (prefix, file, LINE:COLUMN, key words) and that no output
// or temporary file is left.
void check_bad_input(const BadInput& c, const std::string& command) {
  if (c.requires_absent.check) {
    std::string why;
    if (is_backend_available(c.requires_absent.method, c.requires_absent.device, &why))
      GTEST_SKIP() << "method " << to_string(c.requires_absent.method) << " on device "
                   << to_string(c.requires_absent.device) << " is available in this build";
  }
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string dir_s = dir.path().string();
  const std::string file = dir.file("run.yaml");
  const std::string yaml = replace_all(c.yaml, "@DIR@", dir_s);
  std::vector<std::string> expected_tree;
  switch (c.setup) {
    case Setup::kWriteYaml:
      write_text(file, yaml);
      expected_tree = {"run.yaml"};
      break;
    case Setup::kNoFile:
      break;
    case Setup::kDirectory:
      ASSERT_TRUE(fs::create_directory(file));
      expected_tree = {"run.yaml"};
      break;
    case Setup::kUnreadable: {
      write_text(file, yaml);
      fs::permissions(file, fs::perms::none);
      expected_tree = {"run.yaml"};
      if (std::ifstream(file).good())
        GTEST_SKIP() << "the file stays readable after chmod 000 (running as root?)";
      break;
    }
  }
  for (const auto& [name, content] : c.files) {
    const std::string path = dir.file(name);
    if (content == "/")
      ASSERT_TRUE(fs::create_directory(path));
    else if (content.rfind("->", 0) == 0)
      fs::create_symlink(content.substr(2), path);
    else if (content.rfind("=>", 0) == 0)
      fs::create_hard_link(dir.file(content.substr(2)), path);
    else
      write_text(path, replace_all(content, "@DIR@", dir_s));
    expected_tree.push_back(name);
  }
  std::sort(expected_tree.begin(), expected_tree.end());
  ASSERT_FALSE(::testing::Test::HasFatalFailure());

  std::vector<std::string> args = c.args;
  if (args.empty()) args = {command.empty() ? "run" : command, "@FILE@"};
  for (std::string& a : args) a = replace_all(replace_all(a, "@FILE@", file), "@DIR@", dir_s);

  std::string shown_args;
  for (const std::string& a : args) shown_args += " " + a;
  SCOPED_TRACE("pkscan" + shown_args + "\n--- run file ---\n" + yaml + "----------------");

  const CliResult r = run_pkscan(args);

  // Exit status and the shape of the message: exactly one line, with the prefix.
  EXPECT_EQ(r.status, c.status) << describe(r);
  EXPECT_EQ(r.out, "") << describe(r);
  EXPECT_EQ(r.err.rfind("pkscan: error: ", 0), 0u) << describe(r);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1)
      << "want exactly one line; " << describe(r);
  EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n') << describe(r);

  // Where: the file and, where a YAML node is involved, its line and column.
  const std::string loc = location_after(r.err, file);
  if (c.where == kFileOnly) {
    EXPECT_EQ(r.err.rfind("pkscan: error: " + file + ": ", 0), 0u)
        << "want `pkscan: error: " << file << ": ...`; " << describe(r);
  } else if (c.where == kAnyNode) {
    EXPECT_NE(loc, "") << "want `" << file << ":LINE:COLUMN: ...`; " << describe(r);
  } else if (c.where != kCommandLine) {
    EXPECT_EQ(loc, c.where) << "want `" << file << ":" << c.where << ": ...`; " << describe(r);
  }

  // What: the key words of the case (key names, accepted values).
  for (const std::string& w : c.words)
    EXPECT_NE(r.err.find(w), std::string::npos) << "message lacks \"" << w << "\"; " << describe(r);

  // No output file, no temporary file; the run file and every other input as they were.
  EXPECT_TRUE(temp_files(dir.path()).empty()) << "temporary files left behind";
  EXPECT_EQ(list_tree(dir.path()), expected_tree) << "files left in " << dir_s;
  if (c.setup == Setup::kWriteYaml) {
    EXPECT_EQ(read_text(file), yaml) << "the run file changed";
  }
  for (const auto& [name, content] : c.files) {
    const std::string path = dir.file(name);
    if (content == "/")
      EXPECT_TRUE(fs::is_directory(fs::symlink_status(path))) << name;
    else if (content.rfind("->", 0) == 0)
      EXPECT_TRUE(fs::is_symlink(path)) << name;
    else if (content.rfind("=>", 0) == 0)
      EXPECT_TRUE(fs::equivalent(path, dir.file(content.substr(2)))) << name;
    else
      EXPECT_EQ(read_text(path), replace_all(content, "@DIR@", dir_s)) << name << " changed";
  }
}

// Cases whose run file is at fault: `validate` must report them exactly as `run` does.
std::vector<BadInput> validate_cases() {
  std::vector<BadInput> v;
  for (const BadInput& c : cases())
    if (c.args.empty() && !c.run_only) v.push_back(c);
  return v;
}

std::string case_name(const ::testing::TestParamInfo<BadInput>& info) { return info.param.name; }

class BadInputRun : public ::testing::TestWithParam<BadInput> {};
TEST_P(BadInputRun, FailsWithOneLineNamingTheProblemAndLeavesNoFile) {
  check_bad_input(GetParam(), "run");
}
INSTANTIATE_TEST_SUITE_P(Cli, BadInputRun, ::testing::ValuesIn(cases()), case_name);

class BadInputValidate : public ::testing::TestWithParam<BadInput> {};
TEST_P(BadInputValidate, FailsWithOneLineNamingTheProblemAndLeavesNoFile) {
  check_bad_input(GetParam(), "validate");
}
INSTANTIATE_TEST_SUITE_P(Cli, BadInputValidate, ::testing::ValuesIn(validate_cases()), case_name);

TEST(BadInputCases, AtLeastThirtyDistinctCases) {
  std::vector<std::string> names, inputs;
  for (const BadInput& c : cases()) {
    names.push_back(c.name);
    std::string key = c.yaml + "\x1f";
    for (const std::string& a : c.args) key += a + "\x1f";
    key += std::to_string(static_cast<int>(c.setup));
    for (const auto& [name, content] : c.files) key += "\x1f" + name + "=" + content;
    inputs.push_back(key);
  }
  EXPECT_GE(cases().size(), 30u);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end()) << "duplicate case name";
  std::sort(inputs.begin(), inputs.end());
  EXPECT_EQ(std::adjacent_find(inputs.begin(), inputs.end()), inputs.end())
      << "two cases have the same input";
}

}  // namespace
}  // namespace pkscan::cli::test
