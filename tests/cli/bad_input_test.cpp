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

#include "cli/cli_test_support.hpp"

namespace pkscan::cli::test {
namespace {

// How the run file is prepared.
enum class Setup {
  kWriteYaml,   // write `yaml` to run.yaml
  kNoFile,      // write nothing: run.yaml does not exist
  kDirectory,   // run.yaml is a directory
  kUnreadable,  // write `yaml` to run.yaml and remove every permission
};

// Where the message must say the problem is.
constexpr const char* kCommandLine = "";   // a command-line error: no file or location required
constexpr const char* kFileOnly = "FILE";  // `FILE: ...`: no YAML node is involved
constexpr const char* kAnyNode = "ANY";    // `FILE:LINE:COLUMN: ...`, any line and column
// Anything else is the exact "LINE:COLUMN" of the offending node.

// Skip the case when this method/device is available (the case is about it being absent).
struct Requires {
  bool check = false;
  Method method = Method::Auto;
  Device device = Device::Auto;
};
constexpr Requires kAlways{};
constexpr Requires absent(Method m, Device d = Device::Auto) { return Requires{true, m, d}; }

struct BadInput {
  std::string name;                // test name suffix
  std::string yaml;                // run file text
  std::vector<std::string> args;   // command line; empty = {"run", "@FILE@"}
  int status;                      // expected exit status
  std::string where;               // kCommandLine, kFileOnly, kAnyNode or "LINE:COLUMN"
  std::vector<std::string> words;  // must all appear in the message
  Setup setup = Setup::kWriteYaml;
  Requires requires_absent = kAlways;
  // Only `run` sees the problem (it is about writing the output); otherwise the case is also
  // checked with `validate`, which must report the same error.
  bool run_only = false;
};

void PrintTo(const BadInput& c, std::ostream* os) { *os << c.name; }

// The base run file, line by line (see the file comment).
#define L1_TIME "time: {dt: 0.25, steps: 8}\n"
#define L2_SUBJECTS "subjects:\n"
#define L3_PARAMS \
  "  parameters: {ka: 1.2, k12: 0.4, k21: 0.11, ke: 0.25, v_central: 20, v_peripheral: 70}\n"
#define L4_DOSES "doses:\n"
#define L5_DOSE "  - {compartment: depot, time: 0, amount: 100}\n"
#define L6_OUTPUT "output: {path: @DIR@/out.csv}\n"
#define BASE_WITHOUT_OUTPUT L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE
#define BASE BASE_WITHOUT_OUTPUT L6_OUTPUT
// Line 3 with ka given per subject (three subjects).
#define L3_PARAMS_KA_LIST                                                              \
  "  parameters: {ka: [1.2, 1.0, 0.8], k12: 0.4, k21: 0.11, ke: 0.25, v_central: 20, " \
  "v_peripheral: 70}\n"
// A block-style output section (lines 6-7), for cases that add output.times on line 8.
#define BLOCK_OUTPUT "output:\n  path: @DIR@/out.csv\n"

const std::vector<BadInput>& cases() {
  static const std::vector<BadInput> all = {
      // ---- The file itself --------------------------------------------------------------------
      {"MissingRunFile", "", {}, 2, kFileOnly, {"cannot read", "No such file"}, Setup::kNoFile},
      {"UnreadableRunFile", BASE, {}, 2, kFileOnly, {"cannot read"}, Setup::kUnreadable},
      {"DirectoryAsRunFile", "", {}, 2, kFileOnly, {"directory"}, Setup::kDirectory},
      {"EmptyFile", "", {}, 2, kFileOnly, {"empty"}},
      {"FileWithOnlyComments", "# nothing here\n", {}, 2, kFileOnly, {"empty"}},
      {"YamlSyntaxUnclosedBracket",
       "time: {dt: 0.25, steps: 8}\n"
       "subjects:\n"
       "  parameters: {ka: [1.2, 0.8, k12: 0.4, k21: 0.11, ke: 0.25, v_central: 20}\n"
       "output: {path: @DIR@/out.csv}\n",
       {},
       2,
       kAnyNode,
       {"YAML syntax"}},
      {"TopLevelIsAList",
       "- time: {dt: 0.25, steps: 8}\n"
       "- subjects: 1\n",
       {},
       2,
       "1:1",
       {"mapping", "time", "subjects"}},

      // ---- Keys: unknown, duplicate, missing --------------------------------------------------
      {"UnknownTopLevelKeySuggestsTime",
       "tme: {dt: 0.25, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:1",
       {"'tme'", "did you mean 'time'"}},
      {"UnknownKeyInTime",
       "time:\n"
       "  dt: 0.25\n"
       "  step: 8\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:3",
       {"'step'", "time", "'steps'"}},
      {"DuplicateTopLevelKey",
       L1_TIME L2_SUBJECTS L3_PARAMS "time: {dt: 0.5, steps: 4}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "4:1",
       {"duplicate", "'time'", "line 1"}},
      {"DuplicateKeyInTime",
       "time:\n"
       "  dt: 0.25\n"
       "  steps: 8\n"
       "  dt: 0.5\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "4:3",
       {"duplicate", "'dt'", "time"}},
      {"DuplicateKeyInDose",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: depot, time: 0, time: 1, amount: 100}\n" L6_OUTPUT,
       {},
       2,
       "5:35",
       {"duplicate", "'time'", "doses[1]"}},
      {"MissingTime",
       L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:1",
       {"missing", "'time'"}},
      {"MissingTimeDt",
       "time: {steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:7",
       {"missing", "'dt'", "time"}},
      {"MissingSubjectsParameters",
       L1_TIME L2_SUBJECTS "  count: 3\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:3",
       {"missing", "'parameters'", "subjects"}},
      {"MissingRequiredParameterVCentral",
       L1_TIME L2_SUBJECTS
       "  parameters: {ka: 1.2, k12: 0.4, k21: 0.11, ke: 0.25, v_peripheral: 70}\n" L4_DOSES L5_DOSE
           L6_OUTPUT,
       {},
       2,
       "3:15",
       {"missing", "'v_central'", "subjects.parameters"}},
      {"UnknownParameterName",
       L1_TIME L2_SUBJECTS "  parameters: {ka: 1.2, k12: 0.4, k21: 0.11, kel: 0.25, v_central: 20, "
                           "v_peripheral: 70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:46",
       {"'kel'", "subjects.parameters", "'ke'", "v_central"}},
      {"ParameterGivenTwiceViaAlias",
       L1_TIME L2_SUBJECTS "  parameters:\n"
                           "    ka: 1.2\n"
                           "    k12: 0.4\n"
                           "    k21: 0.11\n"
                           "    ke: 0.25\n"
                           "    v_central: 20\n"
                           "    v_peripheral: 70\n"
                           "    k01: 1.0\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       kAnyNode,
       {"ka", "k01", "twice"}},
      {"UnknownKeyInDose",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: depot, time: 0, amout: 100}\n" L6_OUTPUT,
       {},
       2,
       "5:35",
       {"'amout'", "doses[1]", "'amount'"}},
      {"DoseMissingAmount",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES "  - {compartment: depot, time: 0}\n" L6_OUTPUT,
       {},
       2,
       "5:5",
       {"missing", "'amount'", "doses[1]"}},

