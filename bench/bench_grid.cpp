// pkscan-bench's grid cells (bench.hpp): the NumPy workload through Engine::simulate_into beside
// its ceilings (memory fill, streaming fill, the probe's recurrence, one subject and one step,
// and on device 'cuda' the device's copies), and the summaries-only cell (--output summaries);
// run_bench, which picks the workload.
#include <emmintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <pkscan/summary.hpp>
#include <pkscan/threads.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "bench.hpp"
#include "device/copy_timing.hpp"

namespace pkscan::bench {

namespace {

// time_calls of Engine::simulate_into, with the summary of the fastest call (its device times).
struct TimedCalls {
  Timings t;
  RunSummary best;
};
TimedCalls time_simulations(int repeat, Engine& e, const Problem& p, const SimulateOptions& so,
                            SimulationResult& r) {
  std::vector<RunSummary> runs;  // runs[0]: the warm-up call
  TimedCalls c;
  c.t = time_calls(repeat, [&] {
    e.simulate_into(p, so, r);
    runs.push_back(r.summary());
  });
  c.best = runs[1 + static_cast<std::size_t>(std::min_element(c.t.times.begin(), c.t.times.end()) -
                                             c.t.times.begin())];
  return c;
}

// Best and median seconds of a write-only parallel fill of `bytes` (the memory bandwidth the
// output could reach at best), on the same threads, into a buffer touched beforehand.
std::pair<double, double> fill_seconds(std::size_t bytes, int threads, int repeat) {
  const std::size_t n = bytes / sizeof(double);
  std::unique_ptr<double[]> buf(new double[std::max<std::size_t>(n, 1)]);
  double value = 0.0;
  const Timings t = time_calls(repeat, [&] {  // the warm-up pass faults the pages in
    value += 1.0;
#pragma omp parallel num_threads(threads)
    {
      const int nt = omp_get_num_threads(), id = omp_get_thread_num();
      const std::size_t lo = n * static_cast<std::size_t>(id) / static_cast<std::size_t>(nt);
      const std::size_t hi = n * static_cast<std::size_t>(id + 1) / static_cast<std::size_t>(nt);
      std::fill(buf.get() + lo, buf.get() + hi, value);
    }
  });
  volatile double sink = buf[n / 2];
  (void)sink;
  return {t.best(), median(t.times)};
}

// Best seconds of a non-temporal parallel write of `bytes` (streaming stores that bypass the
// caches: what the machine can write at most), on the same threads, after a first pass that
// faults the pages in. The memory ceiling of a cell.
double stream_fill_seconds(std::size_t bytes, int threads, int repeat) {
  const std::size_t n = bytes / sizeof(double);
  std::unique_ptr<double[]> buf(new double[std::max<std::size_t>(n, 2) + 2]);
  double* const base = reinterpret_cast<double*>(
      (reinterpret_cast<std::uintptr_t>(buf.get()) + 15) / 16 * 16);  // 16-byte aligned
  double value = 0.0;
  const Timings t = time_calls(repeat, [&] {
    value += 1.0;
#pragma omp parallel num_threads(threads)
    {
      const int nt = omp_get_num_threads(), id = omp_get_thread_num();
      const std::size_t lo =
          n * static_cast<std::size_t>(id) / static_cast<std::size_t>(nt) / 2 * 2;
      const std::size_t hi = id + 1 == nt ? n
                                          : n * static_cast<std::size_t>(id + 1) /
                                                static_cast<std::size_t>(nt) / 2 * 2;
      const __m128d v = _mm_set1_pd(value);
      std::size_t i = lo;
      for (; i + 2 <= hi; i += 2) _mm_stream_pd(base + i, v);
      for (; i < hi; ++i) base[i] = value;
      _mm_sfence();
    }
  });
  volatile double sink = base[n / 2];
  (void)sink;
  return t.best();
}

// A message as a JSON string's contents.
std::string json_escape(const std::string& m) {
  std::string e;
  for (const char ch : m) {
    if (ch == '"' || ch == '\\') e += '\\';
    if (static_cast<unsigned char>(ch) >= 0x20) e += ch;
  }
  return e;
}

// The regime of a cell: the ceiling that takes longest is what bounds it (memory: writing the
// output with streaming stores; compute: the hand-written probe's recurrence with no output, on
// the same subjects, steps and threads, or for the power path its own run without output;
// overhead: the same entry point on one subject and one step). When the next ceiling is within 20%
// of it, both bound the cell: "memory/compute".
// A device 'cuda' cell has a fourth ceiling, the copy of the output to the host ("transfer"),
// and its memory ceiling is the device's: writing the output at the device-to-device copy rate.
std::string regime_of(std::vector<std::pair<double, const char*>> c) {
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string r = c[0].second;
  if (c[1].first >= 0.8 * c[0].first) r += std::string("/") + c[1].second;
  return r;
}

// The device ceilings of a cell writing `out_bytes` (device 'cuda'): seconds to write them at the
// device-to-device copy rate (a copy reads and writes its bytes) and to copy them to the host,
// from copies of at most 2 GiB measured in this process (scaled linearly above that).
struct DeviceCeilings {
  double d2d_gb_per_s = 0.0;  // bytes read plus bytes written
  double d2h_gb_per_s = 0.0;
  double write_s = 0.0;
  double transfer_s = 0.0;
};
DeviceCeilings device_ceilings(std::size_t out_bytes, int repeat) {
  const std::size_t b = std::min<std::size_t>(std::max<std::size_t>(out_bytes, 1), 2ull << 30);
  const detail::DeviceCopySeconds c = detail::measure_device_copies(b, repeat);
  DeviceCeilings d;
  d.d2d_gb_per_s = 2.0 * static_cast<double>(b) / c.device_to_device / 1e9;
  d.d2h_gb_per_s = static_cast<double>(b) / c.device_to_host / 1e9;
  d.write_s = static_cast<double>(out_bytes) / (d.d2d_gb_per_s * 1e9);
  d.transfer_s = static_cast<double>(out_bytes) / (d.d2h_gb_per_s * 1e9);
  return d;
}

}  // namespace

Problem bench_problem(const BenchOptions& o) {
  Problem p;
  p.discretization = Discretization::Euler;
  p.grid = {1.0, o.t};
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, o.n);
  std::mt19937_64 rng(o.seed);
  std::normal_distribution<double> z(0.0, 1.0);
  for (std::int64_t s = 0; s < o.n; ++s) {
    const double f = std::exp(0.3 * z(rng));
    p.parameters.set("ka", s, 0.10 * f);
    p.parameters.set("k12", s, 0.05 * f);
    p.parameters.set("k21", s, 0.03 / f);
    p.parameters.set("ke", s, 0.02 * f);
    p.parameters.set("v_central", s, 1.0);
    p.parameters.set("v_peripheral", s, 1.0);
  }
  DoseEvent d;
  d.compartment = 0;
  d.amount = 100.0;
  d.every = 24.0;
  d.repeat = o.t / 24;
  p.doses = {d};
  if (o.output == "final") {
    p.output = OutputTimes::at_steps({o.t});
  } else if (o.output.rfind("sparse:", 0) == 0) {
    const std::int64_t k = std::atoll(o.output.c_str() + 7);
    if (k < 1 || k > o.t)
      throw InvalidArgument("--output is " + o.output + ", but sparse:K needs 1 <= K <= --t");
    std::vector<std::int64_t> steps;
    for (std::int64_t i = 1; i <= k; ++i) steps.push_back(i * o.t / k);
    steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    p.output = OutputTimes::at_steps(steps);
  } else if (o.output != "dense") {
    throw InvalidArgument("--output is " + o.output +
                          ", but must be dense, final, sparse:K or summaries");
  }
  return p;
}

