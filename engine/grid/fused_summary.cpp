// The fused simulate-and-summarise path of population runs (Engine::summarize_into with the
// batched method on the CPU, 2 to 4 compartments, summaries only): blocks of 1024 subjects, each
// stepped by the lane kernel (grid/lanes.hpp, lane groups of 8 subjects, 4 groups interleaved)
// over windows of 32 output rows; each window is summarised while it is in the thread's cache
// (per-time sums, the thread's sketch, the metrics), so the trajectories are never stored.
//
// Numeric contract: the same bits as simulate (any grid method) + TimeSummary::add +
// subject_metrics. The trajectories are the lane kernel's, which is the reference scan's
// arithmetic; the sums follow add()'s order (lane g mod 8 of the block of 1024, the block's
// lanes combined by lane_tree, block sums added in block order); the sketch is one per thread,
// merged exactly by finish(); the metrics run the same inline kernels as subject_metrics. The
// file is compiled with -ffp-contract=off like every file holding this arithmetic
// (CMakeLists.txt). A subject found non-finite late is excluded as add() excludes it: its
// values are taken out of the sketch and the block's sums are recomputed without it.
#include "grid/fused_summary.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <pkscan/error.hpp>
#include <pkscan/models/model.hpp>
#include <pkscan/summary.hpp>

#include "core/block.hpp"
#include "core/parallel.hpp"
#include "core/validate.hpp"
#include "grid/backend.hpp"
#include "grid/lanes.hpp"
#include "grid/transition.hpp"
#include "summary/metric_lanes.hpp"
#include "summary/summary_state.hpp"

