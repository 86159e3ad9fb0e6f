#pragma once
// The bad-input cases of tests/cli/bad_input_test.cpp: the base run file's lines, the case type and
// the three tables of cases (tests/cli/bad_input_cases.cpp, bad_input_output_cases.cpp,
// bad_input_run_cases.cpp).
#include <ostream>
#include <pkscan/pkscan.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pkscan::cli::test {

// The base run file, line by line (see bad_input_test.cpp's file comment).
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
// A dataset run (lines 1-3) on the dataset DATASET (the file d.csv of the cases holds DS_CSV).
#define DS_RUN(DATASET) \
  "subjects:\n"         \
  "  dataset: " DATASET \
  "\n"                  \
  "  parameters: {ka: 1, ke: 0.2, k12: 0.3, k21: 0.1, v_central: 10, v_peripheral: 20}\n"
#define DS_CSV "ID,TIME,AMT,CMT,EVID\n1,0,100,1,1\n1,2,.,2,0\n"
// A population run (lines 1-9) with the covariates file COVARIATES (cov.csv: COV_CSV) and
// EFFECTS (the end of line 9), then the doses (lines 10-11).
#define POP_RUN(COVARIATES, EFFECTS)                                                             \
  L1_TIME L2_SUBJECTS                                                                            \
      "  population:\n"                                                                          \
      "    count: 2\n"                                                                           \
      "    seed: 1\n"                                                                            \
      "    typical: {ka: 1.2, k12: 0.4, k21: 0.11, ke: 0.25, v_central: 20, v_peripheral: 70}\n" \
      "    covariates:\n"                                                                        \
      "      file: " COVARIATES                                                                  \
      "\n"                                                                                       \
      "      effects: " EFFECTS "\n" L4_DOSES L5_DOSE
#define COV_EFFECT "[{parameter: ke, covariate: wt, type: power, coefficient: 0.75, reference: 70}]"
#define COV_CSV "wt\n70\n80\n"

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
  // More entries of the directory, made before the run (name -> content; `@DIR@` in a content
  // is the directory): "->TARGET" makes a symlink to TARGET, "=>TARGET" a hard link to TARGET,
  // "/" a directory, anything else a file. Each must be left as it was (files byte for byte).
  std::vector<std::pair<std::string, std::string>> files = {};
};

inline void PrintTo(const BadInput& c, std::ostream* os) { *os << c.name; }

// The cases about the run file itself, its keys, their types and ranges (bad_input_cases.cpp).
std::vector<BadInput> run_file_cases();
// The cases about doses and the output (bad_input_output_cases.cpp).
std::vector<BadInput> output_cases();
// The cases about datasets, keys a run does not use, names, paths and the command line
// (bad_input_run_cases.cpp).
std::vector<BadInput> run_cases();

// Every case, built once: the three tables in turn.
const std::vector<BadInput>& cases();

}  // namespace pkscan::cli::test
