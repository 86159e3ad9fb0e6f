// `pkscan vpc`: the run file's design simulated `replicates` times (run_vpc), the table written
// atomically as CSV, and a gnuplot picture in the field's usual style: the prediction interval of
// each simulated percentile as a band (the median's red, the others blue), the observed
// percentiles as black lines (the median solid, the others dashed) and the observations as grey
// points; with an LLOQ, its line and a panel of the fraction below it per bin.
#include "vpc.hpp"

#include <CLI/CLI.hpp>
#include <cmath>
#include <filesystem>
#include <functional>
#include <pkscan/config/load.hpp>
#include <pkscan/config/population_run.hpp>
#include <pkscan/dataset.hpp>
#include <pkscan/error.hpp>
#include <pkscan/output/output.hpp>
#include <pkscan/vpc.hpp>
#include <sstream>
#include <string>

#include "options.hpp"
#include "plot.hpp"
#include "plot_data.hpp"
#include "progress.hpp"

namespace pkscan::cli {

namespace {

using plot::gp_quote;
using plot::number_text;

// The points of one stratum's bins: (time, a, b) rows for bins with drawable values.
void block(std::ostream& s, const std::string& name, const VpcTable& t, const std::string& stratum,
           bool log, const std::function<std::vector<double>(const VpcBin&)>& values) {
  s << name << " << EOD\n";
  for (const VpcBin& b : t.bins) {
    if (b.stratum != stratum) continue;
    const std::vector<double> v = values(b);
    bool ok = std::isfinite(b.time);
    for (double x : v) ok = ok && std::isfinite(x) && (!log || x > 0);
    if (!ok) continue;
    s << number_text(b.time);
    for (double x : v) s << ' ' << number_text(x);
    s << '\n';
  }
  s << "EOD\n";
}

std::string label(double p) { return "p" + number_text(p); }

std::string script(const VpcTable& t, const VpcCommand& o, double lloq, const std::string& title) {
  std::ostringstream s;
  const int panels = static_cast<int>(t.strata.size()) * (t.blq ? 2 : 1);
  const int height = o.height > 0 ? o.height : 450 * panels;
  s << plot::png_preamble(o.width, height);
  s << "set multiplot layout " << panels << ",1 title " << gp_quote(title) << "\n";
  s << "set key below horizontal\nset grid\nset xlabel 'time'\n";
  const std::size_t np = t.percentiles.size();
  const std::size_t median = [&] {
    std::size_t m = 0;
    for (std::size_t j = 0; j < np; ++j)
      if (std::fabs(t.percentiles[j] - 50.0) < std::fabs(t.percentiles[m] - 50.0)) m = j;
    return m;
  }();
  const std::string pi = number_text(t.interval) + "% PI";
  for (std::size_t k = 0; k < t.strata.size(); ++k) {
    const std::string& st = t.strata[k];
    const std::string sk = std::to_string(k);
    for (std::size_t j = 0; j < np; ++j) {
      block(s, "$band" + sk + "_" + std::to_string(j), t, st, o.log, [&](const VpcBin& b) {
        return std::vector<double>{b.simulated[j * 3], b.simulated[j * 3 + 2]};
      });
      block(s, "$obs" + sk + "_" + std::to_string(j), t, st, o.log,
            [&](const VpcBin& b) { return std::vector<double>{b.observed[j]}; });
    }
    s << "$points" << sk << " << EOD\n";
    for (std::size_t i = 0; i < t.observation_time.size(); ++i)
      if (t.observation_stratum[i] == static_cast<int>(k) &&
          std::isfinite(t.observation_value[i]) && (!o.log || t.observation_value[i] > 0))
        s << number_text(t.observation_time[i]) << ' ' << number_text(t.observation_value[i])
          << '\n';
    s << "EOD\n";
    s << "set title " << gp_quote(t.stratify.empty() ? "" : t.stratify + " = " + st) << "\n";
    s << "set ylabel "
      << gp_quote(t.prediction_corrected ? "prediction-corrected concentration" : "concentration")
      << "\n";
    s << (o.log ? "set logscale y\n" : "unset logscale y\n");
    s << "set yrange [*:*]\n";
    s << "plot ";
    for (std::size_t j = 0; j < np; ++j)
      s << "$band" << sk << "_" << j << " using 1:2:3 with filledcurves fc rgb "
        << (j == median ? "'#d62728'" : "'#1f77b4'") << " fs transparent solid 0.3 noborder title "
        << gp_quote(pi + " of simulated " + label(t.percentiles[j])) << ", ";
    s << "$points" << sk << " using 1:2 with points pt 7 ps 0.4 lc rgb '#7f7f7f' title "
      << gp_quote("observations");
    for (std::size_t j = 0; j < np; ++j)
      s << ", $obs" << sk << "_" << j << " using 1:2 with linespoints pt 7 ps 0.6 lw 2 lc rgb "
        << "'#000000' dt " << (j == median ? 1 : 2) << " title "
        << gp_quote("observed " + label(t.percentiles[j]));
    if (std::isfinite(lloq) && !t.prediction_corrected && (!o.log || lloq > 0))
      s << ", " << number_text(lloq) << " with lines dt 3 lw 1 lc rgb '#2ca02c' title 'LLOQ'";
    s << "\n";
    if (t.blq) {
      block(s, "$blqband" + sk, t, st, false, [](const VpcBin& b) {
        return std::vector<double>{b.simulated_blq[0], b.simulated_blq[2]};
      });
      block(s, "$blqobs" + sk, t, st, false,
            [](const VpcBin& b) { return std::vector<double>{b.observed_blq}; });
      s << "set title "
        << gp_quote("fraction below LLOQ" +
                    (t.stratify.empty() ? "" : " (" + t.stratify + " = " + st + ")"))
        << "\nset ylabel 'fraction < LLOQ'\nunset logscale y\nset yrange [0:1]\n";
      s << "plot $blqband" << sk
        << " using 1:2:3 with filledcurves fc rgb '#1f77b4' fs transparent solid 0.3 noborder "
           "title "
        << gp_quote(pi + " of the simulated fraction") << ", $blqobs" << sk
        << " using 1:2 with linespoints pt 7 lw 2 lc rgb '#000000' title 'observed fraction'\n";
    }
  }
  s << "unset multiplot\n";
  return s.str();
}

}  // namespace

CLI::App* add_vpc_command(CLI::App& app, VpcCommand& o) {
  CLI::App* v = app.add_subcommand(
      "vpc",
      "Visual predictive check: the run file's dataset against replicates of its design (PNG "
      "and CSV table)");
  v->add_option("file", o.file, "Run file: subjects.dataset with subjects.population")->required();
  v->add_option("--output,-o", o.output, "PNG to write; the table goes beside it as STEM.csv")
      ->required();
  v->add_option("--observed", o.observed,
                "Dataset of observations whose design is simulated (default: the run file's)");
  v->add_option("--percentiles", o.percentiles,
                "Percentiles of the observations per bin (default 5,50,95)")
      ->delimiter(',');
  v->add_option("--interval", o.interval,
                "Prediction interval of each percentile across replicates, % (default 90)");
  v->add_option("--bins", o.bins,
                "Bins by equal numbers of observations (default: one per distinct time up to "
                "20, else 10)")
      ->check(CLI::Range(1, 100000));
  v->add_option("--bin-edges", o.bin_edges, "Bin edges in time (ascending), e.g. 0,1,2,4,8,24")
      ->delimiter(',');
  v->add_flag("--prediction-corrected,--pc", o.prediction_corrected,
              "Prediction-corrected VPC (Bergstrand et al. 2011)");
  v->add_option("--stratify", o.stratify, "Dataset column whose values split the VPC in panels");
  v->add_flag("--log", o.log, "Logarithmic concentration axis");
  v->add_option("--width", o.width, "Image width in pixels (default 900)")
      ->check(CLI::Range(64, 10000));
  v->add_option("--height", o.height, "Image height in pixels (default 450 per panel)")
      ->check(CLI::Range(64, 20000));
  v->add_option("--title", o.title, "Title (default: the run file's name)");
  v->add_flag("--quiet,-q", o.quiet, "Print nothing on success, and no progress");
  add_threads_option(v, o.threads, "--threads,-j");
  v->footer(
      "Needs gnuplot (Debian: gnuplot-nox); PKSCAN_GNUPLOT may name the program.\n"
      "Exit status: 0 success; 2 bad input (run file, dataset, options); 3 gnuplot not found;\n"
      "1 gnuplot failed. Errors are one line on stderr.");
  return v;
}

void run_vpc_command(const VpcCommand& o, std::ostream& out, std::ostream& err, bool terminal) {
  if (!plot::ends_with(o.output, ".png"))
    throw InvalidArgument("--output is \"" + o.output + "\", but must end in .png");
  const std::string table_path = o.output.substr(0, o.output.size() - 4) + ".csv";
  config::RunSpec spec = config::load_run_file(o.file);
  if (!spec.design())
    throw ConfigError(o.file, 0, 0,
                      "a VPC simulates the design of a dataset: the run file needs "
                      "subjects.dataset with subjects.population");
  if (!o.observed.empty()) {
    spec.dataset = std::make_shared<Dataset>(read_dataset(o.observed, *spec.population->model));
    output::check_design_columns(*spec.dataset, *spec.population->model);
  }
  DesignRun run = config::to_design_run(spec);
  run.options.threads = o.threads;
  VpcOptions vo;
  vo.percentiles = o.percentiles;
  vo.interval = o.interval;
  vo.bins = o.bins;
  vo.bin_edges = o.bin_edges;
  vo.prediction_corrected = o.prediction_corrected;
  vo.stratify = o.stratify;
  // run_vpc makes check_vpc's checks before it simulates. The run file's dataset's records are
  // reported at their place (RunSpec::located); an observed dataset's, which replaces it, by
  // their file and line.
  const auto located = [&](const std::function<void()>& f) {
    if (o.observed.empty() && spec.located)
      spec.located(f);
    else
      f();
  };
  Progress progress(err, terminal, "replicates");
  DesignProgressFn on_progress;
  if (!o.quiet)
    on_progress = [&](std::int64_t done, std::int64_t total) { progress.update(done, total); };
  VpcTable table;
  located([&] { table = run_vpc(run, vo, on_progress); });
  progress.finish();
  const std::string title = o.title.empty()
                                ? std::filesystem::path(o.file).filename().string() +
                                      (o.prediction_corrected ? " (pcVPC, " : " (VPC, ") +
                                      std::to_string(table.replicates) + " replicates)"
                                : o.title;
  const double lloq = run.lloq_column.empty() ? run.lloq : std::nan("");
  // The picture first: a failing gnuplot leaves no table either.
  render_png(script(table, o, lloq, title), o.output, o.gnuplot);
  output::write_vpc_csv(table, table_path);
  if (!o.quiet)
    out << "pkscan: wrote " << o.output << " and " << table_path << " (" << table.bins.size()
        << " bins, " << table.replicates << " replicates)\n";
}

}  // namespace pkscan::cli
