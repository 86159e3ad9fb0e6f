// CUDA kernels of the `batched` and `power` methods on device `cuda` (2, 3 and 4 compartments;
// every kernel is a template on the compartment count N and the scalar Real).
//
// Numeric contract:
// - Batched kernel: per step x <- K x + b with detail::affine_step<N, Real> (the reference's
//   summation order), K rounded once from the double K of build_transition, and breakpoint
//   inputs c, f computed in double as detail::breakpoint_inputs does (G * rate in the order
//   Eigen 3.4 evaluates a fixed-size row-major product with SSE2: left to right for N <= 3,
//   (a0 + a2) + (a1 + a3) for N = 4; c = 0 when the rate vector is zero; f = c + bolus +
//   partial columns * rate), with __dmul_rn/__dadd_rn so nvcc cannot contract them, then
//   rounded to Real. The only difference from the reference is that nvcc contracts the step's
//   multiply-adds into FMA (its default, -fmad=true): a few ulps per step, no reordering. The
//   agreement suite holds float64 to 1e-12 relative.
// - Power kernel (sparse output): the table P_j = K^(2^j), Q_j = sum_{i<2^j} K^i is built per
//   subject in double on the device (P_{j+1} = P_j P_j, Q_{j+1} = Q_j + P_j Q_j, FMA allowed)
//   and rounded to Real; jumps reorder the products as in engine/src/power_cpu.cpp, so results
//   differ from the reference by O(log2(steps)) roundings; float64 is held to 1e-10 relative.
// - Deterministic run to run: one thread owns one subject, no atomics, no reductions across
//   threads; a subject's bits do not depend on the chunk or the lane it lands in.
//
// Launch configuration: kBlockThreads (128) threads per block, one thread per subject, grid
// ceil(subjects / 128) blocks. Threads past the last subject run the last subject's arithmetic
// too (never written), so every warp follows one path to its warp-synchronous tile flushes.
//
// Output tiles: each warp gathers kRows output rows x N compartments of its 32 subjects in
// shared memory (8 rows for double, 16 for float: 64 * N bytes per subject per flush; pitch
// kRows * N + 1 values, odd, so the per-thread row writes are free of bank conflicts). A flush
// writes the tile "transposed": the warp walks the 32 subjects' contiguous runs of kRows * N
// values (subject-major layout: a subject's rows are adjacent, subjects are n_out * N values
// apart), 32 consecutive values per instruction, so every store instruction touches at most two
// contiguous runs instead of 32 scattered rows. Shared memory per block: 4 warps * 32 *
// (kRows * N + 1) * sizeof(Real) = 25.6 KB for N = 3 double, at most 33.8 KB (N = 4 double),
// below the 48 KB static limit (no opt-in).
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <pkscan/error.hpp>
#include <string>

#include "cuda_check.hpp"
#include "cuda_kernels.hpp"
#include "detail/grid_math.hpp"

namespace pkscan::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = kBlockThreads / kWarp;
static_assert(kBlockThreads % kWarp == 0, "blocks are whole warps");

template <class Real>
struct TileRows;
template <>
struct TileRows<double> {
  static constexpr int value = 8;
};
template <>
struct TileRows<float> {
  static constexpr int value = 16;
};

// One warp's output tile: kRows rows of its 32 subjects, in shared memory.
template <int N, class Real>
struct TileWriter {
  static constexpr int kRows = TileRows<Real>::value;
  static constexpr int kPitch = kRows * N + 1;  // values per subject in the tile (odd)
  static_assert(kPitch % 2 == 1, "odd pitch keeps the row writes free of bank conflicts");

  Real* tile;               // this warp's 32 * kPitch shared values
  Real* out;                // chunk output (device)
  std::int64_t n_out;       // rows per subject
  std::int64_t subjects;    // subjects in the chunk
  std::int64_t warp_first;  // chunk subject of lane 0
  int lane;
  int rows = 0;           // rows gathered, < kRows between calls
  std::int64_t row0 = 0;  // output row of tile row 0
  bool finite = true;     // every recorded value of this thread's subject is finite

  // Records the state as the next output row. Called by all 32 lanes together.
  __device__ void record(const Real* x) {
    Real* dst = tile + lane * kPitch + rows * N;
    for (int r = 0; r < N; ++r) {
      dst[r] = x[r];
      finite = finite && isfinite(x[r]);
    }
    if (++rows == kRows) flush();
  }

  // Writes the gathered rows: the warp copies subject j's run of rows * N values to
  // out[((warp_first + j) * n_out + row0) * N ...], 32 consecutive values per step.
  __device__ void flush() {
    __syncwarp();
    const int per = rows * N;
    const int total = kWarp * per;
    for (int idx = lane; idx < total; idx += kWarp) {
      const int j = idx / per;
      const int e = idx - j * per;
      const std::int64_t subject = warp_first + j;
      if (subject < subjects) out[(subject * n_out + row0) * N + e] = tile[j * kPitch + e];
    }
    __syncwarp();  // the tile is reused right after
    row0 += rows;
    rows = 0;
  }
};