PopulationRun bench_population_run(const BenchOptions& o) {
  PopulationRun run;
  run.problem = bench_problem(o);
  run.options.method = o.method;
  run.options.device = o.device;
  run.options.precision = o.precision;
  run.options.threads = o.threads;
  return run;
}

namespace {

// The options of the grid cells: the bench's method, device, precision and threads, amounts.
SimulateOptions grid_options(const BenchOptions& o) {
  SimulateOptions so;
  so.method = o.method;
  so.device = o.device;
  so.precision = o.precision;
  so.threads = o.threads;
  so.concentrations = false;
  return so;
}

// The summaries-only cell (--output summaries): Engine::summarize_into on the bench problem
// (every step an output time, the sketch from the start, metrics of the central compartment),
// through the fused path, with the time of its parts (RunSummary::fused_*) per call and the
// probe's no-output recurrence on the same subjects and threads beside it; on device cuda
// through the device summary, with the kernel and transfer seconds of the last call.
void run_summaries_bench(const BenchOptions& o, std::ostream& out) {
  BenchOptions dense = o;
  dense.output = "dense";
  const Problem p = bench_problem(dense);
  SimulateOptions so = grid_options(o);
  if (so.method == Method::Auto) so.method = Method::Batched;  // the fused path's backend
  std::vector<double> times(static_cast<std::size_t>(o.t) + 1);
  for (std::int64_t i = 0; i <= o.t; ++i) times[static_cast<std::size_t>(i)] = p.grid.time(i);
  TimeSummaryOptions to;
  to.exact_values = 0;  // the sketch from the start, as the fused path needs
  std::vector<double> metrics(static_cast<std::size_t>(o.n) * kMetricCount);
  Engine engine;
  SimulationResult r;
  bool fused = true;
  const double last = last_dose_time(p.doses);
  // Each part's best over the calls (the warm-up's included: it is never the best), as the
  // call's time and the probe's are each the best of their repeats.
  double best_part[3] = {1e300, 1e300, 1e300};
  const Timings t = time_calls(o.repeat, [&] {
    TimeSummary summary(times, 3, to);
    fused = engine.summarize_into(p, so, summary, 1, last, metrics.data(), r) && fused;
    const RunSummary& c = r.summary();
    best_part[0] = std::min(best_part[0], c.fused_recurrence_seconds);
    best_part[1] = std::min(best_part[1], c.fused_sums_seconds);
    best_part[2] = std::min(best_part[2], c.fused_metrics_seconds);
  });
  const RunSummary& rs = r.summary();
  const double threads = rs.threads;
  const double probe_s =
      probe_recurrence_seconds(o.n, o.t, o.precision, rs.threads, o.repeat, o.seed);
  const double recurrence_s = best_part[0] / threads;
  std::ostringstream s;
  s.precision(6);
  s << "{\"workload\":\"summaries\",\"method\":\"" << to_string(rs.method) << "\",\"device\":\""
    << to_string(rs.device) << "\",\"fused\":" << (fused ? "true" : "false") << ",\"precision\":\""
    << (o.precision == Precision::Float64 ? "float64" : "float32") << "\",\"n\":" << o.n
    << ",\"t\":" << o.t << ",\"threads\":" << rs.threads << ",\"repeat\":" << o.repeat
    << ",\"best_s\":" << t.best() << ",\"median_s\":" << median(t.times)
    << ",\"ns_per_subject_step\":"
    << t.best() * 1e9 / (static_cast<double>(o.n) * static_cast<double>(o.t))
    << ",\"recurrence_s\":" << recurrence_s << ",\"sums_sketch_s\":" << best_part[1] / threads
    << ",\"metrics_s\":" << best_part[2] / threads
    << ",\"last_recurrence_s\":" << rs.fused_recurrence_seconds / threads
    << ",\"last_sums_sketch_s\":" << rs.fused_sums_seconds / threads
    << ",\"last_metrics_s\":" << rs.fused_metrics_seconds / threads
    << ",\"last_call_s\":" << rs.prepare_seconds + rs.scan_seconds << ",\"probe_s\":" << probe_s
    << ",\"recurrence_over_probe\":" << recurrence_s / probe_s;
  if (rs.device == Device::Cuda)  // summarised on the device: its kernels and copies (last call)
    s << ",\"kernel_s\":" << rs.device_kernel_seconds
      << ",\"transfer_s\":" << rs.device_transfer_seconds;
  s << "}\n";
  out << s.str();
}

}  // namespace

