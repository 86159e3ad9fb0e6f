// The host system (device/runtime_host.hpp): Thrust's OpenMP system runs the kernels of
// subject_kernels.hpp, the same source that nvcc builds for CUDA (cuda/launch_cuda.cu), and memory,
// copies, streams and events are their host equivalents (copies synchronous, streams and
// events no-ops). Compiled by g++ with THRUST_DEVICE_SYSTEM_OMP and the Thrust headers of the
// CUDA Toolkit (CMakeLists.txt: pkscan_device_host).
#include "device/runtime_host.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <pkscan/error.hpp>
#include <string>
#include <unordered_map>

#include "device/launch.hpp"
// After every Thrust algorithm header.
#include <thrust/system/omp/execution_policy.h>

namespace pkscan::device {

namespace {

class HostRuntime final : public Runtime {
  using Clock = std::chrono::steady_clock;

 public:
  explicit HostRuntime(const HostRuntimeOptions& o) : o_(o) {}

  const char* system() const noexcept override { return "omp-host"; }
  int device_count(std::string*) const noexcept override { return 1; }
  int current_device() override { return 0; }
  void memory_info(std::size_t& free_bytes, std::size_t& total_bytes) override {
    free_bytes = o_.memory_bytes > held_ ? o_.memory_bytes - held_ : 0;
    total_bytes = o_.memory_bytes;
  }
  void* alloc(std::size_t bytes) override {
    void* p = std::malloc(bytes > 0 ? bytes : 1);
    if (!p)
      throw DeviceError("simulate: omp-host: out of memory allocating " + std::to_string(bytes) +
                        " bytes");
    held_ += bytes;
    sizes_[p] = bytes;
    return p;
  }
  void free(void* p) noexcept override {
    if (!p) return;
    if (auto it = sizes_.find(p); it != sizes_.end()) {
      held_ -= it->second;
      sizes_.erase(it);
    }
    std::free(p);
  }
  void* alloc_staging(std::size_t bytes) override {
    void* p = std::malloc(bytes > 0 ? bytes : 1);
    if (!p) throw DeviceError("simulate: omp-host: out of host memory for staging");
    return p;
  }
  void free_staging(void* p) noexcept override { std::free(p); }
  void* create_stream() override { return &streams_; }  // any non-null handle
  void destroy_stream(void*) noexcept override {}
  // Every event holds the time it was last recorded at (the host system is synchronous, so
  // that is when the stream reached it).
  void* create_event() override { return new Clock::time_point(); }
  void* create_timing_event() override { return create_event(); }
  void destroy_event(void* event) noexcept override {
    delete static_cast<Clock::time_point*>(event);
  }
  void copy_to_device(void* dst, const void* src, std::size_t bytes, void*) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes, void*) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes, void*) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void record(void* event, void*) override {
    *static_cast<Clock::time_point*>(event) = Clock::now();
  }
  void wait_event(void*) override {}
  double elapsed_seconds(void* start, void* end) override {
    return std::chrono::duration<double>(*static_cast<Clock::time_point*>(end) -
                                         *static_cast<Clock::time_point*>(start))
        .count();
  }
  void synchronize(void*) override {}
  void synchronize_quietly(void*) noexcept override {}
  void launch(Kernel kernel, int n, const DeviceSchedule& s, const DeviceChunk<double>& c,
              void*) override {
    device::launch<double>(thrust::omp::par, kernel, n, s, c);
  }
  void launch(Kernel kernel, int n, const DeviceSchedule& s, const DeviceChunk<float>& c,
              void*) override {
    device::launch<float>(thrust::omp::par, kernel, n, s, c);
  }
  void launch_summary(SummaryStage stage, const SummaryChunk<double>& c, void*) override {
    device::launch_summary<double>(thrust::omp::par, stage, c);
  }
  void launch_summary(SummaryStage stage, const SummaryChunk<float>& c, void*) override {
    device::launch_summary<float>(thrust::omp::par, stage, c);
  }
  void launch_walk(int n, const WalkChunk& c, void*) override {
    device::launch_walk(thrust::omp::par, n, c);
  }
  std::int64_t min_chunk_subjects() const noexcept override { return o_.min_chunk_subjects; }
  std::size_t target_chunk_bytes() const noexcept override { return o_.target_chunk_bytes; }
  std::size_t piece_bytes() const noexcept override { return o_.piece_bytes; }

 private:
  HostRuntimeOptions o_;
  std::size_t held_ = 0;
  std::unordered_map<void*, std::size_t> sizes_;
  int streams_ = 0;
};

}  // namespace

std::unique_ptr<Runtime> make_host_runtime(const HostRuntimeOptions& options) {
  return std::make_unique<HostRuntime>(options);
}

}  // namespace pkscan::device
