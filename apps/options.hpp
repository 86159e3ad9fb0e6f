#pragma once
// Command-line options that several subcommands share, each written once.
#include <CLI/CLI.hpp>
#include <string>

namespace pkscan::cli {

// --threads (with `names` such as "--threads,-j"): the one thread rule of docs/performance.md.
inline CLI::Option* add_threads_option(CLI::App* app, int& threads,
                                       const std::string& names = "--threads") {
  return app
      ->add_option(
          names, threads,
          "CPU threads (0 = the default: OMP_NUM_THREADS, else every CPU this process may use)")
      ->check(CLI::Range(0, 4096));
}

}  // namespace pkscan::cli
