// pkscan-bench's exact-percentile workload (--output exact, bench.hpp): a summaries-only
// population run of the benchmark problem with exact percentiles (the first pass, then the
// passes that simulate the rows again) beside the same run keeping the sketch's estimates.
#include <algorithm>
#include <cmath>
#include <pkscan/population_run.hpp>
#include <pkscan/summary.hpp>
#include <pkscan/threads.hpp>
#include <sstream>
#include <vector>

#include "bench.hpp"

namespace pkscan::bench {

namespace {

// Keeps the summary tables only (the run's result).
class SummarySink final : public ResultSink {
 public:
  void write(const Chunk&) override {}
  void write_summary(const TimeSummaryTable& t) override { tables.push_back(t); }
  void commit() override {}
  std::vector<TimeSummaryTable> tables;
};

}  // namespace

// The run summarises every output time of the N subjects (5th, 50th, 95th percentiles, means and
// metrics; trajectories off, so the first pass is the fused one where it applies); with more
// than TimeSummaryOptions::exact_values values the exact run adds its passes. The cost of the
// passes is the exact run's time minus the estimating run's, both measured here.
void run_exact_bench(const BenchOptions& o, std::ostream& out) {
  BenchOptions dense = o;
  dense.output = "dense";
  PopulationRun run = bench_population_run(dense);
  run.trajectories = false;
  run.summaries = true;
  run.exact_percentiles = false;
  SummarySink estimates_sink;
  const Timings estimates = time_calls(o.repeat, [&] {
    estimates_sink.tables.clear();
    run_population(run, estimates_sink);
  });
  run.exact_percentiles = true;
  SummarySink exact_sink;
  const Timings exact = time_calls(o.repeat, [&] {
    exact_sink.tables.clear();
    run_population(run, exact_sink);
  });
  const TimeSummaryTable& e = exact_sink.tables.at(0);
  const TimeSummaryTable& s = estimates_sink.tables.at(0);
  // The estimates' largest relative deviation from the exact percentiles (the sketch's error).
  double deviation = 0.0;
  for (std::size_t i = 0; i < e.quantiles.size(); ++i)
    if (e.quantiles[i] != 0.0)
      deviation = std::max(deviation, std::abs(s.quantiles[i] / e.quantiles[i] - 1.0));
  const double run_s = estimates.best(), exact_s = exact.best();
  std::ostringstream j;
  j.precision(6);
  j << "{\"workload\":\"exact\",\"precision\":\""
    << (o.precision == Precision::Float64 ? "float64" : "float32") << "\",\"n\":" << o.n
    << ",\"t\":" << o.t << ",\"threads\":" << pkscan::resolve_threads(o.threads)
    << ",\"repeat\":" << o.repeat
    << ",\"values\":" << static_cast<double>(o.n) * static_cast<double>(e.times.size()) * 3.0
    << ",\"exact\":" << (e.exact ? "true" : "false")
    << ",\"estimates_exact\":" << (s.exact ? "true" : "false")
    << ",\"summaries_only_best_s\":" << run_s
    << ",\"summaries_only_median_s\":" << median(estimates.times) << ",\"exact_best_s\":" << exact_s
    << ",\"exact_median_s\":" << median(exact.times) << ",\"passes_s\":" << exact_s - run_s
    << ",\"passes_over_run\":" << (exact_s - run_s) / run_s
    << ",\"exact_over_run\":" << exact_s / run_s << ",\"estimate_max_rel_deviation\":" << deviation
    << "}\n";
  out << j.str();
}

}  // namespace pkscan::bench
