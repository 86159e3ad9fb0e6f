#pragma once
// The SIMD lane recurrence of the grid engine: W subjects side by side (structure of arrays, one
// subject per lane), K, the state and the breakpoint inputs held per lane, stepped through the
// schedule with x <- K x + b. The one implementation shared by the batched CPU backend
// (batched_block.hpp: rows written into the result) and the fused summary (fused_summary.cpp:
// rows fed to the per-time sums, the sketch and the metrics); each passes a row sink.
//
// Numeric contract: per step and lane, the reference scan's arithmetic (detail::affine_step):
// acc = k_r0 x_0, acc += k_rj x_j for j = 1..N-1 in order, y_r = acc + b_r, with the same K (the
// subject's Transition rounded to Real) and the same inputs (detail::breakpoint_inputs). Every
// file that includes this header is compiled with -ffp-contract=off (CMakeLists.txt), so no
// multiply-add is contracted into an FMA by any clone: a subject's trajectory is bit-identical
// to the scan's, whatever its lane, its block, the lane width or the thread running it.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/simd.hpp"
#include "grid/schedule.hpp"
#include "grid/transition.hpp"

namespace pkscan::detail {

// The recurrence state of W subjects, one per lane.
template <int N, class Real, int W>
struct alignas(64) Lanes {
  Real k[N * N][W];
  Real x[N][W];
  Real c[N][W];  // inputs of every step of the current breakpoint
  Real f[N][W];  // inputs of its first step (c plus boluses and partial infusions)
};

// The vector of W lanes of Real (GCC/Clang vector extensions, lowered to what the clone's ISA
// offers). The lane kernel holds K, the state and the inputs in such vectors, so that the
// compiler keeps the state in registers across the steps (as arrays of Real, it kept it in
// memory, and every step waited on the store of the last).
template <class Real, int W>
struct LaneVecOf {
  typedef Real type __attribute__((vector_size(W * sizeof(Real))));
};
template <class Real, int W>
using LaneVec = typename LaneVecOf<Real, W>::type;

// Where the time loop of a set of lanes stands. Lanes stepped together share one cursor; a
// window of lane groups advanced in turn starts each group from a copy of it.
struct LaneCursor {
  explicit LaneCursor(const Schedule& s) : last(s.bp_last(0)) {}
  std::int64_t bp = 0;    // current breakpoint
  std::int64_t last = 0;  // its last step
  std::int64_t step = 1;  // next step to take
  std::size_t next = 0;   // next output index
};

// The inputs of breakpoint `bp` for each lane (lanes >= active repeat the last active one).
template <int N, class Real, int W>
PKSCAN_INLINE void load_lane_inputs(Lanes<N, Real, W>& L, const Schedule& s,
                                    const Transition<N>* tr, int active, std::int64_t bp) {
  // Without infusions (boluses only) the inputs do not depend on the subject's transition: the
  // same values in every lane, computed once.
  bool shared = s.bp_partial_begin[static_cast<std::size_t>(bp)] ==
                s.bp_partial_begin[static_cast<std::size_t>(bp + 1)];
  for (int r = 0; r < N; ++r)
    shared = shared && s.bp_rate[static_cast<std::size_t>(bp * N + r)] == 0.0;
  if (shared) {
    Real c[N], f[N];
    breakpoint_inputs<N, Real>(s, tr[0], bp, c, f);
    // Whole vectors stored (a vector load of scalar stores waits for them: the lane kernel
    // reloads these at once).
    for (int r = 0; r < N; ++r) {
      LaneVec<Real, W> cv, fv;
      for (int l = 0; l < W; ++l) cv[l] = c[r], fv[l] = f[r];
      std::memcpy(L.c[r], &cv, sizeof cv);
      std::memcpy(L.f[r], &fv, sizeof fv);
    }
    return;
  }
  for (int l = 0; l < W; ++l) {
    Real c[N], f[N];
    breakpoint_inputs<N, Real>(s, tr[std::min(l, active - 1)], bp, c, f);
    for (int r = 0; r < N; ++r) L.c[r][l] = c[r], L.f[r][l] = f[r];
  }
}

// Lane set-up: each lane's K from its subject's transition, the initial state, the inputs of
// the first breakpoint. Idle lanes (l >= active, in the last group of a block) repeat the last
// active subject: computed, never reported.
template <int N, class Real, int W>
PKSCAN_INLINE void load_lanes(Lanes<N, Real, W>& L, const Schedule& s, const Transition<N>* tr,
                              int active) {
  for (int l = 0; l < W; ++l) {
    const Transition<N>& t = tr[std::min(l, active - 1)];
    for (int i = 0; i < N * N; ++i) L.k[i][l] = static_cast<Real>(t.k.data()[i]);
    for (int r = 0; r < N; ++r)
      L.x[r][l] = static_cast<Real>(s.initial[static_cast<std::size_t>(r)]);
  }
  load_lane_inputs<N, Real, W>(L, s, tr, active, 0);
}

// One step x <- K x + b of P lane groups (lane by lane the scalar order above).
template <int N, class V, int P>
PKSCAN_INLINE void lane_step(const V (&k)[P][N * N], V (&x)[P][N], const V (&b)[P][N]) {
  V y[P][N];
  for (int p = 0; p < P; ++p)
    for (int r = 0; r < N; ++r) {
      V acc = k[p][r * N] * x[p][0];
      for (int j = 1; j < N; ++j) acc += k[p][r * N + j] * x[p][j];
      y[p][r] = acc + b[p][r];
    }
  for (int p = 0; p < P; ++p)
    for (int r = 0; r < N; ++r) x[p][r] = y[p][r];
}

// Whether a row sink takes dense rows in whole groups of W (Sink::kWholeGroups: true): then
// advance_lanes hands it each aligned group's rows as sink.group_row(q, x) (q: the row's place in
// the group, 0 .. W - 1) and the group's end as sink.end_group(j0) (j0: the group's first row in
// this call), so that the sink can spread its work over the group's steps; any other row as
// sink.row(j, x).
template <class Sink, class = void>
struct TakesWholeGroups : std::false_type {};
template <class Sink>
struct TakesWholeGroups<Sink, std::void_t<decltype(Sink::kWholeGroups)>>
    : std::bool_constant<Sink::kWholeGroups> {};

// Advances P lane groups (lanes[0 .. P-1], whose subjects' transitions are tr[p W + l]; `count`
// subjects from the first group's first lane are real) from `cur` by up to `max_rows` output
// rows, and returns the number of rows recorded. Each output row is handed to the sink as
// sink.row(j, x) (j: the row's index within this call; x: LaneVec<Real, W>[P][N], the state at
// that output step; or in whole groups, above); the sink must not keep a reference to x. The
// groups' K, state and inputs are copied into locals for the call (no store of the sink can
// alias them, so they stay in registers; the first step's inputs, used once per breakpoint, are
// read where they are used) and P independent recurrences overlap their latencies. Dense output
// (every step reported) and sparse output each get a loop without per-step tests.
template <int N, class Real, int W, int P, class Sink>
PKSCAN_INLINE int advance_lanes(Lanes<N, Real, W>* lanes, const Transition<N>* tr,
                                std::int64_t count, LaneCursor& cur, const Schedule& s,
                                const std::vector<std::int64_t>& outs, int max_rows, Sink& sink) {
  using V = LaneVec<Real, W>;
  V k[P][N * N], x[P][N], c[P][N];
  // (The helpers below are always inlined: the state's address must not escape, or it would be
  // kept in memory.)
  auto load = [](V* dst, const Real(*src)[W], int n) PKSCAN_LAMBDA_INLINE {
    for (int i = 0; i < n; ++i) std::memcpy(&dst[i], src[i], sizeof(V));
  };
  int active[P];
  for (int p = 0; p < P; ++p) {
    load(k[p], lanes[p].k, N * N);
    load(x[p], lanes[p].x, N);
    load(c[p], lanes[p].c, N);
    active[p] = static_cast<int>(std::min<std::int64_t>(W, count - std::int64_t{p} * W));
  }
  // The next breakpoint's inputs, once the current one's last step is taken.
  auto next_breakpoint = [&]() PKSCAN_LAMBDA_INLINE {
    ++cur.bp;
    cur.last = s.bp_last(cur.bp);
    for (int p = 0; p < P; ++p) {
      load_lane_inputs<N, Real, W>(lanes[p], s, tr + p * W, active[p], cur.bp);
      load(c[p], lanes[p].c, N);
    }
  };
  // The first step of the breakpoint: boluses and partial infusions.
  auto first_step = [&]() PKSCAN_LAMBDA_INLINE {
    V f[P][N];
    for (int p = 0; p < P; ++p) load(f[p], lanes[p].f, N);
    lane_step<N, V, P>(k, x, f);
  };
  const std::size_t n_out = outs.size();
  const bool dense = n_out == static_cast<std::size_t>(s.steps + 1);
  int rows = 0;
  if (cur.next == 0 && cur.step == 1 && outs[0] == 0) {
    sink.row(rows++, x);
    ++cur.next;
  }
  while (rows < max_rows && cur.next < n_out) {
    if constexpr (TakesWholeGroups<Sink>::value) {
      if (dense && rows % W == 0 && max_rows - rows >= W && n_out - cur.next >= W) {
        // A whole group of W rows, breakpoints within it included.
        for (int q = 0; q < W;) {
          if (cur.step > cur.last) next_breakpoint();
          if (cur.step == s.bp_step[static_cast<std::size_t>(cur.bp)]) {
            first_step();
            ++cur.step;
            sink.group_row(q++, x);
            continue;
          }
          const int e =
              q + static_cast<int>(std::min<std::int64_t>(W - q, cur.last - cur.step + 1));
          cur.step += e - q;
          for (; q < e; ++q) {
            lane_step<N, V, P>(k, x, c);
            sink.group_row(q, x);
          }
        }
        sink.end_group(rows);
        rows += W;
        cur.next += W;
        continue;
      }
    }
    if (cur.step > cur.last) next_breakpoint();
    if (cur.step == s.bp_step[static_cast<std::size_t>(cur.bp)]) {
      first_step();
      if (cur.step++ == outs[cur.next]) {
        sink.row(rows++, x);
        ++cur.next;
      }
    } else if (dense) {
      std::int64_t n = std::min<std::int64_t>(cur.last - cur.step + 1, max_rows - rows);
      // A sink of whole groups takes single rows only up to the next group's start.
      if constexpr (TakesWholeGroups<Sink>::value) n = std::min<std::int64_t>(n, W - rows % W);
      for (std::int64_t i = 0; i < n; ++i) {
        lane_step<N, V, P>(k, x, c);
        sink.row(rows++, x);
      }
      cur.step += n;
      cur.next += static_cast<std::size_t>(n);
    } else {
      // Unrecorded steps up to the next output step or the end of the breakpoint.
      const std::int64_t target = std::min(outs[cur.next], cur.last);
      for (std::int64_t i = cur.step; i < target; ++i) lane_step<N, V, P>(k, x, c);
      cur.step = target;
      lane_step<N, V, P>(k, x, c);
      if (cur.step++ == outs[cur.next]) {
        sink.row(rows++, x);
        ++cur.next;
      }
    }
  }
  for (int p = 0; p < P; ++p)
    for (int r = 0; r < N; ++r) std::memcpy(lanes[p].x[r], &x[p][r], sizeof(V));
  return rows;
}

}  // namespace pkscan::detail
