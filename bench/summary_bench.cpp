// summary_bench: cost of the streaming summaries (TimeSummary::add) and the exposure metrics
// (subject_metrics) per subject-step, next to the cost of simulating the same chunk.
//
//   summary_bench [--chunk 2048] [--t 1000] [--reps 5] [--threads 0] [--total 0] [--conc]
//                 [--dense 100000]
//
// A three-compartment chunk (oral doses every 24 steps, log-normal parameters) of --chunk
// subjects x (--t + 1) output times, float64, is simulated once (dense output, amounts only
// unless --conc); then add() and subject_metrics() are timed on it --reps times. With --total N,
// a summaries-only run of N subjects is timed end to end (sample, simulate, add, metrics, chunk
// by chunk, as the population driver does) against simulating the same chunks alone. --dense N
// times one dense simulate() of N subjects at once (the reference "plain dense simulation").
// Prints one line per figure, in ns per subject-step (subject x output time).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <pkscan/engine.hpp>
#include <pkscan/population.hpp>
#include <pkscan/summary.hpp>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// CPU time of the whole process (all threads): robust against other processes on the machine.
double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

pkscan::PopulationSampler make_sampler(std::int64_t count) {
  pkscan::PopulationSpec spec(pkscan::ModelKind::ThreeCompartment, count, 2024);
  spec.set_typical("ka", 0.10);
  spec.set_typical("k12", 0.05);
  spec.set_typical("k21", 0.03);
  spec.set_typical("ke", 0.02);
  spec.set_typical("v_central", 20.0);
  spec.set_typical("v_peripheral", 60.0);
  spec.iiv = {spec.column("ka"), spec.column("ke"), spec.column("v_central")};
  Eigen::MatrixXd corr = Eigen::MatrixXd::Identity(3, 3);
  corr(1, 2) = corr(2, 1) = 0.3;
  spec.omega = pkscan::omega_from_sd({0.3, 0.3, 0.2}, corr);
  return pkscan::PopulationSampler(spec);
}

pkscan::Problem make_problem(std::int64_t steps) {
  pkscan::Problem p;
  p.discretization = pkscan::Discretization::Exact;
  p.grid = {1.0, steps};
  pkscan::DoseEvent d;
  d.compartment = 0;
  d.time = 0.0;
  d.amount = 100.0;
  d.every = 24.0;
  d.repeat = steps / 24;
  p.doses = {d};
  return p;
}

