// The histogram sketch's slow paths and memory (summary/sketch.hpp).
#include "summary/sketch.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace pkscan::detail {

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

MergedRow merge_row(const std::vector<const Sketch*>& sketches, std::int64_t row) noexcept {
  const auto ri = static_cast<std::size_t>(row);
  MergedRow m;
  for (const Sketch* h : sketches) {
    m.mx = std::max(m.mx, h->maxkey[ri]);
    m.zero += h->zero[ri];
    m.under += h->under[ri];
  }
  m.lo = m.mx >= 0 ? m.mx - sketches.front()->width + 1 : kEmpty;
  for (const Sketch* h : sketches) {
    if (h->maxkey[ri] < 0) continue;
    const std::uint32_t* cnt = h->counts + row * h->stride;
    const std::int64_t end = std::min(m.lo, h->maxkey[ri] + 1);
    for (std::int64_t key = std::max<std::int64_t>(h->lo[ri], 0); key < end; ++key)
      m.under += cnt[key & h->mask];
  }
  return m;
}

std::uint64_t merged_count(const std::vector<const Sketch*>& sketches, std::int64_t row,
                           std::int64_t key) noexcept {
  const auto ri = static_cast<std::size_t>(row);
  std::uint64_t c = 0;
  for (const Sketch* h : sketches)
    if (key >= h->lo[ri] && key <= h->maxkey[ri]) c += h->counts[row * h->stride + (key & h->mask)];
  return c;
}

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

}  // namespace pkscan::detail
