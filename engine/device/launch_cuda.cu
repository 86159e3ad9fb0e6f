// The kernels on Thrust's CUDA system (nvcc): subject_kernels.hpp's functors over a chunk, one
// thread per subject, enqueued on the slot's stream without synchronising (par_nosync).
#include <cuda_runtime.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/system_error.h>

#include <pkscan/error.hpp>
#include <string>

#include "device/launch.hpp"

namespace pkscan::device {

template <class Real>
void launch_cuda(Kernel kernel, int n, const DeviceSchedule& s, const DeviceChunk<Real>& c,
                 void* stream) {
  try {
    launch<Real>(thrust::cuda::par_nosync.on(static_cast<cudaStream_t>(stream)), kernel, n, s, c);
  } catch (const thrust::system_error& e) {  // launch errors; execution errors surface later
    throw DeviceError(std::string("simulate: CUDA launch: ") + e.what());
  }
}

template void launch_cuda<double>(Kernel, int, const DeviceSchedule&, const DeviceChunk<double>&,
                                  void*);
template void launch_cuda<float>(Kernel, int, const DeviceSchedule&, const DeviceChunk<float>&,
                                 void*);

}  // namespace pkscan::device
