#pragma once
// `pkscan plot RESULT -o FILE.png`: concentration-time curves of a pkscan result, drawn by
// gnuplot (docs/output.md). Reads a contract CSV (with its `<stem>.summary.csv` when there is
// one), a summary CSV, or an HDF5 result; draws the median and the percentile band when a
// summary is present (one of each per group of a summary by group), one line per subject
// otherwise.
#include <ostream>
#include <string>

namespace CLI {
class App;
}

namespace pkscan::cli {

// Options of `pkscan plot`.
struct PlotOptions {
  std::string result;       // result file: .csv (contract or summary) or .h5 / .hdf5
  std::string output;       // PNG to write (must end in .png); written atomically
  int width = 800;          // image size in pixels
  int height = 500;         // image size in pixels
  bool log = false;         // logarithmic concentration axis (non-positive values skipped)
  std::string compartment;  // compartment to draw; empty = central, else the first
  int max_subjects = 30;    // lines drawn without a summary; the title says when truncated
  int max_groups = 10;      // groups of a summary by group drawn; the title says when truncated
  std::string title;        // image title; empty = the result file's name
  // gnuplot program: empty = $PKSCAN_GNUPLOT when set, else `gnuplot` on PATH.
  std::string gnuplot;
};

// Adds the `plot` subcommand to `app`, storing its options in `options` (which must outlive
// parsing). Returns the subcommand, to ask parsed().
CLI::App* add_plot_command(CLI::App& app, PlotOptions& options);

// Draws the plot and prints one line on `out` naming the file written.
// Throws InvalidArgument for an unreadable or invalid result file or a bad option (exit 2),
// BackendUnavailable when gnuplot cannot be found (exit 3: "gnuplot not found; install
// gnuplot-nox"), Error when gnuplot fails (exit 1, with gnuplot's first error line). Leaves no
// file behind on failure and never writes a partial PNG.
void run_plot(const PlotOptions& options, std::ostream& out);

// Runs the gnuplot `script`, which must write `plot.png` in its working directory (a private
// temporary directory next to `output`), and moves the image to `output`. `program` is the
// gnuplot to run (empty: $PKSCAN_GNUPLOT, else `gnuplot` on PATH). Errors as run_plot; no file
// is left behind on failure.
void render_png(const std::string& script, const std::string& output, const std::string& program);

}  // namespace pkscan::cli
