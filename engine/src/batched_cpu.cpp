// Batched CPU backend: subjects in blocks of W SIMD lanes (structure of arrays, one subject per
// lane), K and the state held in registers across the time loop, outputs gathered in a small
// tile and written out as contiguous per-subject rows. Blocks run on OpenMP threads.
//
// Numeric contract: per step, the same arithmetic as the reference (detail::affine_step order;
// the same rounded K and inputs from detail::breakpoint_inputs). The SIMD clones may contract
// multiply-adds into FMA, so results differ from the reference by a few ulps per step (the
// agreement suite holds float64 to 1e-12 relative). Deterministic: a subject's result does not
// depend on the thread count, the block it falls in, or its lane.
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

#include "detail/backend.hpp"
#include "detail/parallel.hpp"
#include "detail/reference.hpp"
#include "detail/transition.hpp"

namespace pkscan::detail {

namespace {

constexpr int kTileRows = 64;  // output rows gathered per lane before a write-out

template <class Real>
constexpr int lanes() {
  return 64 / static_cast<int>(sizeof(Real));  // one cache line: 8 doubles, 16 floats
}

template <int N, class Real>
struct alignas(64) Lanes {
  static constexpr int W = lanes<Real>();
  Real k[N * N][W];
  Real x[N][W];
  Real c[N][W];
  Real f[N][W];
  Real tile[W][kTileRows * N];  // lane-major: each subject's rows contiguous, as in the result
};

// `count` steps x <- K x + b on all lanes, recording the state after each step into the tile
// when `record` (dense output). Inlined into the per-ISA clones below.
template <int N, class Real>
__attribute__((always_inline)) inline void run_steps(Lanes<N, Real>& L,
                                                     const Real (&b)[N][Lanes<N, Real>::W],
                                                     std::int64_t count, int& row, bool record,
                                                     void (*flush)(Lanes<N, Real>&, int, void*),
                                                     void* ctx) {
  constexpr int W = Lanes<N, Real>::W;
  for (std::int64_t i = 0; i < count; ++i) {
    Real y[N][W];
    for (int r = 0; r < N; ++r) {
      for (int l = 0; l < W; ++l) {
        Real acc = L.k[r * N][l] * L.x[0][l];
        for (int j = 1; j < N; ++j) acc += L.k[r * N + j][l] * L.x[j][l];
        y[r][l] = acc + b[r][l];
      }
    }
    for (int r = 0; r < N; ++r)
      for (int l = 0; l < W; ++l) L.x[r][l] = y[r][l];
    if (record) {
      for (int r = 0; r < N; ++r)
        for (int l = 0; l < W; ++l) L.tile[l][row * N + r] = y[r][l];
      if (++row == kTileRows) {
        flush(L, row, ctx);
        row = 0;
      }
    }
  }
}

// Where a block writes its rows.
template <class Real>
struct Sink {
  Real* out;              // result base
  std::int64_t stride;    // values per subject (times * N)
  std::int64_t first;     // first subject of the block
  int active;             // lanes that are real subjects
  std::int64_t next_row;  // output row the tile starts at
  bool streaming;         // write with non-temporal stores (output much larger than caches)
  bool finite[64];        // per lane
  // Streaming writes whole 64-byte lines only: the values of a lane that do not fill a line yet
  // wait here for the next flush (a partial line written non-temporally is slow).
  static constexpr int kLine = 64 / static_cast<int>(sizeof(Real));
  Real carry[64][kLine];
  int carry_n[64];
};

// Copies n values to dst bypassing the caches (no read-for-ownership of the destination lines):
// scalar MOVNTI up to 16-byte alignment, then 16-byte non-temporal vector stores. Rows of the
// subject-major result are only 4- or 8-byte aligned, hence the head.
inline void stream_copy(double* dst, const double* src, int n) {
#if defined(__x86_64__)
  int i = 0;
  auto scalar = [&](int k) {
    long long bits;
    std::memcpy(&bits, src + k, sizeof bits);
    _mm_stream_si64(reinterpret_cast<long long*>(dst + k), bits);
  };
  if (reinterpret_cast<std::uintptr_t>(dst) & 15) scalar(i++);
  for (; i + 2 <= n; i += 2) _mm_stream_pd(dst + i, _mm_loadu_pd(src + i));
  for (; i < n; ++i) scalar(i);
#else
  std::memcpy(dst, src, sizeof(double) * static_cast<std::size_t>(n));
#endif
}
inline void stream_copy(float* dst, const float* src, int n) {
#if defined(__x86_64__)
  int i = 0;
  auto scalar = [&](int k) {
    int bits;
    std::memcpy(&bits, src + k, sizeof bits);
    _mm_stream_si32(reinterpret_cast<int*>(dst + k), bits);
  };
  while (i < n && (reinterpret_cast<std::uintptr_t>(dst + i) & 15)) scalar(i++);
  for (; i + 4 <= n; i += 4) _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
  for (; i < n; ++i) scalar(i);
#else
  std::memcpy(dst, src, sizeof(float) * static_cast<std::size_t>(n));
#endif
}

// True when all n values are finite: a branch-free test of the exponent bits.
template <class Real>
inline bool all_finite(const Real* v, int n) {
  using Bits = std::conditional_t<sizeof(Real) == 8, std::uint64_t, std::uint32_t>;
  constexpr Bits exp_mask = sizeof(Real) == 8 ? Bits(0x7ff0000000000000ull) : Bits(0x7f800000u);
  Bits bad = 0;
  for (int i = 0; i < n; ++i) {
    Bits b;
    std::memcpy(&b, v + i, sizeof b);
    bad |= static_cast<Bits>((b & exp_mask) == exp_mask);
  }
  return bad == 0;
}

// Appends the tile's `n` values for lane l to the lane's output at `dst` (where its written
// output ends; the lane's carry, s.carry_n[l] values, belongs just before it). Only whole
// 64-byte-aligned lines are stored, non-temporally; the values of an unfinished line wait in the
// carry. The first line of each subject is usually unaligned: it is written with ordinary
// stores. No staging copy: whole lines are stored straight from the tile.
template <class Real>
void stream_lane(Sink<Real>& s, int l, Real* dst, const Real* src, int n) {
  constexpr int kLine = Sink<Real>::kLine;
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
    stream_copy(line_start, line, kLine);
    i = kLine - c;
    line_start += kLine;
  }
  const int whole = (n - i) / kLine * kLine;
  stream_copy(line_start, src + i, whole);  // destination 64-byte aligned
  i += whole;
  s.carry_n[l] = n - i;
  for (int k = 0; k < n - i; ++k) s.carry[l][k] = src[i + k];
}

template <int N, class Real>
void flush_tile(Lanes<N, Real>& L, int rows, void* ctx) {
  auto& s = *static_cast<Sink<Real>*>(ctx);
  for (int l = 0; l < s.active; ++l) {
    const Real* src = L.tile[l];
    s.finite[l] = s.finite[l] && all_finite(src, rows * N);
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
void finish_lanes(Sink<Real>& s) {
  if (!s.streaming) return;
  for (int l = 0; l < s.active; ++l) {
    Real* dst = s.out + (s.first + l) * s.stride + s.next_row * N - s.carry_n[l];
    for (int k = 0; k < s.carry_n[l]; ++k) dst[k] = s.carry[l][k];
    s.carry_n[l] = 0;
  }
}

// Steps one breakpoint range [first, end] recording rows at the output steps.
template <int N, class Real>
__attribute__((always_inline)) inline void run_range(Lanes<N, Real>& L, std::int64_t first,
                                                     std::int64_t end, const std::int64_t* outs,
                                                     std::size_t n_out, std::size_t& next,
                                                     bool dense, int& row, Sink<Real>& sink) {
  // First step of the breakpoint uses f (boluses, partial infusions), the rest c.
  auto fl = &flush_tile<N, Real>;
  if (dense) {
    run_steps<N, Real>(L, L.f, 1, row, true, fl, &sink);
    run_steps<N, Real>(L, L.c, end - first, row, true, fl, &sink);
    next += static_cast<std::size_t>(end - first + 1);
    return;
  }
  // Sparse output: run to each output step without recording, then record one row.
  std::int64_t i = first;
  while (i <= end) {
    const std::int64_t target = next < n_out ? std::min(outs[next], end) : end;
    if (i == first) {
      run_steps<N, Real>(L, L.f, 1, row, false, fl, &sink);
      ++i;
    }
    if (target >= i) run_steps<N, Real>(L, L.c, target - i + 1, row, false, fl, &sink);
    i = target + 1;
    if (next < n_out && target == outs[next]) {
      for (int r = 0; r < N; ++r)
        for (int l = 0; l < Lanes<N, Real>::W; ++l) L.tile[l][row * N + r] = L.x[r][l];
      if (++row == kTileRows) {
        flush_tile<N, Real>(L, row, &sink);
        row = 0;
      }
      ++next;
    }
  }
}

template <int N, class Real>
__attribute__((always_inline)) inline void block_body(const PreparedBatch& b, std::int64_t first,
                                                      Real* out, SubjectStatus* status,
                                                      std::vector<Transition<N>>& tr,
                                                      Lanes<N, Real>& L) {
  constexpr int W = Lanes<N, Real>::W;
  const Problem& p = *b.problem;
  const Schedule& s = b.schedule;
  const int active = static_cast<int>(std::min<std::int64_t>(W, b.subjects - first));
  for (int l = 0; l < active; ++l) {
    Mat<N> a;
    rate_matrix(*b.model, p.parameters.row(first + l), a.data());
    build_transition<N>(a, p.grid.dt, p.discretization, s.partial_lengths,
                        tr[static_cast<std::size_t>(l)]);
  }
  for (int l = 0; l < W; ++l) {
    // Idle lanes of the last block repeat its last subject (computed, never written).
    const Transition<N>& t = tr[static_cast<std::size_t>(std::min(l, active - 1))];
    for (int i = 0; i < N * N; ++i) L.k[i][l] = static_cast<Real>(t.k.data()[i]);
    for (int r = 0; r < N; ++r)
      L.x[r][l] = static_cast<Real>(s.initial[static_cast<std::size_t>(r)]);
  }
  const std::size_t n_out = b.out_steps.size();
  const bool dense = n_out == static_cast<std::size_t>(s.steps + 1);
  // Stream when the whole output is far larger than the caches (it will not be read soon).
  const bool streaming =
      static_cast<double>(b.subjects) * static_cast<double>(n_out) * N * sizeof(Real) >
      64.0 * 1024 * 1024;
  Sink<Real> sink{out, static_cast<std::int64_t>(n_out) * N, first, active, 0, streaming, {}, {},
                  {}};
  for (int l = 0; l < W; ++l) sink.finite[l] = true, sink.carry_n[l] = 0;
  int row = 0;
  std::size_t next = 0;
  if (b.out_steps[0] == 0) {
    for (int r = 0; r < N; ++r)
      for (int l = 0; l < W; ++l) L.tile[l][row * N + r] = L.x[r][l];
    ++row;
    ++next;
  }
  const std::int64_t last = b.out_steps.back();
  for (std::int64_t k = 0; k < s.breakpoints() && next < n_out; ++k) {
    const std::int64_t bfirst = s.bp_step[static_cast<std::size_t>(k)];
    const std::int64_t bend = std::min(s.bp_last(k), last);
    for (int l = 0; l < W; ++l) {
      Real c[N], f[N];
      breakpoint_inputs<N, Real>(s, tr[static_cast<std::size_t>(std::min(l, active - 1))], k, c, f);
      for (int r = 0; r < N; ++r) L.c[r][l] = c[r], L.f[r][l] = f[r];
    }
    run_range<N, Real>(L, bfirst, bend, b.out_steps.data(), n_out, next, dense, row, sink);
  }
  if (row > 0) flush_tile<N, Real>(L, row, &sink);
  finish_lanes<Real, N>(sink);
#if defined(__x86_64__)
  if (streaming) _mm_sfence();  // order the non-temporal stores before the results are read
#endif
  for (int l = 0; l < active; ++l)
    status[first + l] = sink.finite[l] ? SubjectStatus::Ok : SubjectStatus::NonFinite;
}

// One block of subjects, compiled for AVX-512, AVX2 and baseline x86-64; the loader picks the
// best clone for the machine at run time (portable binaries, no -march=native).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PKSCAN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PKSCAN_CLONES
#endif

#define PKSCAN_BLOCK(N, Real, name)                                                               \
  PKSCAN_CLONES void name(const PreparedBatch& b, std::int64_t first, Real* out,                  \
                          SubjectStatus* st, std::vector<Transition<N>>& tr, Lanes<N, Real>& L) { \
    block_body<N, Real>(b, first, out, st, tr, L);                                                \
  }                                                                                               \
  inline void run_block(const PreparedBatch& b, std::int64_t first, Real* out, SubjectStatus* st, \
                        std::vector<Transition<N>>& tr, Lanes<N, Real>& L) {                      \
    name(b, first, out, st, tr, L);                                                               \
  }
PKSCAN_BLOCK(2, double, block2_f64)
PKSCAN_BLOCK(2, float, block2_f32)
PKSCAN_BLOCK(3, double, block3_f64)
PKSCAN_BLOCK(3, float, block3_f32)
PKSCAN_BLOCK(4, double, block4_f64)
PKSCAN_BLOCK(4, float, block4_f32)
#undef PKSCAN_BLOCK

class BatchedCpuBackend final : public Backend {
 public:
  Method method() const noexcept override { return Method::Batched; }
  Device device() const noexcept override { return Device::Cpu; }
  std::string unsupported_reason(const PreparedBatch& b) const override {
    if (b.n < 2 || b.n > 4) return "method 'batched' is compiled for 2 to 4 compartments";
    return {};
  }
  void run(const PreparedBatch& b, ResultView<double> out) override { dispatch(b, out); }
  void run(const PreparedBatch& b, ResultView<float> out) override { dispatch(b, out); }

 private:
  template <class Real>
  static void dispatch(const PreparedBatch& b, ResultView<Real> out) {
    with_compartments_2_to_4(b.n, [&](auto n) { run_all<decltype(n)::value, Real>(b, out); });
  }
  template <int N, class Real>
  static void run_all(const PreparedBatch& b, ResultView<Real> out) {
    constexpr int W = lanes<Real>();
    const std::int64_t stride = static_cast<std::int64_t>(b.out_steps.size()) * b.n;
    if (b.subjects < W) {
      // Too few subjects to fill a block: the per-subject reference loop, on threads.
      RegionError err;
#pragma omp parallel for schedule(dynamic, 1) \
    num_threads(std::max(1, std::min <int>(b.threads, static_cast <int>(b.subjects))))
      for (std::int64_t s = 0; s < b.subjects; ++s)
        err.guard([&] { reference_subject<Real>(b, s, out.amounts + s * stride, out.status + s); });
      err.rethrow();
      return;
    }
    const std::int64_t blocks = (b.subjects + W - 1) / W;
    RegionError err;
#pragma omp parallel num_threads(b.threads)
    {
      std::vector<Transition<N>> tr;
      std::unique_ptr<Lanes<N, Real>> lanes_buf;
      err.guard([&] {
        tr.resize(W);
        lanes_buf = std::make_unique<Lanes<N, Real>>();
      });
#pragma omp for schedule(dynamic, 4)
      for (std::int64_t blk = 0; blk < blocks; ++blk)
        if (lanes_buf && !err.failed())
          err.guard([&] { run_block(b, blk * W, out.amounts, out.status, tr, *lanes_buf); });
    }
    err.rethrow();
  }
};

}  // namespace

std::unique_ptr<Backend> make_batched_cpu_backend() {
  return std::make_unique<BatchedCpuBackend>();
}

}  // namespace pkscan::detail