void fill(pkscan::Problem& p, const pkscan::PopulationSampler& s, std::int64_t first,
          std::int64_t n, int threads) {
  p.parameters = pkscan::ParameterBatch(pkscan::ModelKind::ThreeCompartment, n);
  s.sample(0, first, n, p.parameters.mutable_values(), nullptr, threads);
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t chunk = 2048, steps = 1000, total = 0, dense = 0;
  int reps = 5, threads = 0;
  bool conc = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "summary_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--chunk")
      chunk = std::atoll(next());
    else if (a == "--t")
      steps = std::atoll(next());
    else if (a == "--reps")
      reps = std::atoi(next());
    else if (a == "--threads")
      threads = std::atoi(next());
    else if (a == "--total")
      total = std::atoll(next());
    else if (a == "--dense")
      dense = std::atoll(next());
    else if (a == "--conc")
      conc = true;
    else {
      std::fprintf(stderr,
                   "usage: summary_bench [--chunk N] [--t T] [--reps R] [--threads J] "
                   "[--total N] [--dense N] [--conc]\n");
      return 2;
    }
  }
  const std::int64_t pop = std::max<std::int64_t>({chunk, total, dense, 1});
  const pkscan::PopulationSampler sampler = make_sampler(pop);
  pkscan::SimulateOptions so;
  so.method = pkscan::Method::Batched;
  so.device = pkscan::Device::Cpu;
  so.threads = threads;
  so.concentrations = conc;
  pkscan::Engine engine;
  pkscan::Problem p = make_problem(steps);
  fill(p, sampler, 0, chunk, threads);
  pkscan::SimulationResult r;
  engine.simulate_into(p, so, r);  // warm-up: schedule compiled, pages faulted in
  const double ss = static_cast<double>(chunk) * static_cast<double>(r.times());
  double best_sim = 1e300, best_add = 1e300, best_met = 1e300;
  double cpu_sim = 1e300, cpu_add = 1e300, cpu_met = 1e300;
  std::vector<double> metrics(static_cast<std::size_t>(chunk * pkscan::kMetricCount));
  pkscan::TimeSummaryOptions to;
  to.threads = threads;
  pkscan::TimeSummary summary(r.output_times(), r.compartments(), to);
  for (int k = 0; k < reps; ++k) {
    auto t0 = Clock::now();
    double c0 = cpu_seconds();
    engine.simulate_into(p, so, r);
    best_sim = std::min(best_sim, seconds_since(t0));
    cpu_sim = std::min(cpu_sim, cpu_seconds() - c0);
    t0 = Clock::now();
    c0 = cpu_seconds();
    summary.add(r);
    best_add = std::min(best_add, seconds_since(t0));
    cpu_add = std::min(cpu_add, cpu_seconds() - c0);
    t0 = Clock::now();
    c0 = cpu_seconds();
    pkscan::subject_metrics(r, 1, pkscan::last_dose_time(p.doses), metrics.data(), threads);
    best_met = std::min(best_met, seconds_since(t0));
    cpu_met = std::min(cpu_met, cpu_seconds() - c0);
  }
  std::printf("chunk %lld subjects x %lld times x 3 compartments, float64, %s, threads %d\n",
              static_cast<long long>(chunk), static_cast<long long>(r.times()),
              conc ? "concentration arrays" : "amounts / volume", r.summary().threads);
  std::printf("                                  wall ns/subject-step    cpu ns/subject-step\n");
  std::printf("simulate (dense, batched)     %12.3f %22.3f\n", 1e9 * best_sim / ss,
              1e9 * cpu_sim / ss);
  std::printf("TimeSummary::add              %12.3f %22.3f\n", 1e9 * best_add / ss,
              1e9 * cpu_add / ss);
  std::printf("subject_metrics               %12.3f %22.3f\n", 1e9 * best_met / ss,
              1e9 * cpu_met / ss);
  std::printf("add + metrics                 %8.3f ns/subject-step  (%.2fx the simulation)\n",
              1e9 * (best_add + best_met) / ss, (best_add + best_met) / best_sim);
  std::printf("summary state                 %8.1f MiB allocated\n",
              static_cast<double>(summary.state_bytes()) / (1 << 20));

  if (total > 0) {
    // End to end, chunk by chunk: simulation alone, then simulation + summaries.
    double t_sim = 0, t_all = 0;
    for (int pass = 0; pass < 2; ++pass) {
      pkscan::TimeSummary s2(r.output_times(), r.compartments(), to);
      const auto t0 = Clock::now();
      for (std::int64_t first = 0; first < total; first += chunk) {
        const std::int64_t n = std::min(chunk, total - first);
        fill(p, sampler, first, n, threads);
        engine.simulate_into(p, so, r);
        if (pass == 1) {
          s2.add(r);
          pkscan::subject_metrics(r, 1, pkscan::last_dose_time(p.doses), metrics.data(), threads);
        }
      }
      if (pass == 1) {
        const pkscan::TimeSummaryTable tab = s2.finish();
        if (tab.count != total) std::printf("unexpected count %lld\n", (long long)tab.count);
      }
      (pass == 0 ? t_sim : t_all) = seconds_since(t0);
    }
    const double tss = static_cast<double>(total) * static_cast<double>(r.times());
    std::printf(
        "run of %lld subjects in chunks of %lld: simulate only %.3f s (%.3f ns/ss), "
        "with summaries + metrics %.3f s (%.3f ns/ss): %.2fx\n",
        static_cast<long long>(total), static_cast<long long>(chunk), t_sim, 1e9 * t_sim / tss,
        t_all, 1e9 * t_all / tss, t_all / t_sim);
  }
  if (dense > 0) {
    pkscan::Problem q = make_problem(steps);
    fill(q, sampler, 0, dense, threads);
    pkscan::SimulationResult rd;
    pkscan::SimulateOptions sd = so;
    sd.concentrations = false;
    engine.simulate_into(q, sd, rd);
    double best = 1e300;
    for (int k = 0; k < std::max(1, reps / 2); ++k) {
      const auto t0 = Clock::now();
      engine.simulate_into(q, sd, rd);
      best = std::min(best, seconds_since(t0));
    }
    std::printf("dense simulate of %lld subjects at once: %.4f s (%.3f ns/subject-step)\n",
                static_cast<long long>(dense), best,
                1e9 * best / (static_cast<double>(dense) * static_cast<double>(rd.times())));
  }
  return 0;
}
