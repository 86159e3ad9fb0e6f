#pragma once
// `pkscan bench`: the synthetic workload of docs/performance.md (written in NumPy in
// bench/numpy_baseline.py) through the library, timed, printed as one JSON line.
#include <cstdint>
#include <ostream>
#include <pkscan/pkscan.hpp>
#include <string>

namespace pkscan::cli {

struct BenchOptions {
  std::int64_t n = 1000;
  std::int64_t t = 1000;
  Method method = Method::Auto;
  Device device = Device::Auto;
  Precision precision = Precision::Float64;
  std::string output = "dense";  // dense | final | sparse:K
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
};

/// Best seconds of `repeat` runs (after a warm-up) of the hand-written probe's no-output
/// recurrence (apps/bench_probe.cpp) on the bench's N subjects and T steps, on `threads`
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

// Runs the benchmark and writes one JSON line to `out`. @throws pkscan::Error.
void run_bench(const BenchOptions& o, std::ostream& out);

}  // namespace pkscan::cli
