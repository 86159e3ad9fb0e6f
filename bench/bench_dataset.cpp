// pkscan-bench's dosing-records workloads (bench.hpp): NONMEM-style datasets through the exact
// event engine against the same doses and output times on a grid (--dataset irregular|regular|
// grid), and the fitting call, Predictor::log_likelihood_all with gradients (--dataset
// likelihood).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <pkscan/predictor.hpp>
#include <pkscan/threads.hpp>
#include <random>
#include <sstream>
#include <vector>

#include "bench.hpp"

namespace pkscan::bench {

Dataset bench_dataset(const BenchOptions& o, bool irregular, ParameterBatch& params) {
  Dataset d;
  d.file = irregular ? "bench:irregular" : "bench:regular";
  std::mt19937_64 rng(o.seed + 17);
  std::uniform_real_distribution<double> jitter(-1.0, 1.0);
  const double horizon = 6.0 * o.doses;
  std::uniform_real_distribution<double> when(0.0, horizon);
  std::normal_distribution<double> z(0.0, 1.0);
  params = ParameterBatch(ModelKind::ThreeCompartment, o.n);
  d.subjects.resize(static_cast<std::size_t>(o.n));
  for (std::int64_t s = 0; s < o.n; ++s) {
    const double f = std::exp(0.3 * z(rng));
    params.set("ka", s, 1.0 * f);
    params.set("k12", s, 0.3 * f);
    params.set("k21", s, 0.1 / f);
    params.set("ke", s, 0.15 * f);
    params.set("v_central", s, 20.0 * f);
    params.set("v_peripheral", s, 60.0);
    DatasetSubject& subj = d.subjects[static_cast<std::size_t>(s)];
    subj.id = std::to_string(s + 1);
    for (int k = 0; k < o.doses; ++k) {
      DatasetRecord r;
      r.time = std::max(0.0, 6.0 * k + (irregular && k > 0 ? jitter(rng) : 0.0));
      r.evid = 1;
      r.amt = 100.0;
      r.cmt = 1;
      r.mdv = true;
      subj.records.push_back(r);
    }
    for (int k = 0; k < o.observations; ++k) {
      DatasetRecord r;
      r.time = irregular ? when(rng) : 4.0 * k;
      r.evid = 0;
      r.cmt = 2;
      subj.records.push_back(r);
    }
    std::stable_sort(
        subj.records.begin(), subj.records.end(),
        [](const DatasetRecord& a, const DatasetRecord& b) { return a.time < b.time; });
  }
  return d;
}

void run_dataset_bench(const BenchOptions& o, std::ostream& out) {
  SimulateOptions so;
  so.method = o.method;
  so.device = o.device;
  so.threads = o.threads;
  Timings t;
  RunSummary sum;
  std::int64_t rows = 0;
  if (o.dataset == "grid") {
    // The same work on a regular grid: doses every 6 h, outputs every 4 h, dt = 1 h.
    Problem p;
    p.grid = {1.0, 6 * o.doses};
    ParameterBatch params;
    bench_dataset(o, false, params);
    p.parameters = params;
    DoseEvent d;
    d.amount = 100.0;
    d.every = 6.0;
    d.repeat = o.doses - 1;
    p.doses = {d};
    std::vector<std::int64_t> steps;
    for (int k = 0; k < o.observations && 4 * k <= p.grid.steps; ++k) steps.push_back(4 * k);
    p.output = OutputTimes::at_steps(steps);
    Engine engine;
    SimulationResult r;
    t = time_calls(o.repeat, [&] { engine.simulate_into(p, so, r); });
    sum = r.summary();
    rows = r.subjects() * r.times();
  } else if (o.dataset == "irregular" || o.dataset == "regular") {
    ParameterBatch params;
    const Dataset d = bench_dataset(o, o.dataset == "irregular", params);
    DatasetResult r;  // reused across calls, as the grid workload reuses its result
    t = time_calls(o.repeat, [&] { simulate_dataset_into(d, params, so, r); });
    sum = r.summary;
    rows = r.rows();
  } else {
    throw InvalidArgument("--dataset is " + o.dataset +
                          ", but must be irregular, regular, grid or likelihood");
  }
  const double best = t.best();
  std::ostringstream s;
  s.precision(6);
  s << "{\"workload\":\"" << o.dataset << "\",\"method\":\"" << to_string(sum.method)
    << "\",\"device\":\"" << to_string(sum.device) << "\",\"n\":" << o.n << ",\"doses\":" << o.doses
    << ",\"observations\":" << o.observations << ",\"rows\":" << rows
    << ",\"threads\":" << sum.threads << ",\"repeat\":" << o.repeat << ",\"best_s\":" << best
    << ",\"median_s\":" << median(t.times) << ",\"first_call_s\":" << t.first_call
    << ",\"us_per_subject\":" << best * 1e6 / static_cast<double>(o.n);
  if (sum.device == Device::Cuda)  // the last call's device seconds
    s << ",\"kernel_s\":" << sum.device_kernel_seconds
      << ",\"transfer_s\":" << sum.device_transfer_seconds
      << ",\"host_subjects\":" << sum.device_host_subjects;
  s << "}\n";
  out << s.str();
}

// The fitting workload: Predictor::log_likelihood_all with gradients on the regular dataset
// (DV 1, additive error), `repeat` calls, beside its arithmetic measured in the same run: the
// same subjects through Predictor::log_likelihood one after another on this thread with one
// reused workspace. The difference is the call's overhead (workspaces, threads, copies).
// With --device cuda: the same call on the device (Predictor::set_device), beside the CPU's in the
// same run, with the device call's kernel, copy and host seconds.
void run_likelihood_bench(const BenchOptions& o, std::ostream& out) {
  ParameterBatch params;
  Dataset d = bench_dataset(o, false, params);
  for (DatasetSubject& subj : d.subjects)
    for (DatasetRecord& r : subj.records)
      if (r.evid == 0) r.dv = 1.0, r.mdv = false;
  Predictor pred(std::move(d), ModelKind::ThreeCompartment);
  const ErrorModel error{ErrorModelKind::Additive};
  const double sigma = 0.5;
  const std::size_t np = static_cast<std::size_t>(pred.parameters());
  std::vector<double> gradient(static_cast<std::size_t>(pred.subjects()) * np), sg(1);
  std::ostringstream s;
  s.precision(6);
  if (o.device == Device::Cuda) {
    auto value = [&] {
      return pred.log_likelihood_all(params.row(0), error, &sigma, nullptr, gradient.data(),
                                     sg.data(), o.threads);
    };
    const Timings t_cpu = time_calls(o.repeat, value);
    pred.set_device(Device::Cuda);
    Timings t_dev;
    Predictor::DeviceCall call;
    double t0 = now();
    value();
    t_dev.first_call = now() - t0;
    for (int k = 0; k < o.repeat; ++k) {
      t0 = now();
      value();
      t_dev.times.push_back(now() - t0);
      if (t_dev.times.back() <= t_dev.best()) call = pred.last_device_call();
    }
    const double best = t_dev.best();
    s << "{\"workload\":\"likelihood\",\"entry\":\"log_likelihood_all+gradient\","
      << "\"device\":\"cuda\""
      << ",\"n\":" << o.n << ",\"doses\":" << o.doses << ",\"observations\":" << o.observations
      << ",\"threads\":" << pkscan::resolve_threads(o.threads) << ",\"repeat\":" << o.repeat
      << ",\"best_s\":" << best << ",\"median_s\":" << median(t_dev.times)
      << ",\"first_call_s\":" << t_dev.first_call << ",\"kernel_s\":" << call.kernel_seconds
      << ",\"transfer_s\":" << call.transfer_seconds
      << ",\"host_s\":" << best - call.kernel_seconds - call.transfer_seconds
      << ",\"device_subjects\":" << call.device_subjects << ",\"cpu_best_s\":" << t_cpu.best()
      << ",\"cpu_over_device\":" << t_cpu.best() / best << "}\n";
    out << s.str();
    return;
  }
  auto all = [&] {
    return pred.log_likelihood_all(params.row(0), error, &sigma, nullptr, gradient.data(),
                                   sg.data(), o.threads);
  };
  const std::unique_ptr<Predictor::Workspace> ws = pred.make_workspace();
  auto loop = [&] {
    double total = 0.0;
    for (std::int64_t s = 0; s < pred.subjects(); ++s)
      total += pred.log_likelihood(s, params.row(s), error, &sigma, gradient.data() + s * np,
                                   sg.data(), *ws);
    return total;
  };
  const Timings t_all = time_calls(o.repeat, all), t_loop = time_calls(o.repeat, loop);
  const double best = t_all.best();
  const double arithmetic = t_loop.best();
  s << "{\"workload\":\"likelihood\",\"entry\":\"log_likelihood_all+gradient\",\"n\":" << o.n
    << ",\"doses\":" << o.doses << ",\"observations\":" << o.observations
    << ",\"threads\":" << pkscan::resolve_threads(o.threads) << ",\"repeat\":" << o.repeat
    << ",\"best_s\":" << best << ",\"median_s\":" << median(t_all.times)
    << ",\"arithmetic_best_s\":" << arithmetic << ",\"overhead_us\":" << (best - arithmetic) * 1e6
    << "}\n";
  out << s.str();
}

}  // namespace pkscan::bench