void run_bench(const BenchOptions& o, std::ostream& out) {
  if (o.n < 1 || o.t < 1) throw InvalidArgument("--n and --t must be >= 1");
  if (o.repeat < 1) throw InvalidArgument("--repeat must be >= 1");
  if (!o.fit.empty()) {
    if (!o.dataset.empty() || !o.write_dir.empty() || !o.design.empty())
      throw InvalidArgument(
          "--fit is a workload of its own; give it without --dataset, --write or --design");
    run_fit_bench(o, out);
    return;
  }
  if (!o.design.empty()) {
    if (!o.dataset.empty() || !o.write_dir.empty() || o.output == "summaries" ||
        o.output == "exact")
      throw InvalidArgument(
          "--design is a workload of its own; give it without --dataset, --write or "
          "--output summaries or exact");
    run_design_bench(o, out);
    return;
  }
  if (!o.write_dir.empty()) {
    if (!o.dataset.empty())
      throw InvalidArgument("--write and --dataset are two workloads; give one of them");
    run_write_bench(o, out);
    return;
  }
  if (o.output == "exact") {
    if (!o.dataset.empty())
      throw InvalidArgument("--output exact and --dataset are two workloads; give one of them");
    run_exact_bench(o, out);
    return;
  }
  if (o.output == "summaries") {
    if (!o.dataset.empty())
      throw InvalidArgument("--output summaries and --dataset are two workloads; give one of them");
    run_summaries_bench(o, out);
    return;
  }
  if (!o.dataset.empty()) {
    if (o.doses < 1 || o.observations < 1)
      throw InvalidArgument("--doses and --observations must be >= 1");
    if (o.dataset == "likelihood")
      run_likelihood_bench(o, out);
    else
      run_dataset_bench(o, out);
    return;
  }
  const Problem p = bench_problem(o);
  const SimulateOptions so = grid_options(o);
  // One Engine across the calls, as fitting code and sweeps use it: the compiled schedule and the
  // result storage are reused; the warm-up call compiles, allocates and faults the pages in.
  Engine engine;
  SimulationResult r;
  const TimedCalls calls = time_simulations(o.repeat, engine, p, so, r);
  const Timings& t = calls.t;
  const RunSummary& best_run = calls.best;
  const double best = t.best();
  const std::size_t scalar = o.precision == Precision::Float64 ? 8 : 4;
  const std::size_t out_bytes =
      static_cast<std::size_t>(r.subjects()) * static_cast<std::size_t>(r.times()) * 3 * scalar;
  const int threads = r.summary().threads;
  const auto fill = fill_seconds(out_bytes, pkscan::resolve_threads(o.threads), o.repeat);
  const double stream_s =
      stream_fill_seconds(out_bytes, pkscan::resolve_threads(o.threads), o.repeat);
  // The compute ceiling: the same problem reporting only the final state (best of `repeat`).
  double compute_kernel_s = 0.0;  // device 'cuda': the best final-state call's kernel seconds
  auto best_of = [&](const Problem& q, const SimulateOptions& qo) {
    Engine e;
    SimulationResult qr;
    const TimedCalls c = time_simulations(o.repeat, e, q, qo, qr);
    compute_kernel_s = c.best.device_kernel_seconds;
    return c.t.best();
  };
  Problem final_only = p;
  final_only.output = OutputTimes::at_steps({o.t});
  SimulateOptions compute_options = so;
  compute_options.method = r.summary().method;  // the path that ran, not auto's choice again
  compute_options.device = r.summary().device;
  const double compute_s = best_of(final_only, compute_options);
  const double final_kernel_s = compute_kernel_s;
  // The overhead ceiling: one subject, one step, through the same entry point.
  BenchOptions tiny = o;
  tiny.n = 1;
  tiny.t = 1;
  tiny.output = "dense";
  const double overhead_s = best_of(bench_problem(tiny), compute_options);
  // The arithmetic ceiling: the hand-written probe's no-output recurrence on the same subjects,
  // steps, precision and threads (bench/bench_probe.cpp). The power path does not step through
  // the recurrence (it jumps by powers of K), so its own run without output is its ceiling.
  const double probe_s = probe_recurrence_seconds(o.n, o.t, o.precision, threads, o.repeat, o.seed);
  // On device 'cuda' the arithmetic ceiling is the device's: the final-state call's kernels (the
  // rest of that call is host work and copies).
  const bool cuda = r.summary().device == Device::Cuda;
  const double arithmetic_s = cuda                                  ? final_kernel_s
                              : r.summary().method == Method::Power ? compute_s
                                                                    : probe_s;
  DeviceCeilings dev;
  std::string ceilings_error;  // a device too small for the copies: the cell without them
  if (cuda) {
    try {
      dev = device_ceilings(out_bytes, o.repeat);
    } catch (const DeviceError& e) {
      ceilings_error = e.what();
    }
  }
  const bool dev_ok = cuda && ceilings_error.empty();
  const std::string regime =
      dev_ok
          ? regime_of({{dev.transfer_s, "transfer"},
                       {dev.write_s, "memory"},
                       {arithmetic_s, "compute"},
                       {overhead_s, "overhead"}})
          : regime_of({{stream_s, "memory"}, {arithmetic_s, "compute"}, {overhead_s, "overhead"}});
  const double ceiling_s = dev_ok
                               ? std::max({dev.transfer_s, dev.write_s, arithmetic_s, overhead_s})
                               : std::max({stream_s, arithmetic_s, overhead_s});
  std::ostringstream s;
  s.precision(6);
  s << "{\"method\":\"" << to_string(r.summary().method) << "\",\"device\":\""
    << to_string(r.summary().device) << "\",\"precision\":\""
    << (o.precision == Precision::Float64 ? "float64" : "float32") << "\",\"n\":" << o.n
    << ",\"t\":" << o.t << ",\"output\":\"" << o.output << "\",\"output_times\":" << r.times()
    << ",\"threads\":" << threads << ",\"repeat\":" << o.repeat << ",\"best_s\":" << best
    << ",\"median_s\":" << median(t.times) << ",\"first_call_s\":" << t.first_call
    << ",\"ns_per_subject_step\":"
    << best * 1e9 / (static_cast<double>(o.n) * static_cast<double>(o.t))
    << ",\"last_prepare_s\":" << r.summary().prepare_seconds
    << ",\"last_scan_s\":" << r.summary().scan_seconds << ",\"output_bytes\":" << out_bytes
    << ",\"output_gb_per_s\":" << static_cast<double>(out_bytes) / best / 1e9
    << ",\"fill_best_s\":" << fill.first
    << ",\"fill_gb_per_s\":" << static_cast<double>(out_bytes) / fill.first / 1e9
    << ",\"output_over_fill\":" << fill.first / best
    << ",\"stream_fill_gb_per_s\":" << static_cast<double>(out_bytes) / stream_s / 1e9
    << ",\"compute_s\":" << compute_s << ",\"probe_s\":" << probe_s
    << ",\"over_probe\":" << best / probe_s << ",\"overhead_s\":" << overhead_s << ",\"regime\":\""
    << regime << "\",\"ceiling_over_time\":" << ceiling_s / best
    << ",\"non_finite_subjects\":" << r.summary().non_finite_subjects;
  if (cuda) {  // the best call's device time and transfer time, against the device's ceilings
    const RunSummary& rs = best_run;
    s << ",\"final_kernel_s\":" << final_kernel_s << ",\"host_s\":"
      << std::max(0.0, best - rs.device_kernel_seconds - rs.device_transfer_seconds)
      << ",\"kernel_s\":" << rs.device_kernel_seconds
      << ",\"transfer_s\":" << rs.device_transfer_seconds;
    if (dev_ok)
      s << ",\"d2d_gb_per_s\":" << dev.d2d_gb_per_s << ",\"d2h_gb_per_s\":" << dev.d2h_gb_per_s
        << ",\"device_write_s\":" << dev.write_s
        << ",\"device_write_over_kernel\":" << dev.write_s / rs.device_kernel_seconds
        << ",\"transfer_ceiling_s\":" << dev.transfer_s
        << ",\"transfer_ceiling_over_transfer\":" << dev.transfer_s / rs.device_transfer_seconds;
    else
      s << ",\"device_ceilings\":\"" << json_escape(ceilings_error) << "\"";
  }
  s << "}\n";
  out << s.str();
}

}  // namespace pkscan::bench
