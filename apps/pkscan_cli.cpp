#include <iostream>
#include <string>
#include <vector>

#include "cli.hpp"
#include "signals.hpp"

int main(int argc, char** argv) {
  // First, before any thread exists: SIGINT, SIGTERM, ... remove the temporary files and end
  // the program with 128 + the signal number (signals.hpp).
  pkscan::cli::handle_termination_signals();
  pkscan::cli::skip_hdf5_exit_handler();
  std::ios::sync_with_stdio(false);
  std::vector<std::string> args(argv + 1, argv + argc);
  return pkscan::cli::run_cli(args, std::cout, std::cerr);
}
