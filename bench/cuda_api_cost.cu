// Per-call costs (median of 2001 calls, host time) of the CUDA runtime calls that pkscan's device
// pipeline makes in a small call (docs/performance.md, "Where the GPU pays"). On a GPU machine:
//   nvcc -O2 -std=c++17 -arch=sm_90 bench/cuda_api_cost.cu -o cuda_api_cost && ./cuda_api_cost
// Results of 2026-11-24 on an H200 host: bench/results/NVIDIA-H200-2026-11-24-api-cost.txt.
#include <cuda_runtime.h>
#include <thrust/for_each.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/system/cuda/execution_policy.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>
#define CK(x)                                             \
  do {                                                    \
    cudaError_t e = (x);                                  \
    if (e != cudaSuccess) {                               \
      std::printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      return 1;                                           \
    }                                                     \
  } while (0)
static double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
struct F {
  double* p;
  __host__ __device__ void operator()(long i) const { p[i] = p[i] * 2.0 + 1.0; }
};
template <class G>
double med(G g, int n = 2001) {
  std::vector<double> t;
  for (int i = 0; i < n; ++i) {
    double t0 = now();
    g();
    t.push_back(now() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2] * 1e6;
}
int main() {
  CK(cudaFree(nullptr));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  cudaEvent_t e1, e2, e3;
  CK(cudaEventCreate(&e1));
  CK(cudaEventCreate(&e2));
  CK(cudaEventCreateWithFlags(&e3, cudaEventDisableTiming));
  double* d;
  CK(cudaMalloc(&d, 1 << 20));
  void* pin;
  CK(cudaHostAlloc(&pin, 1 << 20, 0));
  std::vector<char> page(4096, 1);
  size_t fr, to;
  int cnt, dev;
  std::printf("cudaGetDeviceCount %.2f us\n", med([&] { cudaGetDeviceCount(&cnt); }));
  std::printf("cudaGetDevice %.2f us\n", med([&] { cudaGetDevice(&dev); }));
  std::printf("cudaMemGetInfo %.2f us\n", med([&] { cudaMemGetInfo(&fr, &to); }));
  std::printf("cudaEventRecord %.2f us\n", med([&] { cudaEventRecord(e1, st); }));
  std::printf("pageable 1 KiB H2D + stream sync %.2f us\n", med([&] {
                cudaMemcpyAsync(d, page.data(), 1024, cudaMemcpyHostToDevice, st);
                cudaStreamSynchronize(st);
              }));
  std::printf("pinned 1 KiB H2D async (enqueue) %.2f us\n",
              med([&] { cudaMemcpyAsync(d, pin, 1024, cudaMemcpyHostToDevice, st); }));
  cudaStreamSynchronize(st);
  std::printf("pinned 1 KiB H2D + sync %.2f us\n", med([&] {
                cudaMemcpyAsync(d, pin, 1024, cudaMemcpyHostToDevice, st);
                cudaStreamSynchronize(st);
              }));
  std::printf("thrust for_each n=1 par_nosync enqueue %.2f us\n", med([&] {
                thrust::for_each(thrust::cuda::par_nosync.on(st),
                                 thrust::counting_iterator<long>(0),
                                 thrust::counting_iterator<long>(1), F{d});
              }));
  cudaStreamSynchronize(st);
  std::printf("thrust for_each n=1 + sync %.2f us\n", med([&] {
                thrust::for_each(thrust::cuda::par_nosync.on(st),
                                 thrust::counting_iterator<long>(0),
                                 thrust::counting_iterator<long>(1), F{d});
                cudaStreamSynchronize(st);
              }));
  std::printf("event record + event sync %.2f us\n", med([&] {
                cudaEventRecord(e3, st);
                cudaEventSynchronize(e3);
              }));
  std::printf("elapsed time %.2f us\n", med([&] {
                float ms;
                cudaEventRecord(e1, st);
                cudaEventRecord(e2, st);
                cudaStreamSynchronize(st);
                cudaEventElapsedTime(&ms, e1, e2);
              }));
  std::printf(
      "full small call (H2D pageable+sync, H2D pinned, 5 records, kernel, D2H pinned x2, event "
      "sync, sync, 3 elapsed) %.2f us\n",
      med([&] {
        cudaMemcpyAsync(d, page.data(), 1024, cudaMemcpyHostToDevice, st);
        cudaStreamSynchronize(st);
        cudaMemGetInfo(&fr, &to);
        cudaEventRecord(e1, st);
        cudaMemcpyAsync(d, pin, 1024, cudaMemcpyHostToDevice, st);
        cudaEventRecord(e2, st);
        thrust::for_each(thrust::cuda::par_nosync.on(st), thrust::counting_iterator<long>(0),
                         thrust::counting_iterator<long>(1), F{d});
        cudaEventRecord(e1, st);
        cudaMemcpyAsync(pin, d, 64, cudaMemcpyDeviceToHost, st);
        cudaMemcpyAsync(pin, d, 64, cudaMemcpyDeviceToHost, st);
        cudaEventRecord(e3, st);
        cudaEventSynchronize(e3);
        cudaEventRecord(e2, st);
        cudaStreamSynchronize(st);
        float ms;
        cudaEventElapsedTime(&ms, e1, e2);
        cudaEventElapsedTime(&ms, e1, e2);
        cudaEventElapsedTime(&ms, e1, e2);
      }));
  CK(cudaGetLastError());
  return 0;
}
