#pragma once
// The block of the batched CPU backend (grid/batched_cpu.cpp): subjects in blocks of W SIMD lanes
// (structure of arrays, one subject per lane), K and the state held in registers across the time
// loop (the lane kernel, grid/lanes.hpp), output rows staged, transposed in registers into each
// subject's rows and written straight into the result (streamed as whole cache lines when it is
// large).
//
// The block is compiled once per instruction set, compartment count and precision
// (run_block_isa), each set and precision in a translation unit of its own that CMakeLists.txt
// generates (batched_<set>_<precision>.cpp), so that they compile in parallel: together they
// are the library's longest C++ to compile (docs/performance.md, "Building").
//
// Numeric contract: per step, the same arithmetic as the reference (detail::affine_step order;
// the same rounded K and inputs from detail::breakpoint_inputs). The files that include this
// header are compiled with -ffp-contract=off (CMakeLists.txt), so no instruction set contracts a
// multiply-add into an FMA and every subject's result is bit-identical to the reference scan's
// (the population runs and docs/performance.md promise it). Deterministic: a subject's result
// does not depend on the thread count, the block it falls in, or its lane.
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <pkscan/result.hpp>
#include <type_traits>
#include <vector>

#include "grid/backend.hpp"
#include "grid/lanes.hpp"
#include "grid/transition.hpp"