      // ---- Wrong types ------------------------------------------------------------------------
      {"DtNotANumber",
       "time: {dt: abc, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:12",
       {"time.dt", "number", "abc"}},
      {"DtQuotedNumber",
       "time: {dt: \"0.25\", steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:12",
       {"time.dt", "number", "string"}},
      {"StepsIsAList",
       "time: {dt: 0.25, steps: [1, 2]}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:25",
       {"time.steps", "number", "list"}},
      {"ParametersNotAMapping",
       L1_TIME L2_SUBJECTS "  parameters: [1, 2]\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:15",
       {"subjects.parameters", "mapping", "v_central"}},
      {"ParameterListElementNotANumber",
       L1_TIME L2_SUBJECTS
       "  parameters: {ka: [1.2, x], k12: 0.4, k21: 0.11, ke: 0.25, v_central: 20, v_peripheral: "
       "70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:26",
       {"subjects.parameters.ka[2]", "number"}},
      {"DosesNotAList",
       L1_TIME L2_SUBJECTS L3_PARAMS
       "doses: {compartment: depot, time: 0, amount: 100}\n" L6_OUTPUT,
       {},
       2,
       "4:8",
       {"doses", "list"}},
      {"OutputTimesNotAllOrList",
       BASE_WITHOUT_OUTPUT BLOCK_OUTPUT "  times: sometimes\n",
       {},
       2,
       "8:10",
       {"output.times", "all", "list"}},

