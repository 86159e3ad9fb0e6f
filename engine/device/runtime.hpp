#pragma once
// What the device backend (device_backend.cpp) needs from a system: memory, copies, streams and
// a kernel launch. Two implementations:
//   - cuda/runtime_cuda.cpp + cuda/launch_cuda.cu (the top-level cuda/ folder): the CUDA runtime
//     (cudaMalloc, pinned staging, asynchronous copies on streams, events) and the kernels'
//     launch: the only CUDA-only code;
//   - runtime_host.cpp: Thrust's OpenMP system on the host (memory is host memory, copies are
//     memcpy, streams and events are no-ops): the test vehicle that runs every line of the
//     device backend and its kernels in CI, on machines without a GPU. It is not a user-facing
//     device; tests route device 'cuda' to it (device/device.hpp).
// Handles (streams, events) are opaque pointers. Every call throws pkscan::DeviceError on
// failure, except those marked noexcept, which are for clean-up and ignore errors.
#include <cstddef>
#include <cstdint>
#include <string>

#include "device/subject_kernels.hpp"
#include "device/summary_job.hpp"
#include "device/walk_job.hpp"

namespace pkscan::device {

class Runtime {
 public:
  virtual ~Runtime() = default;
  // The system's name in messages and test names: "cuda" or "omp-host".
  virtual const char* system() const noexcept = 0;
  // Number of usable devices (0 with the reason in `why`); never throws.
  virtual int device_count(std::string* why) const noexcept = 0;
  // The current device's id (the backend starts afresh when the caller switched devices).
  virtual int current_device() = 0;
  virtual void memory_info(std::size_t& free_bytes, std::size_t& total_bytes) = 0;

  virtual void* alloc(std::size_t bytes) = 0;  // device memory
  virtual void free(void* p) noexcept = 0;
  virtual void* alloc_staging(std::size_t bytes) = 0;  // host memory the device copies from/to
  virtual void free_staging(void* p) noexcept = 0;

  virtual void* create_stream() = 0;
  virtual void destroy_stream(void* stream) noexcept = 0;
  virtual void* create_event() = 0;  // for ordering only
  // An event that also takes the time at which the stream reaches it (elapsed_seconds).
  virtual void* create_timing_event() = 0;
  virtual void destroy_event(void* event) noexcept = 0;

  // Asynchronous on `stream` where the system has streams.
  virtual void copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream) = 0;
  virtual void copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream) = 0;
  virtual void copy_on_device(void* dst, const void* src, std::size_t bytes, void* stream) = 0;
  virtual void record(void* event, void* stream) = 0;
  virtual void wait_event(void* event) = 0;  // the host waits for the event
  // Seconds between two recorded timing events, both complete (after a synchronize).
  virtual double elapsed_seconds(void* start, void* end) = 0;
  // The host waits for everything enqueued on `stream`; execution errors surface here.
  virtual void synchronize(void* stream) = 0;
  virtual void synchronize_quietly(void* stream) noexcept = 0;  // errors ignored and cleared

  // Enqueues `kernel` over every subject of the chunk (N = n) on `stream`.
  virtual void launch(Kernel kernel, int n, const DeviceSchedule& s, const DeviceChunk<double>& c,
                      void* stream) = 0;
  virtual void launch(Kernel kernel, int n, const DeviceSchedule& s, const DeviceChunk<float>& c,
                      void* stream) = 0;

  // Enqueues the device summary's kernel of `stage` over the chunk on `stream`.
  virtual void launch_summary(SummaryStage stage, const SummaryChunk<double>& c, void* stream) = 0;
  virtual void launch_summary(SummaryStage stage, const SummaryChunk<float>& c, void* stream) = 0;

  // Enqueues the event walk (walk_kernels.hpp) over the chunk's subjects, for a model of n
  // compartments (1 to 6), on `stream`.
  virtual void launch_walk(int n, const WalkChunk& c, void* stream) = 0;

  // Sizes of the pipeline: a chunk holds at least min_chunk_subjects() subjects (when there are
  // that many) and about target_chunk_bytes() of output; results come back in pieces of at
  // most piece_bytes(). The host system's test vehicle makes them small to exercise chunking.
  virtual std::int64_t min_chunk_subjects() const noexcept { return 8192; }
  virtual std::size_t target_chunk_bytes() const noexcept { return std::size_t{256} << 20; }
  virtual std::size_t piece_bytes() const noexcept { return std::size_t{32} << 20; }
};

}  // namespace pkscan::device