template <int N, class Real>
__device__ inline void step(const Real* k, Real* x, const Real* b) {
  Real y[N];
  detail::affine_step<N, Real>(k, x, b, y);
  for (int r = 0; r < N; ++r) x[r] = y[r];
}

// sum_j a[j * stride] * v[j] without contraction, in the order of Eigen's fixed-size product.
template <int N>
__device__ inline double dot_rn(const double* a, std::int64_t stride, const double* v) {
  if constexpr (N == 4) {
    return __dadd_rn(__dadd_rn(__dmul_rn(a[0], v[0]), __dmul_rn(a[2 * stride], v[2])),
                     __dadd_rn(__dmul_rn(a[stride], v[1]), __dmul_rn(a[3 * stride], v[3])));
  } else {
    double acc = __dmul_rn(a[0], v[0]);
    for (int i = 1; i < N; ++i) acc = __dadd_rn(acc, __dmul_rn(a[i * stride], v[i]));
    return acc;
  }
}

// Inputs of breakpoint `bp` for chunk subject `j`, as detail::breakpoint_inputs computes them.
template <int N, class Real>
__device__ void breakpoint_inputs(const DeviceSchedule& s, const DeviceChunk<Real>& ch,
                                  std::int64_t j, std::int64_t bp, Real* c, Real* f) {
  const std::int64_t stride = ch.subjects;
  double rate[N];
  bool zero = true;
  for (int i = 0; i < N; ++i) {
    rate[i] = s.bp_rate[bp * N + i];
    zero = zero && rate[i] == 0.0;
  }
  double cc[N];
  for (int r = 0; r < N; ++r)
    cc[r] = zero ? 0.0 : dot_rn<N>(ch.g + (r * N) * stride + j, stride, rate);  // row r of G
  double ff[N];
  for (int r = 0; r < N; ++r) ff[r] = __dadd_rn(cc[r], s.bp_bolus[bp * N + r]);
  const std::int64_t p_end = s.bp_partial_begin[bp + 1];
  for (std::int64_t p = s.bp_partial_begin[bp]; p < p_end; ++p) {
    const int comp = s.partial_compartment[p];
    const double pr = s.partial_rate[p];
    const std::int64_t l = s.partial_length[p];
    // Column `comp` of the partial matrix: element (r, comp) is e = r * N + comp.
    const double* m = ch.partial + (l * N * N + comp) * stride + j;
    for (int r = 0; r < N; ++r) ff[r] = __dadd_rn(ff[r], __dmul_rn(m[r * N * stride], pr));
  }
  for (int r = 0; r < N; ++r) {
    c[r] = static_cast<Real>(cc[r]);
    f[r] = static_cast<Real>(ff[r]);
  }
}

struct ThreadSetup {
  std::int64_t idx;  // thread index in the chunk (may be >= subjects)
  std::int64_t j;    // subject whose arithmetic it runs (idx clamped to the last subject)
};

template <class Real>
__device__ ThreadSetup thread_setup(const DeviceChunk<Real>& ch) {
  const std::int64_t idx = static_cast<std::int64_t>(blockIdx.x) * kBlockThreads +
                           static_cast<std::int64_t>(threadIdx.x);
  return {idx, idx < ch.subjects ? idx : ch.subjects - 1};
}

template <int N, class Real>
__device__ TileWriter<N, Real> make_writer(Real* tile_block, const DeviceSchedule& s,
                                           const DeviceChunk<Real>& ch) {
  const int warp = static_cast<int>(threadIdx.x) / kWarp;
  const int lane = static_cast<int>(threadIdx.x) % kWarp;
  return TileWriter<N, Real>{tile_block + warp * kWarp * TileWriter<N, Real>::kPitch,
                             ch.out,
                             s.n_out,
                             ch.subjects,
                             static_cast<std::int64_t>(blockIdx.x) * kBlockThreads + warp * kWarp,
                             lane};
}

