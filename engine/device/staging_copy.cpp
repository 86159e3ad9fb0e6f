// Copies out of staging memory (see buffer.hpp).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <pkscan/threads.hpp>

#include "device/buffer.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace pkscan::detail {

namespace {

// Copies with non-temporal stores where the CPU has AVX: the result's lines are written without
// being read first (memcpy reads them at these sizes: a third more host memory traffic, while
// the link is writing the next piece into staging) and do not evict the staging data.
#if defined(__x86_64__)
__attribute__((target("avx"))) void stream_copy_avx(char* dst, const char* src, std::size_t bytes) {
  const std::size_t head = std::min(bytes, (32 - reinterpret_cast<std::uintptr_t>(dst) % 32) % 32);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  bytes -= head;
  const std::size_t body = bytes / 128 * 128;
  for (std::size_t i = 0; i < body; i += 128)
    for (std::size_t k = 0; k < 128; k += 32)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i + k),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + k)));
  std::memcpy(dst + body, src + body, bytes - body);
  _mm_sfence();
}
#endif

void stream_copy(void* dst, const void* src, std::size_t bytes) {
#if defined(__x86_64__)
  static const bool avx = __builtin_cpu_supports("avx");
  if (avx && bytes >= 4096) {  // the host system's 4 KiB pieces take this path in CI too
    stream_copy_avx(static_cast<char*>(dst), static_cast<const char*>(src), bytes);
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace

// Copies `bytes` from staging into the result on up to `threads` threads (the result's pages
// are often touched for the first time here, so one thread would not keep up with the link).
void parallel_copy(void* dst, const void* src, std::size_t bytes, int threads) {
  constexpr std::size_t kGrain = std::size_t{4} << 20;
  const std::int64_t parts = std::max<std::int64_t>(
      1, std::min<std::int64_t>(threads, static_cast<std::int64_t>((bytes + kGrain - 1) / kGrain)));
  const std::size_t each =
      align_up((bytes + static_cast<std::size_t>(parts) - 1) / static_cast<std::size_t>(parts), 64);
  pkscan::parallel_for(parts, static_cast<int>(parts), [&](std::int64_t p, int) {
    const std::size_t off = static_cast<std::size_t>(p) * each;
    if (off < bytes)
      stream_copy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off,
                  std::min(each, bytes - off));
  });
}

}  // namespace pkscan::detail
