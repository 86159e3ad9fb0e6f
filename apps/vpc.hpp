#pragma once
// `pkscan vpc RUN.yaml -o vpc.png`: a visual predictive check of a design simulation's dataset
// (pkscan/vpc.hpp): the table as CSV beside the picture (vpc.csv), the picture drawn by gnuplot.
#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace pkscan::cli {

struct VpcCommand {
  std::string file;      // run file: subjects.dataset with subjects.population
  std::string output;    // PNG (ends in .png); the table goes to the same stem with .csv
  std::string observed;  // dataset replacing the run file's (its design and observations)
  std::vector<double> percentiles = {5, 50, 95};
  double interval = 90;
  int bins = 0;
  std::vector<double> bin_edges;
  bool prediction_corrected = false;
  std::string stratify;
  bool log = false;
  int width = 900;
  int height = 0;  // 0: 450 per panel
  std::string title;
  std::string gnuplot;
  int threads = 0;
  bool quiet = false;
};

CLI::App* add_vpc_command(CLI::App& app, VpcCommand& options);

// Runs the VPC and writes the table and the picture; prints one line naming them.
// @throws ConfigError / InvalidArgument / DomainError for bad input (exit 2), BackendUnavailable
//         when gnuplot cannot be found (exit 3), Error when gnuplot fails (exit 1)
void run_vpc_command(const VpcCommand& options, std::ostream& out, std::ostream& err,
                     bool terminal);

}  // namespace pkscan::cli