// Batched: the whole horizon, every step, recording the output steps.
template <int N, class Real>
__global__ void __launch_bounds__(kBlockThreads)
    batched_kernel(const DeviceSchedule s, const DeviceChunk<Real> ch) {
  __shared__ Real tile_block[kWarpsPerBlock * kWarp * TileWriter<N, Real>::kPitch];
  const ThreadSetup t = thread_setup(ch);
  TileWriter<N, Real> w = make_writer<N>(tile_block, s, ch);

  Real k[N * N];
  for (int e = 0; e < N * N; ++e) k[e] = static_cast<Real>(ch.k[e * ch.subjects + t.j]);
  Real x[N];
  for (int r = 0; r < N; ++r) x[r] = static_cast<Real>(s.initial[r]);

  std::int64_t next = 0;  // next output row
  const std::int64_t last = s.dense ? s.steps : s.out_steps[s.n_out - 1];
  if (s.dense || s.out_steps[0] == 0) {
    w.record(x);
    next = 1;
  }
  for (std::int64_t bp = 0; bp < s.breakpoints && next < s.n_out; ++bp) {
    const std::int64_t first = s.bp_step[bp];
    const std::int64_t bp_last = bp + 1 < s.breakpoints ? s.bp_step[bp + 1] - 1 : s.steps;
    const std::int64_t end = bp_last < last ? bp_last : last;
    Real c[N], f[N];
    breakpoint_inputs<N>(s, ch, t.j, bp, c, f);
    if (s.dense) {
      // Every step is an output: out_steps[i] == i.
      step<N>(k, x, f);
      w.record(x);
      for (std::int64_t i = first + 1; i <= end; ++i) {
        step<N>(k, x, c);
        w.record(x);
      }
      next = end + 1;
      continue;
    }
    // Sparse: run to each output step inside [first, end] without recording, then record.
    // Invariant: the state is at step i - 1 and out_steps[next] >= i.
    std::int64_t i = first;
    while (i <= end) {
      const std::int64_t want = s.out_steps[next];
      const std::int64_t target = want < end ? want : end;
      if (target < i) break;  // unreachable for validated (sorted) output steps
      if (i == first) {
        step<N>(k, x, f);
        ++i;
      }
      for (; i <= target; ++i) step<N>(k, x, c);
      if (target == want) {
        w.record(x);
        if (++next == s.n_out) break;
      }
    }
  }
  if (w.rows > 0) w.flush();
  if (t.idx < ch.subjects) ch.status[t.idx] = w.finite ? 0 : 1;
}

// N x N row-major product in double: out = a b.
template <int N>
__device__ inline void matmul(const double* a, const double* b, double* out) {
  for (int r = 0; r < N; ++r)
    for (int c = 0; c < N; ++c) {
      double acc = a[r * N] * b[c];
      for (int i = 1; i < N; ++i) acc += a[r * N + i] * b[i * N + c];
      out[r * N + c] = acc;
    }
}

// m steps of x <- K x + c with constant c, by the table (as PowerSubject::jump of power_cpu.cpp).
template <int N, class Real>
__device__ void jump(const Real* tab, std::int64_t tstride, int levels, Real* x, const Real* c,
                     bool zero_input, std::int64_t m) {
  for (int lv = 0; m > 0 && lv < levels; ++lv, m >>= 1) {
    if (!(m & 1)) continue;
    const Real* t = tab + static_cast<std::int64_t>(lv) * 2 * N * N * tstride;
    Real p[N * N];
    for (int e = 0; e < N * N; ++e) p[e] = t[e * tstride];
    Real y[N];
    if (zero_input) {
      for (int r = 0; r < N; ++r) {
        Real acc = p[r * N] * x[0];
        for (int i = 1; i < N; ++i) acc += p[r * N + i] * x[i];
        y[r] = acc;
      }
    } else {
      Real q[N * N];
      for (int e = 0; e < N * N; ++e) q[e] = t[(N * N + e) * tstride];
      Real qc[N];
      for (int r = 0; r < N; ++r) {
        Real acc = q[r * N] * c[0];
        for (int i = 1; i < N; ++i) acc += q[r * N + i] * c[i];
        qc[r] = acc;
      }
      detail::affine_step<N, Real>(p, x, qc, y);
    }
    for (int r = 0; r < N; ++r) x[r] = y[r];
  }
}

