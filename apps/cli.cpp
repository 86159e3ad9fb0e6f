#include "cli.hpp"

#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <new>
#include <optional>
#include <pkscan/build_config.hpp>
#include <pkscan/config/load.hpp>
#include <pkscan/config/run.hpp>
#include <pkscan/pkscan.hpp>
#include <sstream>

#include "fit.hpp"
#include "options.hpp"
#include "plot.hpp"
#include "progress.hpp"
#include "vpc.hpp"

namespace pkscan::cli {

namespace {

constexpr const char* kExitHelp =
    "Exit status: 0 success; 2 bad input (unreadable file, YAML syntax, unknown, duplicate or\n"
    "missing key, wrong type, out-of-range value, a time off the grid, a run too large to hold);\n"
    "3 the requested method or device is not available in this build or on this machine;\n"
    "1 any other failure; 130 (SIGINT), 143 (SIGTERM), 128 + N (signal N): stopped by a signal,\n"
    "temporary files removed, earlier results left whole. Errors are one line on stderr:\n"
    "pkscan: error: FILE:LINE:COLUMN: ...";

struct Command {
  std::string file;
  std::string output;
  bool quiet = false;
  bool verbose = false;
  bool terminal = false;        // stderr is a terminal (progress bar instead of lines)
  int threads = 0;              // --threads: 0 = pkscan's default (OMP_NUM_THREADS, affinity mask)
  std::int64_t chunk_rows = 0;  // --chunk-rows: 0 = the engine's (about 64 MiB of results)
};

std::string plural(std::int64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::int64_t output_count(const OutputTimes& o, const TimeGrid& grid) {
  return o.all ? grid.steps + 1 : static_cast<std::int64_t>(o.steps.size());
}

// The success line of `pkscan validate` for a run on a time grid: its subjects (per arm, with
// each arm's dose lines and output times), replicates and sweep points, grid, dose lines and
// output times.
std::string describe(const config::RunSpec& spec) {
  const Problem& p = spec.problem;
  std::ostringstream s;
  if (!spec.arms.empty()) {
    std::int64_t total = 0;
    for (const Arm& a : spec.arms) total += a.count;
    s << plural(total, "subject", "subjects") << " in " << spec.arms.size() << " arms (";
    for (std::size_t k = 0; k < spec.arms.size(); ++k) {
      const Arm& a = spec.arms[k];
      s << (k > 0 ? "; " : "") << a.name << ": " << plural(a.count, "subject", "subjects") << ", "
        << plural(static_cast<std::int64_t>(a.doses.size()), "dose line", "dose lines");
      if (a.output)
        s << ", " << plural(output_count(*a.output, p.grid), "output time", "output times");
    }
    s << ")";
  } else {
    const std::int64_t n = spec.population ? spec.population->count : p.parameters.subjects();
    s << plural(n, "subject", "subjects");
  }
  if (spec.replicates > 1) s << " x " << spec.replicates << " replicates";
  if (!spec.sweep.columns.empty()) s << " x " << spec.sweep.points() << " sweep points";
  s << ", " << p.grid.steps << " steps of " << format_value(p.grid.dt);
  if (spec.arms.empty())
    s << ", " << plural(static_cast<std::int64_t>(p.doses.size()), "dose line", "dose lines");
  s << ", " << plural(output_count(p.output, p.grid), "output time", "output times");
  return s.str();
}

// An error about the output path, where it was given: at output.path in the run file, or
// --output on the command line.
[[noreturn]] void output_error(const Command& c, const config::RunSpec& spec,
                               const std::string& what) {
  if (c.output.empty())
    throw ConfigError(c.file, spec.output_path_line, spec.output_path_column,
                      "output.path: " + what);
  throw InvalidArgument("--output: " + what);
}

// The output path's checks that need no file to be written (its suffix; it replaces or removes no
// file the run reads), for `pkscan validate`.
void check_output_inputs(const Command& c, const config::RunSpec& spec, const std::string& path) {
  try {
    config::check_output_path(spec, path);
  } catch (const config::OutputPathError& e) {
    output_error(c, spec, e.what());
  }
}

int do_validate(const Command& c, std::ostream& out) {
  const config::RunSpec spec = config::load_run_file(c.file);
  config::check_run(spec);  // a dataset's records, checked as the run would
  if (!spec.output_path.empty()) check_output_inputs(c, spec, spec.output_path);
  if (spec.dataset) {
    std::int64_t records = 0;
    for (const DatasetSubject& s : spec.dataset->subjects)
      records += static_cast<std::int64_t>(s.records.size());
    out << c.file << ": ok: dataset " << spec.dataset->file << ", " << spec.dataset->subjects.size()
        << (spec.dataset->subjects.size() == 1 ? " subject, " : " subjects, ") << records
        << " records, " << spec.dataset->observation_count() << " observations";
    if (spec.design()) {
      // A design simulation: its virtual subjects (resampled, or the dataset's) and replicates.
      out << ", simulated";
      if (spec.design_count > 0)
        out << " for " << plural(spec.design_count, "virtual subject", "virtual subjects");
      out << " with parameters drawn per replicate, "
          << plural(spec.replicates, "replicate", "replicates");
    }
    out << (spec.output_path.empty() ? " (no output.path: give --output to run it)"
                                     : ", output " + spec.output_path)
        << "\n";
    return kExitOk;
  }
  out << c.file << ": ok: " << describe(spec)
      << (spec.output_path.empty() ? " (no output.path: give --output to run it)"
                                   : ", output " + spec.output_path)
      << "\n";
  return kExitOk;
}

// The success line on stdout (unless --quiet), the path that ran with --verbose, and a warning
// for subjects whose values overflowed.
void report(const RunSummary& sum, const std::string& what, const std::string& path,
            const Command& c, std::ostream& out, std::ostream& err) {
  if (c.verbose)
    err << "pkscan: ran method " << to_string(sum.method) << " on " << to_string(sum.device) << " ("
        << sum.threads << (sum.threads == 1 ? " thread" : " threads") << "), prepare "
        << sum.prepare_seconds << " s, scan " << sum.scan_seconds << " s\n";
  if (sum.non_finite_subjects > 0)
    err << "pkscan: warning: " << sum.non_finite_subjects
        << " subjects have non-finite values (overflow); their rows hold nan or inf\n";
  if (!c.quiet)
    out << "pkscan: wrote " << path << " (" << what << ", method " << to_string(sum.method)
        << " on " << to_string(sum.device) << ")\n";
}

// What a run wrote, for the success line: "12 subjects x 97 times", "340 observation rows",
// "5000 subjects, with summaries".
std::string rows_written(const config::RunReport& r) {
  const std::string n = std::to_string(r.rows);
  switch (r.kind) {
    case config::RunKind::Dataset:
    case config::RunKind::Design:
      return n + " observation rows";
    case config::RunKind::Streamed:
      return n + (r.rows == 1 ? " subject" : " subjects") +
             (r.summaries ? ", with summaries" : "") + (r.trajectories ? "" : ", no trajectories");
    case config::RunKind::Grid:
      break;
  }
  return n + (r.rows == 1 ? " subject x " : " subjects x ") + std::to_string(r.times) + " times";
}

int do_run(const Command& c, std::ostream& out, std::ostream& err, const RunFunction& runner) {
  config::RunSpec spec = config::load_run_file(c.file);
  spec.options.threads = c.threads;
  const std::string path = c.output.empty() ? spec.output_path : c.output;
  if (path.empty())
    throw ConfigError(c.file, spec.output_line, spec.output_column,
                      "output.path is missing; give output.path in the run file or --output PATH");
  PopulationRunOptions options;
  options.chunk_rows = c.chunk_rows;
  Progress progress(err, c.terminal, "subjects");
  // The passes of exact percentiles after the last chunk: a bar of their own per pass.
  std::optional<Progress> passes;
  int shown = 0;
  if (!c.quiet) {
    options.progress = [&](std::int64_t done, std::int64_t total) { progress.update(done, total); };
    options.pass_progress = [&](int pass, std::int64_t done, std::int64_t total) {
      if (pass != shown) {
        if (passes)
          passes->finish();
        else
          progress.finish();
        passes.emplace(err, c.terminal,
                       "subjects again (exact percentiles, pass " + std::to_string(pass) + ")");
        shown = pass;
      }
      passes->update(done, total);
    };
  }
  config::RunReport rep;
  try {
    rep = runner ? runner(spec, path, options) : config::run(spec, path, options);
  } catch (const config::OutputPathError& e) {
    output_error(c, spec, e.what());
  }
  if (passes)
    passes->finish();
  else
    progress.finish();
  report(rep.summary, rows_written(rep), path, c, out, err);
  return kExitOk;
}

}  // namespace

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
            const RunFunction& runner) {
  CLI::App app{"pkscan " PKSCAN_VERSION_STRING
               ": linear pharmacokinetic compartment models for many subjects at once",
               "pkscan"};
  app.footer(kExitHelp);
  app.set_version_flag("--version", PKSCAN_VERSION_STRING);
  app.require_subcommand(1);
  Command c;
  c.terminal = &err == &std::cerr && stderr_is_terminal();
  CLI::App* run = app.add_subcommand("run", "Run a run file and write its results");
  run->add_option("file", c.file, "Run file (YAML)")->required();
  run->add_option("--output,-o", c.output, "Output path (overrides output.path; .csv or .h5)");
  run->add_flag("--quiet,-q", c.quiet, "Print nothing on success, and no progress");
  run->add_flag("--verbose,-v", c.verbose, "Report the compute path and timings on stderr");
  add_threads_option(run, c.threads, "--threads,-j");
  run->add_option("--chunk-rows", c.chunk_rows,
                  "Rows per chunk of a streamed run, rounded down to a multiple of 1024 (0 = "
                  "about 64 MiB of results); the results do not depend on it")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40));
  run->footer(kExitHelp);
  CLI::App* validate = app.add_subcommand("validate", "Check a run file; run nothing");
  validate->add_option("file", c.file, "Run file (YAML)")->required();
  validate->footer(kExitHelp);
  PlotOptions po;
  CLI::App* plot = add_plot_command(app, po);
  FitOptions fo;
  CLI::App* fit = add_fit_command(app, fo);
  fit->footer(kExitHelp);
  VpcCommand vo;
  CLI::App* vpc = add_vpc_command(app, vo);

  if (!args.empty() && !args[0].empty() && args[0][0] != '-' && args[0] != "run" &&
      args[0] != "validate" && args[0] != "plot" && args[0] != "fit" && args[0] != "vpc") {
    error_line(err, "unknown command '" + args[0] +
                        "'; commands: run, validate, plot, fit, vpc (see pkscan --help)");
    return kExitBadInput;
  }
  try {
    std::vector<std::string> rev(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitOk;
  } catch (const CLI::CallForAllHelp&) {
    out << app.help("", CLI::AppFormatMode::All);
    return kExitOk;
  } catch (const CLI::CallForVersion&) {
    out << "pkscan " << PKSCAN_VERSION_STRING << (PKSCAN_HAS_CUDA ? " (CUDA)" : " (no CUDA)")
        << "\n";
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    error_line(err, one_line(e.what()) + " (see pkscan --help)");
    return kExitBadInput;
  }

  try {
    if (run->parsed()) return do_run(c, out, err, runner);
    if (plot->parsed()) {
      c.file = po.result;
      run_plot(po, out);
      return kExitOk;
    }
    if (vpc->parsed()) {
      c.file = vo.file;
      run_vpc_command(vo, out, err, c.terminal);
      return kExitOk;
    }
    if (fit->parsed()) {
      c.file = fo.dataset;
      return run_fit(fo, out, err);
    }
    return do_validate(c, out);
  } catch (const ConfigError& e) {
    error_line(err, one_line(e.what()));
    return kExitBadInput;
  } catch (const BackendUnavailable& e) {
    error_line(err, one_line(e.what()));
    return kExitUnavailable;
  } catch (const InvalidArgument& e) {
    error_line(err, c.file + ": " + one_line(e.what()));
    return kExitBadInput;
  } catch (const DomainError& e) {
    error_line(err, c.file + ": " + one_line(e.what()));
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    error_line(err, c.file + ": out of memory");
    return kExitFailure;
  } catch (const std::exception& e) {
    error_line(err, c.file + ": " + one_line(e.what()));
    return kExitFailure;
  }
}

}  // namespace pkscan::cli
