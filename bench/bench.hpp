#pragma once
// pkscan-bench: the synthetic workload of docs/performance.md (written in NumPy in
// bench/numpy_baseline.py) and the other workloads of that page through the library, timed,
// printed as one JSON line. The grid and summaries cells: bench_grid.cpp; the dosing-records
// workloads: bench_dataset.cpp; the output-bound one: bench_write.cpp; the arithmetic ceiling:
// bench_probe.cpp; the command line: pkscan_bench.cpp.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ostream>
#include <pkscan/pkscan.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pkscan::bench {

struct BenchOptions {
  std::int64_t n = 1000;
  std::int64_t t = 1000;
  Method method = Method::Auto;
  Device device = Device::Auto;
  Precision precision = Precision::Float64;
  std::string output = "dense";  // dense | final | sparse:K | summaries | exact
  int threads = 0;
  int repeat = 5;
  std::uint32_t seed = 0;
  /// "" (the NumPy workload), or a dosing-records workload: "irregular" / "regular" (the exact
  /// event engine on a dataset with that many doses and observations per subject) or "grid"
  /// (the same doses and output times on a 1-hour grid through the grid engine).
  std::string dataset;
  int doses = 20;         ///< doses per subject (dataset workloads), every 6 h
  int observations = 30;  ///< observations per subject (dataset workloads)
  /// The output-bound workload when not empty: the problem streamed by run_population into an
  /// HDF5 file in this folder, beside a plain write of the file's size there (the disk's speed).
  std::string write_dir;
  /// A virtual-trial workload when not empty (bench_design.cpp): "simulate" (one replicate of a
  /// design of N subjects with `doses` doses and `observations` observations each, IIV and
  /// residual error, against a grid population of the same model, subjects and output times,
  /// per simulated observation) or "vpc" (run_vpc of `replicates` replicates of such a design
  /// with IIV, IOV and residual error: wall time and peak resident memory).
  std::string design;
  std::int64_t replicates = 1000;  ///< replicates of the VPC (--design vpc)
  /// replicates of both runs of --design simulate (their per-call costs shared by more values)
  std::int64_t design_replicates = 1;
  /// A population-estimation workload when not empty (bench_fit.cpp): "theoph" (NONMEM's THEO
  /// FOCEI fit) or "simulated" (N subjects of a three-compartment oral model, `observations`
  /// samples each, 4 ETAs): the fit and its covariance step, beside the same fit on a
  /// finite-difference outer gradient.
  std::string fit;
};

/// Best seconds of `repeat` runs (after a warm-up) of the hand-written probe's no-output
/// recurrence (bench/bench_probe.cpp) on the bench's N subjects and T steps, on `threads`
/// threads: the arithmetic ceiling of the grid cells.
double probe_recurrence_seconds(std::int64_t n, std::int64_t t, Precision precision, int threads,
                                int repeat, std::uint32_t seed);

/// The dataset workload: N subjects, `doses` oral doses every 6 h (jittered by up to +-1 h when
/// irregular) and `observations` observation records (uniform random times when irregular,
/// every 4 h when regular), three-compartment parameters with between-subject variability.
Dataset bench_dataset(const BenchOptions& o, bool irregular, ParameterBatch& params);

// The benchmark problem: N subjects, T euler steps of dt = 1 with the baseline's per-step
// fractions k01 = 0.10 f, k12 = 0.05 f, k21 = 0.03 / f, u = 0.02 f, f = exp(0.3 z), z ~ N(0, 1)
// (seeded), 100 into the depot at t = 0 and every 24 steps. @throws InvalidArgument for a bad
// output spec.
Problem bench_problem(const BenchOptions& o);

// The benchmark problem as a population run (its subjects the problem's rows) with the
// options' method, device, precision and threads; what it writes is the caller's to set.
PopulationRun bench_population_run(const BenchOptions& o);

// Runs the benchmark and writes one JSON line to `out`. @throws pkscan::Error.
void run_bench(const BenchOptions& o, std::ostream& out);

// The workloads run_bench dispatches to, each writing its JSON line to `out`:
// --dataset irregular|regular|grid, --dataset likelihood (bench_dataset.cpp) and --write DIR
// (bench_write.cpp).
void run_dataset_bench(const BenchOptions& o, std::ostream& out);
void run_likelihood_bench(const BenchOptions& o, std::ostream& out);
void run_write_bench(const BenchOptions& o, std::ostream& out);
// --output exact (bench_exact.cpp): a summaries-only population run with exact percentiles
// beside the same run keeping the sketch's estimates.
void run_exact_bench(const BenchOptions& o, std::ostream& out);
// --fit theoph|simulated (bench_fit.cpp).
void run_fit_bench(const BenchOptions& o, std::ostream& out);
// --design simulate|vpc (bench_design.cpp).
void run_design_bench(const BenchOptions& o, std::ostream& out);

// ---- Timing, shared by the workloads ------------------------------------------------------------

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// The seconds of one warm-up call of f (it compiles schedules, allocates and faults pages in)
// and of `repeat` timed calls after it.
struct Timings {
  double first_call = 0.0;
  std::vector<double> times;
  double best() const { return *std::min_element(times.begin(), times.end()); }
};

template <class F>
Timings time_calls(int repeat, F&& f) {
  Timings t;
  double t0 = now();
  f();
  t.first_call = now() - t0;
  for (int i = 0; i < repeat; ++i) {
    t0 = now();
    f();
    t.times.push_back(now() - t0);
  }
  return t;
}

// time_calls of two workloads taking turns (a, b, a, b, ...), so that a machine's drift over the
// run weighs on both alike: for ratios of one run.
template <class F, class G>
std::pair<Timings, Timings> time_calls_alternating(int repeat, F&& f, G&& g) {
  std::pair<Timings, Timings> t;
  double t0 = now();
  f();
  t.first.first_call = now() - t0;
  t0 = now();
  g();
  t.second.first_call = now() - t0;
  for (int i = 0; i < repeat; ++i) {
    t0 = now();
    f();
    t.first.times.push_back(now() - t0);
    t0 = now();
    g();
    t.second.times.push_back(now() - t0);
  }
  return t;
}

}  // namespace pkscan::bench
