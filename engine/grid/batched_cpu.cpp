// Batched CPU backend: subjects in blocks of W SIMD lanes (structure of arrays, one subject per
// lane), K and the state held in registers across the time loop (the lane kernel,
// grid/lanes.hpp), outputs gathered in a small tile and written out as contiguous per-subject
// rows. Blocks run on OpenMP threads.
//
// Numeric contract: per step, the same arithmetic as the reference (detail::affine_step order;
// the same rounded K and inputs from detail::breakpoint_inputs). This file is compiled with
// -ffp-contract=off (CMakeLists.txt), so no SIMD clone contracts a multiply-add into an FMA and
// every subject's result is bit-identical to the reference scan's (the population runs and
// docs/performance.md promise it). Deterministic: a subject's result does not depend on the
// thread count, the block it falls in, or its lane.
#include <omp.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/parallel.hpp"
#include "grid/backend.hpp"
#include "grid/lanes.hpp"
#include "grid/reference.hpp"
#include "grid/transition.hpp"
#include "summary/fused_summary.hpp"

namespace pkscan::detail {

namespace {

constexpr int kTileRows = 64;  // output rows gathered per lane before a write-out

template <class Real>
constexpr int lanes() {
  return 64 / static_cast<int>(sizeof(Real));  // one cache line: 8 doubles, 16 floats
}

// Where a block writes its rows in the result.
template <class Real>
struct Writer {
  Real* out;              // result base
  std::int64_t stride;    // values per subject (times * N)
  std::int64_t first;     // first subject of the block
  int active;             // lanes that are real subjects
  std::int64_t next_row;  // output row the tile starts at
  bool streaming;         // write with non-temporal stores (output much larger than caches)
  // Streaming writes whole 64-byte lines only: the values of a lane that do not fill a line yet
  // wait here for the next flush (a partial line written non-temporally is slow).
  static constexpr int kLine = 64 / static_cast<int>(sizeof(Real));
  Real carry[64][kLine];
  int carry_n[64];
};

// Copies n values, whole 64-byte lines, to the 64-byte-aligned dst bypassing the caches (no
// read-for-ownership of the destination lines). 32-byte non-temporal stores where the machine
// has AVX: with 16-byte ones, twice as many stores wait in the store queue and the lane kernel
// stalls behind them (dense float64 output 20% slower on one Zen 4 core, with the tile's stores
// in between).
#if defined(__x86_64__)
__attribute__((target("avx"))) void stream_lines_avx(double* dst, const double* src, int n) {
  for (int i = 0; i < n; i += 4) _mm256_stream_pd(dst + i, _mm256_loadu_pd(src + i));
}
__attribute__((target("avx"))) void stream_lines_avx(float* dst, const float* src, int n) {
  for (int i = 0; i < n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
}
void stream_lines_sse(double* dst, const double* src, int n) {
  for (int i = 0; i < n; i += 2) _mm_stream_pd(dst + i, _mm_loadu_pd(src + i));
}
void stream_lines_sse(float* dst, const float* src, int n) {
  for (int i = 0; i < n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
}
template <class Real>
PKSCAN_INLINE void stream_lines(Real* dst, const Real* src, int n) {
  static const bool avx = __builtin_cpu_supports("avx");
  if (avx)
    stream_lines_avx(dst, src, n);
  else
    stream_lines_sse(dst, src, n);
}
#else
template <class Real>
PKSCAN_INLINE void stream_lines(Real* dst, const Real* src, int n) {
  std::memcpy(dst, src, sizeof(Real) * static_cast<std::size_t>(n));
}
#endif

// Appends the tile's `n` values for lane l to the lane's output at `dst` (where its written
// output ends; the lane's carry, s.carry_n[l] values, belongs just before it). Only whole
// 64-byte-aligned lines are stored, non-temporally; the values of an unfinished line wait in the
// carry. The first line of each subject is usually unaligned: it is written with ordinary
// stores. No staging copy: whole lines are stored straight from the tile.
template <class Real>
PKSCAN_INLINE void stream_lane(Writer<Real>& s, int l, Real* dst, const Real* src, int n) {
  constexpr int kLine = Writer<Real>::kLine;
  int c = s.carry_n[l];
  Real* line_start = dst - c;  // the carry's destination
  int i = 0;
  if (reinterpret_cast<std::uintptr_t>(line_start) & 63) {
    // Unaligned head (first flush of the subject; carry is empty): ordinary stores up to the
    // first line boundary.
    while (i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 63)) {
      dst[i] = src[i];
      ++i;
    }
    if (i == n) return;
    line_start = dst + i;
    c = 0;
  } else if (c > 0) {
    // Complete the carried line with the tile's first values and stream it.
    if (c + n < kLine) {
      for (int k = 0; k < n; ++k) s.carry[l][c + k] = src[k];
      s.carry_n[l] = c + n;
      return;
    }
    alignas(64) Real line[kLine];
    for (int k = 0; k < c; ++k) line[k] = s.carry[l][k];
    for (int k = c; k < kLine; ++k) line[k] = src[k - c];
    stream_lines(line_start, line, kLine);
    i = kLine - c;
    line_start += kLine;
  }
  const int whole = (n - i) / kLine * kLine;
  stream_lines(line_start, src + i, whole);  // destination 64-byte aligned
  i += whole;
  s.carry_n[l] = n - i;
  for (int k = 0; k < n - i; ++k) s.carry[l][k] = src[i + k];
}

// The batched backend's row sink: P lane groups' output rows are staged as they come (W rows,
// step-major: whole vectors stored), and each complete group of W rows is transposed in
// registers (W x W blocks, transpose_block): each lane's values in result order. When the output
// fits in the caches they are stored straight into the result (`direct`); otherwise into the
// block's tile, lane-major, which flush_tile streams out in whole lines.
template <int N, class Real, int P>
struct TileSink {
  static constexpr int W = lanes<Real>();
  using V = typename LineVec<Real>::type;
  Real (*tile)[kTileRows * N];  // P W lanes of kTileRows rows
  Real (*stage)[P][N][W];       // W rows
  Real* direct;                 // the block's first subject's values, or null: use the tile
  std::int64_t stride;          // values per subject
  int active;                   // lanes that are real subjects
  const std::int64_t* row0;     // output row of j = 0 (the writer's next row; direct)
  PKSCAN_INLINE void row(int j, const Real (&x)[P][N][W]) const {
    // Element by element (not one memcpy of x), so that x stays in registers.
    Real(&row)[P][N][W] = stage[j % W];
    for (int p = 0; p < P; ++p)
      for (int r = 0; r < N; ++r)
        for (int l = 0; l < W; ++l) row[p][r][l] = x[p][r][l];
    if (j % W == W - 1) transpose_group(j - (W - 1));
  }
  // Where lane l's values of row j (of this call) go.
  PKSCAN_INLINE Real* lane_row(int l, int j) const {
    return direct ? direct + l * stride + (*row0 + j) * N : tile[l] + j * N;
  }
  // Rows j0 .. j0 + W - 1 (staged): per group, the W N values of each lane in order (row,
  // compartment) are N blocks of W, each the transpose of W staged vectors.
  PKSCAN_INLINE void transpose_group(int j0) const {
    for (int p = 0; p < P; ++p) {
      const int real = std::min(W, active - p * W);
      if (real * 4 <= W) {
        // A group of a few subjects (a small problem's last): lane by lane costs less than
        // transposing idle lanes.
        copy_lanes(p * W, p * W + real, j0, W);
        continue;
      }
      for (int b = 0; b < N; ++b) {
        V v[W];
        for (int i = 0; i < W; ++i) {
          const int m = b * W + i;  // (row, compartment) = (m / N, m % N)
          std::memcpy(&v[i], stage[m / N][p][m % N], sizeof(V));
        }
        transpose_block<Real>(v);
        for (int i = 0; i < W; ++i)
          if (!direct || p * W + i < active)  // no idle lane in the result
            std::memcpy(lane_row(p * W + i, j0) + b * W, &v[i], sizeof(V));
      }
    }
  }
  // The staged rows j0 .. j0 + n - 1 of lanes l0 .. l1 - 1, lane by lane (an incomplete last
  // group of rows, or a group of a few subjects).
  PKSCAN_INLINE void copy_lanes(int l0, int l1, int j0, int n) const {
    for (int l = l0; l < l1; ++l)
      for (int jj = 0; jj < n; ++jj)
        for (int r = 0; r < N; ++r) lane_row(l, j0 + jj)[r] = stage[jj][l / W][r][l % W];
  }
};

// Writes the tile's first `rows` rows of every real lane into the result.
template <int N, class Real>
PKSCAN_INLINE void flush_tile(const Real (*tile)[kTileRows * N], int rows, Writer<Real>& s) {
  for (int l = 0; l < s.active; ++l) {
    const Real* src = tile[l];
    Real* dst = s.out + (s.first + l) * s.stride + s.next_row * N;
    if (s.streaming)
      stream_lane(s, l, dst, src, rows * N);
    else
      std::memcpy(dst, src, sizeof(Real) * static_cast<std::size_t>(rows * N));
  }
  s.next_row += rows;
}

// Writes what the lanes still carry (ordinary stores), at the end of a block.
template <class Real, int N>
PKSCAN_INLINE void finish_lanes(Writer<Real>& s) {
  if (!s.streaming) return;
  for (int l = 0; l < s.active; ++l) {
    Real* dst = s.out + (s.first + l) * s.stride + s.next_row * N - s.carry_n[l];
    for (int k = 0; k < s.carry_n[l]; ++k) dst[k] = s.carry[l][k];
    s.carry_n[l] = 0;
  }
}

// Lane groups stepped together in a block: P independent recurrences overlap their latencies.
constexpr int kGroups = 2;

// The lanes of one block, their staged rows and output tile (one per thread, reused across
// blocks).
template <int N, class Real>
struct alignas(64) Block {
  static constexpr int W = lanes<Real>();
  static constexpr int kSubjects = kGroups * W;
  Lanes<N, Real, W> lanes[kGroups];
  Real stage[W][kGroups][N][W];
  Real tile[kGroups * W][kTileRows * N];
};

// Steps P lane groups of the block to the end, flushing the tile every kTileRows rows.
template <int N, class Real, int P>
PKSCAN_INLINE void block_rows(const PreparedBatch& b, std::int64_t active,
                              const std::vector<Transition<N>>& tr, Block<N, Real>& B,
                              Writer<Real>& writer) {
  constexpr int W = Block<N, Real>::W;
  const std::size_t n_out = b.out_steps.size();
  // stage[W][kGroups][N][W] seen as stage[W][P][N][W] (P <= kGroups): the rows of P groups.
  const TileSink<N, Real, P> sink{
      B.tile,
      reinterpret_cast<Real(*)[P][N][W]>(B.stage),
      writer.streaming ? nullptr : writer.out + writer.first * writer.stride,
      writer.stride,
      static_cast<int>(active),
      &writer.next_row};
  static_assert(P <= kGroups, "the stage holds kGroups groups");
  LaneCursor cur(b.schedule);
  while (cur.next < n_out) {
    const int rows = advance_lanes<N, Real, W, P>(B.lanes, tr.data(), active, cur, b.schedule,
                                                  b.out_steps, kTileRows, sink);
    const int whole = rows / W * W;
    if (whole < rows) sink.copy_lanes(0, static_cast<int>(active), whole, rows - whole);
    if (writer.streaming)
      flush_tile<N, Real>(B.tile, rows, writer);  // advances writer.next_row
    else
      writer.next_row += rows;
  }
}

// Subjects [first, first + count) (count <= the block's kSubjects).
template <int N, class Real>
PKSCAN_INLINE void block_body(const PreparedBatch& b, std::int64_t first, std::int64_t count,
                              Real* out, SubjectStatus* status, std::vector<Transition<N>>& tr,
                              Block<N, Real>& B) {
  constexpr int W = Block<N, Real>::W;
  const Problem& p = *b.problem;
  const Schedule& s = b.schedule;
  const int active = static_cast<int>(count);
  for (int l = 0; l < active; ++l) {
    Mat<N> a;
    rate_matrix(*b.model, p.parameters.row(first + l), a.data());
    build_transition<N>(a, p.grid.dt, p.discretization, s.partial_lengths,
                        tr[static_cast<std::size_t>(l)]);
  }
  const int groups = (active + W - 1) / W;
  for (int g = 0; g < groups; ++g)
    load_lanes<N, Real, W>(B.lanes[g], s, tr.data() + g * W, std::min(W, active - g * W));
  const std::size_t n_out = b.out_steps.size();
  // Stream when the whole output is far larger than the caches (it will not be read soon).
  const bool streaming =
      static_cast<double>(b.subjects) * static_cast<double>(n_out) * N * sizeof(Real) >
      64.0 * 1024 * 1024;
  Writer<Real> writer{out, static_cast<std::int64_t>(n_out) * N, first, active, 0, streaming, {},
                      {}};
  for (int l = 0; l < kGroups * W; ++l) writer.carry_n[l] = 0;
  static_assert(kGroups == 2, "one or two groups");
  if (groups == 2)
    block_rows<N, Real, 2>(b, active, tr, B, writer);
  else
    block_rows<N, Real, 1>(b, active, tr, B, writer);
  finish_lanes<Real, N>(writer);
#if defined(__x86_64__)
  if (streaming) _mm_sfence();  // order the non-temporal stores before the results are read
#endif
  // A subject's outputs are all finite when its last output state is: a value that is not
  // finite never leaves the recurrence (every row of K x + b multiplies every component, and
  // 0 * inf is NaN), so the first one that appears makes every later state, the last
  // included, not finite.
  for (int l = 0; l < active; ++l) {
    Real last[N];
    for (int r = 0; r < N; ++r) last[r] = B.lanes[l / W].x[r][l % W];
    status[first + l] = all_finite(last, N) ? SubjectStatus::Ok : SubjectStatus::NonFinite;
  }
}

// One block of subjects, compiled per ISA (PKSCAN_CLONES, core/simd.hpp): one overload per
// compartment count and precision, picked by type.
#define PKSCAN_BLOCK(N, Real)                                                           \
  PKSCAN_CLONES void run_block(const PreparedBatch& b, std::int64_t first, std::int64_t count, \
                               Real* out, SubjectStatus* st, std::vector<Transition<N>>& tr,  \
                               Block<N, Real>& B) {                                            \
    block_body<N, Real>(b, first, count, out, st, tr, B);                                      \
  }
PKSCAN_BLOCK(2, double)
PKSCAN_BLOCK(2, float)
PKSCAN_BLOCK(3, double)
PKSCAN_BLOCK(3, float)
PKSCAN_BLOCK(4, double)
PKSCAN_BLOCK(4, float)
#undef PKSCAN_BLOCK

class BatchedCpuBackend final : public CompiledCpuBackend<BatchedCpuBackend, Method::Batched> {
 public:
  // The fused summary (fused_summary.cpp): the lane kernel without storing the trajectories.
  bool can_summarize(const PreparedBatch& b, const TimeSummary& summary) const override {
    return FusedSummary::accepts(summary, b.subjects);
  }
  void summarize(const PreparedBatch& b, const SummaryTarget& t) override {
    FusedSummary::add_batch(*t.summary, b, t.precision, t.metric_compartment, t.last_dose_time,
                            t.metrics, t.status, fused_scratch_, t.seconds);
  }

 private:
  FusedScratch fused_scratch_;  // kept between calls of summarize()

 public:
  template <int N, class Real>
  static void run_all(const PreparedBatch& b, ResultView<Real> out) {
    const std::int64_t stride = static_cast<std::int64_t>(b.out_steps.size()) * b.n;
    if (b.subjects < 3) {
      // One or two subjects: the per-subject reference loop. A lane group steps as fast as one
      // subject does (its latency bounds it), and from three subjects on it is the faster one
      // (N = 10 .. 2 subjects, T = 1e3 dense: docs/performance.md); below, the reference's
      // direct row writes win.
      RegionError err;
#pragma omp parallel for schedule(dynamic, 1) \
    num_threads(std::max(1, std::min <int>(b.threads, static_cast <int>(b.subjects))))
      for (std::int64_t s = 0; s < b.subjects; ++s)
        err.guard([&] { reference_subject<Real>(b, s, out.amounts + s * stride, out.status + s); });
      err.rethrow();
      return;
    }
    constexpr int kBlock = Block<N, Real>::kSubjects;
    constexpr int W = Block<N, Real>::W;
    // Work items: blocks of two lane groups (whose recurrences overlap), or, when there are
    // fewer blocks than threads, single lane groups, so that each thread runs chains of its own
    // (N = 10, T = 1e3 dense: docs/performance.md).
    const std::int64_t blocks = (b.subjects + kBlock - 1) / kBlock;
    const std::int64_t unit = blocks < b.threads && b.subjects > W ? W : kBlock;
    const std::int64_t items = (b.subjects + unit - 1) / unit;
    auto count = [&](std::int64_t i) { return std::min(unit, b.subjects - i * unit); };
    if (b.threads <= 1 || items == 1) {
      // One thread: no parallel region (its start costs about a microsecond, much of a call of
      // a few subjects), and the thread's scratch is reused from call to call.
      Scratch<N, Real>& w = scratch<N, Real>();
      for (std::int64_t i = 0; i < items; ++i)
        run_block(b, i * unit, count(i), out.amounts, out.status, w.tr, *w.block);
      return;
    }
    RegionError err;
#pragma omp parallel num_threads(static_cast<int>(std::min<std::int64_t>(b.threads, items)))
    {
      Scratch<N, Real>* w = nullptr;
      err.guard([&] { w = &scratch<N, Real>(); });
#pragma omp for schedule(dynamic, items >= 16 * b.threads ? 4 : 1)
      for (std::int64_t i = 0; i < items; ++i)
        if (w && !err.failed())
          err.guard([&] {
            run_block(b, i * unit, count(i), out.amounts, out.status, w->tr, *w->block);
          });
    }
    err.rethrow();
  }

 private:
  // A thread's transitions and block buffers, kept for its later calls (a fitting loop calls
  // with a few subjects millions of times: fresh buffers cost an allocation and its first
  // touch each time). One per thread, compartment count and precision: about 33 KiB for three
  // compartments in float64.
  template <int N, class Real>
  struct Scratch {
    std::vector<Transition<N>> tr;
    std::unique_ptr<Block<N, Real>> block;
  };
  template <int N, class Real>
  static Scratch<N, Real>& scratch() {
    thread_local Scratch<N, Real> w;
    if (!w.block) {
      w.tr.resize(Block<N, Real>::kSubjects);
      w.block = std::make_unique<Block<N, Real>>();
    }
    return w;
  }
};

}  // namespace

std::unique_ptr<Backend> make_batched_cpu_backend() {
  return std::make_unique<BatchedCpuBackend>();
}

}  // namespace pkscan::detail
