#pragma once
// The device summary of population runs (Engine::summarize_into on device 'cuda'): after the
// batched or power kernel has written a chunk's trajectories into device memory, these PKSCAN_HD
// functors summarise them there, so only the summary crosses the bus: the per-time sums of
// blocks of detail::kSubjectBlock subjects, the histogram sketch, each subject's exposure metrics
// and whether it is excluded. Thrust runs them on whatever system it is built for (launch.hpp), as
// the simulation kernels.
//
// Numeric contract: the CPU's (summary/summary_state.hpp), bit for bit on both systems:
//  - a value is double(amount) * (1 / volume), the reciprocal computed on the host;
//  - per block and row, lane l sums the included subjects j = l mod 8 of the block in order
//    from 0, the lanes are combined by lane_tree8; the host adds the block sums in block order
//    (FusedSummary::commit). A chunk starts at a multiple of detail::kSubjectBlock subjects of the
//    summary;
//  - the sketch's window for a row ends at the largest key of every finite positive value passed
//    (excluded subjects too), so the chunk's largest keys move the window first (BlockMax, then
//    Rebase: the counters that leave it go to `under`, as slow_add does), then the included
//    subjects' values are counted (Count) with integer atomics, whose order does not matter;
//  - metrics: MetricOne (kernels/summary.hpp), the lane kernel's arithmetic for one subject.
// Layouts (every pointer in the system's memory):
//   out[r * subjects + j]      the chunk's trajectories (r = time * n + compartment), time-major
//                              (DeviceChunk::time_major): neighbouring threads of the
//                              simulation and of SubjectSummary touch neighbouring addresses
//   inv[j * n + c]             reciprocal volumes
//   status[j]                  the simulation kernel's (0 Ok)
//   nonfinite[j]               1 when a value of the subject is not finite (BlockMax sets it)
//   excluded[j]                out: 1 when the subject is left out of the summary
//   metrics[j * 4 + k]         out: cmax, tmax, auc, cmin of compartment mc
//   block_max[b * rows + r]    the largest key of block b's finite positive values (-1: none)
//   block_sums[b * rows + r]   out: the sum of complete block b
//   tail[r * 8 + l]            out: the lanes of an incomplete last block
#include <cuda/atomic>

#include "core/block.hpp"
#include "device/summary_job.hpp"
#include "kernels/summary.hpp"

