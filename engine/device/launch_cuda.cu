// The kernels on CUDA (nvcc): subject_kernels.hpp's functors over a chunk, one thread per
// subject, enqueued on the slot's stream without synchronising. A plain kernel launch rather
// than thrust::for_each, whose host time per launch is much of a small call (docs/performance.md,
// "Thresholds" and "Where the GPU pays").
#include <cuda_runtime.h>

#include <cstdint>
#include <pkscan/error.hpp>
#include <string>

#include "device/subject_kernels.hpp"
#include "device/summary_job.hpp"

namespace pkscan::device {

struct CudaStream {
  cudaStream_t stream;
};

template <class F>
__global__ void subjects_kernel(F f, std::int64_t n) {
  const std::int64_t j =
      static_cast<std::int64_t>(blockIdx.x) * static_cast<std::int64_t>(blockDim.x) +
      static_cast<std::int64_t>(threadIdx.x);
  if (j < n) f(j);
}

// launch.hpp's for_each_subject on CUDA (more specialised than its Thrust template).
template <class F>
void for_each_subject(const CudaStream& policy, std::int64_t n, const F& f) {
  constexpr int kThreads = 256;
  const std::int64_t blocks = (n + kThreads - 1) / kThreads;
  subjects_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, policy.stream>>>(f, n);
  // Launch errors; execution errors surface at the stream's next synchronisation.
  if (const cudaError_t err = cudaGetLastError(); err != cudaSuccess)
    throw DeviceError(std::string("simulate: CUDA launch: ") + cudaGetErrorName(err) + ": " +
                      cudaGetErrorString(err));
}

}  // namespace pkscan::device

#include "device/launch.hpp"

namespace pkscan::device {

template <class Real>
void launch_cuda(Kernel kernel, int n, const DeviceSchedule& s, const DeviceChunk<Real>& c,
                 void* stream) {
  launch<Real>(CudaStream{static_cast<cudaStream_t>(stream)}, kernel, n, s, c);
}

template <class Real>
void launch_summary_cuda(SummaryStage stage, const SummaryChunk<Real>& c, void* stream) {
  launch_summary<Real>(CudaStream{static_cast<cudaStream_t>(stream)}, stage, c);
}

void launch_walk_cuda(int n, const WalkChunk& c, void* stream) {
  launch_walk(CudaStream{static_cast<cudaStream_t>(stream)}, n, c);
}

template void launch_summary_cuda<double>(SummaryStage, const SummaryChunk<double>&, void*);
template void launch_summary_cuda<float>(SummaryStage, const SummaryChunk<float>&, void*);
template void launch_cuda<double>(Kernel, int, const DeviceSchedule&, const DeviceChunk<double>&,
                                  void*);
template void launch_cuda<float>(Kernel, int, const DeviceSchedule&, const DeviceChunk<float>&,
                                 void*);

}  // namespace pkscan::device
