#pragma once
// What the device summary's kernels (summary_kernels.hpp) read and write: plain structs, so that
// the device backend (device_summary.cpp) can fill them without seeing the kernels.
#include <cstdint>

namespace pkscan::device {

// The device's copy of a summary sketch (summary/sketch.hpp's layout: row r's counter of key k
// at counts[r * stride + (k & mask)]).
struct DeviceSketch {
  std::uint32_t* counts = nullptr;
  std::int64_t stride = 0, width = 0, mask = 0;
  std::int64_t* lo = nullptr;
  std::int64_t* maxkey = nullptr;
  unsigned long long* zero = nullptr;
  unsigned long long* under = nullptr;
};

// One chunk of subjects to summarise (summary_kernels.hpp gives the layouts).
template <class Real>
struct SummaryChunk {
  std::int64_t subjects = 0;
  std::int64_t n_times = 0;
  int n = 0;              // compartments
  std::int64_t rows = 0;  // n_times * n
  const Real* out = nullptr;
  const double* inv = nullptr;
  const std::uint8_t* status = nullptr;
  std::uint8_t* excluded = nullptr;
  std::uint32_t* nonfinite = nullptr;  // per subject: a value is not finite (device only)
  double* metrics = nullptr;
  int mc = 0;                     // metric compartment
  std::int64_t i0 = 0;            // first output index of the last dosing interval
  const double* times = nullptr;  // n_times output times
  std::int64_t* block_max = nullptr;
  double* block_sums = nullptr;
  double* tail = nullptr;
  DeviceSketch sk;
};

// The summary kernels, in the order the backend enqueues them: per subject, per (block, row),
// per subject, per row, per (block, row).
enum class SummaryStage { Clear, BlockMax, Subjects, Rebase, Count };

}  // namespace pkscan::device
