#pragma once
// Runs a kernel of subject_kernels.hpp over every subject of a chunk on the system of the
// execution policy given: a CudaStream in cuda/launch_cuda.cu (nvcc; the event walks' launches are
// compiled in launch_walk_cuda_<n>.cu), thrust::omp::par in runtime_host.cpp (g++,
// THRUST_DEVICE_SYSTEM_OMP). The one place a functor meets an algorithm; included by exactly
// those two files.
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>

#include <cstdint>

#include "core/block.hpp"
#include "device/subject_kernels.hpp"
#include "device/summary_kernels.hpp"
#include "device/walk_kernels.hpp"

namespace pkscan::device {

// Calls f(j) for every index j in [0, n) (subjects, or rows of a summary) on the policy's system:
// thrust::for_each. The CUDA files overload it for their own policy with a plain kernel launch
// (cuda/launch_cuda.cuh), whose host cost is a fraction of a Thrust launch's (docs/performance.md,
// "Thresholds").
template <class Policy, class F>
void for_each_subject(const Policy& policy, std::int64_t n, const F& f) {
  const thrust::counting_iterator<std::int64_t> first(0), last(n);
  thrust::for_each(policy, first, last, f);
}

template <int N, class Real, class Policy>
void launch_n(const Policy& policy, Kernel kernel, const DeviceSchedule& s,
              const DeviceChunk<Real>& c) {
  if (kernel == Kernel::PowerSparse)
    for_each_subject(policy, c.subjects, SubjectKernel<N, Real, Kernel::PowerSparse>{s, c});
  else
    for_each_subject(policy, c.subjects, SubjectKernel<N, Real, Kernel::Batched>{s, c});
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

// The device summary's kernel of `stage` over its indices (summary_kernels.hpp).
template <class Real, class Policy>
void launch_summary(const Policy& policy, SummaryStage stage, const SummaryChunk<Real>& c) {
  if (c.subjects <= 0) return;
  const std::int64_t cells =
      (c.subjects + detail::kSubjectBlock - 1) / detail::kSubjectBlock * c.rows;
  switch (stage) {
    case SummaryStage::Clear:
      for_each_subject(policy, c.subjects, ClearFlags<Real>{c});
      break;
    case SummaryStage::Subjects:
      for_each_subject(policy, c.subjects, SubjectSummary<Real>{c});
      break;
    case SummaryStage::BlockMax:
      for_each_subject(policy, cells, BlockMax<Real>{c});
      break;
    case SummaryStage::Rebase:
      for_each_subject(policy, c.rows, Rebase<Real>{c});
      break;
    case SummaryStage::Count:
      for_each_subject(policy, cells, Count<Real>{c});
      break;
  }
}

// The event walk over a chunk's subjects, for n = 1 to 6 compartments.
template <class Policy>
void launch_walk(const Policy& policy, int n, const WalkChunk& c) {
  if (c.subjects <= 0) return;
  switch (n) {
    case 1:
      return for_each_subject(policy, c.subjects, EventWalk<1>{c});
    case 2:
      return for_each_subject(policy, c.subjects, EventWalk<2>{c});
    case 3:
      return for_each_subject(policy, c.subjects, EventWalk<3>{c});
    case 4:
      return for_each_subject(policy, c.subjects, EventWalk<4>{c});
    case 5:
      return for_each_subject(policy, c.subjects, EventWalk<5>{c});
    default:
      return for_each_subject(policy, c.subjects, EventWalk<6>{c});
  }
}

}  // namespace pkscan::device
