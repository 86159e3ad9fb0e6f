// Where the time of a dataset on device 'cuda' goes, measured without a GPU: the dataset of
// `pkscan-bench --dataset irregular` (bench/bench_dataset.cpp: bench_dataset) on device 'cpu',
// and on the device path run by the host system (Thrust's OpenMP system on the same cores: the
// test vehicle of the device code), whose time splits into the host's part (building each chunk:
// the plans, the parameter rows with their checks and eigendecompositions, the index columns; the
// bookkeeping around the device; the subjects the walk leaves to the host) and the device's part
// (the event walk and the copies, here on the host). The host's part is what a GPU cannot take
// away; host_over_cpu is its ratio to the whole CPU path, measured in the same process.
//
// The same split for the Predictor on the device (Predictor::set_device, the event walk): its
// log_likelihood_all without gradients on the dataset (DV 1, additive error) on the CPU and on
// the host system, whose host part is what stays on the host per call (the parameter rows, their
// checks and eigendecompositions, the likelihood from the predictions).
//
// Usage: build/bin/pkscan_dataset_host_split [N] [repeat]   (built with the tests; three JSON
// lines: the dataset, then the Predictor without and with gradients)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <pkscan/pkscan.hpp>
#include <pkscan/predictor.hpp>
#include <utility>
#include <vector>

#include "bench.hpp"
#include "device/device.hpp"
#include "device/runtime_host.hpp"

namespace {

// A positive whole number from the command line, or 0 when the text is not one.
long long positive(const char* text) {
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  return end != text && *end == '\0' && v > 0 ? v : 0;
}

int run(long long n, int repeat) {
  using namespace pkscan;
  detail::set_device_runtime_factory([]() -> std::unique_ptr<device::Runtime> {
    device::HostRuntimeOptions o;
    o.memory_bytes = std::size_t{16} << 30;
    return device::make_host_runtime(o);
  });
  bench::BenchOptions o;
  o.n = n;
  ParameterBatch params;
  const Dataset d = bench::bench_dataset(o, true, params);
  DatasetResult r;
  struct Best {
    double s = 1e300;
    RunSummary sum;
  } best[2];
  for (int k = 0; k < repeat + 1; ++k)  // the first round faults the result's pages in
    for (int dev = 0; dev < 2; ++dev) {
      SimulateOptions so;
      so.device = dev == 0 ? Device::Cpu : Device::Cuda;
      const auto t0 = std::chrono::steady_clock::now();
      simulate_dataset_into(d, params, so, r);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (k > 0 && s < best[dev].s) best[dev] = {s, r.summary};
    }
  const RunSummary& g = best[1].sum;
  const double host = best[1].s - g.device_kernel_seconds - g.device_transfer_seconds;
  std::printf(
      "{\"workload\":\"irregular\",\"n\":%lld,\"doses\":%d,\"observations\":%d,\"threads\":%d,"
      "\"cpu_s\":%.6g,\"device_host_system_s\":%.6g,\"kernel_s\":%.6g,\"transfer_s\":%.6g,"
      "\"host_s\":%.6g,\"host_over_cpu\":%.3f,\"host_subjects\":%lld}\n",
      static_cast<long long>(o.n), o.doses, o.observations, g.threads, best[0].s, best[1].s,
      g.device_kernel_seconds, g.device_transfer_seconds, host, host / best[0].s,
      static_cast<long long>(g.device_host_subjects));

  Dataset dl = d;
  for (DatasetSubject& subj : dl.subjects)
    for (DatasetRecord& rec : subj.records)
      if (rec.evid == 0) rec.dv = 1.0, rec.mdv = false;
  Predictor cpu(dl, ModelKind::ThreeCompartment);
  Predictor dev(std::move(dl), ModelKind::ThreeCompartment);
  dev.set_device(Device::Cuda);
  const ErrorModel error{ErrorModelKind::Additive};
  const double sigma = 0.5;
  std::vector<double> rows;
  for (std::int64_t s = 0; s < params.subjects(); ++s)
    rows.insert(rows.end(), params.row(s), params.row(s) + params.parameters());
  std::vector<double> gradient(rows.size());
  for (const bool with_gradient : {false, true}) {
    double best_ll[2] = {1e300, 1e300};
    Predictor::DeviceCall call;
    for (int k = 0; k < repeat + 1; ++k)
      for (int which = 0; which < 2; ++which) {
        const Predictor& p = which == 0 ? cpu : dev;
        const auto t0 = std::chrono::steady_clock::now();
        p.log_likelihood_all(rows.data(), error, &sigma, nullptr,
                             with_gradient ? gradient.data() : nullptr, nullptr);
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (k > 0 && s < best_ll[which]) {
          best_ll[which] = s;
          if (which == 1) call = dev.last_device_call();
        }
      }
    const double host = best_ll[1] - call.kernel_seconds - call.transfer_seconds;
    std::printf(
        "{\"workload\":\"predictor\",\"entry\":\"%s\",\"n\":%lld,"
        "\"doses\":%d,\"observations\":%d,\"threads\":%d,\"cpu_s\":%.6g,"
        "\"device_host_system_s\":%.6g,\"kernel_s\":%.6g,\"transfer_s\":%.6g,"
        "\"host_s\":%.6g,\"host_over_cpu\":%.3f,\"device_subjects\":%lld}\n",
        with_gradient ? "log_likelihood_all+gradient" : "log_likelihood_all",
        static_cast<long long>(o.n), o.doses, o.observations, resolve_threads(0), best_ll[0],
        best_ll[1], call.kernel_seconds, call.transfer_seconds, host, host / best_ll[0],
        static_cast<long long>(call.device_subjects));
  }
  return 0;
}

}  // namespace

// Exit status: 0 success; 2 bad arguments; 1 any other failure. Errors are one line on stderr.
int main(int argc, char** argv) {
  const long long n = argc > 1 ? positive(argv[1]) : 100000;
  const long long repeat = argc > 2 ? positive(argv[2]) : 5;
  if (argc > 3 || n == 0 || repeat == 0 || repeat > 1000) {
    std::fprintf(stderr,
                 "pkscan_dataset_host_split: error: usage: pkscan_dataset_host_split [N >= 1] "
                 "[repeat in 1..1000]\n");
    return 2;
  }
  try {
    return run(n, static_cast<int>(repeat));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pkscan_dataset_host_split: error: %s\n", e.what());
    return 1;
  }
}