      // ---- Out-of-range values ----------------------------------------------------------------
      {"DtZero",
       "time: {dt: 0, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:12",
       {"time.dt", "> 0"}},
      {"DtNegative",
       "time: {dt: -0.25, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:12",
       {"time.dt", "> 0"}},
      {"DtNan",
       "time: {dt: .nan, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:12",
       {"time.dt", "finite"}},
      {"DtInfinite",
       "time: {dt: .inf, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:12",
       {"time.dt", "finite"}},
      {"StepsZero",
       "time: {dt: 0.25, steps: 0}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:25",
       {"time.steps", "[1, "}},
      {"StepsNotWhole",
       "time: {dt: 0.25, steps: 2.5}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:25",
       {"time.steps", "whole number"}},
      {"StepsTooLarge",
       "time: {dt: 0.25, steps: 1e15}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "1:25",
       {"time.steps", "1e15"}},
      {"NegativeRateConstant",
       L1_TIME L2_SUBJECTS "  parameters: {ka: 1.2, k12: -0.4, k21: 0.11, ke: 0.25, v_central: 20, "
                           "v_peripheral: 70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:30",
       {"subjects.parameters.k12", ">= 0"}},
      {"ZeroVolume",
       L1_TIME L2_SUBJECTS "  parameters: {ka: 1.2, k12: 0.4, k21: 0.11, ke: 0.25, v_central: 0, "
                           "v_peripheral: 70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:67",
       {"subjects.parameters.v_central", "> 0"}},
      {"ParameterListLengthMismatch",
       L1_TIME L2_SUBJECTS
       "  parameters: {ka: [1.2, 1.0, 0.8], k12: [0.4, 0.3], k21: 0.11, ke: 0.25, v_central: 20, "
       "v_peripheral: 70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       kAnyNode,
       {"subjects.parameters.k", "3 values", "one value per subject"}},
      {"CountDisagreesWithListLength",
       L1_TIME L2_SUBJECTS "  count: 4\n" L3_PARAMS_KA_LIST L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:10",
       {"subjects.count", "4", "3 values"}},
      {"CountZero",
       L1_TIME L2_SUBJECTS "  count: 0\n" L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:10",
       {"subjects.count", "[1, "}},
      {"EmptyParameterList",
       L1_TIME L2_SUBJECTS "  parameters: {ka: [], k12: 0.4, k21: 0.11, ke: 0.25, v_central: 20, "
                           "v_peripheral: 70}\n" L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:20",
       {"subjects.parameters.ka", "empty list"}},

