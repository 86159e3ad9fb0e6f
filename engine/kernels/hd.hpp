#pragma once
// PKSCAN_HD marks functions shared by host and device code (one piece of math, two compilers).
#if defined(__CUDACC__)
#define PKSCAN_HD __host__ __device__
#define PKSCAN_HD_FORCEINLINE __host__ __device__ __forceinline__
#else
#define PKSCAN_HD
#define PKSCAN_HD_FORCEINLINE inline __attribute__((always_inline))
#endif
