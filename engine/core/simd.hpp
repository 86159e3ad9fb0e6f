#pragma once
// The private SIMD layer of the hot loops (the batched backend, the lane kernel, the summaries):
// the per-ISA clone and forced-inline attributes, and eight-lane vector types with their loads,
// stores and bit casts (GCC/Clang vector extensions, lowered to what each clone's ISA offers).
//
// A hot function is compiled for AVX-512, AVX2 and baseline x86-64 (PKSCAN_CLONES); the loader
// picks the best clone for the machine at run time (portable binaries, no -march=native), the
// same one for every call, so results are deterministic on one machine. Its body is forced
// inline (PKSCAN_INLINE) into each clone.
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"  // vector types stay inside always-inline code
#elif defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PKSCAN_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PKSCAN_CLONES
#endif
#if defined(__GNUC__)
#define PKSCAN_INLINE __attribute__((always_inline)) inline
#define PKSCAN_LAMBDA_INLINE __attribute__((always_inline))  // after a lambda's parameter list
#else
#define PKSCAN_INLINE inline
#define PKSCAN_LAMBDA_INLINE
#endif

namespace pkscan::detail {

// Eight-lane vectors.
typedef double v8d __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef std::int64_t v8i __attribute__((vector_size(64)));
typedef std::uint64_t v8u __attribute__((vector_size(64)));
// Sixteen-lane vectors (one 64-byte line of floats).
typedef float v16f __attribute__((vector_size(64)));
typedef std::int32_t v16i __attribute__((vector_size(64)));

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
// clang (the fuzz build, scripts/fuzz.sh) has no __builtin_shuffle; every shuffle of the SIMD
// code has a constant mask, which is __builtin_shufflevector's index list.
PKSCAN_INLINE v8d splat(double x) noexcept {
  return __builtin_shufflevector(v8d{x}, v8d{x}, 0, 0, 0, 0, 0, 0, 0, 0);
}
#else
PKSCAN_INLINE v8d splat(double x) noexcept { return __builtin_shuffle(v8d{x}, v8i{}); }
#endif

// The 64-byte vector of a scalar type: W lanes, one cache line (8 doubles, 16 floats), and the
// integer vector of its shuffle masks.
template <class Real>
struct LineVec;
template <>
struct LineVec<double> {
  using type = v8d;
  using mask = v8i;
  static constexpr int W = 8;
};
template <>
struct LineVec<float> {
  using type = v16f;
  using mask = v16i;
  static constexpr int W = 16;
};

// Lane J of one of the two shuffles of a transpose stage's pair of rows (i and i + S, bit S of
// i clear): in the first, lanes with bit S clear keep row i's own element and the others take
// row i + S's element of lane J - S; the second is the mirror image. After the stages S = 1, 2,
// .., W / 2, element (i, j) has moved to (j, i).
template <int W, int S, bool second, int J>
struct TransposeLane {
  static constexpr int value = second ? ((J & S) ? W + J : J + S) : ((J & S) ? W + (J - S) : J);
};

template <class V, class M, int W, int S, bool second, std::size_t... J>
PKSCAN_INLINE V transpose_shuffle(V a, V b, std::index_sequence<J...>) noexcept {
#if defined(__clang__)
  return __builtin_shufflevector(a, b, TransposeLane<W, S, second, static_cast<int>(J)>::value...);
#else
  return __builtin_shuffle(a, b, M{TransposeLane<W, S, second, static_cast<int>(J)>::value...});
#endif
}

// Transposes the W x W block whose row i is v[i] (lane j: element (i, j)) in place: log2(W)
// stages of W two-source shuffles with constant masks (W = 8: 24 shuffles for 64 doubles).
template <class Real, int S = 1>
PKSCAN_INLINE void transpose_block(typename LineVec<Real>::type (&v)[LineVec<Real>::W]) noexcept {
  using V = typename LineVec<Real>::type;
  using M = typename LineVec<Real>::mask;
  constexpr int W = LineVec<Real>::W;
  if constexpr (S < W) {
    for (int i = 0; i < W; ++i) {
      if (i & S) continue;
      const V a = v[i], b = v[i + S];
      v[i] = transpose_shuffle<V, M, W, S, false>(a, b, std::make_index_sequence<W>{});
      v[i + S] = transpose_shuffle<V, M, W, S, true>(a, b, std::make_index_sequence<W>{});
    }
    transpose_block<Real, S * 2>(v);
  }
}

}  // namespace pkscan::detail
