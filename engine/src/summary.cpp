// Streaming per-time summaries and per-subject exposure metrics of population runs.
//
// Numeric contract (the user-facing rules are in summary.hpp):
//  - sums: per row (output time x compartment), subjects are added in global subject order
//    within aligned blocks of 1024 subjects, block sums are added in block order;
//  - histogram: integer increments; the window's position depends only on the largest key,
//    so the final state does not depend on the order in which values arrive;
//  - metrics: per subject, lanes = output index mod 8 within aligned blocks of 64 output
//    indices, lanes combined in a fixed tree, blocks combined in time order; each subject's
//    arithmetic does not depend on its chunk, its lane group or the thread running it.
// Results are therefore bit-identical for any chunking and thread count on one machine (the
// function clone chosen for the CPU is fixed). The threads of add() own disjoint ranges of
// output times, so no counter or sum is shared.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // vector types stay inside always-inline code
#endif
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <pkscan/error.hpp>
#include <pkscan/models/model_kind.hpp>
#include <pkscan/summary.hpp>
#include <type_traits>

#include "detail/backend.hpp"
#include "detail/fused_summary.hpp"
#include "detail/parallel.hpp"
#include "detail/transition.hpp"
#include "detail/validate.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace pkscan {

namespace {

// Hot loops are compiled for AVX-512, AVX2 and baseline x86-64; the loader picks one clone per
// machine (same rule as the batched backend). Bodies are forced inline into each clone.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PKSCAN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PKSCAN_CLONES
#endif
#if defined(__GNUC__)
#define PKSCAN_INLINE __attribute__((always_inline)) inline
#else
#define PKSCAN_INLINE inline
#endif

// Eight-lane vectors (GCC/Clang vector extensions; lowered to what each clone's ISA offers).
typedef double v8d __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef std::int64_t v8i __attribute__((vector_size(64)));
typedef std::uint64_t v8u __attribute__((vector_size(64)));

constexpr std::int64_t kBlock = 1024;          // subjects per summation block
constexpr std::int64_t kUnit = 64;             // output indices per thread unit and metric block
constexpr std::int64_t kSubTile = 8;           // output times per add() sub-tile
constexpr std::int64_t kPrefetchSubjects = 8;  // how far ahead add() prefetches
constexpr int kBatchValues = 1536;             // values per increment batch of add()
constexpr std::uint64_t kPosFiniteMax = 0x7FEFFFFFFFFFFFFFull;  // bits of DBL_MAX
constexpr std::uint64_t kAbsMask = 0x7FFFFFFFFFFFFFFFull;
constexpr std::uint64_t kInfBits = 0x7FF0000000000000ull;
constexpr double kDblMax = 1.7976931348623157e308;
constexpr int kKeyShift = 45;  // a key is the exponent and the top 7 mantissa bits
constexpr std::int64_t kEmpty = std::numeric_limits<std::int64_t>::min() / 4;

PKSCAN_INLINE std::uint64_t bits_of(double x) noexcept {
  std::uint64_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
PKSCAN_INLINE double from_bits(std::uint64_t b) noexcept {
  double x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}
PKSCAN_INLINE v8d load8(const double* p) noexcept {
  v8d v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
PKSCAN_INLINE v8d load8(const float* p) noexcept {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, v8d);
}
PKSCAN_INLINE v8i load8(const std::int64_t* p) noexcept {
  v8i v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
PKSCAN_INLINE void store8(double* p, v8d v) noexcept { std::memcpy(p, &v, sizeof v); }
// Bit casts between the vector types.
template <class To, class From>
PKSCAN_INLINE To vcast(From v) noexcept {
  static_assert(sizeof(To) == sizeof(From), "same size");
  To r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}
// x in every lane (one broadcast; GCC 12 lowers the initializer-list form to one masked
// broadcast per lane).
#if defined(__clang__)
// clang (the fuzz build, scripts/fuzz.sh) has no __builtin_shuffle; every shuffle in this file
// has a constant mask, which is __builtin_shufflevector's index list.
PKSCAN_INLINE v8d splat(double x) noexcept {
  return __builtin_shufflevector(v8d{x}, v8d{x}, 0, 0, 0, 0, 0, 0, 0, 0);
}
#else
PKSCAN_INLINE v8d splat(double x) noexcept { return __builtin_shuffle(v8d{x}, v8i{}); }
#endif

// Where a chunk's concentrations come from: a concentration array, or amounts times the
// reciprocal volume of the subject's compartment.
struct Source {
  const double* f64 = nullptr;  // values, subject-major (one of f64 / f32 is set)
  const float* f32 = nullptr;
  bool scale = false;  // multiply by 1 / volume
  const SimulationResult* r = nullptr;
  std::int64_t per_subject = 0;  // times * compartments
  int compartments = 0;
};

Source source_of(const SimulationResult& r) {
  Source s;
  s.r = &r;
  s.per_subject = r.times() * r.compartments();
  s.compartments = r.compartments();
  if (r.precision() == Precision::Float64) {
    if (!r.concentrations_f64().empty()) {
      s.f64 = r.concentrations_f64().data();
    } else {
      s.f64 = r.amounts_f64().data();
      s.scale = true;
    }
  } else if (!r.concentrations_f32().empty()) {
    s.f32 = r.concentrations_f32().data();
  } else {
    s.f32 = r.amounts_f32().data();
    s.scale = true;
  }
  return s;
}

// Reciprocal volume of one compartment of one subject (1 when the source is concentrations).
double inverse_volume(const Source& src, std::int64_t s, int c) {
  return src.scale ? 1.0 / src.r->volume(s, c) : 1.0;
}

// Concentration of subject s at row r (= time * compartments + compartment): the one formula
// every path uses.
double value_at(const Source& src, std::int64_t s, std::int64_t r) {
  const std::int64_t i = s * src.per_subject + r;
  const double x = src.f64 ? src.f64[i] : static_cast<double>(src.f32[i]);
  return src.scale ? x * inverse_volume(src, s, static_cast<int>(r % src.compartments)) : x;
}

// ---- Histogram sketch -----------------------------------------------------------------------

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
void slow_add(Sketch& h, std::int64_t row, std::int64_t key) noexcept {
  std::int64_t& lo = h.lo[static_cast<std::size_t>(row)];
  std::int64_t& mx = h.maxkey[static_cast<std::size_t>(row)];
  std::uint32_t* cnt = h.counts + row * h.stride;
  if (mx < 0) {
    mx = key;
    lo = key - h.width + 1;
    ++cnt[key & h.mask];
    return;
  }
  if (key > mx) {
    const std::int64_t new_lo = key - h.width + 1;
    const std::int64_t end = std::min(new_lo, mx + 1);
    for (std::int64_t k = std::max<std::int64_t>(lo, 0); k < end; ++k) {
      std::uint32_t& c = cnt[k & h.mask];
      if (c) {
        h.under[static_cast<std::size_t>(row)] += c;
        c = 0;
      }
    }
    lo = new_lo;
    mx = key;
    ++cnt[key & h.mask];
    return;
  }
  ++h.under[static_cast<std::size_t>(row)];  // below the window
}

// Allocates an empty sketch of `rows` rows. The counters are zero-filled and faulted in on first
// touch. Every tile of add() touches a few hundred rows 16 KiB apart, so on Linux add()'s
// sketch asks for transparent huge pages (`huge`, 2 MiB): with 4 KiB pages nearly every
// increment misses the first-level TLB. The fused kernel's sketches do not: it increments a
// few rows at a time, and a huge page is zeroed in full when first touched (most of each
// row's ring never is: the values of one time span a few binades of the window).
void init_sketch(Sketch& h, std::int64_t rows, int window_binades, bool huge) {
  const std::size_t R = static_cast<std::size_t>(rows);
  h.width = static_cast<std::int64_t>(window_binades) * 128;
  h.ring = 1;
  while (h.ring < h.width) h.ring *= 2;
  h.mask = h.ring - 1;
  h.stride = h.ring + 16;
  h.dummy = rows * h.stride;
  h.lo.assign(R + 8, kEmpty);
  h.maxkey.assign(R + 8, -1);
  h.zero.assign(R + 8, 0);
  h.under.assign(R + 8, 0);
  h.bytes = (R * static_cast<std::size_t>(h.stride) + 16) * sizeof(std::uint32_t);
#if defined(__linux__)
  void* p = mmap(nullptr, h.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p != MAP_FAILED) {
    madvise(p, h.bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);  // advisory
    h.counts = static_cast<std::uint32_t*>(p);
    h.mapped = true;
  }
#endif
  if (!h.counts) h.counts = static_cast<std::uint32_t*>(std::calloc(h.bytes, 1));
  if (!h.counts) throw std::bad_alloc();
}

void free_sketch(Sketch& h) noexcept {
#if defined(__linux__)
  if (h.mapped) {
    munmap(h.counts, h.bytes);
    h.counts = nullptr;
    return;
  }
#endif
  std::free(h.counts);
  h.counts = nullptr;
}

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
void remove_one(Sketch& h, std::int64_t row, double x) noexcept {
  const std::uint64_t b = bits_of(x);
  if (b - 1 < kPosFiniteMax) {
    const std::int64_t key = static_cast<std::int64_t>(b >> kKeyShift);
    if (key >= h.lo[static_cast<std::size_t>(row)])
      --h.counts[row * h.stride + (key & h.mask)];
    else
      --h.under[static_cast<std::size_t>(row)];
  } else if ((b & kAbsMask) < kInfBits) {
    --h.zero[static_cast<std::size_t>(row)];
  }
}

// ---- Exposure metrics -----------------------------------------------------------------------

// ln(x) for x in [1, DBL_MAX]. x = 2^e m, m in [1, 2); j = the top 4 bits of m's fraction,
// c_j = 1 + (j + 1/2)/16, ic_j = RN(1/c_j): ln m = -ln(ic_j) + log1p(u) with u = m ic_j - 1
// (|u| < 0.031), -ln(ic_j) tabulated correctly rounded, log1p(u) by its Taylor series to u^10
// (truncation < 2e-18). No division; about 1 ulp.
PKSCAN_INLINE v8d log_ge1(v8d x) noexcept {
  static constexpr double kInvC[16] = {
      0.9696969696969697, 0.9142857142857143, 0.8648648648648649, 0.8205128205128205,
      0.7804878048780488, 0.7441860465116279, 0.7111111111111111, 0.6808510638297872,
      0.6530612244897959, 0.6274509803921569, 0.6037735849056604, 0.5818181818181818,
      0.5614035087719298, 0.5423728813559322, 0.5245901639344263, 0.5079365079365079};
  static constexpr double kLogC[16] = {
      0.03077165866675366, 0.08961215868968717, 0.14518200984449783, 0.19782574332991992,
      0.2478361639045812,  0.2954642128938359,  0.3409265869705932,  0.38441169891033206,
      0.42608439531090014, 0.46608972992459924, 0.5045560107523953,  0.5415972824327444,
      0.5773153650348236,  0.6118015411059929,  0.6451379613735847,  0.6773988235918061};
  const v8u b = vcast<v8u>(x);
  // Exponent as a double, exactly: 2^52 + (b >> 52) minus 2^52 + 1023.
  const v8d e = vcast<v8d>((b >> 52) | 0x4330000000000000ull) - 4503599627371519.0;
  const v8d m = vcast<v8d>((b & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);
  const v8i j = vcast<v8i>((b >> 48) & 15);
#if defined(__GNUC__) && !defined(__clang__)
  // 16-entry table lookups as two-register permutes (vpermt2pd with AVX-512).
  const v8d ic = __builtin_shuffle(load8(kInvC), load8(kInvC + 8), j);
  const v8d lc = __builtin_shuffle(load8(kLogC), load8(kLogC + 8), j);
#else
  v8d ic, lc;
  for (int l = 0; l < 8; ++l) {
    ic[l] = kInvC[j[l]];
    lc[l] = kLogC[j[l]];
  }
#endif
  const v8d u = m * ic - 1.0;
  const v8d p =
      u *
      (1.0 + u * (-1.0 / 2 +
                  u * (1.0 / 3 +
                       u * (-1.0 / 4 +
                            u * (1.0 / 5 +
                                 u * (-1.0 / 6 +
                                      u * (1.0 / 7 +
                                           u * (-1.0 / 8 + u * (1.0 / 9 + u * (-1.0 / 10))))))))));
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2 with 21 trailing zero bits
  constexpr double kLn2Lo = 1.90821492927058770002e-10;  // ln 2 - kLn2Hi
  return e * kLn2Hi + (lc + (p + e * kLn2Lo));
}

// Metrics of 8 subjects at once, one subject per lane, the output times in order. Every path
// (the standalone subject_metrics and the fused simulate-and-summarise kernel) runs these same
// inline functions, so a subject's metrics do not depend on the path, its lane or its chunk.
struct MetricLanes {
  v8d prev{};  // concentration at the previous output time
  v8d cmax{}, tmax{}, cmin{}, auc{};
  v8d nonfinite{};  // 0 while every value seen is finite, NaN after
};

// Output index 0 (value c at time t).
PKSCAN_INLINE void metric_first(v8d c, double t, bool in_last, MetricLanes& L) noexcept {
  const double inf = std::numeric_limits<double>::infinity();
  L.cmax = splat(-inf);
  L.tmax = splat(inf);
  L.cmin = splat(inf);
  L.auc = splat(0.0);
  L.nonfinite = c * 0.0;  // inf * 0 and NaN * 0 are NaN
  const v8d cmax = (c > L.cmax) ? c : L.cmax;
  L.tmax = (cmax != L.cmax) ? splat(t) : L.tmax;
  L.cmax = cmax;
  if (in_last) L.cmin = (c < L.cmin) ? c : L.cmin;
  L.prev = c;
}

// Lane-wise a b + c rounded once (IEEE fusedMultiplyAdd: the same bits on every CPU; one
// instruction where the clone's ISA has FMA).
PKSCAN_INLINE v8d fma8(v8d a, v8d b, v8d c) noexcept {
  v8d r;
  for (int l = 0; l < 8; ++l) r[l] = __builtin_fma(a[l], b[l], c[l]);
  return r;
}

// Lane-wise a > b ? a : b (b where either is NaN).
PKSCAN_INLINE v8d vmax(v8d a, v8d b) noexcept { return (a > b) ? a : b; }

// Gregory's coefficients: x / ln(1 + x) = 1 + G_1 x + G_2 x^2 + ... (G_1 = 1/2, G_2 = -1/12, ...),
// each the double nearest to the exact fraction.
constexpr double kGregory[12] = {0.5,
                                 -0.08333333333333333,
                                 0.041666666666666664,
                                 -0.02638888888888889,
                                 0.01875,
                                 -0.014269179894179895,
                                 0.01136739417989418,
                                 -0.00935653659611993,
                                 0.00789255401234568,
                                 -0.006785849984634707,
                                 0.005924056412337663,
                                 -0.005236693257950285};
// Below this x = c1 / c2 - 1 the series is used: its terms after G_12 x^12 add up to less
// than 1.1e-18 relative.
constexpr double kSeriesMax = 0.0625;

// The linear-up / log-down area of [t_{k-1}, t_k] divided by dt, from the values c1 at
// t_{k-1} and c2 at t_k: 0.5 (c1 + c2), or, when c1 > c2 > 0 (q = min(c2, c1 - c2) > 0),
// d / ln(c1 / c2) with d = c1 - c2 and x = d / c2:
//  - x < 1/16: c2 x / ln(1 + x) = c2 + d (G_1 + G_2 x + ... + G_12 x^11) (no cancellation;
//    within about 2 ulp);
//  - otherwise d / ln(r) with r = c1 / c2 (correctly rounded, clamped to DBL_MAX): ln r >=
//    0.0606, so r's rounding moves it by at most 1.9e-15 relative (about 1 ulp for larger
//    ratios).
// The logarithm is computed only for vectors in which some lane needs it; each lane's result
// depends on its own values only.
//
// Written for GCC 12's vector lowering: a comparison that feeds one select becomes a mask
// blend, but one whose result is reused (or combined with &) is scalarised. So every
// comparison below is used once; lanes whose piece is linear compute a harmless garbage
// log-down piece that the last select drops (no floating-point traps are enabled).
PKSCAN_INLINE v8d auc_piece(v8d c1, v8d c2) noexcept {
  const v8d d = c1 - c2;
  const v8d q = (c2 < d) ? c2 : d;
  const v8d x = d / c2;
  // h = G_1 + G_2 x + ... + G_12 x^11 by Estrin's scheme (a short dependency chain), with
  // fused multiply-adds.
  const v8d x2 = x * x;
  const v8d x4 = x2 * x2;
  const v8d x8 = x4 * x4;
  const v8d p0 = fma8(splat(kGregory[1]), x, splat(kGregory[0]));
  const v8d p1 = fma8(splat(kGregory[3]), x, splat(kGregory[2]));
  const v8d p2 = fma8(splat(kGregory[5]), x, splat(kGregory[4]));
  const v8d p3 = fma8(splat(kGregory[7]), x, splat(kGregory[6]));
  const v8d p4 = fma8(splat(kGregory[9]), x, splat(kGregory[8]));
  const v8d p5 = fma8(splat(kGregory[11]), x, splat(kGregory[10]));
  const v8d h = fma8(fma8(p5, x2, p4), x8, fma8(fma8(p3, x2, p2), x4, fma8(p1, x2, p0)));
  const v8d series = fma8(d, h, c2);
  // The largest x of the log-down lanes (NaN and linear lanes count as 0).
  v8d xl = (q > 0.0) ? x : splat(0.0);
#if defined(__clang__)
  xl = vmax(xl, __builtin_shufflevector(xl, xl, 4, 5, 6, 7, 0, 1, 2, 3));
  xl = vmax(xl, __builtin_shufflevector(xl, xl, 2, 3, 0, 1, 6, 7, 4, 5));
  xl = vmax(xl, __builtin_shufflevector(xl, xl, 1, 0, 3, 2, 5, 4, 7, 6));
#else
  xl = vmax(xl, __builtin_shuffle(xl, v8i{4, 5, 6, 7, 0, 1, 2, 3}));
  xl = vmax(xl, __builtin_shuffle(xl, v8i{2, 3, 0, 1, 6, 7, 4, 5}));
  xl = vmax(xl, __builtin_shuffle(xl, v8i{1, 0, 3, 2, 5, 4, 7, 6}));
#endif
  const double big = xl[0];
  v8d piece = series;
  if (!(big < kSeriesMax)) {
    v8d r = c1 / c2;
    r = (r < kDblMax) ? r : splat(kDblMax);
    const v8d logp = d / log_ge1(r);
    piece = (x < kSeriesMax) ? series : logp;
  }
  return (q > 0.0) ? piece : 0.5 * (c1 + c2);
}

// Output index k >= 1 given the piece of its interval (auc_piece of the previous value and c2).
PKSCAN_INLINE void metric_update(v8d c2, v8d piece, double t, double dt, bool in_last,
                                 MetricLanes& L) noexcept {
  L.auc = L.auc + dt * piece;
  // Maximum (first time reached): the time changes only when the maximum strictly grows.
  const v8d cmax = (c2 > L.cmax) ? c2 : L.cmax;
  L.tmax = (cmax != L.cmax) ? splat(t) : L.tmax;
  L.cmax = cmax;
  // Minimum over the last dosing interval.
  if (in_last) L.cmin = (c2 < L.cmin) ? c2 : L.cmin;
  L.nonfinite = L.nonfinite + c2 * 0.0;
  L.prev = c2;
}

// Output index k >= 1: value c2 at time t, dt = t_k - t_{k-1}.
PKSCAN_INLINE void metric_next(v8d c2, double t, double dt, bool in_last, MetricLanes& L) noexcept {
  metric_update(c2, auc_piece(L.prev, c2), t, dt, in_last, L);
}

// Lane l's {cmax, tmax, auc, cmin} (NaN when not ok).
inline void metric_out(const MetricLanes& L, int l, bool ok, double* out) noexcept {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  ok = ok && L.nonfinite[l] == 0.0;
  out[0] = ok ? L.cmax[l] : nan;
  out[1] = ok ? L.tmax[l] : nan;
  out[2] = ok ? L.auc[l] : nan;
  out[3] = ok && L.cmin[l] != std::numeric_limits<double>::infinity() ? L.cmin[l] : nan;
}

std::int64_t first_index_at_or_after(const std::vector<double>& t, double last_dose) noexcept {
  if (std::isnan(last_dose)) return 0;
  std::int64_t i = 0;
  while (i < static_cast<std::int64_t>(t.size()) && t[static_cast<std::size_t>(i)] < last_dose) ++i;
  return i;
}

// ---- Sums ----------------------------------------------------------------------------------

// The 8 lane sums of one row, combined in a fixed tree.
PKSCAN_INLINE double lane_tree(const double* part, std::int64_t lane_stride) noexcept {
  const double* p = part;
  const std::int64_t k = lane_stride;
  return ((p[0] + p[k]) + (p[2 * k] + p[3 * k])) + ((p[4 * k] + p[5 * k]) + (p[6 * k] + p[7 * k]));
}

// End of a block of kBlock subjects for rows [r0, r1): the block's sum is added to the total,
// the lanes restart at zero.
inline void close_block(double* part, std::int64_t lane_stride, double* total, std::int64_t r0,
                        std::int64_t r1) noexcept {
  for (std::int64_t r = r0; r < r1; ++r) {
    total[r] += lane_tree(part + r, lane_stride);
    for (int l = 0; l < 8; ++l) part[r + l * lane_stride] = 0.0;
  }
}

// ---- The add() kernel -----------------------------------------------------------------------

struct AddJob {
  const Source* src;
  const unsigned char* inc;  // per subject: included so far
  const double* inv;         // per subject: kSubTile * C reciprocal volumes (Scale only)
  std::int64_t S;
  std::int64_t g0;      // global index of the chunk's first subject
  std::int64_t ta, tb;  // output indices owned by this thread
  double* part;         // 8 lanes of partial sums, lane l at part + l * lane_stride
  std::int64_t lane_stride;
  double* total;
  Sketch* h;
  unsigned char* bad;  // per subject: found non-finite (this thread's flags)
};

// For each sub-tile of kSubTile output times (a few dozen rows, whose counters stay in the
// first-level cache), the subjects of the chunk in order, in batches:
//  1. a vector pass adds each value to its row's partial sum and computes the index of its
//     counter, or of a dummy counter when the value needs the slow path (outside the window,
//     <= 0, or not finite);
//  2. a branch-free loop increments the counters;
//  3. the rare slow-path values are then added one by one (the sketch's final state does not
//     depend on the order of the values, see Sketch).
// Each line of the chunk is read once, prefetched a few subjects ahead (consecutive subjects
// are a whole row apart, too far for the hardware prefetcher).
template <class Real, bool Scale>
PKSCAN_INLINE void add_body(const AddJob& a, const Real* data) {
  Sketch& h = *a.h;
  const int C = a.src->compartments;
  const std::int64_t R = a.src->per_subject;
  const int wmax = static_cast<int>(kSubTile) * C;
  const int batch = std::max(1, kBatchValues / wmax);
  std::vector<std::int64_t> slots(static_cast<std::size_t>(batch * wmax));
  std::vector<double> values(static_cast<std::size_t>(batch * wmax));
  std::vector<std::int64_t> who(static_cast<std::size_t>(batch));
  std::vector<std::int64_t> rowoff(static_cast<std::size_t>(wmax));
  const std::int64_t dummy = h.dummy;
  const v8i mask = v8i{} + h.mask;
  const std::int64_t top = h.width - 1;
  for (std::int64_t t0 = a.ta; t0 < a.tb; t0 += kSubTile) {
    const std::int64_t t1 = std::min(t0 + kSubTile, a.tb);
    const int w = static_cast<int>((t1 - t0) * C);
    const int wv = w / 8 * 8;  // values on the vector path per subject
    const std::int64_t r0 = t0 * C;
    for (int j = 0; j < w; ++j) rowoff[static_cast<std::size_t>(j)] = (r0 + j) * h.stride;
    const int last_byte = w * static_cast<int>(sizeof(Real)) - 1;
    for (std::int64_t s0 = 0; s0 < a.S; s0 += batch) {
      const std::int64_t s1 = std::min(a.S, s0 + batch);
      int n = 0;     // values in slots
      int nsub = 0;  // included subjects in this batch
      v8i slow{};
      for (std::int64_t s = s0; s < s1; ++s) {
        if (s + kPrefetchSubjects < a.S) {
          const char* ahead =
              reinterpret_cast<const char*>(data + (s + kPrefetchSubjects) * R + r0);
          for (int byte = 0; byte < last_byte; byte += 64) __builtin_prefetch(ahead + byte);
          __builtin_prefetch(ahead + last_byte);
        }
        if (a.inc[s]) {
          const Real* x = data + s * R + r0;
          const double* iv = a.inv + s * wmax;
          double* part = a.part + ((a.g0 + s) & 7) * a.lane_stride;
          who[static_cast<std::size_t>(nsub++)] = s;
          for (int j = 0; j < wv; j += 8) {
            v8d v = load8(x + j);
            if (Scale) v = v * load8(iv + j);
            store8(part + r0 + j, load8(part + r0 + j) + v);
            // No 64-bit integer vector comparisons (GCC 12 scalarises them): a value is on the
            // fast path <=> 1 <= bits <= bits(DBL_MAX) and 0 <= idx <= top <=> `out` >= 0.
            const v8i b = vcast<v8i>(v);
            const v8i key = b >> kKeyShift;
            const v8i idx = key - load8(h.lo.data() + r0 + j);
            const v8i out =
                (b - 1) | (static_cast<std::int64_t>(kPosFiniteMax) - b) | idx | (top - idx);
            const v8i m = out >> 63;  // -1 on the slow path
            slow |= m;
            const v8i slot = ((load8(rowoff.data() + j) + (key & mask)) & ~m) | (m & dummy);
            std::memcpy(slots.data() + n, &slot, sizeof slot);
            store8(values.data() + n, v);
            n += 8;
          }
          for (int j = wv; j < w; ++j) {  // the scalar tail (when 8 does not divide w)
            const double v = Scale ? static_cast<double>(x[j]) * iv[j] : static_cast<double>(x[j]);
            part[r0 + j] += v;
            if (!add_one(h, r0 + j, v)) a.bad[s] = 1;
          }
        }
        if ((a.g0 + s + 1) % kBlock == 0) close_block(a.part, a.lane_stride, a.total, r0, r0 + w);
      }
      for (int i = 0; i < n; ++i) ++h.counts[slots[static_cast<std::size_t>(i)]];
      std::int64_t any = 0;
      for (int l = 0; l < 8; ++l) any |= slow[l];
      if (any && wv > 0)
        for (int i = 0; i < n; ++i)
          if (slots[static_cast<std::size_t>(i)] == dummy &&
              !add_one(h, r0 + i % wv, values[static_cast<std::size_t>(i)]))
            a.bad[who[static_cast<std::size_t>(i / wv)]] = 1;
    }
  }
}

PKSCAN_CLONES void add_f64(const AddJob& a, const double* d) { add_body<double, false>(a, d); }
PKSCAN_CLONES void add_f64_scaled(const AddJob& a, const double* d) {
  add_body<double, true>(a, d);
}
PKSCAN_CLONES void add_f32(const AddJob& a, const float* d) { add_body<float, false>(a, d); }
PKSCAN_CLONES void add_f32_scaled(const AddJob& a, const float* d) { add_body<float, true>(a, d); }

// Standalone metrics of subjects [s_first, s_last), 8 at a time (idle lanes of the last group
// repeat its last subject and are not written).
template <class Real>
PKSCAN_INLINE void metrics_body(const Source& src, const Real* data, std::int64_t s_first,
                                std::int64_t s_last, int mc, std::int64_t i0,
                                const std::vector<double>& times, double* out) {
  const int C = src.compartments;
  const std::int64_t T = src.per_subject / C;
  MetricLanes L;
  for (std::int64_t s0 = s_first; s0 < s_last; s0 += 8) {
    const Real* x[8];
    v8d inv;
    for (int l = 0; l < 8; ++l) {
      const std::int64_t s = std::min(s0 + l, s_last - 1);
      x[l] = data + s * src.per_subject + mc;
      inv[l] = inverse_volume(src, s, mc);
    }
    v8d c;
    for (int l = 0; l < 8; ++l) c[l] = static_cast<double>(x[l][0]);
    metric_first(c * inv, times[0], 0 >= i0, L);
    for (std::int64_t k = 1; k < T; ++k) {
      for (int l = 0; l < 8; ++l) c[l] = static_cast<double>(x[l][k * C]);
      const double t = times[static_cast<std::size_t>(k)];
      metric_next(c * inv, t, t - times[static_cast<std::size_t>(k - 1)], k >= i0, L);
    }
    for (int l = 0; l < 8 && s0 + l < s_last; ++l) {
      const std::int64_t s = s0 + l;
      metric_out(L, l, src.r->status()[static_cast<std::size_t>(s)] == SubjectStatus::Ok,
                 out + s * kMetricCount);
    }
  }
}

PKSCAN_CLONES void metrics_f64(const Source& src, std::int64_t a, std::int64_t b, int mc,
                               std::int64_t i0, const std::vector<double>& times, double* out) {
  metrics_body<double>(src, src.f64, a, b, mc, i0, times, out);
}
PKSCAN_CLONES void metrics_f32(const Source& src, std::int64_t a, std::int64_t b, int mc,
                               std::int64_t i0, const std::vector<double>& times, double* out) {
  metrics_body<float>(src, src.f32, a, b, mc, i0, times, out);
}

// ---- Percentiles ----------------------------------------------------------------------------

// Type-7 interpolation between order statistics a = x_k and b = x_{k+1} at fraction g, in
// numpy's form (exact at both ends).
inline double lerp7(double a, double b, double g) noexcept {
  const double d = b - a;
  return g < 0.5 ? a + d * g : b - d * (1.0 - g);
}

// Rank positions of a percentile among n values: k = floor(h), g = h - k, h = (n - 1) p / 100.
inline void rank_of(std::int64_t n, double p, std::int64_t& k, double& g) noexcept {
  const double h = static_cast<double>(n - 1) * (p / 100.0);
  double fk = std::floor(h);
  if (fk > static_cast<double>(n - 1)) fk = static_cast<double>(n - 1);
  k = static_cast<std::int64_t>(fk);
  g = h - fk;
}

// Estimate of the values in the bucket of `key`: its midpoint.
inline double bucket_mid(std::int64_t key) noexcept {
  const std::uint64_t lower_bits = static_cast<std::uint64_t>(key) << kKeyShift;
  const double lower = from_bits(lower_bits);
  const std::uint64_t e = lower_bits >> 52;
  const double width = from_bits((e == 0 ? 1 : e) << 52) * 0x1.0p-7;
  return lower + 0.5 * width;
}

}  // namespace

// ---- TimeSummary ----------------------------------------------------------------------------

struct TimeSummary::Impl {
  std::vector<double> times;
  int compartments = 0;
  std::int64_t rows = 0;  // times * compartments
  TimeSummaryOptions opt;

  std::int64_t subjects = 0;  // passed to add()
  std::int64_t included = 0;
  std::int64_t excluded = 0;

  std::int64_t lane_stride = 0;  // rows + 8
  std::vector<double> part;      // current block's partial sums: 8 lanes x lane_stride
  std::vector<double> total;     // sum of completed blocks per row

  Sketch sk;                                               // add()'s sketch
  std::vector<std::unique_ptr<Sketch, SketchFree>> local;  // the fused kernel's, one per thread

  bool exact = true;
  std::vector<double> kept;  // included subjects x rows, while exact
  std::int64_t kept_subjects = 0;

  ~Impl() { free_sketch(sk); }
};

TimeSummary::TimeSummary(std::vector<double> times, int compartments, TimeSummaryOptions options)
    : impl_(std::make_unique<Impl>()) {
  const char* where = "TimeSummary";
  if (times.empty()) detail::throw_invalid(where, "number of output times", "0", ">= 1");
  if (compartments < 1 || compartments > 64)
    detail::throw_invalid(where, "compartments", std::to_string(compartments), "in [1, 64]");
  for (std::size_t i = 0; i < options.percentiles.size(); ++i)
    if (!(options.percentiles[i] >= 0.0 && options.percentiles[i] <= 100.0))
      detail::throw_invalid(where, "percentiles[" + std::to_string(i) + "]",
                            format_value(options.percentiles[i]), "in [0, 100]");
  if (options.exact_values < 0)
    detail::throw_invalid(where, "exact_values", std::to_string(options.exact_values), ">= 0");
  if (options.window_binades < 1 || options.window_binades > 1024)
    detail::throw_invalid(where, "window_binades", std::to_string(options.window_binades),
                          "in [1, 1024]");
  if (options.threads < 0)
    detail::throw_invalid(where, "threads", std::to_string(options.threads), ">= 0");
  Impl& m = *impl_;
  m.times = std::move(times);
  m.compartments = compartments;
  m.rows = static_cast<std::int64_t>(m.times.size()) * compartments;
  m.opt = std::move(options);
  const std::size_t R = static_cast<std::size_t>(m.rows);
  m.lane_stride = m.rows + 8;
  m.part.assign(8 * (R + 8), 0.0);
  m.total.assign(R + 8, 0.0);
  init_sketch(m.sk, m.rows, m.opt.window_binades, true);
}

TimeSummary::~TimeSummary() = default;
TimeSummary::TimeSummary(TimeSummary&&) noexcept = default;
TimeSummary& TimeSummary::operator=(TimeSummary&&) noexcept = default;

std::int64_t TimeSummary::subjects() const noexcept { return impl_->subjects; }
std::int64_t TimeSummary::excluded() const noexcept { return impl_->excluded; }
bool TimeSummary::exact() const noexcept { return impl_->exact; }
std::size_t TimeSummary::state_bytes() const noexcept {
  const Impl& m = *impl_;
  const std::size_t per_sketch =
      static_cast<std::size_t>(m.rows) *
      (static_cast<std::size_t>(m.sk.stride) * sizeof(std::uint32_t) + 4 * sizeof(std::int64_t));
  return per_sketch * (1 + m.local.size()) +
         (m.part.size() + m.total.size() + m.kept.capacity()) * sizeof(double);
}

void TimeSummary::add(const SimulationResult& chunk, int metric_compartment, double last_dose_time,
                      double* metrics) {
  if (metric_compartment < 0 || metric_compartment >= impl_->compartments)
    detail::throw_invalid("TimeSummary::add", "metric compartment",
                          std::to_string(metric_compartment),
                          "in [0, " + std::to_string(impl_->compartments) + ")");
  add(chunk);
  subject_metrics(chunk, metric_compartment, last_dose_time, metrics, impl_->opt.threads);
}

void TimeSummary::add(const SimulationResult& chunk) {
  Impl& m = *impl_;
  const char* where = "TimeSummary::add";
  if (chunk.times() != static_cast<std::int64_t>(m.times.size()))
    detail::throw_invalid(where, "chunk output times", std::to_string(chunk.times()),
                          std::to_string(m.times.size()) + " (the summary's)");
  if (chunk.compartments() != m.compartments)
    detail::throw_invalid(where, "chunk compartments", std::to_string(chunk.compartments()),
                          std::to_string(m.compartments) + " (the summary's)");
  for (std::size_t i = 0; i < m.times.size(); ++i)
    if (chunk.output_times()[i] != m.times[i])
      detail::throw_invalid(where, "chunk output time " + std::to_string(i),
                            format_value(chunk.output_times()[i]),
                            format_value(m.times[i]) + " (the summary's)");
  const std::int64_t S = chunk.subjects();
  if (S == 0) return;
  if (m.subjects + S > static_cast<std::int64_t>(0xFFFFFFFFll))
    detail::throw_domain(where, "number of subjects", std::to_string(m.subjects + S),
                         "<= 4294967295");

  const Source src = source_of(chunk);
  // Every subject's finite values go into the sketch; those of subjects found non-finite (or
  // with a non-Ok status) are taken out again below. So the sketch's window depends on the
  // values of every subject passed, whichever path added them (see the fused kernel).
  std::vector<unsigned char> inc(static_cast<std::size_t>(S), 1);
  // Reciprocal volumes of each subject laid out along one sub-tile's rows.
  std::vector<double> inv;
  const int C = m.compartments;
  if (src.scale) {
    const std::size_t w = static_cast<std::size_t>(kSubTile * C);
    inv.resize(static_cast<std::size_t>(S) * w);
    for (std::int64_t s = 0; s < S; ++s)
      for (std::size_t j = 0; j < w; ++j)
        inv[static_cast<std::size_t>(s) * w + j] =
            inverse_volume(src, s, static_cast<int>(j % static_cast<std::size_t>(C)));
  }
  const std::vector<double> snap_part = m.part;
  const std::vector<double> snap_total = m.total;

  const std::int64_t T = static_cast<std::int64_t>(m.times.size());
  const std::int64_t units = (T + kUnit - 1) / kUnit;
  const int nt = static_cast<int>(std::min<std::int64_t>(resolve_threads(m.opt.threads), units));
  std::vector<unsigned char> bad(static_cast<std::size_t>(nt) * static_cast<std::size_t>(S), 0);
  detail::RegionError error;

  // Each thread owns a contiguous range of output times (whole 64-index units), so every row
  // sees the subjects in order and no counter or sum is shared.
#pragma omp parallel num_threads(nt)
  {
    int tid = 0, n = 1;
#if defined(_OPENMP)
    tid = omp_get_thread_num();
    n = omp_get_num_threads();
#endif
    AddJob a{};
    a.src = &src;
    a.inc = inc.data();
    a.inv = inv.data();
    a.S = S;
    a.g0 = m.subjects;
    a.ta = std::min(T, units * tid / n * kUnit);
    a.tb = std::min(T, units * (tid + 1) / n * kUnit);
    a.part = m.part.data();
    a.lane_stride = m.lane_stride;
    a.total = m.total.data();
    a.h = &m.sk;
    a.bad = bad.data() + static_cast<std::size_t>(tid) * static_cast<std::size_t>(S);
    error.guard([&] {
      if (src.f64)
        (src.scale ? add_f64_scaled : add_f64)(a, src.f64);
      else
        (src.scale ? add_f32_scaled : add_f32)(a, src.f32);
    });
  }
  error.rethrow();

  bool any_bad = false;
  for (std::int64_t s = 0; s < S; ++s) {
    if (chunk.status()[static_cast<std::size_t>(s)] != SubjectStatus::Ok)
      bad[static_cast<std::size_t>(s)] = 1;
    for (int t = 0; t < nt; ++t)
      if (bad[static_cast<std::size_t>(t) * static_cast<std::size_t>(S) +
              static_cast<std::size_t>(s)]) {
        // Rare: an included subject has a non-finite concentration (amount / volume
        // overflowed). Exclude it: take its values out of the sketch.
        inc[static_cast<std::size_t>(s)] = 0;
        any_bad = true;
        for (std::int64_t r = 0; r < m.rows; ++r) remove_one(m.sk, r, value_at(src, s, r));
        break;
      }
  }
  if (any_bad) {
    // Redo the chunk's sums without the excluded subjects, in the same order.
    m.part = snap_part;
    m.total = snap_total;
    for (std::int64_t s = 0; s < S; ++s) {
      double* part = m.part.data() + ((m.subjects + s) & 7) * m.lane_stride;
      if (inc[static_cast<std::size_t>(s)])
        for (std::int64_t r = 0; r < m.rows; ++r) part[r] += value_at(src, s, r);
      if ((m.subjects + s + 1) % kBlock == 0)
        close_block(m.part.data(), m.lane_stride, m.total.data(), 0, m.rows);
    }
  }

  std::int64_t n_inc = 0;
  for (unsigned char v : inc) n_inc += v;
  m.subjects += S;
  m.included += n_inc;
  m.excluded += S - n_inc;

  if (m.exact) {
    if (static_cast<double>(m.subjects) * static_cast<double>(m.rows) <=
        static_cast<double>(m.opt.exact_values)) {
      const std::size_t at = m.kept.size();
      m.kept.resize(at + static_cast<std::size_t>(n_inc * m.rows));
      double* out = m.kept.data() + at;
      for (std::int64_t s = 0; s < S; ++s) {
        if (!inc[static_cast<std::size_t>(s)]) continue;
        for (std::int64_t r = 0; r < m.rows; ++r) out[r] = value_at(src, s, r);
        out += m.rows;
      }
      m.kept_subjects += n_inc;
    } else {
      m.exact = false;
      std::vector<double>().swap(m.kept);
      m.kept_subjects = 0;
    }
  }
}

TimeSummaryTable TimeSummary::finish() const {
  const Impl& m = *impl_;
  TimeSummaryTable t;
  t.times = m.times;
  t.percentiles = m.opt.percentiles;
  t.compartments = m.compartments;
  t.count = m.included;
  t.excluded = m.excluded;
  t.exact = m.exact;
  const std::size_t R = static_cast<std::size_t>(m.rows);
  const std::size_t P = m.opt.percentiles.size();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  t.mean.assign(R, nan);
  t.quantiles.assign(R * P, nan);
  const std::int64_t n = m.included;
  if (n == 0) return t;
  for (std::size_t r = 0; r < R; ++r)
    t.mean[r] = (m.total[r] + lane_tree(m.part.data() + r, m.lane_stride)) / static_cast<double>(n);
  if (P == 0) return t;

  // The order statistics needed: k and k + 1 of each percentile.
  std::vector<std::int64_t> ks(P);
  std::vector<double> gs(P);
  for (std::size_t p = 0; p < P; ++p) rank_of(n, m.opt.percentiles[p], ks[p], gs[p]);
  std::vector<const Sketch*> sketches{&m.sk};
  for (const auto& h : m.local) sketches.push_back(h.get());
  const int nt = resolve_threads(m.opt.threads);
  static_cast<void>(nt);  // read by the OpenMP pragma only
  detail::RegionError error;
#pragma omp parallel num_threads(nt)
  {
    std::vector<double> v;
    std::vector<std::pair<std::int64_t, std::size_t>> want;  // (rank, slot)
    std::vector<double> got;
    error.guard([&] {
      if (m.exact) v.resize(static_cast<std::size_t>(n));
      want.reserve(2 * P);
      got.resize(2 * P);
    });
#pragma omp for schedule(dynamic, 16)
    for (std::int64_t r = 0; r < static_cast<std::int64_t>(R); ++r) {
      if (error.failed()) continue;
      double* q = t.quantiles.data() + static_cast<std::size_t>(r) * P;
      if (m.exact) {
        for (std::int64_t s = 0; s < n; ++s)
          v[static_cast<std::size_t>(s)] = m.kept[static_cast<std::size_t>(s * m.rows + r)];
        std::sort(v.begin(), v.end());
        for (std::size_t p = 0; p < P; ++p) {
          const std::int64_t k = ks[p];
          const double a = v[static_cast<std::size_t>(k)];
          q[p] = k + 1 < n ? lerp7(a, v[static_cast<std::size_t>(k + 1)], gs[p]) : a;
        }
        continue;
      }
      // Sketch: walk the zero bucket, the values below the window and the window in order.
      want.clear();
      for (std::size_t p = 0; p < P; ++p) {
        want.emplace_back(ks[p], 2 * p);
        want.emplace_back(std::min(ks[p] + 1, n - 1), 2 * p + 1);
      }
      std::sort(want.begin(), want.end());
      // The sketches (add()'s and the fused kernel's, one per thread) are merged on the fly:
      // the merged window ends at the largest key of all, and each sketch's counters below
      // the merged window count as values below it. Counts are integers, so the merged
      // state is the one a single sketch fed every value would have.
      const std::size_t ri = static_cast<std::size_t>(r);
      std::int64_t mx = -1;
      std::uint64_t zero = 0, under = 0;
      for (const Sketch* h : sketches) {
        mx = std::max(mx, h->maxkey[ri]);
        zero += h->zero[ri];
        under += h->under[ri];
      }
      const std::int64_t lo = mx >= 0 ? mx - m.sk.width + 1 : kEmpty;
      for (const Sketch* h : sketches) {
        if (h->maxkey[ri] < 0) continue;
        const std::uint32_t* cnt = h->counts + r * h->stride;
        const std::int64_t end = std::min(lo, h->maxkey[ri] + 1);
        for (std::int64_t key = std::max<std::int64_t>(h->lo[ri], 0); key < end; ++key)
          under += cnt[key & h->mask];
      }
      // Count of `key` (in the merged window) over all sketches.
      auto count_of = [&](std::int64_t key) {
        std::uint64_t c = 0;
        for (const Sketch* h : sketches)
          if (key >= h->lo[ri] && key <= h->maxkey[ri])
            c += h->counts[r * h->stride + (key & h->mask)];
        return c;
      };
      std::size_t wi = 0;
      std::int64_t below = static_cast<std::int64_t>(zero);  // values ranked below
      while (wi < want.size() && want[wi].first < below) got[want[wi++].second] = 0.0;
      // Values below the window lie in (0, edge): estimated by edge / 2.
      const double edge =
          lo > 0 ? 0.5 * from_bits(static_cast<std::uint64_t>(lo) << kKeyShift) : 0.0;
      below += static_cast<std::int64_t>(under);
      while (wi < want.size() && want[wi].first < below) got[want[wi++].second] = edge;
      for (std::int64_t key = std::max<std::int64_t>(lo, 0); key <= mx && wi < want.size(); ++key) {
        const std::uint64_t c = count_of(key);
        if (!c) continue;
        below += c;
        const double mid = bucket_mid(key);
        while (wi < want.size() && want[wi].first < below) got[want[wi++].second] = mid;
      }
      for (std::size_t p = 0; p < P; ++p)
        q[p] = ks[p] + 1 < n ? lerp7(got[2 * p], got[2 * p + 1], gs[p]) : got[2 * p];
    }
  }
  error.rethrow();
  return t;
}

// ---- Exposure metrics (standalone) ----------------------------------------------------------

std::vector<std::string> metric_names() {
  return std::vector<std::string>(kMetricNames.begin(), kMetricNames.end());
}

double last_dose_time(const std::vector<DoseEvent>& doses) noexcept {
  double last = std::numeric_limits<double>::quiet_NaN();
  for (const DoseEvent& d : doses) {
    const double t = d.time + static_cast<double>(d.repeat) * d.every;
    if (!(last >= t)) last = t;
  }
  return last;
}

void subject_metrics(const SimulationResult& chunk, int compartment, double last_dose, double* out,
                     int threads) {
  const char* where = "subject_metrics";
  if (compartment < 0 || compartment >= chunk.compartments())
    detail::throw_invalid(where, "compartment", std::to_string(compartment),
                          "in [0, " + std::to_string(chunk.compartments()) + ")");
  if (threads < 0) detail::throw_invalid(where, "threads", std::to_string(threads), ">= 0");
  const std::int64_t S = chunk.subjects();
  if (S == 0) return;
  if (!out) detail::throw_invalid(where, "out", "null", "not null");
  if (chunk.times() == 0) {
    std::fill(out, out + S * kMetricCount, std::numeric_limits<double>::quiet_NaN());
    return;
  }
  const Source src = source_of(chunk);
  const std::int64_t i0 = first_index_at_or_after(chunk.output_times(), last_dose);
  constexpr std::int64_t kGroup = 16;
  const std::int64_t groups = (S + kGroup - 1) / kGroup;
  const int nt = resolve_threads(threads);
  static_cast<void>(nt);  // read by the OpenMP pragma only
  detail::RegionError error;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (std::int64_t g = 0; g < groups; ++g) {
    const std::int64_t a = g * kGroup, b = std::min(S, a + kGroup);
    error.guard([&] {
      if (src.f64)
        metrics_f64(src, a, b, compartment, i0, chunk.output_times(), out);
      else
        metrics_f32(src, a, b, compartment, i0, chunk.output_times(), out);
    });
  }
  error.rethrow();
}

// ---- Fused simulate-and-summarise (Engine::summarize_into) ---------------------------------

namespace {

constexpr int kFuseRows = 32;      // output rows per window: a 1024-subject tile stays in L2
constexpr int kAdvanceGroups = 4;  // lane groups whose recurrences are interleaved
constexpr int kHistRows = 8;       // sketch rows whose increments are interleaved (fuse_hist)
constexpr std::int64_t kSlotStride = kBlock + 16;  // a row of fuse_rows' counter indices
// Tile elements per lane group: kFuseRows x N rows of 8 lanes, plus 8 so that the groups do not
// all fall in the same cache sets.
constexpr std::int64_t group_stride(int n) noexcept { return std::int64_t{kFuseRows} * n * 8 + 8; }

// The recurrence state of 8 subjects (one per lane), as the batched backend keeps it.
template <int N, class Real>
struct alignas(64) FuseLanes {
  Real k[N * N][8];
  Real x[N][8];
  Real c[N][8];  // inputs of every step of the current breakpoint
  Real f[N][8];  // inputs of its first step
};

// Where the shared time loop of a block stands.
struct FuseCursor {
  std::int64_t bp = 0;    // current breakpoint
  std::int64_t last = 0;  // its last step
  std::int64_t step = 1;  // next step to take
  std::size_t next = 0;   // next output index
};

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
  const detail::PreparedBatch* b = nullptr;
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

// Per-thread scratch of the fused kernel.
template <int N, class Real>
struct FuseScratch {
  std::vector<detail::Transition<N>> tr;
  AlignedVector<FuseLanes<N, Real>> lanes;
  AlignedVector<MetricLanes> ml;
  AlignedVector<Real> tile;               // per lane group: kFuseRows x N rows of 8 lanes
  AlignedVector<double> inv;              // per lane group: N x 8 reciprocal volumes
  AlignedVector<double> part;             // rows x 8 lane sums of the block
  std::vector<unsigned char> amount_bad;  // per subject of the block: an amount is not finite
  std::vector<unsigned char> bad;         // per subject of the block: excluded from the summary
  std::vector<std::uint32_t> slots;       // kHistRows rows of the block: each value's counter
  FuseScratch()
      : tr(kBlock),
        lanes(kBlock / 8),
        ml(kBlock / 8),
        tile(static_cast<std::size_t>(kBlock / 8 * group_stride(N))),
        inv(static_cast<std::size_t>(kBlock) * N),
        amount_bad(kBlock),
        bad(kBlock),
        slots(static_cast<std::size_t>(kHistRows) * kSlotStride) {}
};

template <int N, class Real>
PKSCAN_INLINE void fuse_inputs(FuseLanes<N, Real>& L, const detail::Schedule& s,
                               const detail::Transition<N>* tr, int active, std::int64_t bp) {
  for (int l = 0; l < 8; ++l) {
    Real c[N], f[N];
    detail::breakpoint_inputs<N, Real>(s, tr[std::min(l, active - 1)], bp, c, f);
    for (int r = 0; r < N; ++r) L.c[r][l] = c[r], L.f[r][l] = f[r];
  }
}

// Advances P lane groups (g0 .. g0 + P - 1) by up to kFuseRows output rows, recording them in
// their parts of the tile (row j, compartment r of lane l at tile_g[(j N + r) 8 + l]). The
// arithmetic of each step is the batched backend's (and the reference scan's): acc = k_r0 x_0,
// acc += k_rj x_j, y = acc + b. The groups' states are copied into locals for the window (no
// store to the tile can alias them, so they stay in registers or on the stack) and P
// independent recurrences overlap their latencies.
template <int N, class Real, int P>
PKSCAN_INLINE int fuse_advance(FuseScratch<N, Real>& w, std::int64_t g0, std::int64_t count,
                               FuseCursor& cur, const detail::Schedule& s,
                               const std::vector<std::int64_t>& outs) {
  alignas(64) Real k[P][N * N][8];
  alignas(64) Real x[P][N][8];
  alignas(64) Real c[P][N][8];
  alignas(64) Real f[P][N][8];
  Real* tile[P];
  int active[P];
  for (int p = 0; p < P; ++p) {
    const FuseLanes<N, Real>& L = w.lanes[static_cast<std::size_t>(g0 + p)];
    std::memcpy(k[p], L.k, sizeof k[p]);
    std::memcpy(x[p], L.x, sizeof x[p]);
    std::memcpy(c[p], L.c, sizeof c[p]);
    std::memcpy(f[p], L.f, sizeof f[p]);
    tile[p] = w.tile.data() + (g0 + p) * group_stride(N);
    active[p] = static_cast<int>(std::min<std::int64_t>(8, count - (g0 + p) * 8));
  }
  const std::size_t n_out = outs.size();
  int rows = 0;
  auto record = [&](const Real(&v)[P][N][8]) {
    for (int p = 0; p < P; ++p)
      for (int r = 0; r < N; ++r)
        for (int l = 0; l < 8; ++l) tile[p][(rows * N + r) * 8 + l] = v[p][r][l];
    ++rows;
    ++cur.next;
  };
  if (cur.next == 0 && cur.step == 1 && outs[0] == 0) record(x);
  while (rows < kFuseRows && cur.next < n_out) {
    if (cur.step > cur.last) {
      ++cur.bp;
      cur.last = s.bp_last(cur.bp);
      for (int p = 0; p < P; ++p) {
        FuseLanes<N, Real>& L = w.lanes[static_cast<std::size_t>(g0 + p)];
        fuse_inputs<N, Real>(L, s, w.tr.data() + (g0 + p) * 8, active[p], cur.bp);
        std::memcpy(c[p], L.c, sizeof c[p]);
        std::memcpy(f[p], L.f, sizeof f[p]);
      }
    }
    const bool first = cur.step == s.bp_step[static_cast<std::size_t>(cur.bp)];
    const Real(&b)[P][N][8] = first ? f : c;
    Real y[P][N][8];
    for (int p = 0; p < P; ++p)
      for (int r = 0; r < N; ++r)
        for (int l = 0; l < 8; ++l) {
          Real acc = k[p][r * N][l] * x[p][0][l];
          for (int j = 1; j < N; ++j) acc += k[p][r * N + j][l] * x[p][j][l];
          y[p][r][l] = acc + b[p][r][l];
        }
    std::memcpy(x, y, sizeof x);
    if (cur.step == outs[cur.next]) record(y);
    ++cur.step;
  }
  for (int p = 0; p < P; ++p)
    std::memcpy(w.lanes[static_cast<std::size_t>(g0 + p)].x, x[p], sizeof x[p]);
  return rows;
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

// One block of `count` subjects (<= kBlock) whose transitions and volumes are in the scratch,
// `Fixup` as for fuse_window.
template <int N, class Real, bool Fixup>
PKSCAN_INLINE void fuse_pass(FuseScratch<N, Real>& w, const FuseJob& job, Sketch& h,
                             std::int64_t count) {
  const detail::PreparedBatch& b = *job.b;
  const detail::Schedule& s = b.schedule;
  const std::int64_t groups = (count + 7) / 8;
  for (std::int64_t g = 0; g < groups; ++g) {
    FuseLanes<N, Real>& L = w.lanes[static_cast<std::size_t>(g)];
    const int active = static_cast<int>(std::min<std::int64_t>(8, count - g * 8));
    const detail::Transition<N>* tr = w.tr.data() + g * 8;
    for (int l = 0; l < 8; ++l) {
      const detail::Transition<N>& t = tr[std::min(l, active - 1)];
      for (int i = 0; i < N * N; ++i) L.k[i][l] = static_cast<Real>(t.k.data()[i]);
      for (int r = 0; r < N; ++r)
        L.x[r][l] = static_cast<Real>(s.initial[static_cast<std::size_t>(r)]);
    }
    fuse_inputs<N, Real>(L, s, tr, active, 0);
  }
  std::fill(w.part.begin(), w.part.end(), 0.0);
  FuseCursor cur;
  cur.last = s.bp_last(0);
  const std::size_t n_out = b.out_steps.size();
  while (cur.next < n_out) {
    const std::int64_t t0 = static_cast<std::int64_t>(cur.next);
    FuseCursor after = cur;
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
    if (!Fixup)
      for (std::int64_t g = 0; g < groups; ++g) fuse_metrics<N, Real>(w, job, g, t0, rows);
    fuse_rows<N, Real, Fixup>(w, h, t0, rows, count);
    cur = after;
  }
}

// One block: transitions, the first pass, the fix-up pass when a subject was excluded, then
// the block's sums, metrics and statuses.
template <int N, class Real>
PKSCAN_INLINE void fuse_block(FuseScratch<N, Real>& w, const FuseJob& job, Sketch& h,
                              std::int64_t blk, std::int64_t count) {
  const detail::PreparedBatch& b = *job.b;
  const Problem& p = *b.problem;
  const std::int64_t first = blk * kBlock;
  for (std::int64_t i = 0; i < count; ++i) {
    detail::Mat<N> a;
    rate_matrix(*b.model, p.parameters.row(first + i), a.data());
    detail::build_transition<N>(a, p.grid.dt, p.discretization, b.schedule.partial_lengths,
                                w.tr[static_cast<std::size_t>(i)]);
  }
  const std::int64_t groups = (count + 7) / 8;
  for (std::int64_t g = 0; g < groups; ++g)
    for (int c = 0; c < N; ++c)
      for (int l = 0; l < 8; ++l) {
        const std::int64_t s = first + std::min<std::int64_t>(g * 8 + l, count - 1);
        w.inv[static_cast<std::size_t>((g * N + c) * 8 + l)] =
            1.0 / p.parameters.get(s, b.model->volume_parameter[static_cast<std::size_t>(c)]);
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
  if (any_bad) fuse_pass<N, Real, true>(w, job, h, count);
  if (count == kBlock) {
    double* out = job.block_sums + blk * job.rows;
    for (std::int64_t r = 0; r < job.rows; ++r) out[r] = lane_tree(w.part.data() + r * 8, 1);
  } else {
    std::copy(w.part.begin(), w.part.begin() + job.rows * 8, job.tail_part);
  }
}

template <int N, class Real>
PKSCAN_INLINE void fuse_thread(const FuseJob& job, Sketch& h, std::int64_t blk, std::int64_t count,
                               std::unique_ptr<FuseScratch<N, Real>>& w) {
  if (!w) w = std::make_unique<FuseScratch<N, Real>>();
  if (w->part.size() != static_cast<std::size_t>(job.rows) * 8)
    w->part.assign(static_cast<std::size_t>(job.rows) * 8, 0.0);
  fuse_block<N, Real>(*w, job, h, blk, count);
}

#define PKSCAN_FUSE(N, Real, name)                                                             \
  PKSCAN_CLONES void name(const FuseJob& job, Sketch& h, std::int64_t blk, std::int64_t count, \
                          std::unique_ptr<FuseScratch<N, Real>>& w) {                          \
    fuse_thread<N, Real>(job, h, blk, count, w);                                               \
  }                                                                                            \
  inline void fuse_call(const FuseJob& job, Sketch& h, std::int64_t blk, std::int64_t count,   \
                        std::unique_ptr<FuseScratch<N, Real>>& w) {                            \
    name(job, h, blk, count, w);                                                               \
  }
PKSCAN_FUSE(2, double, fuse2_f64)
PKSCAN_FUSE(3, double, fuse3_f64)
PKSCAN_FUSE(4, double, fuse4_f64)
PKSCAN_FUSE(2, float, fuse2_f32)
PKSCAN_FUSE(3, float, fuse3_f32)
PKSCAN_FUSE(4, float, fuse4_f32)
#undef PKSCAN_FUSE

template <int N, class Real>
void fuse_all(const FuseJob& job, std::vector<Sketch*>& sketches, std::int64_t subjects,
              int threads) {
  const std::int64_t blocks = (subjects + kBlock - 1) / kBlock;
  detail::RegionError error;
#pragma omp parallel num_threads(threads)
  {
    int tid = 0;
#if defined(_OPENMP)
    tid = omp_get_thread_num();
#endif
    // Each thread's scratch (about 1.4 MiB for 3 compartments and 1000 times) is kept for the
    // thread's next call: a population run calls once per chunk, and fresh memory would be
    // faulted in and zeroed every time.
    static thread_local std::unique_ptr<FuseScratch<N, Real>> w;
#pragma omp for schedule(dynamic, 1)
    for (std::int64_t blk = 0; blk < blocks; ++blk) {
      if (error.failed()) continue;
      error.guard([&] {
        fuse_call(job, *sketches[static_cast<std::size_t>(tid)], blk,
                  std::min<std::int64_t>(kBlock, subjects - blk * kBlock), w);
      });
    }
  }
  error.rethrow();
}

}  // namespace

namespace detail {

bool FusedSummary::accepts(const TimeSummary& summary, std::int64_t subjects) noexcept {
  const TimeSummary::Impl& m = *summary.impl_;
  if (m.subjects % kBlock != 0 || subjects <= 0) return false;
  return !m.exact || static_cast<double>(m.subjects + subjects) * static_cast<double>(m.rows) >
                         static_cast<double>(m.opt.exact_values);
}

void FusedSummary::add_batch(TimeSummary& summary, const PreparedBatch& b, Precision precision,
                             int metric_compartment, double last_dose, double* metrics,
                             SubjectStatus* status) {
  TimeSummary::Impl& m = *summary.impl_;
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

  const int nt = std::max(1, b.threads);
  while (m.local.size() < static_cast<std::size_t>(nt)) {
    std::unique_ptr<Sketch, SketchFree> h(new Sketch);
    init_sketch(*h, m.rows, m.opt.window_binades, false);
    m.local.push_back(std::move(h));
  }
  std::vector<Sketch*> sketches;
  for (auto& h : m.local) sketches.push_back(h.get());

  const std::int64_t full = S / kBlock;
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
      fuse_all<N, double>(job, sketches, S, nt);
    else
      fuse_all<N, float>(job, sketches, S, nt);
  });

  // Block sums in block order; an incomplete last block is carried as add()'s lanes.
  for (std::int64_t blk = 0; blk < full; ++blk)
    for (std::int64_t r = 0; r < m.rows; ++r)
      m.total[static_cast<std::size_t>(r)] +=
          block_sums[static_cast<std::size_t>(blk * m.rows + r)];
  if (S % kBlock != 0)
    for (std::int64_t r = 0; r < m.rows; ++r)
      for (int l = 0; l < 8; ++l)
        m.part[static_cast<std::size_t>(l * m.lane_stride + r)] =
            tail[static_cast<std::size_t>(r * 8 + l)];
  std::int64_t n_excluded = 0;
  for (unsigned char e : excluded) n_excluded += e;
  m.subjects += S;
  m.included += S - n_excluded;
  m.excluded += n_excluded;
  m.exact = false;
  std::vector<double>().swap(m.kept);
  m.kept_subjects = 0;
}

}  // namespace detail

}  // namespace pkscan
