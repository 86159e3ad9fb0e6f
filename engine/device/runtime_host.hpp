#pragma once
// The host system's runtime (runtime_host.cpp): the device backend and its kernels on Thrust's
// OpenMP system, for tests on machines without a GPU. Its "device memory" is host memory of a
// stated size, and its pipeline sizes can be made small so that a test exercises several chunks,
// both slots and several staging pieces with a few hundred subjects.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "device/runtime.hpp"

namespace pkscan::device {

struct HostRuntimeOptions {
  std::size_t memory_bytes = std::size_t{1} << 30;  // reported as the device's total and free
  std::int64_t min_chunk_subjects = 8192;
  std::size_t target_chunk_bytes = std::size_t{256} << 20;
  std::size_t piece_bytes = std::size_t{32} << 20;
};

std::unique_ptr<Runtime> make_host_runtime(const HostRuntimeOptions& options);

}  // namespace pkscan::device
