#pragma once
// The steps of `pkscan plot` (private to the command line): output::read_result reads the result
// (pkscan/output/read.hpp), plot_script.cpp writes the gnuplot script; plot.cpp runs gnuplot.
#include <pkscan/output/read.hpp>
#include <string>

#include "plot.hpp"

namespace pkscan::cli::plot {

// A gnuplot script and what it draws (for the success line).
struct Script {
  std::string text;
  std::string what;
};

bool ends_with(const std::string& s, const std::string& suffix);
// A gnuplot single-quoted string (control characters become spaces).
std::string gp_quote(const std::string& s);
// The lines that select the PNG terminal (pngcairo when present) at this size and the output
// `plot.png`.
std::string png_preamble(int width, int height);
// Shortest text that reads back as `v`.
std::string number_text(double v);

// The gnuplot script drawing `d` into plot.png. @throws InvalidArgument when nothing is drawable
Script make_script(const output::Curves& d, const PlotOptions& o);

// Whether `path` is a population fit's table (`<stem>.table.csv` of `pkscan fit FILE.yaml`).
bool is_fit_table(const std::string& path);
// The goodness-of-fit plots of the fit table o.result (plot_fit.cpp).
// @throws InvalidArgument for a table that cannot be read or has no observations
Script fit_table_script(const PlotOptions& o);

}  // namespace pkscan::cli::plot
