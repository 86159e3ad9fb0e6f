// The arithmetic ceiling of the grid recurrence for pkscan-bench: a hand-written blocked kernel
// that bounds the compute (no output, sparse doses; docs/performance.md, the compute ceiling),
// on the bench's subjects and threads. 64 subjects per block in
// structure-of-arrays registers, time outer, the subjects' loop vectorized; no output but a
// checksum of the final states. It is not bound by pkscan's rules: multiply-adds may contract
// into FMA, and the sums are grouped as the compiler likes. Compiled for AVX-512, AVX2 and
// baseline x86-64 and picked at run time, as the library's hot loops are.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "bench.hpp"

namespace pkscan::bench {

namespace {

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PKSCAN_PROBE_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PKSCAN_PROBE_CLONES
#endif

template <class R>
struct ProbeInputs {
  std::vector<R> k, x0, dose;  // k[9 n] (row-major per subject), x0[3 n], dose[n]
};

// The probe's per-subject matrix (amounts, euler, the bench's fractions): depot -> central
// (k01), central <-> peripheral (k12, k21), elimination u from the central compartment.
template <class R>
ProbeInputs<R> probe_inputs(std::int64_t n, std::uint32_t seed) {
  ProbeInputs<R> in;
  const auto un = static_cast<std::size_t>(n);
  in.k.assign(9 * un, R(0));
  in.x0.assign(3 * un, R(0));
  in.dose.assign(un, R(100));
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> z(0.0, 1.0);
  for (std::size_t s = 0; s < un; ++s) {
    const double f = std::exp(0.3 * z(rng));
    const double k01 = 0.10 * f, k12 = 0.05 * f, k21 = 0.03 / f, u = 0.02 * f;
    R* k = &in.k[9 * s];
    k[0] = R(1 - k01);
    k[3] = R(k01), k[4] = R(1 - k12 - u), k[5] = R(k21);
    k[7] = R(k12), k[8] = R(1 - k21);
  }
  return in;
}

constexpr std::int64_t kProbeBlock = 64;

// One block of the probe: its subjects' recurrence over t steps, the sum of their final states.
template <class R>
__attribute__((always_inline)) inline double probe_block(const ProbeInputs<R>& in, std::int64_t n,
                                                         std::int64_t t, std::int64_t ib) {
  constexpr std::int64_t W = kProbeBlock;
  const std::int64_t n0 = ib * W, w = std::min(W, n - n0);
  alignas(64) R k[9][W], x[3][W], d[W];
  for (std::int64_t j = 0; j < W; ++j) {
    const auto s = static_cast<std::size_t>(n0 + std::min(j, w - 1));
    for (int e = 0; e < 9; ++e) k[e][j] = in.k[9 * s + static_cast<std::size_t>(e)];
    for (int c = 0; c < 3; ++c) x[c][j] = in.x0[3 * s + static_cast<std::size_t>(c)];
    d[j] = in.dose[s];
  }
  for (std::int64_t step = 0; step < t; ++step) {
    const bool dose = step % 24 == 0;
#pragma omp simd
    for (std::int64_t j = 0; j < W; ++j) {
      const R b0 = dose ? d[j] : R(0);
      const R a0 = x[0][j], a1 = x[1][j], a2 = x[2][j];
      const R y0 = k[0][j] * a0 + k[1][j] * a1 + k[2][j] * a2 + b0;
      const R y1 = k[3][j] * a0 + k[4][j] * a1 + k[5][j] * a2;
      const R y2 = k[6][j] * a0 + k[7][j] * a1 + k[8][j] * a2;
      x[0][j] = y0, x[1][j] = y1, x[2][j] = y2;
    }
  }
  double cs = 0;
  for (std::int64_t j = 0; j < w; ++j) cs += double(x[0][j]) + double(x[1][j]) + double(x[2][j]);
  return cs;
}

// Per block, compiled per ISA (an OpenMP region's outlined body would not inherit the clones'
// targets, so the threads call these).
PKSCAN_PROBE_CLONES double probe_run(const ProbeInputs<double>& in, std::int64_t n, std::int64_t t,
                                     std::int64_t ib) {
  return probe_block(in, n, t, ib);
}
PKSCAN_PROBE_CLONES double probe_run(const ProbeInputs<float>& in, std::int64_t n, std::int64_t t,
                                     std::int64_t ib) {
  return probe_block(in, n, t, ib);
}

template <class R>
double probe_all(const ProbeInputs<R>& in, std::int64_t n, std::int64_t t, int threads) {
  const std::int64_t nb = (n + kProbeBlock - 1) / kProbeBlock;
  double cs = 0;
#pragma omp parallel for schedule(static) reduction(+ : cs) num_threads(threads)
  for (std::int64_t ib = 0; ib < nb; ++ib) cs += probe_run(in, n, t, ib);
  return cs;
}

template <class R>
double probe_best(std::int64_t n, std::int64_t t, int threads, int repeat, std::uint32_t seed) {
  const ProbeInputs<R> in = probe_inputs<R>(n, seed);
  volatile double sink = probe_all(in, n, t, threads);  // warm-up
  double best = 1e300;
  for (int i = 0; i < repeat; ++i) {
    const double t0 = omp_get_wtime();
    sink = probe_all(in, n, t, threads);
    best = std::min(best, omp_get_wtime() - t0);
  }
  (void)sink;
  return best;
}

}  // namespace

double probe_recurrence_seconds(std::int64_t n, std::int64_t t, Precision precision, int threads,
                                int repeat, std::uint32_t seed) {
  return precision == Precision::Float64 ? probe_best<double>(n, t, threads, repeat, seed)
                                         : probe_best<float>(n, t, threads, repeat, seed);
}

}  // namespace pkscan::bench