namespace pkscan::detail {

namespace {

constexpr int kFuseRows = 32;      // output rows per window: a 1024-subject tile stays in L2
constexpr int kAdvanceGroups = 2;  // lane groups whose recurrences are interleaved (4 spilled K)
constexpr int kHistRows = 8;       // sketch rows whose increments are interleaved (fuse_hist)
constexpr std::int64_t kSlotStride = kSubjectBlock + 16;  // a row of fuse_rows' counter indices
// Tile elements per lane group: kFuseRows x N rows of 8 lanes, plus 8 so that the groups do not
// all fall in the same cache sets.
constexpr std::int64_t group_stride(int n) noexcept { return std::int64_t{kFuseRows} * n * 8 + 8; }

// 64-byte aligned storage for the vector types (the default allocator only promises 16 bytes
// here).
template <class T>
struct Aligned64 {
  using value_type = T;
  Aligned64() = default;
  template <class U>
  explicit Aligned64(const Aligned64<U>&) noexcept {}
  T* allocate(std::size_t n) {
    void* p = std::aligned_alloc(64, (n * sizeof(T) + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, std::size_t) noexcept { std::free(p); }
  friend bool operator==(const Aligned64&, const Aligned64&) noexcept { return true; }
  friend bool operator!=(const Aligned64&, const Aligned64&) noexcept { return false; }
};
template <class T>
using AlignedVector = std::vector<T, Aligned64<T>>;

// Everything one call of add_batch shares between its threads.
struct FuseJob {
  const PreparedBatch* b = nullptr;
  int mc = 0;             // metric compartment
  std::int64_t i0 = 0;    // first output index of the last dosing interval
  std::int64_t rows = 0;  // output times x compartments
  const double* times = nullptr;
  double* metrics = nullptr;
  SubjectStatus* status = nullptr;
  double* block_sums = nullptr;       // per complete block: rows sums
  double* tail_part = nullptr;        // the last, incomplete block's lanes: rows x 8
  unsigned char* excluded = nullptr;  // per subject: left out of the summary
};

// Per-thread scratch of the fused kernel (a slot of FusedScratch).
template <int N, class Real>
struct FuseScratch final : FusedScratch::Slot {
  std::vector<Transition<N>> tr;
  AlignedVector<Lanes<N, Real, 8>> lanes;
  AlignedVector<MetricLanes> ml;
  AlignedVector<Real> tile;               // per lane group: kFuseRows x N rows of 8 lanes
  AlignedVector<double> inv;              // per lane group: N x 8 reciprocal volumes
  AlignedVector<double> part;             // rows x 8 lane sums of the block
  double seconds[3] = {};                 // this call: recurrence, sums and sketch, metrics
  std::vector<unsigned char> amount_bad;  // per subject of the block: an amount is not finite
  std::vector<unsigned char> bad;         // per subject of the block: excluded from the summary
  std::vector<std::uint32_t> slots;       // kHistRows rows of the block: each value's counter
  FuseScratch()
      : tr(kSubjectBlock),
        lanes(kSubjectBlock / 8),
        ml(kSubjectBlock / 8),
        tile(static_cast<std::size_t>(kSubjectBlock / 8 * group_stride(N))),
        inv(static_cast<std::size_t>(kSubjectBlock) * N),
        amount_bad(kSubjectBlock),
        bad(kSubjectBlock),
        slots(static_cast<std::size_t>(kHistRows) * kSlotStride) {}
};

// The fused summary's row sink: the output rows of P lane groups go into their parts of the
// block's tile (row j, compartment r of lane l at tile_g[(j N + r) 8 + l]), a window of
// kFuseRows rows that fuse_metrics and fuse_rows then read while it is in cache.
template <int N, class Real, int P>
struct WindowSink {
  Real* tile[P];
  PKSCAN_INLINE void row(int j, const LaneVec<Real, 8> (&x)[P][N]) const {
    for (int p = 0; p < P; ++p)
      for (int r = 0; r < N; ++r) std::memcpy(tile[p] + (j * N + r) * 8, &x[p][r], sizeof x[p][r]);
  }
};

// Advances lane groups g0 .. g0 + P - 1 by up to kFuseRows output rows (the lane kernel,
// grid/lanes.hpp), recording them in their parts of the tile.
template <int N, class Real, int P>
PKSCAN_INLINE int fuse_advance(FuseScratch<N, Real>& w, std::int64_t g0, std::int64_t count,
                               LaneCursor& cur, const Schedule& s,
                               const std::vector<std::int64_t>& outs) {
  WindowSink<N, Real, P> sink;
  for (int p = 0; p < P; ++p) sink.tile[p] = w.tile.data() + (g0 + p) * group_stride(N);
  return advance_lanes<N, Real, 8, P>(w.lanes.data() + g0, w.tr.data() + g0 * 8, count - g0 * 8,
                                      cur, s, outs, kFuseRows, sink);
}

// The metrics' share of one window (output indices t0 .. t0 + rows - 1) of lane group g: the
// metric compartment's concentrations (the tile times the reciprocal volume) through the AUC
// pieces and the metric updates.
template <int N, class Real>
PKSCAN_INLINE void fuse_metrics(FuseScratch<N, Real>& w, const FuseJob& job, std::int64_t g,
                                std::int64_t t0, int rows) {
  const Real* tile = w.tile.data() + g * group_stride(N) + job.mc * 8;
  const v8d inv = load8(w.inv.data() + (g * N + job.mc) * 8);
  MetricLanes& M = w.ml[static_cast<std::size_t>(g)];
  // Metric compartment values: mv[0] the previous window's last, mv[1 + j] row j.
  v8d mv[kFuseRows + 4];
  v8d pieces[kFuseRows + 3];
  mv[0] = M.prev;
  for (int j = 0; j < rows; ++j) mv[j + 1] = load8(tile + j * N * 8) * inv;
  // The pieces of the area do not depend on each other: four at a time, so that their long
  // dependency chains overlap.
  for (int j = rows; j < rows + 3; ++j) mv[j + 1] = mv[rows];
  for (int j = 0; j < rows; j += 4) {
    const v8d p0 = auc_piece(mv[j], mv[j + 1]);
    const v8d p1 = auc_piece(mv[j + 1], mv[j + 2]);
    const v8d p2 = auc_piece(mv[j + 2], mv[j + 3]);
    const v8d p3 = auc_piece(mv[j + 3], mv[j + 4]);
    pieces[j] = p0;
    pieces[j + 1] = p1;
    pieces[j + 2] = p2;
    pieces[j + 3] = p3;
  }
  MetricLanes L = M;  // in registers for the window (stores to M would chain the rows)
  for (int j = 0; j < rows; ++j) {
    const std::int64_t t = t0 + j;
    const double tt = job.times[t];
    if (t == 0)
      metric_first(mv[1], tt, t >= job.i0, L);
    else
      metric_update(mv[j + 1], pieces[j], tt, tt - job.times[t - 1], t >= job.i0, L);
  }
  M = L;
}

// The sums' and the sketch's share of one window: the values of the block's `count` subjects
// (the tile times the reciprocal volumes), kHistRows rows at a time.
//  - Sums: each row's 8 lane sums stay in a register while the lane groups are added in
//    order (the arithmetic of add()). In the fix-up pass (`Fixup`: a subject of the block was
//    found non-finite) the sums are recomputed without the excluded subjects, whose values are
//    taken out of the sketch; nothing else is done.
//  - Sketch: a vector pass computes each value's counter within its row, or the row's spare
//    counter `ring` (padding, never read) when the value needs the slow path; the increments
//    then take the rows in turn, so that two increments of one counter are far apart (a row's
//    values often share buckets) and the rows' counters stay in the first-level cache; the
//    rare slow-path values follow one by one (the sketch's final state does not depend on the
//    order of the values). A value that is not finite excludes its subject, and marks its
//    amounts bad when the amount itself is not finite (a finite amount times a finite positive
//    reciprocal volume is finite unless it overflows).
template <int N, class Real, bool Fixup>
PKSCAN_INLINE void fuse_rows(FuseScratch<N, Real>& w, Sketch& h, std::int64_t t0, int rows,
                             std::int64_t count) {
  typedef std::uint32_t v16w __attribute__((vector_size(64)));
  typedef std::int32_t v16s __attribute__((vector_size(64)));
  constexpr std::uint32_t kPosFiniteMaxHi = static_cast<std::uint32_t>(kPosFiniteMax >> 32);
  const std::uint32_t top = static_cast<std::uint32_t>(h.width - 1);
  const std::uint32_t mask = static_cast<std::uint32_t>(h.mask);
  const std::uint32_t spare = static_cast<std::uint32_t>(h.ring);
  const std::int64_t groups = (count + 7) / 8;
  std::uint32_t* slots = w.slots.data();
  const int total = rows * N;  // tile rows: q = j N + c is sketch row t0 N + q
  for (int q0 = 0; q0 < total; q0 += kHistRows) {
    const int nr = std::min(kHistRows, total - q0);
    std::uint32_t* cnt[kHistRows];
    std::uint32_t lo[kHistRows];  // window starts; an empty row's lies far below every key
    int cmt[kHistRows];           // compartment of each row
    v16w slow[kHistRows];
    v8d sum[kHistRows];
    for (int k = 0; k < nr; ++k) {
      const std::int64_t row = t0 * N + q0 + k;
      cmt[k] = (q0 + k) % N;
      cnt[k] = h.counts + row * h.stride;
      lo[k] = static_cast<std::uint32_t>(
          std::max<std::int64_t>(h.lo[static_cast<std::size_t>(row)], -(std::int64_t{1} << 30)));
      slow[k] = v16w{};
      sum[k] = load8(w.part.data() + row * 8);
    }
    if (Fixup) {
      for (std::int64_t g = 0; g < groups; ++g) {
        const Real* a = w.tile.data() + g * group_stride(N) + q0 * 8;
        const double* inv = w.inv.data() + g * N * 8;
        const v8i live = (g * 8 + v8i{0, 1, 2, 3, 4, 5, 6, 7} - count) >> 63;  // -1: a subject
        v8i keep = live;  // -1: the lane's values go into the sums
        for (int l = 0; l < 8; ++l)
          if (w.bad[static_cast<std::size_t>(g * 8 + l)]) keep[l] = 0;
        for (int k = 0; k < nr; ++k) {
          const v8d v = load8(a + k * 8) * load8(inv + cmt[k] * 8);
          sum[k] = sum[k] + vcast<v8d>(vcast<v8i>(v) & keep);  // v or +0
          for (int l = 0; l < 8; ++l)
            if (live[l] && w.bad[static_cast<std::size_t>(g * 8 + l)])
              remove_one(h, t0 * N + q0 + k, v[l]);
        }
      }
    } else {
      // Two lane groups (16 subjects) per step. The counter index needs only the high word of
      // each value (the key is bits 45 to 63): 16 of them fit one vector of 32-bit lanes.
      // Fast path <=> 1 <= high word <= that of DBL_MAX and 0 <= key - lo <= top (unsigned
      // wrap-around puts every other case's sign bit up); values whose high word is 0 (zero
      // and the tiniest subnormals) take the slow path, where add_one() treats them exactly.
      for (std::int64_t g = 0; g < groups; g += 2) {  // group g + 1 may be idle (in the tile)
        const Real* a0 = w.tile.data() + g * group_stride(N) + q0 * 8;
        const Real* a1 = a0 + group_stride(N);
        const double* inv0 = w.inv.data() + g * N * 8;
        const double* inv1 = inv0 + N * 8;
        const v8i keep0 = (g * 8 + v8i{0, 1, 2, 3, 4, 5, 6, 7} - count) >> 63;  // -1: a subject
        const v8i keep1 = (g * 8 + v8i{8, 9, 10, 11, 12, 13, 14, 15} - count) >> 63;
        const v16w live =
            vcast<v16w>((static_cast<std::int32_t>(g * 8 - count) +
                         v16s{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}) >>
                        31);
        for (int k = 0; k < nr; ++k) {
          const v8d v0 = load8(a0 + k * 8) * load8(inv0 + cmt[k] * 8);
          const v8d v1 = load8(a1 + k * 8) * load8(inv1 + cmt[k] * 8);
          sum[k] = sum[k] + vcast<v8d>(vcast<v8i>(v0) & keep0);  // v or +0
          sum[k] = sum[k] + vcast<v8d>(vcast<v8i>(v1) & keep1);
#if defined(__clang__)
          const v16w hi = __builtin_shufflevector(vcast<v16w>(v0), vcast<v16w>(v1), 1, 3, 5, 7, 9,
                                                  11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
#else
          const v16w hi =
              __builtin_shuffle(vcast<v16w>(v0), vcast<v16w>(v1),
                                v16w{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31});
#endif
          const v16w key = hi >> (kKeyShift - 32);
          const v16w idx = key - lo[k];
          const v16w out = (hi - 1) | (kPosFiniteMaxHi - hi) | idx | (top - idx);
          const v16w sm = vcast<v16w>(vcast<v16s>(out) >> 31);  // all ones: slow path
          slow[k] |= sm & live;
          const v16w m = sm | ~live;  // slow path or idle lane: the spare counter
          const v16w slot = (key & mask & ~m) | (m & spare);
          std::memcpy(slots + k * kSlotStride + g * 8, &slot, sizeof slot);
        }
      }
    }
    for (int k = 0; k < nr; ++k) store8(w.part.data() + (t0 * N + q0 + k) * 8, sum[k]);
    if (Fixup) continue;
    if (nr == kHistRows) {
      for (std::int64_t i = 0; i < count; ++i)
        for (int k = 0; k < kHistRows; ++k) ++cnt[k][slots[k * kSlotStride + i]];
    } else {
      for (int k = 0; k < nr; ++k)
        for (std::int64_t i = 0; i < count; ++i) ++cnt[k][slots[k * kSlotStride + i]];
    }
    for (int k = 0; k < nr; ++k) {
      std::uint32_t any = 0;
      for (int l = 0; l < 16; ++l) any |= slow[k][l];
      if (!any) continue;
      const int q = q0 + k;
      const std::int64_t row = t0 * N + q;
      for (std::int64_t i = 0; i < count; ++i) {
        if (slots[k * kSlotStride + i] != spare) continue;
        const std::int64_t g = i / 8, l = i % 8;
        const Real a = w.tile[static_cast<std::size_t>(g * group_stride(N) + q * 8 + l)];
        const double v =
            static_cast<double>(a) * w.inv[static_cast<std::size_t>((g * N + cmt[k]) * 8 + l)];
        if (!add_one(h, row, v)) {
          w.bad[static_cast<std::size_t>(i)] = 1;
          if (!std::isfinite(a)) w.amount_bad[static_cast<std::size_t>(i)] = 1;
        }
      }
    }
  }
}

// One block of `count` subjects (<= kSubjectBlock) whose transitions and volumes are in the
// scratch, `Fixup` as for fuse_window.
template <int N, class Real, bool Fixup>
PKSCAN_INLINE void fuse_pass(FuseScratch<N, Real>& w, const FuseJob& job, Sketch& h,
                             std::int64_t count) {
  const PreparedBatch& b = *job.b;
  const Schedule& s = b.schedule;
  const std::int64_t groups = (count + 7) / 8;
  for (std::int64_t g = 0; g < groups; ++g)
    load_lanes<N, Real, 8>(w.lanes[static_cast<std::size_t>(g)], s, w.tr.data() + g * 8,
                           static_cast<int>(std::min<std::int64_t>(8, count - g * 8)));
  std::fill(w.part.begin(), w.part.end(), 0.0);
  LaneCursor cur(s);
  const std::size_t n_out = b.out_steps.size();
  using Clock = std::chrono::steady_clock;
  auto since = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  while (cur.next < n_out) {
    const std::int64_t t0 = static_cast<std::int64_t>(cur.next);
    const Clock::time_point c0 = Clock::now();
    LaneCursor after = cur;
    int rows = 0;
    std::int64_t g = 0;
    for (; g + kAdvanceGroups <= groups; g += kAdvanceGroups) {
      after = cur;
      rows = fuse_advance<N, Real, kAdvanceGroups>(w, g, count, after, s, b.out_steps);
    }
    for (; g < groups; ++g) {
      after = cur;
      rows = fuse_advance<N, Real, 1>(w, g, count, after, s, b.out_steps);
    }
    const Clock::time_point c1 = Clock::now();
    if (!Fixup)
      for (std::int64_t g = 0; g < groups; ++g) fuse_metrics<N, Real>(w, job, g, t0, rows);
    const Clock::time_point c2 = Clock::now();
    fuse_rows<N, Real, Fixup>(w, h, t0, rows, count);
    const Clock::time_point c3 = Clock::now();
    w.seconds[0] += since(c0, c1);
    w.seconds[1] += since(c2, c3);
    w.seconds[2] += since(c1, c2);
    cur = after;
  }
}

// One block's transitions, its first pass, statuses and metrics; true when a subject was
// excluded (fuse_finish then runs the fix-up pass).
template <int N, class Real>
PKSCAN_INLINE bool fuse_block(FuseScratch<N, Real>& w, const FuseJob& job, Sketch& h,
                              std::int64_t blk, std::int64_t count) {
  const PreparedBatch& b = *job.b;
  const Problem& p = *b.problem;
  const std::int64_t first = blk * kSubjectBlock;
  for (std::int64_t i = 0; i < count; ++i) {
    Mat<N> a;
    rate_matrix(*b.model, p.parameters.row(first + i), a.data());
    build_transition<N>(a, p.grid.dt, p.discretization, b.schedule.partial_lengths,
                        w.tr[static_cast<std::size_t>(i)]);
  }
  const std::int64_t groups = (count + 7) / 8;
  for (std::int64_t g = 0; g < groups; ++g)
    for (int c = 0; c < N; ++c)
      for (int l = 0; l < 8; ++l) {
        const std::int64_t s = first + std::min<std::int64_t>(g * 8 + l, count - 1);
        w.inv[static_cast<std::size_t>((g * N + c) * 8 + l)] = reciprocal_volume(b, s, c);
      }
  std::fill(w.amount_bad.begin(), w.amount_bad.end(), 0);
  std::fill(w.bad.begin(), w.bad.end(), 0);
  fuse_pass<N, Real, false>(w, job, h, count);
  bool any_bad = false;
  for (std::int64_t i = 0; i < count; ++i) {
    const bool amounts_ok = !w.amount_bad[static_cast<std::size_t>(i)];
    job.status[first + i] = amounts_ok ? SubjectStatus::Ok : SubjectStatus::NonFinite;
    if (!amounts_ok) w.bad[static_cast<std::size_t>(i)] = 1;
    any_bad = any_bad || w.bad[static_cast<std::size_t>(i)];
    job.excluded[first + i] = w.bad[static_cast<std::size_t>(i)];
    metric_out(w.ml[static_cast<std::size_t>(i / 8)], static_cast<int>(i % 8), amounts_ok,
               job.metrics + (first + i) * kMetricCount);
  }
  return any_bad;
}

// The rest of a block: the fix-up pass when a subject was excluded, then the block's sums. Not
// compiled per ISA: the fix-up pass is rare, and its arithmetic gives the same bits on every
// ISA (-ffp-contract=off), so one compiled copy serves (a third of this file's compile time).
template <int N, class Real>
void fuse_finish(FuseScratch<N, Real>& w, const FuseJob& job, Sketch& h, std::int64_t blk,
                 std::int64_t count, bool any_bad) {
  if (any_bad) fuse_pass<N, Real, true>(w, job, h, count);
  if (count == kSubjectBlock) {
    double* out = job.block_sums + blk * job.rows;
    for (std::int64_t r = 0; r < job.rows; ++r) out[r] = lane_tree(w.part.data() + r * 8, 1);
  } else {
    std::copy(w.part.begin(), w.part.begin() + job.rows * 8, job.tail_part);
  }
}

// This thread's scratch for N and Real, made on first use (or remade for another N or Real).
template <int N, class Real>
FuseScratch<N, Real>& scratch_for(std::unique_ptr<FusedScratch::Slot>& slot, std::int64_t rows) {
  auto* w = dynamic_cast<FuseScratch<N, Real>*>(slot.get());
  if (!w) {
    auto fresh = std::make_unique<FuseScratch<N, Real>>();
    w = fresh.get();
    slot = std::move(fresh);
  }
  if (w->part.size() != static_cast<std::size_t>(rows) * 8)
    w->part.assign(static_cast<std::size_t>(rows) * 8, 0.0);
  return *w;
}

// One block, compiled per ISA (PKSCAN_CLONES, core/simd.hpp): one overload per compartment
// count and precision, picked by type.
#define PKSCAN_FUSE(N, Real)                                                    \
  PKSCAN_CLONES bool fuse_call(const FuseJob& job, Sketch& h, std::int64_t blk, \
                               std::int64_t count, FuseScratch<N, Real>& w) {   \
    return fuse_block<N, Real>(w, job, h, blk, count);                          \
  }
PKSCAN_FUSE(2, double)
PKSCAN_FUSE(3, double)
PKSCAN_FUSE(4, double)
PKSCAN_FUSE(2, float)
PKSCAN_FUSE(3, float)
PKSCAN_FUSE(4, float)
#undef PKSCAN_FUSE

template <int N, class Real>
void fuse_all(const FuseJob& job, std::vector<Sketch*>& sketches, std::int64_t subjects,
              int threads, FusedScratch& scratch, double* seconds) {
  const std::int64_t blocks = (subjects + kSubjectBlock - 1) / kSubjectBlock;
  if (scratch.per_thread.size() < static_cast<std::size_t>(threads))
    scratch.per_thread.resize(static_cast<std::size_t>(threads));
  RegionError error;
#pragma omp parallel num_threads(threads)
  {
    int tid = 0;
#if defined(_OPENMP)
    tid = omp_get_thread_num();
#endif
    FuseScratch<N, Real>* w = nullptr;
    error.guard([&] {
      w = &scratch_for<N, Real>(scratch.per_thread[static_cast<std::size_t>(tid)], job.rows);
      for (double& x : w->seconds) x = 0.0;
    });
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      if (!w || error.failed()) continue;
      error.guard([&] {
        Sketch& h = *sketches[static_cast<std::size_t>(tid)];
        const std::int64_t count =
            std::min<std::int64_t>(kSubjectBlock, subjects - blk * kSubjectBlock);
        fuse_finish<N, Real>(*w, job, h, blk, count, fuse_call(job, h, blk, count, *w));
      });
    }
    if (w && seconds) {
#pragma omp critical(pkscan_fused_seconds)
      for (int i = 0; i < 3; ++i) seconds[i] += w->seconds[i];
    }
  }
  error.rethrow();
}

}  // namespace

bool FusedSummary::accepts(const TimeSummary& summary, std::int64_t subjects) noexcept {
  const TimeSummary::Impl& m = *summary.impl_;
  if (m.subjects % kSubjectBlock != 0 || subjects <= 0) return false;
  return !m.exact || static_cast<double>(m.subjects + subjects) * static_cast<double>(m.rows) >
                         static_cast<double>(m.opt.exact_values);
}

void FusedSummary::check_batch(const TimeSummary& summary, const PreparedBatch& b,
                               int metric_compartment, const double* metrics) {
  const TimeSummary::Impl& m = *summary.impl_;
  const char* where = "TimeSummary::add";
  if (b.n != m.compartments)
    throw_invalid(where, "chunk compartments", std::to_string(b.n),
                  std::to_string(m.compartments) + " (the summary's)");
  if (b.out_steps.size() != m.times.size())
    throw_invalid(where, "chunk output times", std::to_string(b.out_steps.size()),
                  std::to_string(m.times.size()) + " (the summary's)");
  for (std::size_t i = 0; i < m.times.size(); ++i)
    if (b.problem->grid.time(b.out_steps[i]) != m.times[i])
      throw_invalid(where, "chunk output time " + std::to_string(i),
                    format_value(b.problem->grid.time(b.out_steps[i])),
                    format_value(m.times[i]) + " (the summary's)");
  if (metric_compartment < 0 || metric_compartment >= m.compartments)
    throw_invalid(where, "metric compartment", std::to_string(metric_compartment),
                  "in [0, " + std::to_string(m.compartments) + ")");
  const std::int64_t S = b.subjects;
  if (S == 0) return;
  if (!metrics) throw_invalid(where, "metrics", "null", "not null");
  if (b.n < 2 || b.n > 4 || !accepts(summary, S))
    throw_invalid(where, "fused batch", "not accepted", "FusedSummary::accepts");
  if (m.subjects + S > static_cast<std::int64_t>(0xFFFFFFFFll))
    throw_domain(where, "number of subjects", std::to_string(m.subjects + S), "<= 4294967295");
}

void FusedSummary::commit(TimeSummary& summary, std::int64_t S, const double* block_sums,
                          const double* tail, const unsigned char* excluded) noexcept {
  std::int64_t n_excluded = 0;
  for (std::int64_t s = 0; s < S; ++s) n_excluded += excluded[s] ? 1 : 0;
  commit_counts(summary, S, block_sums, tail, n_excluded);
}

void FusedSummary::commit_counts(TimeSummary& summary, std::int64_t S, const double* block_sums,
                                 const double* tail, std::int64_t n_excluded) noexcept {
  TimeSummary::Impl& m = *summary.impl_;
  // Block sums in block order; an incomplete last block is carried as add()'s lanes.
  const std::int64_t full = S / kSubjectBlock;
  if (m.capture)
    m.captured.assign(block_sums, block_sums + full * m.rows);
  else
    for (std::int64_t blk = 0; blk < full; ++blk)
      for (std::int64_t r = 0; r < m.rows; ++r)
        m.total[static_cast<std::size_t>(r)] += block_sums[blk * m.rows + r];
  if (S % kSubjectBlock != 0)
    for (std::int64_t r = 0; r < m.rows; ++r)
      for (int l = 0; l < 8; ++l)
        m.part[static_cast<std::size_t>(l * m.lane_stride + r)] = tail[r * 8 + l];
  m.subjects += S;
  m.included += S - n_excluded;
  m.excluded += n_excluded;
  m.exact = false;
  std::vector<double>().swap(m.kept);
  m.kept_subjects = 0;
}

void FusedSummary::start_capture(TimeSummary& worker) noexcept { worker.impl_->capture = true; }

void FusedSummary::take_capture(TimeSummary& worker, std::vector<double>& block_sums,
                                std::vector<double>& tail, std::int64_t& excluded) {
  TimeSummary::Impl& m = *worker.impl_;
  const auto R = static_cast<std::size_t>(m.rows);
  block_sums.swap(m.captured);
  m.captured.clear();
  tail.assign(R * 8, 0.0);
  if (m.subjects % kSubjectBlock != 0)
    for (std::size_t r = 0; r < R; ++r)
      for (std::size_t l = 0; l < 8; ++l)
        tail[r * 8 + l] = m.part[l * static_cast<std::size_t>(m.lane_stride) + r];
  excluded = m.excluded;
  std::fill(m.part.begin(), m.part.end(), 0.0);
  m.subjects = 0;
  m.included = 0;
  m.excluded = 0;
}

std::vector<const Sketch*> FusedSummary::sketches(const TimeSummary& worker) {
  return worker.impl_->sketches();
}

void FusedSummary::adopt_sketch(TimeSummary& summary, std::unique_ptr<Sketch, SketchFree> h) {
  summary.impl_->local.push_back(std::move(h));
}

std::int64_t FusedSummary::rows(const TimeSummary& summary) noexcept { return summary.impl_->rows; }

int FusedSummary::window_binades(const TimeSummary& summary) noexcept {
  return summary.impl_->opt.window_binades;
}

const std::vector<double>& FusedSummary::times(const TimeSummary& summary) noexcept {
  return summary.impl_->times;
}

Refinement* FusedSummary::open_pass(TimeSummary& summary) noexcept {
  return summary.in_pass() ? summary.impl_->refine.get() : nullptr;
}

void FusedSummary::set_pass(TimeSummary& worker, std::unique_ptr<Refinement> pass) noexcept {
  if (pass) pass->active = true;
  worker.impl_->refine = std::move(pass);
}

Sketch& FusedSummary::device_sketch(TimeSummary& summary, bool spare) {
  TimeSummary::Impl& m = *summary.impl_;
  std::unique_ptr<Sketch, SketchFree>& slot = spare ? m.device_spare : m.device;
  if (!slot) {
    std::unique_ptr<Sketch, SketchFree> h(new Sketch);
    init_sketch(*h, m.rows, m.opt.window_binades, false);
    slot = std::move(h);
  }
  return *slot;
}

void FusedSummary::swap_device_sketch(TimeSummary& summary) noexcept {
  TimeSummary::Impl& m = *summary.impl_;
  std::swap(m.device, m.device_spare);
}

void FusedSummary::add_batch(TimeSummary& summary, const PreparedBatch& b, Precision precision,
                             int metric_compartment, double last_dose, double* metrics,
                             SubjectStatus* status, FusedScratch& scratch, double* seconds) {
  check_batch(summary, b, metric_compartment, metrics);
  TimeSummary::Impl& m = *summary.impl_;
  const std::int64_t S = b.subjects;
  if (S == 0) return;

  const int nt = std::max(1, b.threads);
  while (m.local.size() < static_cast<std::size_t>(nt)) {
    std::unique_ptr<Sketch, SketchFree> h(new Sketch);
    init_sketch(*h, m.rows, m.opt.window_binades, false);
    m.local.push_back(std::move(h));
  }
  std::vector<Sketch*> sketches;
  for (auto& h : m.local) sketches.push_back(h.get());

  const std::int64_t full = S / kSubjectBlock;
  std::vector<double> block_sums(static_cast<std::size_t>(full * m.rows));
  std::vector<double> tail(static_cast<std::size_t>(m.rows) * 8, 0.0);
  FuseJob job;
  job.b = &b;
  job.mc = metric_compartment;
  job.i0 = first_index_at_or_after(m.times, last_dose);
  job.rows = m.rows;
  job.times = m.times.data();
  job.metrics = metrics;
  job.status = status;
  job.block_sums = block_sums.data();
  job.tail_part = tail.data();
  std::vector<unsigned char> excluded(static_cast<std::size_t>(S), 0);
  job.excluded = excluded.data();
  with_compartments_2_to_4(b.n, [&](auto n) {
    constexpr int N = decltype(n)::value;
    if (precision == Precision::Float64)
      fuse_all<N, double>(job, sketches, S, nt, scratch, seconds);
    else
      fuse_all<N, float>(job, sketches, S, nt, scratch, seconds);
  });
  commit(summary, S, block_sums.data(), tail.data(), excluded.data());
}

}  // namespace pkscan::detail