namespace pkscan::device {

template <class Real>
PKSCAN_HD inline double summary_value(const SummaryChunk<Real>& c, std::int64_t j, std::int64_t r) {
  return static_cast<double>(c.out[r * c.subjects + j]) * c.inv[j * c.n + r % c.n];
}

// The (block, row) cell i = b * rows + r of a chunk: its row and its block's subjects [j0, j1).
struct Cell {
  std::int64_t r, j0, j1;
};
template <class Real>
PKSCAN_HD inline Cell cell_of(const SummaryChunk<Real>& c, std::int64_t i) {
  const std::int64_t j0 = i / c.rows * detail::kSubjectBlock;
  return {i % c.rows, j0,
          j0 + detail::kSubjectBlock < c.subjects ? j0 + detail::kSubjectBlock : c.subjects};
}

template <class T>
PKSCAN_HD inline void atomic_increment(T& counter) {
  cuda::atomic_ref<T, cuda::thread_scope_device>(counter).fetch_add(T{1},
                                                                    cuda::memory_order_relaxed);
}

// Per subject j: no value found not finite yet.
template <class Real>
struct ClearFlags {
  SummaryChunk<Real> c;
  PKSCAN_HD void operator()(std::int64_t j) const { c.nonfinite[j] = 0; }
};

// Per subject j: excluded or not (its status, or a value BlockMax found not finite), and its
// metrics (the metric compartment's values only; the pass over every value is BlockMax's).
template <class Real>
struct SubjectSummary {
  SummaryChunk<Real> c;
  PKSCAN_HD void operator()(std::int64_t j) const {
    c.excluded[j] = c.status[j] != 0 || c.nonfinite[j] != 0 ? 1 : 0;
    detail::MetricOne m;
    m.first(summary_value(c, j, c.mc), c.times[0], 0 >= c.i0);
    for (std::int64_t k = 1; k < c.n_times; ++k) {
      const double t = c.times[k];
      m.next(summary_value(c, j, k * c.n + c.mc), t, t - c.times[k - 1], k >= c.i0);
    }
    m.out(c.status[j] == 0, c.metrics + j * 4);
  }
};

// Per (block, row) i = b * rows + r: the largest key of the block's finite positive values; a
// subject with a value that is not finite is flagged (rare: several threads may store the same
// 1).
template <class Real>
struct BlockMax {
  SummaryChunk<Real> c;
  PKSCAN_HD void operator()(std::int64_t i) const {
    const Cell cell = cell_of(c, i);
    std::int64_t mx = -1;
    for (std::int64_t j = cell.j0; j < cell.j1; ++j) {
      const std::uint64_t bits = detail::hd_bits(summary_value(c, j, cell.r));
      const std::int64_t key = static_cast<std::int64_t>(bits >> detail::kKeyShift);
      if (bits - 1 < detail::kPosFiniteMax && key > mx) mx = key;
      if ((bits & detail::kAbsMask) >= detail::kInfBits)
        cuda::atomic_ref<std::uint32_t, cuda::thread_scope_device>(c.nonfinite[j])
            .store(1u, cuda::memory_order_relaxed);
    }
    c.block_max[i] = mx;
  }
};

// Per row r: the window moves up to the chunk's largest key (slow_add's rule).
template <class Real>
struct Rebase {
  SummaryChunk<Real> c;
  PKSCAN_HD void operator()(std::int64_t r) const {
    const DeviceSketch& h = c.sk;
    const std::int64_t blocks = (c.subjects + detail::kSubjectBlock - 1) / detail::kSubjectBlock;
    std::int64_t top = -1;
    for (std::int64_t b = 0; b < blocks; ++b)
      top = c.block_max[b * c.rows + r] > top ? c.block_max[b * c.rows + r] : top;
    const std::int64_t mx = h.maxkey[r];
    if (top <= mx) return;  // no value, or inside the window
    const std::int64_t new_lo = top - h.width + 1;
    if (mx >= 0) {
      std::uint32_t* cnt = h.counts + r * h.stride;
      const std::int64_t end = new_lo < mx + 1 ? new_lo : mx + 1;
      for (std::int64_t k = h.lo[r] > 0 ? h.lo[r] : 0; k < end; ++k) {
        h.under[r] += cnt[k & h.mask];
        cnt[k & h.mask] = 0;
      }
    }
    h.lo[r] = new_lo;
    h.maxkey[r] = top;
  }
};

// Per (block, row) i = b * rows + r: the lane sums of the included subjects and their counts.
template <class Real>
struct Count {
  SummaryChunk<Real> c;
  PKSCAN_HD void operator()(std::int64_t i) const {
    const DeviceSketch& h = c.sk;
    const Cell cell = cell_of(c, i);
    const std::int64_t r = cell.r;
    const std::int64_t lo = h.lo[r];
    double lane[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
    for (std::int64_t j = cell.j0; j < cell.j1; ++j) {
      if (c.excluded[j]) continue;
      const double v = summary_value(c, j, r);
      lane[j & 7] += v;
      const std::uint64_t bits = detail::hd_bits(v);
      if (bits - 1 < detail::kPosFiniteMax) {
        const std::int64_t key = static_cast<std::int64_t>(bits >> detail::kKeyShift);
        if (key >= lo)
          atomic_increment(h.counts[r * h.stride + (key & h.mask)]);
        else
          atomic_increment(h.under[r]);
      } else {
        atomic_increment(h.zero[r]);  // finite (included) and <= 0
      }
    }
    if (cell.j1 - cell.j0 == detail::kSubjectBlock) {
      c.block_sums[i] = detail::lane_tree8(lane, 1);
    } else {
      for (int l = 0; l < 8; ++l) c.tail[r * 8 + l] = lane[l];
    }
  }
};

}  // namespace pkscan::device
