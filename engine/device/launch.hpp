#pragma once
// Runs a kernel of subject_kernels.hpp over every subject of a chunk with Thrust, on the system
// of the execution policy given: thrust::cuda::par_nosync.on(stream) in launch_cuda.cu (nvcc),
// thrust::omp::par in runtime_host.cpp (g++, THRUST_DEVICE_SYSTEM_OMP). The one place a
// functor meets an algorithm; included by exactly those two files.
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <cstdint>

#include "device/subject_kernels.hpp"

namespace pkscan::device {

template <int N, class Real, class Policy>
void launch_n(const Policy& policy, Kernel kernel, const DeviceSchedule& s,
              const DeviceChunk<Real>& c) {
  const thrust::counting_iterator<std::int64_t> first(0), last(c.subjects);
  if (kernel == Kernel::PowerSparse)
    thrust::for_each(policy, first, last, SubjectKernel<N, Real, Kernel::PowerSparse>{s, c});
  else
    thrust::for_each(policy, first, last, SubjectKernel<N, Real, Kernel::Batched>{s, c});
}

// N is 2, 3 or 4 (the device backend's unsupported_reason has rejected other counts).
template <class Real, class Policy>
void launch(const Policy& policy, Kernel kernel, int n, const DeviceSchedule& s,
            const DeviceChunk<Real>& c) {
  if (c.subjects <= 0 || s.n_out <= 0) return;
  if (n == 2)
    launch_n<2, Real>(policy, kernel, s, c);
  else if (n == 3)
    launch_n<3, Real>(policy, kernel, s, c);
  else
    launch_n<4, Real>(policy, kernel, s, c);
}

}  // namespace pkscan::device
