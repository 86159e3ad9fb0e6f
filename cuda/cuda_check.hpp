#pragma once
// PKSCAN_CUDA_CHECK(expr): evaluates a CUDA runtime call and throws pkscan::DeviceError when it
// does not return cudaSuccess. The message names the error (cudaGetErrorName), its description
// (cudaGetErrorString), the call as written and file:line. Before throwing, the runtime's
// last-error slot is cleared with cudaGetLastError so the error does not leak into the next,
// unrelated check (sticky errors, such as an illegal address, cannot be cleared: the context is
// unusable after them and every later call reports them again).
//
// Launch and execution errors are checked separately (Eigen gpu_common.h):
//   kernel<<<...>>>(...);
//   PKSCAN_CUDA_CHECK_LAUNCH();                       // bad configuration, too many resources
//   PKSCAN_CUDA_CHECK(cudaStreamSynchronize(stream));  // faults while the kernel ran
//
// Usable from host C++ (.cpp) and from nvcc (.cu) translation units; never from device code.
// Included by runtime_cuda.cpp only.
#include <cuda_runtime.h>

#include <pkscan/error.hpp>
#include <string>

namespace pkscan::cuda {

// Cold path, kept out of line so the checks stay a compare and a branch.
[[noreturn]] __attribute__((noinline, cold)) inline void throw_cuda_error(cudaError_t err,
                                                                          const char* expr,
                                                                          const char* file,
                                                                          int line) {
  (void)cudaGetLastError();  // clear the last-error slot (no effect on sticky errors)
  const char* name = cudaGetErrorName(err);
  const char* text = cudaGetErrorString(err);
  throw DeviceError(std::string("simulate: CUDA call ") + expr + " failed with " +
                    (name ? name : "unknown CUDA error") + " (" + (text ? text : "no description") +
                    ") at " + file + ":" + std::to_string(line));
}

}  // namespace pkscan::cuda

#define PKSCAN_CUDA_CHECK(expr)                                                      \
  do {                                                                               \
    const cudaError_t pkscan_cuda_err_ = (expr);                                     \
    if (pkscan_cuda_err_ != cudaSuccess)                                             \
      ::pkscan::cuda::throw_cuda_error(pkscan_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

// Launch errors of the kernel launched just before (invalid configuration, too many resources
// requested, no kernel image for this device). Execution errors show up only at a later
// synchronisation; check those with PKSCAN_CUDA_CHECK(cudaStreamSynchronize(stream)).
#define PKSCAN_CUDA_CHECK_LAUNCH() PKSCAN_CUDA_CHECK(cudaGetLastError())
