// ChunkWriter: HDF5's shuffle and deflate filters run on all threads, chunks written directly
// (h5_chunk_writer.hpp).
#include "h5_chunk_writer.hpp"

#include <libdeflate.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <pkscan/error.hpp>
#include <utility>

// Chunks are written as the bytes in memory; HDF5 files store the trajectories little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the HDF5 sink writes little-endian chunks");

namespace pkscan::config::detail {

namespace {

// Jobs compressed per thread between two rounds of writes: enough to keep every thread busy,
// few enough that the compressed chunks held at once stay small (a few MiB per thread).
constexpr std::size_t kJobsPerThread = 4;

struct CompressorDeleter {
  void operator()(libdeflate_compressor* c) const noexcept { libdeflate_free_compressor(c); }
};
using Compressor = std::unique_ptr<libdeflate_compressor, CompressorDeleter>;

// HDF5's shuffle filter (H5Zshuffle.c): byte j of element i goes to position j * n + i.
void shuffle(const unsigned char* in, std::size_t bytes, std::size_t element_size,
             unsigned char* out) {
  const std::size_t n = bytes / element_size;
  for (std::size_t j = 0; j < element_size; ++j) {
    unsigned char* o = out + j * n;
    const unsigned char* p = in + j;
    for (std::size_t i = 0; i < n; ++i) o[i] = p[i * element_size];
  }
  // A chunk whose size is not a multiple of the element size keeps its tail as it is.
  std::memcpy(out + n * element_size, in + n * element_size, bytes - n * element_size);
}

// Order-0 entropy of a byte sequence, in bits per byte.
double entropy_bits(const unsigned char* p, std::size_t n) {
  std::uint32_t count[256] = {};
  for (std::size_t i = 0; i < n; ++i) ++count[p[i]];
  double h = 0.0;
  for (const std::uint32_t c : count)
    if (c != 0) {
      const double q = static_cast<double>(c) / static_cast<double>(n);
      h -= q * std::log2(q);
    }
  return h;
}

// A zlib stream (RFC 1950) of `bytes` shuffled bytes, the format of HDF5's deflate filter. The
// shuffled chunk is a row of byte planes, least significant byte first; the low planes of a
// trajectory's mantissas are nearly random, and deflate spends most of its time on them to save
// little. Leading planes above kStoreBits bits of entropy a byte (deflate would save under 2%
// there) go into stored deflate blocks (copied), the rest is compressed by libdeflate: one
// valid stream, which every zlib decodes.
// Returns the stream's size, 0 when `out` (libdeflate_zlib_compress_bound(bytes) + 64 + 5 bytes
// per 65535 stored) is too small.
constexpr double kStoreBits = 7.9;
std::size_t zlib_stream(libdeflate_compressor* c, const unsigned char* in, std::size_t bytes,
                        std::size_t element_size, unsigned char* out, std::size_t cap) {
  const std::size_t plane = bytes / element_size;
  std::size_t stored = 0;  // leading planes stored as they are
  while (stored < element_size && plane >= 4096 &&
         entropy_bits(in + stored * plane, plane) > kStoreBits)
    ++stored;
  if (stored == 0) return libdeflate_zlib_compress(c, in, bytes, out, cap);
  const std::size_t head = stored == element_size ? bytes : stored * plane;
  std::size_t pos = 0;
  out[pos++] = 0x78;  // deflate, 32 KiB window
  out[pos++] = 0x01;  // no dictionary; (0x78 * 256 + 0x01) % 31 == 0
  for (std::size_t at = 0; at < head;) {
    const std::size_t len = std::min<std::size_t>(65535, head - at);
    if (pos + 5 + len + 4 > cap) return 0;
    const bool final = at + len == bytes;
    out[pos++] = final ? 1 : 0;  // BFINAL, BTYPE 00 (stored), padding to the byte
    out[pos++] = static_cast<unsigned char>(len & 0xff);
    out[pos++] = static_cast<unsigned char>(len >> 8);
    out[pos++] = static_cast<unsigned char>(~len & 0xff);
    out[pos++] = static_cast<unsigned char>((~len >> 8) & 0xff);
    std::memcpy(out + pos, in + at, len);
    pos += len;
    at += len;
  }
  if (head < bytes) {  // the rest, compressed: its last block is the stream's final one
    const std::size_t n = libdeflate_deflate_compress(c, in + head, bytes - head, out + pos,
                                                      cap - std::min(cap, pos + 4));
    if (n == 0) return 0;
    pos += n;
  }
  if (pos + 4 > cap) return 0;
  const std::uint32_t adler = libdeflate_adler32(1, in, bytes);  // big-endian
  for (int shift = 24; shift >= 0; shift -= 8)
    out[pos++] = static_cast<unsigned char>((adler >> shift) & 0xff);
  return pos;
}

}  // namespace

ChunkWriter::ChunkWriter(hid_t dset, std::vector<hsize_t> chunk, std::size_t element_size,
                         std::int64_t row_elements, int level, int threads, std::string path,
                         std::string what)
    : dset_(dset),
      chunk_(std::move(chunk)),
      element_size_(element_size),
      row_elements_(row_elements),
      chunk_rows_(static_cast<std::int64_t>(chunk_.at(0))),
      chunk_elements_(row_elements),
      level_(level),
      threads_(std::max(1, threads)),
      path_(std::move(path)),
      what_(std::move(what)) {
  // One row and a block of the second axis: the chunk holds that block's elements of the row.
  if (chunk_rows_ == 1 && chunk_.size() >= 2) {
    std::int64_t e = 1;
    for (std::size_t i = 1; i < chunk_.size(); ++i) e *= static_cast<std::int64_t>(chunk_[i]);
    chunk_elements_ = std::min(e, row_elements_);
  }
}

void ChunkWriter::write(std::int64_t first, std::int64_t rows, std::int64_t total,
                        const FillRows& fill) {
  const std::int64_t end = first + rows;
  const std::size_t row_bytes = static_cast<std::size_t>(row_elements_) * element_size_;
  std::vector<Job> jobs;
  std::int64_t next = first;
  if (chunk_elements_ < row_elements_) {  // rows split into blocks: no chunk spans two calls
    for (std::int64_t r = first; r < end; ++r)
      for (std::int64_t e = 0; e < row_elements_; e += chunk_elements_)
        jobs.push_back({r, 1, e, std::min(chunk_elements_, row_elements_ - e), false});
    run(jobs, fill);
    return;
  }
  if (pending_rows_ > 0) {  // complete the chunk begun by earlier calls
    const std::int64_t take = std::min(end, pending_row_ + chunk_rows_) - next;
    fill(next, take, 0, row_elements_,
         pending_.data() + static_cast<std::size_t>(pending_rows_) * row_bytes);
    pending_rows_ += take;
    next += take;
    if (pending_rows_ == chunk_rows_ || next == total)
      jobs.push_back({pending_row_, pending_rows_, 0, row_elements_, true});
  }
  for (; next + chunk_rows_ <= end; next += chunk_rows_)
    jobs.push_back({next, chunk_rows_, 0, row_elements_, false});
  const bool last = next < end && end == total;  // the dataset's edge chunk, complete now
  if (last) jobs.push_back({next, end - next, 0, row_elements_, false});
  run(jobs, fill);
  if (!jobs.empty() && jobs.front().pending) pending_rows_ = 0;
  if (next < end && !last) {  // the rest waits for the next call (or finish())
    pending_.assign(static_cast<std::size_t>(chunk_rows_) * row_bytes, 0);
    pending_row_ = next;
    pending_rows_ = end - next;
    fill(next, pending_rows_, 0, row_elements_, pending_.data());
  }
}

void ChunkWriter::finish() {
  if (pending_rows_ == 0) return;
  run({{pending_row_, pending_rows_, 0, row_elements_, true}}, FillRows());
  pending_rows_ = 0;
}

void ChunkWriter::run(const std::vector<Job>& jobs, const FillRows& fill) {
  if (jobs.empty()) return;
  const std::size_t chunk_bytes =
      static_cast<std::size_t>(chunk_rows_ * chunk_elements_) * element_size_;
  const std::size_t batch = kJobsPerThread * static_cast<std::size_t>(threads_);
  const int threads = static_cast<int>(std::min<std::size_t>(threads_, jobs.size()));
  std::vector<std::vector<unsigned char>> out(std::min(batch, jobs.size()));
  std::vector<std::size_t> sizes(out.size());
  const std::size_t inner =  // elements per step of the second axis
      chunk_.size() >= 2 && chunk_elements_ < row_elements_
          ? static_cast<std::size_t>(chunk_elements_) / static_cast<std::size_t>(chunk_[1])
          : 1;
  for (std::size_t b0 = 0; b0 < jobs.size(); b0 += batch) {
    const std::size_t nb = std::min(batch, jobs.size() - b0);
    bool failed = false;
#pragma omp parallel num_threads(threads)
    {
      // Per thread: the chunk's bytes, its shuffle and a compressor (libdeflate's state is
      // several hundred KiB; one per thread per round).
      std::vector<unsigned char> raw(chunk_bytes), shuffled(chunk_bytes);
      const Compressor compressor(libdeflate_alloc_compressor(level_));
#pragma omp for schedule(dynamic, 1)
      for (std::size_t k = 0; k < nb; ++k) {
        const Job& j = jobs[b0 + k];
        const std::size_t data_bytes = static_cast<std::size_t>(j.rows * j.count) * element_size_;
        const unsigned char* src = raw.data();
        if (j.pending) {
          src = pending_.data();
        } else {
          fill(j.row, j.rows, j.element, j.count, raw.data());
        }
        if (data_bytes < chunk_bytes) {  // an edge chunk: zeros beyond the extent
          if (src != raw.data()) std::memcpy(raw.data(), src, data_bytes);
          std::memset(raw.data() + data_bytes, 0, chunk_bytes - data_bytes);
          src = raw.data();
        }
        shuffle(src, chunk_bytes, element_size_, shuffled.data());
        std::vector<unsigned char>& o = out[k];
        std::size_t n = 0;
        if (compressor) {
          o.resize(libdeflate_zlib_compress_bound(compressor.get(), chunk_bytes) + 64 +
                   5 * (chunk_bytes / 65535 + 1));
          n = zlib_stream(compressor.get(), shuffled.data(), chunk_bytes, element_size_, o.data(),
                          o.size());
        }
        sizes[k] = n;
        if (n == 0) {
#pragma omp atomic write
          failed = true;
        }
      }
    }
    if (failed)
      throw Error("cannot write HDF5 file " + path_ + ": " + what_ + ": compression failed");
    // In file order, on this thread (HDF5 calls are not made from several threads).
    for (std::size_t k = 0; k < nb; ++k) {
      const Job& j = jobs[b0 + k];
      std::vector<hsize_t> offset(chunk_.size(), 0);
      offset[0] = static_cast<hsize_t>(j.row);
      if (chunk_.size() >= 2) offset[1] = static_cast<hsize_t>(j.element) / inner;
      if (H5Dwrite_chunk(dset_, H5P_DEFAULT, 0, offset.data(), sizes[k], out[k].data()) < 0)
        h5_fail(path_, what_ + ": direct chunk write");
    }
  }
}

}  // namespace pkscan::config::detail
