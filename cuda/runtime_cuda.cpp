// The CUDA runtime behind device 'cuda' (engine/device/runtime.hpp): device memory, pinned
// staging, streams, events and asynchronous copies. With launch_cuda.cu (the kernels' launches)
// this folder is all the CUDA-only code of pkscan, built only when nvcc is found; everything it
// runs is shared with the host system and tested in CI there. Compiled by the host compiler
// against the CUDA runtime API.
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "cuda_check.hpp"
#include "device/runtime.hpp"

namespace pkscan::device {

template <class Real>
void launch_cuda(Kernel kernel, int n, const DeviceSchedule& s, const DeviceChunk<Real>& c,
                 void* stream);  // launch_cuda.cu
template <class Real>
void launch_summary_cuda(SummaryStage stage, const SummaryChunk<Real>& c,
                         void* stream);                          // launch_cuda.cu
void launch_walk_cuda(int n, const WalkChunk& c, void* stream);  // launch_cuda.cu

int cuda_device_count(std::string* why) noexcept {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why)
      *why = std::string("no usable CUDA device (") + cudaGetErrorName(err) + ": " +
             cudaGetErrorString(err) + ")";
    (void)cudaGetLastError();  // clear the error so it does not leak into the next call
    return 0;
  }
  if (count == 0 && why) *why = "no CUDA device found";
  return count;
}

namespace {

// Calls a CUDA function that returns a handle or pointer through its argument; throws
// DeviceError naming `call` when it fails.
template <class T, class F>
T created(const char* call, F&& create) {
  T h{};
  if (const cudaError_t err = create(&h); err != cudaSuccess)
    cuda::throw_cuda_error(err, call, __FILE__, __LINE__);
  return h;
}

class CudaRuntime final : public Runtime {
 public:
  const char* system() const noexcept override { return "cuda"; }
  int device_count(std::string* why) const noexcept override { return cuda_device_count(why); }
  int current_device() override {
    return created<int>("cudaGetDevice", [](int* d) { return cudaGetDevice(d); });
  }
  void memory_info(std::size_t& free_bytes, std::size_t& total_bytes) override {
    PKSCAN_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  }
  void* alloc(std::size_t bytes) override {
    return created<void*>("cudaMalloc", [&](void** p) { return cudaMalloc(p, bytes); });
  }
  void free(void* p) noexcept override { (void)cudaFree(p); }
  void* alloc_staging(std::size_t bytes) override {
    return created<void*>("cudaHostAlloc",
                          [&](void** p) { return cudaHostAlloc(p, bytes, cudaHostAllocDefault); });
  }
  void free_staging(void* p) noexcept override { (void)cudaFreeHost(p); }
  void* create_stream() override {
    return created<cudaStream_t>("cudaStreamCreateWithFlags", [](cudaStream_t* st) {
      return cudaStreamCreateWithFlags(st, cudaStreamNonBlocking);
    });
  }
  void destroy_stream(void* stream) noexcept override {
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  }
  void* create_event() override {
    return created<cudaEvent_t>("cudaEventCreateWithFlags", [](cudaEvent_t* e) {
      return cudaEventCreateWithFlags(e, cudaEventDisableTiming);
    });
  }
  void* create_timing_event() override {
    return created<cudaEvent_t>("cudaEventCreate",
                                [](cudaEvent_t* e) { return cudaEventCreate(e); });
  }
  void destroy_event(void* event) noexcept override {
    (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
  }
  void copy_to_device(void* dst, const void* src, std::size_t bytes, void* stream) override {
    PKSCAN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice,
                                      static_cast<cudaStream_t>(stream)));
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream) override {
    PKSCAN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost,
                                      static_cast<cudaStream_t>(stream)));
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes, void* stream) override {
    PKSCAN_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                      static_cast<cudaStream_t>(stream)));
  }
  void record(void* event, void* stream) override {
    PKSCAN_CUDA_CHECK(
        cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)));
  }
  void wait_event(void* event) override {
    PKSCAN_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  }
  double elapsed_seconds(void* start, void* end) override {
    float ms = 0.0f;
    PKSCAN_CUDA_CHECK(
        cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
    return 1e-3 * static_cast<double>(ms);
  }
  void synchronize(void* stream) override {
    PKSCAN_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
  }
  void synchronize_quietly(void* stream) noexcept override {
    (void)cudaStreamSynchronize(static_cast<cudaStream_t>(stream));
    (void)cudaGetLastError();
  }
  void launch(Kernel kernel, int n, const DeviceSchedule& s, const DeviceChunk<double>& c,
              void* stream) override {
    launch_cuda<double>(kernel, n, s, c, stream);
  }
  void launch(Kernel kernel, int n, const DeviceSchedule& s, const DeviceChunk<float>& c,
              void* stream) override {
    launch_cuda<float>(kernel, n, s, c, stream);
  }
  void launch_summary(SummaryStage stage, const SummaryChunk<double>& c, void* stream) override {
    launch_summary_cuda<double>(stage, c, stream);
  }
  void launch_summary(SummaryStage stage, const SummaryChunk<float>& c, void* stream) override {
    launch_summary_cuda<float>(stage, c, stream);
  }
  void launch_walk(int n, const WalkChunk& c, void* stream) override {
    launch_walk_cuda(n, c, stream);
  }
};

}  // namespace

std::unique_ptr<Runtime> make_cuda_runtime() { return std::make_unique<CudaRuntime>(); }

}  // namespace pkscan::device
