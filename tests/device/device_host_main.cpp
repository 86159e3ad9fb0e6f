// pkscan_device_host_tests: the Gpu/ cases of the agreement suite (tests/agreement, tests/device)
// with device 'cuda' routed to the device backends on Thrust's OpenMP system
// (engine/device/runtime_host.cpp), the same source nvcc builds for CUDA. The pipeline is made
// small (chunks of at least 16 subjects, 64 KiB of output per chunk, 4 KiB staging pieces, 64 MiB
// of "device memory") so that the 203-subject and long-horizon cases run several chunks through
// both slots and several pieces.
#include <gtest/gtest.h>

#include <memory>

#include "device/device.hpp"
#include "device/runtime_host.hpp"
#include "support/shard_status.hpp"

// The "device memory" of the runtimes made from now on (a test may make it small for a while).
std::size_t pkscan_device_host_memory = std::size_t{64} << 20;

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  pkscan::detail::set_device_runtime_factory([]() -> std::unique_ptr<pkscan::device::Runtime> {
    pkscan::device::HostRuntimeOptions o;
    o.memory_bytes = pkscan_device_host_memory;
    o.min_chunk_subjects = 16;
    o.target_chunk_bytes = std::size_t{64} << 10;
    o.piece_bytes = std::size_t{4} << 10;
    return pkscan::device::make_host_runtime(o);
  });
  return pkscan::test::shard_status(RUN_ALL_TESTS());
}