      // ---- Doses ------------------------------------------------------------------------------
      {"DoseToUnknownCompartment",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: gut, time: 0, amount: 100}\n" L6_OUTPUT,
       {},
       2,
       "5:19",
       {"doses[1].compartment", "gut", "depot, central, peripheral"}},
      {"DoseTimeOffGrid",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: depot, time: 0.3, amount: 100}\n" L6_OUTPUT,
       {},
       2,
       "5:32",
       {"doses[1].time", "0.3", "grid", "0.25"}},
      {"NegativeDoseTime",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: depot, time: -1, amount: 100}\n" L6_OUTPUT,
       {},
       2,
       "5:32",
       {"doses[1].time", ">= 0"}},
      {"NegativeDoseAmount",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: depot, time: 0, amount: -100}\n" L6_OUTPUT,
       {},
       2,
       "5:43",
       {"doses[1].amount", ">= 0"}},
      {"InfusionWithRateAndDuration",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: central, time: 0, amount: 100, rate: 10, duration: 10}\n" L6_OUTPUT,
       {},
       2,
       kAnyNode,
       {"doses[1]", "rate", "duration", "exactly one"}},
      {"InfusionRateZero",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: central, time: 0, amount: 100, rate: 0}\n" L6_OUTPUT,
       {},
       2,
       "5:56",
       {"doses[1].rate", "> 0"}},
      {"EveryWithoutRepeat",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: depot, time: 0, amount: 100, every: 2}\n" L6_OUTPUT,
       {},
       2,
       "5:48",
       {"doses[1]", "every", "without repeat"}},
      {"RepeatWithoutEvery",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: depot, time: 0, amount: 100, repeat: 3}\n" L6_OUTPUT,
       {},
       2,
       "5:48",
       {"doses[1]", "repeat", "without every"}},
      {"EveryNotAMultipleOfDt",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: depot, time: 0, amount: 100, every: 0.3, repeat: 2}\n" L6_OUTPUT,
       {},
       2,
       "5:55",
       {"doses[1].every", "0.3", "multiple", "0.25"}},
      {"RepeatNegative",
       L1_TIME L2_SUBJECTS L3_PARAMS L4_DOSES
       "  - {compartment: depot, time: 0, amount: 100, every: 1, repeat: -1}\n" L6_OUTPUT,
       {},
       2,
       "5:66",
       {"doses[1].repeat", "[0, "}},

      // ---- Output -----------------------------------------------------------------------------
      {"OutputTimeOffGrid",
       BASE_WITHOUT_OUTPUT BLOCK_OUTPUT "  times: [0, 0.3]\n",
       {},
       2,
       "8:14",
       {"output.times[2]", "0.3", "grid", "0.25"}},
      {"OutputTimeBeyondLastGridTime",
       BASE_WITHOUT_OUTPUT BLOCK_OUTPUT "  times: [0, 100]\n",
       {},
       2,
       "8:14",
       {"output.times[2]", "100", "last grid time 2"}},
      {"OutputTimesNotIncreasing",
       BASE_WITHOUT_OUTPUT BLOCK_OUTPUT "  times: [1, 0.5]\n",
       {},
       2,
       "8:14",
       {"output.times[2]", "increasing"}},
      {"OutputTimesEmptyList",
       BASE_WITHOUT_OUTPUT BLOCK_OUTPUT "  times: []\n",
       {},
       2,
       "8:10",
       {"output.times", "empty"}},
      {"OutputPathNotCsv",
       BASE_WITHOUT_OUTPUT "output: {path: @DIR@/out.txt}\n",
       {},
       2,
       "6:16",
       {"output.path", "out.txt", ".csv"}},
      {"OutputPathInMissingDirectory",
       BASE_WITHOUT_OUTPUT "output: {path: @DIR@/no_such_dir/out.csv}\n",
       {},
       2,
       "6:16",
       {"output.path", "no_such_dir", "No such file or directory"},
       Setup::kWriteYaml,
       kAlways,
       /*run_only=*/true},
      {"OutputPathMissingAndNoOutputOption",
       BASE_WITHOUT_OUTPUT "output:\n  times: all\n",
       {},
       2,
       kAnyNode,
       {"output.path", "--output"},
       Setup::kWriteYaml,
       kAlways,
       /*run_only=*/true},
      {"OutputOptionNotCsv",
       BASE,
       {"run", "@FILE@", "--output", "@DIR@/x.txt"},
       2,
       kFileOnly,
       {"--output", "x.txt", ".csv"}},

      // ---- Names of discretizations, precisions, methods, devices, models ---------------------
      {"BadDiscretizationName",
       "discretization: rk4\n" BASE,
       {},
       2,
       "1:17",
       {"discretization", "rk4", "exact", "euler"}},
      {"BadPrecisionName",
       BASE "precision: float16\n",
       {},
       2,
       "7:12",
       {"precision", "float16", "float64", "float32"}},
      {"BadEngineMethodName",
       BASE "engine: {method: fast}\n",
       {},
       2,
       "7:18",
       {"engine.method", "fast", "auto, scan, batched, power"}},
      {"BadEngineDeviceName",
       BASE "engine: {device: gpu}\n",
       {},
       2,
       "7:18",
       {"engine.device", "gpu", "auto, cpu, cuda"}},
      {"BadModelName",
       "model: five_compartment\n" BASE,
       {},
       2,
       "1:8",
       {"model", "five_compartment", "two_compartment, three_compartment, four_compartment"}},

      // ---- Unavailable method or device (exit 3) ----------------------------------------------
      {"MethodPowerUnavailable",
       BASE "engine: {method: power}\n",
       {},
       3,
       kAnyNode,
       {"power"},
       Setup::kWriteYaml,
       absent(Method::Power)},
      {"MethodBatchedUnavailable",
       BASE "engine: {method: batched}\n",
       {},
       3,
       kAnyNode,
       {"batched"},
       Setup::kWriteYaml,
       absent(Method::Batched)},
      {"DeviceCudaUnavailable",
       BASE "engine: {device: cuda}\n",
       {},
       3,
       kAnyNode,
       {"cuda"},
       Setup::kWriteYaml,
       absent(Method::Auto, Device::Cuda)},

      // ---- Runs that cannot be done -----------------------------------------------------------
      {"EulerStepTooLongForTheRates",
       "discretization: euler\n"
       "time: {dt: 5, steps: 8}\n" L2_SUBJECTS L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       kAnyNode,
       {"euler", "dt"}},
      {"RunTooLargeToHoldInMemory",
       "time: {dt: 0.25, steps: 1000}\n" L2_SUBJECTS
       "  count: 100000000000\n" L3_PARAMS L4_DOSES L5_DOSE L6_OUTPUT,
       {},
       2,
       "3:10",
       {"too large"}},
      // Streamed (summaries only): no result is held, but the parameter table of every subject
      // is (found by tests/fuzz: it was a std::bad_alloc).
      {"StreamedRunParametersTooLargeToHoldInMemory",
       L1_TIME L2_SUBJECTS "  count: 100000000000\n" L3_PARAMS L4_DOSES L5_DOSE
                           "output: {path: @DIR@/out.csv, trajectories: false}\n",
       {},
       2,
       "3:10",
       {"too large", "parameters", "subjects"}},

      // ---- Command line -----------------------------------------------------------------------
      {"UnknownCommandLineOption",
       BASE,
       {"run", "@FILE@", "--frobnicate"},
       2,
       kCommandLine,
       {"--frobnicate"}},
      {"UnknownSubcommand", BASE, {"simulate", "@FILE@"}, 2, kCommandLine, {"simulate"}},
      {"RunWithoutFileArgument", "", {"run"}, 2, kCommandLine, {"file"}, Setup::kNoFile},
      {"ValidateWithoutFileArgument", "", {"validate"}, 2, kCommandLine, {"file"}, Setup::kNoFile},
      {"OutputOptionWithoutValue",
       BASE,
       {"run", "@FILE@", "--output"},
       2,
       kCommandLine,
       {"--output"}},
  };
  return all;
}

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

  // No output file, no temporary file.
  EXPECT_TRUE(temp_files(dir.path()).empty()) << "temporary files left behind";
  EXPECT_EQ(list_tree(dir.path()), expected_tree) << "files left in " << dir_s;
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