namespace pkscan::detail::batched {

constexpr int kTileRows = 64;  // output rows per call of the lane kernel (a multiple of W)

// Lane groups stepped together in a block: P independent recurrences overlap their latencies.
constexpr int kGroups = 2;

template <class Real>
constexpr int lanes() {
  return 64 / static_cast<int>(sizeof(Real));  // one cache line: 8 doubles, 16 floats
}

// The instruction sets a block is compiled for. One function per set (run_block_isa below),
// chosen once per process by machine_isa() (batched_cpu.cpp) as PKSCAN_CLONES's loader chooses its
// clone; the set is a template parameter so that the streaming stores and the line shifts can use
// its instructions (GCC's target_clones compiles one body for every clone, which cannot).
enum class Isa { Base, Avx2, Avx512 };
template <Isa I>
using IsaTag = std::integral_constant<Isa, I>;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PKSCAN_ISA_TARGETS 1
#else
#define PKSCAN_ISA_TARGETS 0
#endif

// Stores the 64-byte line v at the 64-byte-aligned p bypassing the caches (no read for
// ownership of the destination line). One 64-byte store with AVX-512, two of 32 with AVX2,
// four of 16 (SSE2) otherwise.
template <Isa I, class Real, class V>
PKSCAN_INLINE void stream_line(Real* p, const V& v) {
  static_assert(sizeof(V) == 64, "one line");
#if defined(__x86_64__)
  constexpr bool f64 = std::is_same<Real, double>::value;
#if PKSCAN_ISA_TARGETS
  if constexpr (I == Isa::Avx512) {
    if constexpr (f64)
      asm volatile("vmovntpd %1, %0" : "=m"(*reinterpret_cast<V*>(p)) : "v"(v));
    else
      asm volatile("vmovntps %1, %0" : "=m"(*reinterpret_cast<V*>(p)) : "v"(v));
    return;
  } else if constexpr (I == Isa::Avx2) {
    typedef Real H __attribute__((vector_size(32)));
    H h[2];
    std::memcpy(h, &v, sizeof h);
    for (int k = 0; k < 2; ++k) {
      if constexpr (f64)
        asm volatile("vmovntpd %1, %0" : "=m"(*reinterpret_cast<H*>(p + 4 * k)) : "x"(h[k]));
      else
        asm volatile("vmovntps %1, %0" : "=m"(*reinterpret_cast<H*>(p + 8 * k)) : "x"(h[k]));
    }
    return;
  }
#endif
  for (int k = 0; k < 4; ++k) {
    if constexpr (f64) {
      __m128d q;
      std::memcpy(&q, reinterpret_cast<const char*>(&v) + 16 * k, sizeof q);
      _mm_stream_pd(p + 2 * k, q);
    } else {
      __m128 q;
      std::memcpy(&q, reinterpret_cast<const char*>(&v) + 16 * k, sizeof q);
      _mm_stream_ps(p + 4 * k, q);
    }
  }
#else
  std::memcpy(p, &v, sizeof v);
#endif
}

// The line that starts m values before cur's first: prev's last m values, then cur's first
// W - m (idx: lane j takes element W - m + j of prev:cur). One two-source permute with
// AVX-512; through a small buffer otherwise.
template <Isa I, class Real, class V, class M>
PKSCAN_INLINE V shift_in(const V& prev, const V& cur, const M& idx, int m) {
#if PKSCAN_ISA_TARGETS
  if constexpr (I == Isa::Avx512) return __builtin_shuffle(prev, cur, idx);
#endif
  (void)idx;
  constexpr int W = lanes<Real>();
  Real buf[2 * W];
  std::memcpy(buf, &prev, sizeof prev);
  std::memcpy(buf + W, &cur, sizeof cur);
  V r;
  std::memcpy(&r, buf + W - m, sizeof r);
  return r;
}

// The rows of P lane groups, staged as they come (step-major: whole vectors stored), and each
// complete group of W rows transposed in registers (W x W blocks, transpose_block): each lane's
// values in result order, N vectors (W rows x N compartments).
template <int N, class Real, int P>
struct StagedRows {
  static constexpr int W = lanes<Real>();
  using V = typename LineVec<Real>::type;
  Real (*stage)[P][N][W];    // staged rows
  Real* base;                // the block's first subject's values
  std::int64_t stride;       // values per subject
  int active;                // lanes that are real subjects
  const std::int64_t* row0;  // result row of the call's row j = 0 (the block's next row)
  PKSCAN_INLINE void stage_row(int s, const V (&x)[P][N]) const {
    for (int p = 0; p < P; ++p)
      for (int r = 0; r < N; ++r) std::memcpy(stage[s][p][r], &x[p][r], sizeof(V));
  }
  // Lanes of group p that are real subjects.
  PKSCAN_INLINE int real(int p) const { return std::min(W, active - p * W); }
  // A group of a few subjects (a small problem's last) is written lane by lane, with ordinary
  // stores: that costs less than transposing idle lanes.
  PKSCAN_INLINE bool few(int p) const { return real(p) * 4 <= W; }
  // Block b of group p's staged rows s0 .. s0 + W - 1, transposed: the values (row,
  // compartment) = (s0 + m / N, m % N) for m = b W .. b W + W - 1 of each lane.
  PKSCAN_INLINE void transpose_block_of(int s0, int p, int b, V (&v)[W]) const {
    for (int i = 0; i < W; ++i) {
      const int m = b * W + i;
      std::memcpy(&v[i], stage[s0 + m / N][p][m % N], sizeof(V));
    }
    transpose_block<Real>(v);
  }
  // Staged rows s0 .. s0 + n - 1 of lanes l0 .. l1 - 1 into result rows r0 .., lane by lane,
  // ordinary stores.
  PKSCAN_INLINE void copy_lanes(int l0, int l1, int s0, std::int64_t r0, int n) const {
    for (int l = l0; l < l1; ++l)
      for (int jj = 0; jj < n; ++jj)
        for (int r = 0; r < N; ++r)
          base[l * stride + (r0 + jj) * N + r] = stage[s0 + jj][l / W][r][l % W];
  }
};

// The row sink of an output that fits in the caches: the call's rows staged (kTileRows), then
// each complete group of W rows transposed and stored straight into the result.
template <int N, class Real, int P>
struct TileSink : StagedRows<N, Real, P> {
  using S = StagedRows<N, Real, P>;
  using S::W;
  using typename S::V;
  PKSCAN_INLINE void row(int j, const V (&x)[P][N]) const { this->stage_row(j, x); }
  // Writes the call's `rows` staged rows into the result.
  PKSCAN_INLINE void write(int rows) const {
    const std::int64_t r0 = *this->row0;
    const int whole = rows / W * W;
    for (int j0 = 0; j0 < whole; j0 += W)
      for (int p = 0; p < P; ++p) {
        if (this->few(p)) {
          this->copy_lanes(p * W, p * W + this->real(p), j0, r0 + j0, W);
          continue;
        }
        for (int b = 0; b < N; ++b) {
          V v[W];
          this->transpose_block_of(j0, p, b, v);
          for (int i = 0; i < this->real(p); ++i)  // no idle lane in the result
            std::memcpy(this->base + (p * W + i) * this->stride + (r0 + j0) * N + b * W, &v[i],
                        sizeof(V));
        }
      }
    if (whole < rows) this->copy_lanes(0, this->active, whole, r0 + whole, rows - whole);
  }
  PKSCAN_INLINE void finish(std::int64_t) const {}
};

// What a block keeps of its lanes' output when the result is streamed: the last complete group
// of W rows, transposed (pending), being written; each lane's values go out as whole 64-byte
// lines, non-temporally. A subject's first values are usually not at a line's start, so each
// group's last `shift` values of a lane wait in `carry` for its next group's first line (a
// partial line written non-temporally is slow).
template <int N, class Real>
struct LaneLines {
  static constexpr int W = lanes<Real>();
  static constexpr int kLanes = kGroups * W;
  using V = typename LineVec<Real>::type;
  V pending[kGroups][N][W];
  V carry[kLanes];
  typename LineVec<Real>::mask idx[kLanes];  // the shift_in permutation of each lane
  Real* at[kLanes];    // the lane's next whole line (64-byte aligned) in the result
  int shift[kLanes];   // values of the lane's first row before its first line boundary
  bool taken = false;  // `pending` holds a group
  bool head = false;   // the lanes' first rows
};

// The row sink of a large output (streamed): rows staged in a ring of W; when a group of W rows
// completes it is transposed into `pending`, and its lanes are written P per row of the next
// group (in the row's place q: lanes q P .. q P + P - 1), so that the non-temporal stores spread
// evenly among the steps (in bursts, the store queue fills and stalls the recurrence). Each call
// of advance_lanes starts at a group boundary (kTileRows is a multiple of W), so that a row's
// place in its group is j % W.
template <int N, class Real, int P, Isa I>
struct StreamSink : StagedRows<N, Real, P> {
  using S = StagedRows<N, Real, P>;
  using S::W;
  using typename S::V;
  static constexpr bool kWholeGroups = true;
  LaneLines<N, Real>* lines;
  PKSCAN_INLINE void group_row(int q, const V (&x)[P][N]) const {
    this->stage_row(q, x);
    if (lines->taken)
      for (int k = 0; k < P; ++k) write_lane(q * P + k);
  }
  PKSCAN_INLINE void end_group(int j0) const { take_group(*this->row0 + j0); }
  PKSCAN_INLINE void row(int j, const V (&x)[P][N]) const {
    const int q = j % W;
    group_row(q, x);
    if (q == W - 1) take_group(*this->row0 + j - (W - 1));
  }
  PKSCAN_INLINE void write(int) const {}
  // The ring's complete group of W rows (result rows r0 ..): transposed into `pending`, or
  // written at once for a group of a few subjects.
  PKSCAN_INLINE void take_group(std::int64_t r0) const {
    for (int p = 0; p < P; ++p) {
      if (this->few(p)) {
        this->copy_lanes(p * W, p * W + this->real(p), 0, r0, W);
        continue;
      }
      for (int b = 0; b < N; ++b) this->transpose_block_of(0, p, b, lines->pending[p][b]);
    }
    lines->taken = true;
    lines->head = r0 == 0;
  }
  // Lane l's N lines of `pending`: the carried values, then the group's; its last vector is
  // carried. A subject's first line holds the previous subject's last values: its own part
  // goes with ordinary stores.
  PKSCAN_INLINE void write_lane(int l) const {
    const int p = l / W, i = l % W;
    if (i >= this->real(p) || this->few(p)) return;
    const V(&v)[N][W] = lines->pending[p];
    Real* d = lines->at[l];
    const auto idx = lines->idx[l];
    const int m = lines->shift[l];
    if (lines->head) {
      for (int k = 0; k < W - m; ++k) d[m + k] = v[0][i][k];
    } else {
      stream_line<I>(d, shift_in<I, Real>(lines->carry[l], v[0][i], idx, m));
    }
    for (int b = 1; b < N; ++b)
      stream_line<I>(d + b * W, shift_in<I, Real>(v[b - 1][i], v[b][i], idx, m));
    lines->carry[l] = v[N - 1][i];
    lines->at[l] = d + N * W;
  }
  // After the last row (n_out rows in all): the pending lanes not yet written (the rows after
  // the last complete group wrote P lanes each), each lane's carried values and those rows, with
  // ordinary stores.
  PKSCAN_INLINE void finish(std::int64_t n_out) const {
    const std::int64_t end = n_out / W * W;
    const int rest = static_cast<int>(n_out - end);
    if (lines->taken)
      for (int l = rest * P; l < P * W; ++l) write_lane(l);
    for (int l = 0; l < this->active && end > 0; ++l) {
      if (this->few(l / W)) continue;
      const int m = lines->shift[l];
      Real* d = this->base + l * this->stride + end * N - m;
      for (int k = 0; k < m; ++k) d[k] = lines->carry[l][W - m + k];
    }
    if (rest > 0) this->copy_lanes(0, this->active, 0, end, rest);
  }
};

// The lanes of one block, their staged rows and line carries (one per thread, reused across
// blocks).
template <int N, class Real>
struct alignas(64) Block {
  static constexpr int W = lanes<Real>();
  static constexpr int kSubjects = kGroups * W;
  Lanes<N, Real, W> lanes[kGroups];
  Real stage[kTileRows][kGroups][N][W];
  LaneLines<N, Real> lines;
};

// Steps P lane groups of the block to the end, writing their rows through `sink`.
template <int N, class Real, int P, class Sink>
PKSCAN_INLINE void block_rows(const PreparedBatch& b, std::int64_t active, const Transition<N>* tr,
                              Lanes<N, Real, lanes<Real>()>* L, std::int64_t& next_row,
                              const Sink& sink) {
  constexpr int W = Block<N, Real>::W;
  static_assert(kTileRows % W == 0, "calls start at a group boundary");
  const std::size_t n_out = b.out_steps.size();
  LaneCursor cur(b.schedule);
  while (cur.next < n_out) {
    const int rows =
        advance_lanes<N, Real, W, P>(L, tr, active, cur, b.schedule, b.out_steps, kTileRows, sink);
    sink.write(rows);
    next_row += rows;
  }
  sink.finish(static_cast<std::int64_t>(n_out));
}

// Steps the block's P lane groups to the end, their subjects' rows into out (from subject
// `first`) through the caches.
template <int N, class Real, int P>
PKSCAN_INLINE void tile_rows(const PreparedBatch& b, std::int64_t first, std::int64_t active,
                             Real* out, const std::vector<Transition<N>>& tr, Block<N, Real>& B) {
  constexpr int W = Block<N, Real>::W;
  static_assert(P <= kGroups, "the stage holds kGroups groups");
  const std::int64_t stride = static_cast<std::int64_t>(b.out_steps.size()) * N;
  std::int64_t next_row = 0;
  // stage[kTileRows][kGroups][N][W] seen as stage[kTileRows][P][N][W] (P <= kGroups): the
  // rows of P groups.
  const StagedRows<N, Real, P> rows{reinterpret_cast<Real(*)[P][N][W]>(B.stage),
                                    out + first * stride, stride, static_cast<int>(active),
                                    &next_row};
  block_rows<N, Real, P>(b, active, tr.data(), B.lanes, next_row, TileSink<N, Real, P>{rows});
}

// Steps Q lane groups of the block, from group g0, to the end, their subjects' rows streamed
// into out (the block's first subject: `first`): their lanes' line pointers and shifts, then
// their rows.
template <int N, class Real, int Q, Isa I>
PKSCAN_INLINE void stream_groups(const PreparedBatch& b, std::int64_t first, std::int64_t active,
                                 int g0, Real* out, const std::vector<Transition<N>>& tr,
                                 Block<N, Real>& B) {
  constexpr int W = Block<N, Real>::W;
  static_assert(Q <= kGroups, "the stage holds kGroups groups");
  const std::int64_t stride = static_cast<std::int64_t>(b.out_steps.size()) * N;
  std::int64_t next_row = 0;
  LaneLines<N, Real>& L = B.lines;
  const int count = static_cast<int>(std::min<std::int64_t>(Q * W, active - g0 * W));
  const StagedRows<N, Real, Q> some{reinterpret_cast<Real(*)[Q][N][W]>(B.stage),
                                    out + first * stride + g0 * W * stride, stride, count,
                                    &next_row};
  for (int l = 0; l < count; ++l) {
    const auto at = reinterpret_cast<std::uintptr_t>(some.base + l * stride);
    const int m = static_cast<int>(at % 64 / sizeof(Real));
    L.shift[l] = m;
    L.at[l] = some.base + l * stride - m;
    for (int k = 0; k < W; ++k) L.idx[l][k] = W - m + k;
  }
  L.taken = false;
  block_rows<N, Real, Q>(b, count, tr.data() + g0 * W, B.lanes + g0, next_row,
                         StreamSink<N, Real, Q, I>{some, &L});
}

// How a block's rows are written: through the caches for one lane group or two (the tile), or
// streamed, one lane group at a time or two together.
enum class Rows { Tile1, Tile2, Stream1, Stream2 };
template <Rows R>
using RowsTag = std::integral_constant<Rows, R>;

// Steps the block's lane groups to the end, their subjects' rows written as R says. Each R is
// compiled out of line (rows_isa, below), for the block's instruction set: inlined into one
// function, the four took the compiler half as long again (docs/performance.md, "Building").
template <Rows R, int N, class Real, Isa I>
PKSCAN_INLINE void block_rows_as(const PreparedBatch& b, std::int64_t first, std::int64_t active,
                                 Real* out, const std::vector<Transition<N>>& tr,
                                 Block<N, Real>& B) {
  constexpr int W = Block<N, Real>::W;
  if constexpr (R == Rows::Tile1 || R == Rows::Tile2) {
    tile_rows<N, Real, R == Rows::Tile2 ? 2 : 1>(b, first, active, out, tr, B);
  } else {
    if constexpr (R == Rows::Stream2)
      stream_groups<N, Real, 2, I>(b, first, active, 0, out, tr, B);
    else
      for (int g = 0; g * W < active; ++g)
        stream_groups<N, Real, 1, I>(b, first, active, g, out, tr, B);
#if defined(__x86_64__)
    _mm_sfence();  // order the non-temporal stores before the results are read
#endif
  }
}

// Subjects [first, first + count) (count <= the block's kSubjects).
template <int N, class Real, Isa I>
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
  // Stream when the whole output is far larger than the caches (it will not be read soon), into
  // a result whose values are aligned (as a vector's are; the lines' shifts count whole values).
  const bool streaming =
      static_cast<double>(b.subjects) * static_cast<double>(n_out) * N * sizeof(Real) >
          64.0 * 1024 * 1024 &&
      reinterpret_cast<std::uintptr_t>(out) % sizeof(Real) == 0;
  static_assert(kGroups == 2, "one or two groups");
  const bool dense = n_out == static_cast<std::size_t>(s.steps + 1);
  if (streaming && groups == 2 && !dense) {
    // Sparse: the recurrence bounds the block, and two groups overlap their latencies.
    rows_isa(IsaTag<I>{}, RowsTag<Rows::Stream2>{}, b, first, active, out, tr, B);
  } else if (streaming) {
    // Dense: one lane group at a time. Its recurrence, the line emission and their registers
    // fit in the machine's, and the stores, not the recurrence's latency, bound a group (both
    // groups are slower: docs/performance.md, "Thresholds"). (A single group, dense or sparse,
    // is this loop's one turn.)
    rows_isa(IsaTag<I>{}, RowsTag<Rows::Stream1>{}, b, first, active, out, tr, B);
  } else if (groups == 2) {
    rows_isa(IsaTag<I>{}, RowsTag<Rows::Tile2>{}, b, first, active, out, tr, B);
  } else {
    rows_isa(IsaTag<I>{}, RowsTag<Rows::Tile1>{}, b, first, active, out, tr, B);
  }
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

// The instruction set attribute of each set's functions.
#if PKSCAN_ISA_TARGETS
#define PKSCAN_ISA_TARGET_Avx512 __attribute__((target("arch=x86-64-v4")))
#define PKSCAN_ISA_TARGET_Avx2 __attribute__((target("arch=x86-64-v3")))
#endif
#define PKSCAN_ISA_TARGET_Base

// One block of subjects on instruction set I, for N compartments in Real: one overload per
// compartment count, precision and set, picked by type. Declared here for the backend; defined,
// with the four ways of writing its rows (block_rows_as) that it calls, by
// PKSCAN_BATCHED_DEFINE in the generated files.
#define PKSCAN_BATCHED_BLOCK(N, Real, I)                                                         \
  PKSCAN_ISA_TARGET_##I void run_block_isa(                                                      \
      IsaTag<Isa::I>, const PreparedBatch& b, std::int64_t first, std::int64_t count, Real* out, \
      SubjectStatus* st, std::vector<Transition<N>>& tr, Block<N, Real>& B)
