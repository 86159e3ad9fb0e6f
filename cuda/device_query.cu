// CUDA device query. Every CUDA error becomes a count of 0 and a reason; nothing throws, so
// GPU-less machines (CI) and machines without a driver behave like "no device".
#include <cuda_runtime.h>

#include <string>

namespace pkscan::cuda {

int device_count(std::string* why) noexcept {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    if (why) {
      *why = std::string("no usable CUDA device (") + cudaGetErrorName(err) + ": " +
             cudaGetErrorString(err) + ")";
    }
    (void)cudaGetLastError();  // clear the error so it does not leak into the next call
    return 0;
  }
  if (count == 0 && why) *why = "no CUDA device found";
  return count;
}

}  // namespace pkscan::cuda