// Power, sparse output: table of powers, then jumps from one output step to the next.
template <int N, class Real>
__global__ void __launch_bounds__(kBlockThreads)
    power_sparse_kernel(const DeviceSchedule s, const DeviceChunk<Real> ch) {
  __shared__ Real tile_block[kWarpsPerBlock * kWarp * TileWriter<N, Real>::kPitch];
  const ThreadSetup t = thread_setup(ch);
  TileWriter<N, Real> w = make_writer<N>(tile_block, s, ch);

  // Every thread (also those past the last subject) owns table column t.idx: no sharing, and
  // the column is written and then read by this thread only, so no synchronisation is needed.
  const std::int64_t tstride = ch.table_stride;
  Real* tab = ch.table + t.idx;
  Real k[N * N];
  {
    double p[N * N], q[N * N];
    for (int e = 0; e < N * N; ++e) {
      p[e] = ch.k[e * ch.subjects + t.j];
      q[e] = (e % (N + 1)) == 0 ? 1.0 : 0.0;  // identity
      k[e] = static_cast<Real>(p[e]);
    }
    for (int lv = 0; lv < s.levels; ++lv) {
      Real* tl = tab + static_cast<std::int64_t>(lv) * 2 * N * N * tstride;
      for (int e = 0; e < N * N; ++e) {
        tl[e * tstride] = static_cast<Real>(p[e]);
        tl[(N * N + e) * tstride] = static_cast<Real>(q[e]);
      }
      if (lv + 1 == s.levels) break;
      double pq[N * N], pp[N * N];
      matmul<N>(p, q, pq);
      matmul<N>(p, p, pp);
      for (int e = 0; e < N * N; ++e) {
        q[e] = q[e] + pq[e];
        p[e] = pp[e];
      }
    }
  }

  Real x[N];
  for (int r = 0; r < N; ++r) x[r] = static_cast<Real>(s.initial[r]);
  std::int64_t at = 0;       // x is the state at step `at`
  std::int64_t bp = 0;       // breakpoint covering step at + 1
  std::int64_t cached = -1;  // breakpoint whose inputs are in c, f
  Real c[N] = {}, f[N] = {};
  bool zero = true;
  for (std::int64_t o = 0; o < s.n_out; ++o) {
    const std::int64_t to = s.out_steps[o];
    while (at < to) {
      while (bp + 1 < s.breakpoints && s.bp_step[bp + 1] <= at + 1) ++bp;
      const std::int64_t bf = s.bp_step[bp];
      const std::int64_t bl = bp + 1 < s.breakpoints ? s.bp_step[bp + 1] - 1 : s.steps;
      const std::int64_t s1 = bl < to ? bl : to;  // >= at + 1
      std::int64_t s0 = at + 1;
      if (bp != cached) {
        breakpoint_inputs<N>(s, ch, t.j, bp, c, f);
        zero = true;
        for (int r = 0; r < N; ++r) zero = zero && c[r] == Real(0);
        cached = bp;
      }
      if (s0 == bf) {
        step<N>(k, x, f);
        ++s0;
      }
      if (s1 >= s0) jump<N>(tab, tstride, s.levels, x, c, zero, s1 - s0 + 1);
      at = s1;
    }
    w.record(x);
  }
  if (w.rows > 0) w.flush();
  if (t.idx < ch.subjects) ch.status[t.idx] = w.finite ? 0 : 1;
}

[[noreturn]] __attribute__((noinline, cold)) void throw_launch(const std::string& what) {
  throw DeviceError("simulate: CUDA launch: " + what);
}

unsigned grid_blocks(std::int64_t subjects) {
  const std::int64_t blocks = (subjects + kBlockThreads - 1) / kBlockThreads;
  if (blocks > INT_MAX)
    throw_launch("a chunk of " + std::to_string(subjects) +
                 " subjects needs more thread blocks than a grid can have");
  return static_cast<unsigned>(blocks);
}

template <int N, class Real>
void launch_n(bool power, const DeviceSchedule& s, const DeviceChunk<Real>& c,
              cudaStream_t stream) {
  const unsigned blocks = grid_blocks(c.subjects);
  if (power)
    power_sparse_kernel<N, Real><<<blocks, kBlockThreads, 0, stream>>>(s, c);
  else
    batched_kernel<N, Real><<<blocks, kBlockThreads, 0, stream>>>(s, c);
  PKSCAN_CUDA_CHECK_LAUNCH();
}

template <class Real>
void launch(bool power, const DeviceSchedule& s, const DeviceChunk<Real>& c, void* stream) {
  if (c.subjects <= 0 || s.n_out <= 0) return;
  const auto st = static_cast<cudaStream_t>(stream);
  switch (s.n) {
    case 2:
      return launch_n<2, Real>(power, s, c, st);
    case 3:
      return launch_n<3, Real>(power, s, c, st);
    case 4:
      return launch_n<4, Real>(power, s, c, st);
    default:
      throw_launch("the kernels are compiled for 2, 3 and 4 compartments, not " +
                   std::to_string(s.n));
  }
}

}  // namespace

void launch_batched(const DeviceSchedule& s, const DeviceChunk<double>& c, void* stream) {
  launch<double>(false, s, c, stream);
}
void launch_batched(const DeviceSchedule& s, const DeviceChunk<float>& c, void* stream) {
  launch<float>(false, s, c, stream);
}
void launch_power_sparse(const DeviceSchedule& s, const DeviceChunk<double>& c, void* stream) {
  launch<double>(true, s, c, stream);
}
void launch_power_sparse(const DeviceSchedule& s, const DeviceChunk<float>& c, void* stream) {
  launch<float>(true, s, c, stream);
}

}  // namespace pkscan::cuda
