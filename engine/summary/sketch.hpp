#pragma once
// The histogram sketch of the per-time summaries (TimeSummary::add and the fused summary; its
// accuracy is stated in pkscan/summary.hpp). Counts are integers and the window depends only on
// the largest key seen, so the final state does not depend on the order in which values arrive;
// several sketches (one per thread of the fused summary) are merged exactly by
// TimeSummary::finish().
#include <cstdint>
#include <limits>
#include <vector>

#include "core/simd.hpp"
#include "kernels/summary.hpp"

namespace pkscan::detail {

constexpr std::int64_t kEmpty = std::numeric_limits<std::int64_t>::min() / 4;

// Per (time, compartment) row: the window of keys [lo, maxkey] (lo = maxkey - width + 1), the
// count of finite values <= 0 and of positive values below the window. Counters of key k live
// at slot k & mask of the row's ring; slots outside the window are zero.
struct Sketch {
  std::int64_t width = 0;  // window width in keys (window_binades * 128)
  std::int64_t ring = 0;   // counters per row, a power of two >= width
  std::int64_t mask = 0;
  // Distance between rows: the ring plus one cache line, so that the same slot of consecutive
  // rows (consecutive times hold similar values) falls in different cache sets.
  std::int64_t stride = 0;
  std::int64_t dummy = 0;  // index of a scratch counter after the last row (slow-path lanes)
  std::uint32_t* counts = nullptr;   // rows x stride + dummies, zero pages mapped lazily
  std::vector<std::int64_t> lo;      // kEmpty until the first positive value
  std::vector<std::int64_t> maxkey;  // -1 until the first positive value
  std::vector<std::uint64_t> zero;
  std::vector<std::uint64_t> under;
  std::size_t bytes = 0;  // of counts
  bool mapped = false;    // counts come from mmap
};

// A positive finite key outside the window: a first value, a new maximum (the window moves up
// and the counters that leave it are added to `under`), or a value below the window.
void slow_add(Sketch& h, std::int64_t row, std::int64_t key) noexcept;

// Allocates an empty sketch of `rows` rows. The counters are zero-filled and faulted in on first
// touch. Every tile of add() touches a few hundred rows 16 KiB apart, so on Linux add()'s
// sketch asks for transparent huge pages (`huge`, 2 MiB): with 4 KiB pages nearly every
// increment misses the first-level TLB. The fused kernel's sketches do not: it increments a
// few rows at a time, and a huge page is zeroed in full when first touched (most of each
// row's ring never is: the values of one time span a few binades of the window).
void init_sketch(Sketch& h, std::int64_t rows, int window_binades, bool huge);

void free_sketch(Sketch& h) noexcept;

struct SketchFree {
  void operator()(Sketch* h) const noexcept {
    free_sketch(*h);
    delete h;
  }
};

// One value into one row; false for a non-finite value (not counted).
PKSCAN_INLINE bool add_one(Sketch& h, std::int64_t row, double x) noexcept {
  const std::uint64_t b = bits_of(x);
  if (b - 1 < kPosFiniteMax) {
    const std::int64_t key = static_cast<std::int64_t>(b >> kKeyShift);
    if (static_cast<std::uint64_t>(key - h.lo[static_cast<std::size_t>(row)]) <
        static_cast<std::uint64_t>(h.width))
      ++h.counts[row * h.stride + (key & h.mask)];
    else
      slow_add(h, row, key);
    return true;
  }
  if ((b & kAbsMask) < kInfBits) {
    ++h.zero[static_cast<std::size_t>(row)];
    return true;
  }
  return false;
}

// Removes a value added before (the rare undo of a subject found non-finite late).
void remove_one(Sketch& h, std::int64_t row, double x) noexcept;

// One row of several sketches merged (add()'s, the fused kernel's per thread, the device's):
// the merged window ends at the largest key of all, and each sketch's counters below the merged
// window count as values below it. Counts are integers, so the merged state is the one a single
// sketch fed every value would have.
struct MergedRow {
  std::int64_t lo = kEmpty;  // the window [lo, mx]; mx = -1 before the first positive value
  std::int64_t mx = -1;
  std::uint64_t zero = 0;   // finite values <= 0
  std::uint64_t under = 0;  // positive values below the window
};
MergedRow merge_row(const std::vector<const Sketch*>& sketches, std::int64_t row) noexcept;

// Count of `key` (in the merged window) over all sketches.
std::uint64_t merged_count(const std::vector<const Sketch*>& sketches, std::int64_t row,
                           std::int64_t key) noexcept;

// Estimate of the values in the bucket of `key`: its midpoint.
inline double bucket_mid(std::int64_t key) noexcept {
  const std::uint64_t lower_bits = static_cast<std::uint64_t>(key) << kKeyShift;
  const double lower = from_bits(lower_bits);
  const std::uint64_t e = lower_bits >> 52;
  const double width = from_bits((e == 0 ? 1 : e) << 52) * 0x1.0p-7;
  return lower + 0.5 * width;
}

}  // namespace pkscan::detail
