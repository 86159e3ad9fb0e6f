#pragma once
// The bad-input cases of bad_input_test.cpp (their table: bad_input_cases.cpp).
#include <ostream>
#include <pkscan/pkscan.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pkscan::cli::test {

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

// Every case, built once.
const std::vector<BadInput>& cases();

}  // namespace pkscan::cli::test
