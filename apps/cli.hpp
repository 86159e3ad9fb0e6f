#pragma once
// The pkscan command line, callable in-process (tests run it without spawning a process).
#include <ostream>
#include <string>
#include <vector>

namespace pkscan::cli {

// Exit statuses (also in `pkscan --help` and docs/cli.md).
enum ExitStatus : int {
  kExitOk = 0,           // success
  kExitFailure = 1,      // any other failure (I/O error writing output, device error)
  kExitBadInput = 2,     // unreadable file, YAML syntax, unknown/duplicate/missing key, bad value
  kExitUnavailable = 3,  // requested method or device not available in this build or machine
};

// `s` with its line breaks as spaces: an error message on the one line errors are printed on.
inline std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// Runs `pkscan args...` (args excludes the program name). Normal output goes to `out`, the
// one-line error messages to `err`. Never throws, never exits.
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace pkscan::cli