#define PKSCAN_BATCHED_DECLARE(N, Real, I) PKSCAN_BATCHED_BLOCK(N, Real, I);
#define PKSCAN_BATCHED_ROWS(N, Real, I, R)                                                       \
  static PKSCAN_ISA_TARGET_##I __attribute__((noinline)) void rows_isa(                          \
      IsaTag<Isa::I>, RowsTag<Rows::R>, const PreparedBatch& b, std::int64_t first,              \
      std::int64_t active, Real* out, const std::vector<Transition<N>>& tr, Block<N, Real>& B) { \
    block_rows_as<Rows::R, N, Real, Isa::I>(b, first, active, out, tr, B);                       \
  }
#define PKSCAN_BATCHED_DEFINE(N, Real, I)  \
  PKSCAN_BATCHED_ROWS(N, Real, I, Tile1)   \
  PKSCAN_BATCHED_ROWS(N, Real, I, Tile2)   \
  PKSCAN_BATCHED_ROWS(N, Real, I, Stream1) \
  PKSCAN_BATCHED_ROWS(N, Real, I, Stream2) \
  PKSCAN_BATCHED_BLOCK(N, Real, I) { block_body<N, Real, Isa::I>(b, first, count, out, st, tr, B); }
// WHAT (DECLARE or DEFINE) for every compartment count of one set and precision.
#define PKSCAN_BATCHED_BLOCKS(Real, I, WHAT) \
  WHAT(2, Real, I)                           \
  WHAT(3, Real, I)                           \
  WHAT(4, Real, I)

PKSCAN_BATCHED_BLOCKS(double, Base, PKSCAN_BATCHED_DECLARE)
PKSCAN_BATCHED_BLOCKS(float, Base, PKSCAN_BATCHED_DECLARE)
#if PKSCAN_ISA_TARGETS
PKSCAN_BATCHED_BLOCKS(double, Avx2, PKSCAN_BATCHED_DECLARE)
PKSCAN_BATCHED_BLOCKS(float, Avx2, PKSCAN_BATCHED_DECLARE)
PKSCAN_BATCHED_BLOCKS(double, Avx512, PKSCAN_BATCHED_DECLARE)
PKSCAN_BATCHED_BLOCKS(float, Avx512, PKSCAN_BATCHED_DECLARE)
#endif

}  // namespace pkscan::detail::batched
