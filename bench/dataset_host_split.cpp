// Where the time of a dataset on device 'cuda' goes, measured without a GPU: the dataset of
// `pkscan bench --dataset irregular` (apps/bench.cpp: bench_dataset) on device 'cpu', and on the
// device path run by the host system (Thrust's OpenMP system on the same cores: the test vehicle
// of the device code), whose time splits into the host's part (recording every subject's
// program: the plan, the parameter rows, the event logic, the eigendecompositions; and the
// bookkeeping around the device) and the device's part (kernel and copies, here on the host).
// The host's part is what a GPU cannot take away with this design; record_over_cpu is its ratio
// to the whole CPU path, measured in the same process.
//
// Usage: pkscan_dataset_host_split [N] [repeat]   (built with the tests; one JSON line)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <pkscan/pkscan.hpp>

#include "bench.hpp"
#include "device/runtime_host.hpp"
#include "grid/device_backend.hpp"

int main(int argc, char** argv) {
  using namespace pkscan;
  detail::set_device_runtime_factory([]() -> std::unique_ptr<device::Runtime> {
    device::HostRuntimeOptions o;
    o.memory_bytes = std::size_t{16} << 30;
    return device::make_host_runtime(o);
  });
  cli::BenchOptions o;
  o.n = argc > 1 ? std::atoll(argv[1]) : 100000;
  const int repeat = argc > 2 ? std::atoi(argv[2]) : 5;
  ParameterBatch params;
  const Dataset d = cli::bench_dataset(o, true, params);
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
      simulate_dataset_into(d, ModelKind::ThreeCompartment, params, so, r);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (k > 0 && s < best[dev].s) best[dev] = {s, r.summary};
    }
  const RunSummary& g = best[1].sum;
  const double record = best[1].s - g.device_kernel_seconds - g.device_transfer_seconds;
  std::printf(
      "{\"workload\":\"irregular\",\"n\":%lld,\"doses\":%d,\"observations\":%d,\"threads\":%d,"
      "\"cpu_s\":%.6g,\"device_host_system_s\":%.6g,\"kernel_s\":%.6g,\"transfer_s\":%.6g,"
      "\"record_s\":%.6g,\"record_over_cpu\":%.3f}\n",
      static_cast<long long>(o.n), o.doses, o.observations, g.threads, best[0].s, best[1].s,
      g.device_kernel_seconds, g.device_transfer_seconds, record, record / best[0].s);
}
