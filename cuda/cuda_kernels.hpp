#pragma once
// Plain C++ interface between the host side of the CUDA backends (cuda_backend.cpp: Eigen,
// transitions, memory, streams) and the kernels (cuda_kernels.cu: POD math only). No CUDA or
// Eigen types here; every pointer in these structs is a DEVICE pointer unless said otherwise,
// and streams travel as `void*` (a cudaStream_t).
//
// Layouts, for N compartments (all per-subject arrays are structure-of-arrays with stride
// `subjects` of the chunk, so consecutive threads read consecutive addresses):
//   k[e * subjects + j]                 K(r, c) of chunk subject j, e = r * N + c (row-major),
//                                       double as built by build_transition; rounded to Real
//                                       on the device (the same rounding as the host's cast)
//   g[e * subjects + j]                 G(r, c), double
//   partial[(l * N*N + e) * subjects + j]
//                                       partial-step input matrix for partial_lengths[l], double
//   table[(lv * 2*N*N + e) * table_stride + t]
//                                       power table of level lv for thread t of the launch:
//                                       e < N*N: P = K^(2^lv), else Q = sum_{i < 2^lv} K^i, in
//                                       Real (device scratch; table_stride >= subjects rounded
//                                       up to kBlockThreads, so idle threads own a column too)
//   out[(j * n_out + t) * N + c]        amounts, subject-major, exactly the host result layout
//   status[j]                           0 Ok, 1 NonFinite (SubjectStatus values)
#include <cstdint>

namespace pkscan::cuda {

inline constexpr int kMinCompartments = 2;  // the kernels are compiled for N = 2, 3 and 4
inline constexpr int kMaxCompartments = 4;
inline constexpr int kBlockThreads = 128;  // threads per block; one thread per subject

// The schedule shared by every subject (engine/detail/schedule.hpp, flattened).
struct DeviceSchedule {
  int n = 0;                     // compartments, kMinCompartments..kMaxCompartments
  std::int64_t steps = 0;        // last grid index simulated
  std::int64_t breakpoints = 0;  // >= 1 (validated problems have steps >= 1)
  std::int64_t n_out = 0;        // output rows per subject (>= 1)
  int dense = 0;                 // 1 when n_out == steps + 1 (out_steps[i] == i; not uploaded)
  int partial_lengths = 0;       // distinct partial-step lengths (matrices per subject)
  int levels = 0;                // power table levels: 2^levels > steps (power kernel only)
  double initial[kMaxCompartments] = {};           // doses at t = 0 (n used, by value)
  const std::int64_t* bp_step = nullptr;           // breakpoints
  const double* bp_rate = nullptr;                 // n per breakpoint
  const double* bp_bolus = nullptr;                // n per breakpoint
  const std::int64_t* bp_partial_begin = nullptr;  // breakpoints + 1
  const int* partial_compartment = nullptr;        // per partial infusion
  const double* partial_rate = nullptr;            // per partial infusion
  const int* partial_length = nullptr;             // per partial infusion: index l
  const std::int64_t* out_steps = nullptr;         // n_out sorted grid indices (null if dense)
};

// One chunk of subjects.
template <class Real>
struct DeviceChunk {
  std::int64_t subjects = 0;        // subjects in the chunk (the SoA stride), >= 1
  const double* k = nullptr;        // N*N * subjects
  const double* g = nullptr;        // N*N * subjects
  const double* partial = nullptr;  // partial_lengths * N*N * subjects (null when none)
  Real* table = nullptr;            // levels * 2*N*N * table_stride (power kernel only)
  std::int64_t table_stride = 0;    // >= subjects rounded up to kBlockThreads
  Real* out = nullptr;              // subjects * n_out * 3
  std::uint8_t* status = nullptr;   // subjects
};

// Launch wrappers. Each enqueues one kernel (for N = s.n) on `stream` and checks the launch
// (not the execution: that surfaces at the caller's next synchronisation). Throw
// pkscan::DeviceError (also for an N outside kMinCompartments..kMaxCompartments).
//
// Batched: one thread per subject, the whole horizon in one launch, every step x <- K x + b.
void launch_batched(const DeviceSchedule& s, const DeviceChunk<double>& c, void* stream);
void launch_batched(const DeviceSchedule& s, const DeviceChunk<float>& c, void* stream);
// Power (sparse output): one thread per subject; builds the table, then jumps between outputs.
void launch_power_sparse(const DeviceSchedule& s, const DeviceChunk<double>& c, void* stream);
void launch_power_sparse(const DeviceSchedule& s, const DeviceChunk<float>& c, void* stream);

}  // namespace pkscan::cuda
