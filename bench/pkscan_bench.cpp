// pkscan-bench: the benchmarks of docs/performance.md as a program of their own (docs/cli.md),
// built beside `pkscan` and never installed. One JSON line on stdout per run; errors are one line
// on stderr with pkscan's exit statuses (apps/cli.hpp).
#include <CLI/CLI.hpp>
#include <cstdint>
#include <exception>
#include <iostream>
#include <new>
#include <pkscan/pkscan.hpp>
#include <string>
#include <vector>

#include "bench.hpp"
#include "cli.hpp"
#include "options.hpp"
#include "signals.hpp"

namespace {

using namespace pkscan;
using namespace pkscan::cli;

constexpr const char* kExitHelp =
    "Exit status: 0 success; 2 bad input (unknown option, out-of-range value, options that name\n"
    "two workloads); 3 the requested method or device is not available in this build or on this\n"
    "machine; 1 any other failure (writing in the --write folder); 130 (SIGINT), 143 (SIGTERM),\n"
    "128 + N (signal N): stopped by a signal, temporary files removed. Errors are one line on\n"
    "stderr: pkscan-bench: error: ...";

int run(const std::vector<std::string>& args) {
  CLI::App app{
      "pkscan-bench: time the synthetic workload of docs/performance.md (its NumPy "
      "version: bench/numpy_baseline.py); one JSON line",
      "pkscan-bench"};
  app.footer(kExitHelp);
  bench::BenchOptions bo;
  std::string b_method = "auto", b_device = "auto", b_precision = "float64";
  app.add_option("--n", bo.n, "Subjects")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  app.add_option("--t", bo.t, "Time steps")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1000000000}));
  app.add_option("--method", b_method, "auto, scan, batched or power")
      ->check(CLI::IsMember({"auto", "scan", "batched", "power"}));
  app.add_option("--device", b_device, "auto, cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--precision", b_precision, "float64 or float32")
      ->check(CLI::IsMember({"float64", "float32"}));
  app.add_option("--output", bo.output,
                 "dense, final, sparse:K, summaries (the fused summaries-only path), or exact "
                 "(a summaries-only population run with exact percentiles beside one keeping "
                 "the sketch's estimates)");
  add_threads_option(&app, bo.threads);
  app.add_option("--repeat", bo.repeat, "Timed runs after one warm-up")->check(CLI::Range(1, 1000));
  app.add_option("--seed", bo.seed, "Seed of the between-subject variability");
  app.add_option("--dataset", bo.dataset,
                 "Dosing-records workload instead: irregular, regular (event engine), grid, or "
                 "likelihood (Predictor::log_likelihood_all with gradients)")
      ->check(CLI::IsMember({"irregular", "regular", "grid", "likelihood"}));
  app.add_option("--write", bo.write_dir,
                 "Output-bound workload instead: stream the problem into an HDF5 file in this "
                 "folder, beside a plain write of its size there")
      ->check(CLI::ExistingDirectory);
  app.add_option("--design", bo.design,
                 "Virtual-trial workload instead: simulate (a design simulation against a grid "
                 "population, per simulated observation) or vpc (a VPC: wall time, peak memory)")
      ->check(CLI::IsMember({"simulate", "vpc"}));
  app.add_option("--replicates", bo.replicates, "Replicates of the VPC (--design vpc)")
      ->check(CLI::Range(std::int64_t{2}, std::int64_t{1000000}));
  app.add_option("--design-replicates", bo.design_replicates,
                 "Replicates of the design and of the grid population (--design simulate)")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1000000}));
  app.add_option("--fit", bo.fit,
                 "Population-estimation workload instead: theoph (NONMEM's THEO FOCEI fit and "
                 "covariance step) or simulated (--n subjects of a three-compartment oral model, "
                 "--observations samples each), beside the same fit on a finite-difference "
                 "gradient")
      ->check(CLI::IsMember({"theoph", "simulated"}));
  app.add_option("--doses", bo.doses, "Doses per subject (--dataset, --design)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--observations", bo.observations,
                 "Observations per subject (--dataset, --design, --fit simulated)")
      ->check(CLI::Range(1, 100000));

  try {
    std::vector<std::string> rev(args.rbegin(), args.rend());  // CLI11 parses a reversed vector
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::cerr << "pkscan-bench: error: " << one_line(e.what()) << " (see pkscan-bench --help)\n";
    return kExitBadInput;
  }

  try {
    bo.method = method_from_string(b_method);
    bo.device = device_from_string(b_device);
    bo.precision = precision_from_string(b_precision);
    bench::run_bench(bo, std::cout);
    return kExitOk;
  } catch (const BackendUnavailable& e) {
    std::cerr << "pkscan-bench: error: " << one_line(e.what()) << "\n";
    return kExitUnavailable;
  } catch (const InvalidArgument& e) {
    std::cerr << "pkscan-bench: error: " << one_line(e.what()) << "\n";
    return kExitBadInput;
  } catch (const DomainError& e) {
    std::cerr << "pkscan-bench: error: " << one_line(e.what()) << "\n";
    return kExitBadInput;
  } catch (const std::bad_alloc&) {
    std::cerr << "pkscan-bench: error: out of memory\n";
    return kExitFailure;
  } catch (const std::exception& e) {
    std::cerr << "pkscan-bench: error: " << one_line(e.what()) << "\n";
    return kExitFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // First, before any thread exists: a signal removes --write's temporary files and ends the
  // program with 128 + the signal number, as it does `pkscan` (apps/signals.hpp).
  pkscan::cli::handle_termination_signals("pkscan-bench");
  pkscan::cli::skip_hdf5_exit_handler();
  std::ios::sync_with_stdio(false);
  return run(std::vector<std::string>(argv + 1, argv + argc));
}
