#pragma once
// The pkscan command line, callable in-process (tests run it without spawning a process).
#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace pkscan {
struct PopulationRunOptions;
namespace config {
struct RunSpec;
struct RunReport;
}  // namespace config
}  // namespace pkscan

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

// Writes "pkscan: error: TEXT" and a line break to `err` in one insertion (one write(2) on the
// program's stderr), so that no other output (a rank's under mpirun, the launcher's) lands inside
// the line.
inline void error_line(std::ostream& err, const std::string& text) {
  err << ("pkscan: error: " + text + "\n");
  err.flush();
}

// How `pkscan run` runs a run file: config::run, or the program's MPI split (mpi_main.cpp).
using RunFunction = std::function<config::RunReport(const config::RunSpec&, const std::string&,
                                                    const PopulationRunOptions&)>;

// Runs `pkscan args...` (args excludes the program name). Normal output goes to `out`, the
// one-line error messages to `err`. `runner` runs `pkscan run`'s run (empty: config::run).
// Never throws, never exits.
int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
            const RunFunction& runner = {});

}  // namespace pkscan::cli
