// pkscan-bench's virtual-trial cells (bench.hpp): a design simulation (run_design: a dataset's
// records, parameters drawn per replicate) against a grid population of the same model, subjects
// and output times (run_population), both in memory, as a cost per simulated observation
// (--design simulate); and a visual predictive check through run_vpc, the library call of
// `pkscan vpc`, with its wall time and the process's peak resident memory (--design vpc).
#include <sys/resource.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <pkscan/population_run.hpp>
#include <pkscan/threads.hpp>
#include <pkscan/vpc.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench.hpp"

namespace pkscan::bench {

namespace {

// Sinks that keep nothing: the cells time the simulation, not the writing.
class NullDesignSink final : public DesignSink {
 public:
  void write(const DesignChunk& c) override { rows += c.result->rows(); }
  void commit() override {}
  std::int64_t rows = 0;
};

class NullResultSink final : public ResultSink {
 public:
  void write(const Chunk& c) override { rows += c.result->subjects() * c.result->times(); }
  void write_summary(const TimeSummaryTable&) override {}
  void commit() override {}
  std::int64_t rows = 0;
};

// The population of both cells: the bench's three-compartment model (depot, central,
// peripheral) at typical values ka 1, k12 0.3, k21 0.1, ke 0.15, v_central 20, v_peripheral 60,
// log-normal variability (variance 0.09) on ka, ke and v_central.
PopulationSpec bench_population(std::int64_t count, std::uint32_t seed) {
  PopulationSpec p(ModelKind::ThreeCompartment, count, seed);
  p.set_typical("ka", 1.0);
  p.set_typical("k12", 0.3);
  p.set_typical("k21", 0.1);
  p.set_typical("ke", 0.15);
  p.set_typical("v_central", 20.0);
  p.set_typical("v_peripheral", 60.0);
  p.iiv = {p.column("ka"), p.column("ke"), p.column("v_central")};
  p.omega = Eigen::MatrixXd::Identity(3, 3) * 0.09;
  return p;
}

ResidualError bench_residual() {
  ResidualError e;
  e.additive = 0.05;
  e.proportional = 0.1;
  return e;
}

// The design of both cells: the bench's regular dataset (o.doses oral doses every 6 h,
// o.observations observations every 4 h from 0, in the central compartment), without parameter
// columns; with `occasions`, a covariate column OCC numbering each subject's days (1, 2, ...)
// and a DV on every observation (the typical curve, for the VPC's observed percentiles).
std::shared_ptr<const Dataset> bench_design(const BenchOptions& o, bool occasions) {
  ParameterBatch unused;
  Dataset d = bench_dataset(o, false, unused);
  d.file = "bench:design";
  if (occasions) d.covariate_columns = {"OCC"};
  for (DatasetSubject& s : d.subjects)
    for (DatasetRecord& r : s.records) {
      if (!occasions) continue;
      r.covariates = {std::to_string(1 + static_cast<int>(r.time / 24.0))};
      if (r.evid == 0) {
        r.dv = 1.0 + 0.01 * r.time;
        r.mdv = false;
      }
    }
  return std::make_shared<const Dataset>(std::move(d));
}

SimulateOptions cpu_options(const BenchOptions& o) {
  SimulateOptions so;
  so.method = o.method;
  so.device = o.device;
  so.threads = o.threads;
  return so;
}

// Seconds of CPU time (user and system) of this process so far.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::int64_t>(u.ru_maxrss) * 1024;  // kilobytes on Linux
}

// --design simulate: `design_replicates` replicates of the design and of the grid population,
// `repeat` calls each after a warm-up, in this process.
void run_design_ratio(const BenchOptions& o, std::ostream& out) {
  DesignRun design;
  design.data = bench_design(o, false);
  design.population = bench_population(o.n, o.seed);
  design.residual = bench_residual();
  design.parameter_table = false;
  design.replicates = o.design_replicates;
  design.options = cpu_options(o);
  NullDesignSink dsink;
  RunSummary dsum;
  const std::int64_t observations = design_rows(design) * o.design_replicates;

  // The same doses and output times on a 1-hour grid (as --dataset grid), the same population.
  PopulationRun grid;
  grid.problem.grid = {1.0, 6 * o.doses};
  grid.problem.parameters = ParameterBatch(ModelKind::ThreeCompartment, 1);
  DoseEvent dose;
  dose.amount = 100.0;
  dose.every = 6.0;
  dose.repeat = o.doses - 1;
  grid.problem.doses = {dose};
  std::vector<std::int64_t> steps;
  for (int k = 0; k < o.observations; ++k) steps.push_back(4 * k);
  if (steps.back() > grid.problem.grid.steps)
    throw InvalidArgument(
        "--observations is " + std::to_string(o.observations) + ", but the grid of --doses " +
        std::to_string(o.doses) + " doses every 6 h holds at most " +
        std::to_string(grid.problem.grid.steps / 4 + 1) + " outputs every 4 h (--design simulate)");
  grid.problem.output = OutputTimes::at_steps(steps);
  grid.options = cpu_options(o);
  grid.population = bench_population(o.n, o.seed);
  grid.residual = bench_residual();
  grid.replicates = o.design_replicates;
  NullResultSink gsink;
  PopulationRunReport grep;
  const std::int64_t values = o.n * static_cast<std::int64_t>(steps.size()) * o.design_replicates;

  // The two runs take turns, each timed with its CPU seconds.
  double design_cpu = 0.0, grid_cpu = 0.0;
  const auto [td, tg] = time_calls_alternating(
      o.repeat,
      [&] {
        const double c0 = cpu_seconds();
        dsum = run_design(design, dsink);
        design_cpu += cpu_seconds() - c0;
      },
      [&] {
        const double c0 = cpu_seconds();
        grep = run_population(grid, gsink);
        grid_cpu += cpu_seconds() - c0;
      });
  design_cpu /= o.repeat + 1;
  grid_cpu /= o.repeat + 1;

  const double design_ns = td.best() * 1e9 / static_cast<double>(observations);
  const double grid_ns = tg.best() * 1e9 / static_cast<double>(values);
  std::ostringstream s;
  s.precision(6);
  s << "{\"workload\":\"design\",\"method\":\"" << to_string(dsum.method) << "\",\"device\":\""
    << to_string(dsum.device) << "\",\"n\":" << o.n << ",\"doses\":" << o.doses
    << ",\"observations\":" << o.observations << ",\"replicates\":" << o.design_replicates
    << ",\"design_observations\":" << observations << ",\"threads\":" << dsum.threads
    << ",\"repeat\":" << o.repeat << ",\"design_best_s\":" << td.best()
    << ",\"design_median_s\":" << median(td.times) << ",\"design_first_call_s\":" << td.first_call
    << ",\"design_ns_per_observation\":" << design_ns
    << ",\"design_prepare_s\":" << dsum.prepare_seconds
    << ",\"design_scan_s\":" << dsum.scan_seconds << ",\"grid_method\":\""
    << to_string(grep.summary.method) << "\",\"grid_values\":" << values
    << ",\"grid_best_s\":" << tg.best() << ",\"grid_median_s\":" << median(tg.times)
    << ",\"grid_ns_per_value\":" << grid_ns << ",\"design_over_grid\":" << design_ns / grid_ns
    << ",\"design_cpu_s\":" << design_cpu << ",\"grid_cpu_s\":" << grid_cpu
    << ",\"cpu_design_over_grid\":"
    << design_cpu / static_cast<double>(observations) / (grid_cpu / static_cast<double>(values))
    << "}\n";
  out << s.str();
}

// --design vpc: one VPC of `replicates` replicates of the design with IIV, IOV (an occasion per
// day, on ka and ke) and residual error, timed once (wall and CPU seconds: the CPU time of its
// threads tells a busy machine from a slow run); the process's peak resident memory after it.
void run_vpc_bench(const BenchOptions& o, std::ostream& out) {
  DesignRun run;
  run.data = bench_design(o, true);
  run.population = bench_population(o.n, o.seed);
  run.population.iov = {run.population.column("ka"), run.population.column("ke")};
  run.population.iov_omega = Eigen::MatrixXd::Identity(2, 2) * 0.04;
  run.occasion = "OCC";
  run.replicates = o.replicates;
  run.residual = bench_residual();
  run.options = cpu_options(o);
  const std::int64_t rss_before = peak_rss_bytes();
  const double t0 = now();
  const double c0 = cpu_seconds();
  const VpcTable table = run_vpc(run, VpcOptions{});
  const double wall = now() - t0;
  const double cpu = cpu_seconds() - c0;
  const std::int64_t rss = peak_rss_bytes();
  const std::int64_t simulated = design_rows(run) * o.replicates;
  std::ostringstream s;
  s.precision(6);
  s << "{\"workload\":\"vpc\",\"n\":" << o.n << ",\"doses\":" << o.doses
    << ",\"observations\":" << o.observations << ",\"replicates\":" << o.replicates
    << ",\"threads\":" << pkscan::resolve_threads(o.threads) << ",\"bins\":" << table.bins.size()
    << ",\"simulated_observations\":" << simulated << ",\"wall_s\":" << wall << ",\"cpu_s\":" << cpu
    << ",\"ns_per_observation\":" << wall * 1e9 / static_cast<double>(simulated)
    << ",\"peak_rss_before_bytes\":" << rss_before << ",\"peak_rss_bytes\":" << rss
    << ",\"peak_rss_mib\":" << static_cast<double>(rss) / (1024.0 * 1024.0) << "}\n";
  out << s.str();
}

}  // namespace

void run_design_bench(const BenchOptions& o, std::ostream& out) {
  if (o.doses < 1 || o.observations < 1)
    throw InvalidArgument("--doses and --observations must be >= 1");
  if (o.design == "simulate")
    run_design_ratio(o, out);
  else if (o.design == "vpc")
    run_vpc_bench(o, out);
  else
    throw InvalidArgument("--design is " + o.design + ", but must be simulate or vpc");
}

}  // namespace pkscan::bench
