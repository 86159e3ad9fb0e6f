#pragma once
// The copy rates of device 'cuda', measured: the device ceilings of pkscan-bench's cuda cells
// (bench/bench_grid.cpp, docs/performance.md). Internal: the benchmarks reach it through the
// engine's private headers.
#include <cstddef>

namespace pkscan::detail {

// Best seconds of copies through device 'cuda'.
struct DeviceCopySeconds {
  double device_to_device = 0.0;  // a copy within device memory (reads and writes the bytes)
  double device_to_host = 0.0;    // a copy from device memory into pinned host memory
};

// Times `repeat` copies of `bytes` each way on the current device and keeps the best of each.
// @throws BackendUnavailable when device 'cuda' is not available; DeviceError on a device error.
DeviceCopySeconds measure_device_copies(std::size_t bytes, int repeat);

}  // namespace pkscan::detail
