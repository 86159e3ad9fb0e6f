// The kernels on CUDA (nvcc): subject_kernels.hpp's, summary_kernels.hpp's and walk_kernels.hpp's
// functors over a chunk, launched by launch_cuda.cuh on the slot's stream.
#include "device/walk_kernels.hpp"
#include "launch_cuda.cuh"

namespace pkscan::device {

// The event walks are compiled in files of their own, one per compartment count (CMakeLists.txt
// generates launch_walk_cuda_<n>.cu): they are most of the device code's compile time, and so
// they compile in parallel.
#define PKSCAN_WALK_ELSEWHERE(N) \
  extern template void for_each_subject(const CudaStream&, std::int64_t, const EventWalk<N>&);
PKSCAN_WALK_ELSEWHERE(1)
PKSCAN_WALK_ELSEWHERE(2)
PKSCAN_WALK_ELSEWHERE(3)
PKSCAN_WALK_ELSEWHERE(4)
PKSCAN_WALK_ELSEWHERE(5)
PKSCAN_WALK_ELSEWHERE(6)
#undef PKSCAN_WALK_ELSEWHERE

}  // namespace pkscan::device

#include "device/launch.hpp"
#include "device/summary_job.hpp"

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
