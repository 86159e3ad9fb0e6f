#pragma once
// What `pkscan plot` draws, and the steps that get there (private to the command line):
// plot_read.cpp reads a CSV result (and picks the file), plot_h5.cpp an HDF5 result,
// plot_script.cpp writes the gnuplot script; plot.cpp runs gnuplot.
#include <cstdint>
#include <string>
#include <vector>

#include "plot.hpp"

namespace pkscan::cli::plot {

struct Series {
  std::string label;  // "id 3"
  std::vector<double> t, y;
};

struct PlotData {
  std::vector<std::string> compartments;  // all compartments of the result
  std::string compartment;                // the one drawn
  // Summary: the centre line (median, else mean) and the band between the lowest and highest
  // percentile (empty when fewer than two percentiles).
  bool summary = false;
  std::string center_label, band_label;
  std::vector<double> t, center, low, high;
  std::int64_t count = -1;  // subjects summarised, -1 when unknown
  // Subjects (no summary): the first max_subjects of `total`.
  std::vector<Series> subjects;
  std::int64_t total = 0;
};

// A gnuplot script and what it draws (for the success line).
struct Script {
  std::string text;
  std::string what;
};

bool ends_with(const std::string& s, const std::string& suffix);
bool starts_with(const std::string& s, const std::string& prefix);
// Shortest text that reads back as `v`.
std::string number_text(double v);
// Picks the compartment to draw: the asked one, else central, else the first.
std::string choose_compartment(const std::vector<std::string>& available, const std::string& asked);

// The data of o.result: a trajectory or summary CSV (a summary next to trajectories is drawn
// instead of them), or an HDF5 result. @throws InvalidArgument
PlotData read_result(const PlotOptions& o);
// An HDF5 result: its summary when it has one, else the first max_subjects subjects.
PlotData read_h5(const std::string& path, const std::string& asked, int max_subjects);
// The gnuplot script drawing `d` into plot.png. @throws InvalidArgument when nothing is drawable
Script make_script(const PlotData& d, const PlotOptions& o);

}  // namespace pkscan::cli::plot
