// ChunkWriter: HDF5's shuffle and deflate filters run on all threads, chunks written directly
// (h5_chunk_writer.hpp).
#include "h5_chunk_writer.hpp"

#include <fcntl.h>
#include <libdeflate.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <pkscan/error.hpp>
#include <utility>

// Chunks are written as the bytes in memory; HDF5 files store the trajectories little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the HDF5 sink writes little-endian chunks");

namespace pkscan::output::detail {

namespace {

// Jobs compressed per thread between two rounds of writes: enough to keep every thread busy,
// few enough that the compressed chunks held at once stay small (a few MiB per thread).
constexpr std::size_t kJobsPerThread = 4;

struct CompressorDeleter {
  void operator()(libdeflate_compressor* c) const noexcept { libdeflate_free_compressor(c); }
};
using Compressor = std::unique_ptr<libdeflate_compressor, CompressorDeleter>;

// Transposes the K x K byte matrix held in w[0..K), K = sizeof(Word) (byte c of w[r] is element
// r's byte c), so that byte r of w[c] is element r's byte c: rounds of swapping the off-diagonal
// blocks of halves, then quarters, ..., then single bytes.
template <class Word>
inline void transpose_bytes(Word* w) {
  constexpr int K = sizeof(Word);
  for (int half = K / 2; half >= 1; half /= 2) {
    const int bits = 8 * half;
    Word mask = 0;  // the low `bits` bits of every group of 2 * half bytes
    for (int g = 0; g < K; g += 2 * half) mask |= ((Word{1} << bits) - 1) << (8 * g);
    for (int r = 0; r < K; ++r) {
      if ((r & half) != 0) continue;  // r is the first row of the pair (r, r + half)
      const Word t = ((w[r] >> bits) ^ w[r + half]) & mask;
      w[r] ^= t << bits;
      w[r + half] ^= t;
    }
  }
}

// The shuffle of the first n / K * K elements of K = sizeof(Word) bytes, K at a time through
// transpose_bytes; returns how many it did.
template <class Word>
std::size_t shuffle_words(const unsigned char* in, std::size_t n, unsigned char* out) {
  constexpr std::size_t K = sizeof(Word);
  std::size_t i = 0;
  for (; i + K <= n; i += K) {
    Word w[K];
    std::memcpy(w, in + i * K, K * K);
    transpose_bytes(w);
    for (std::size_t j = 0; j < K; ++j) std::memcpy(out + j * n + i, &w[j], K);
  }
  return i;
}

// HDF5's shuffle filter (H5Zshuffle.c): byte j of element i goes to position j * n + i. Float64
// and float32 elements go K at a time through registers (shuffle_words); the rest byte by byte.
void shuffle(const unsigned char* in, std::size_t bytes, std::size_t element_size,
             unsigned char* out) {
  const std::size_t n = bytes / element_size;
  std::size_t i = 0;
  if (element_size == 8) i = shuffle_words<std::uint64_t>(in, n, out);
  if (element_size == 4) i = shuffle_words<std::uint32_t>(in, n, out);
  for (std::size_t j = 0; j < element_size; ++j)
    for (std::size_t k = i; k < n; ++k) out[j * n + k] = in[k * element_size + j];
  // A chunk whose size is not a multiple of the element size keeps its tail as it is.
  std::memcpy(out + n * element_size, in + n * element_size, bytes - n * element_size);
}

// Order-0 entropy, in bits per byte, of a sample of p[0, n): kSampleRuns runs of kSampleRun
// consecutive bytes spread evenly (all of p when shorter). Runs, not a stride: a stride would
// see one compartment of a trajectory only. The sample's estimate is low by about 0.02 bit for
// random bytes.
constexpr std::size_t kSampleRuns = 8;
constexpr std::size_t kSampleRun = 1024;
double entropy_bits(const unsigned char* p, std::size_t n) {
  std::uint32_t count[4][256] = {};  // four tables: no wait on the previous byte's count
  std::size_t m = 0;
  auto add = [&](const unsigned char* q, std::size_t len) {
    std::size_t i = 0;
    for (; i + 4 <= len; i += 4) {
      ++count[0][q[i]];
      ++count[1][q[i + 1]];
      ++count[2][q[i + 2]];
      ++count[3][q[i + 3]];
    }
    for (; i < len; ++i) ++count[0][q[i]];
    m += len;
  };
  if (n <= kSampleRuns * kSampleRun) {
    add(p, n);
  } else {
    for (std::size_t r = 0; r < kSampleRuns; ++r) add(p + r * (n / kSampleRuns), kSampleRun);
  }
  double h = 0.0;
  for (int b = 0; b < 256; ++b) {
    const std::uint32_t c = count[0][b] + count[1][b] + count[2][b] + count[3][b];
    if (c != 0) {
      const double q = static_cast<double>(c) / static_cast<double>(m);
      h -= q * std::log2(q);
    }
  }
  return h;
}

// A zlib stream (RFC 1950) of `bytes` shuffled bytes, the format of HDF5's deflate filter. The
// shuffled chunk is a row of byte planes, least significant byte first; the low planes of a
// trajectory's mantissas are nearly random, and deflate spends most of its time on them to save
// little. Leading planes above kStoreBits bits of entropy a byte (deflate would save under 3%
// there) go into stored deflate blocks (copied), the rest is compressed by libdeflate: one
// valid stream, which every zlib decodes.
// Returns the stream's size, 0 when `out` (libdeflate_zlib_compress_bound(bytes) + 64 + 5 bytes
// per 65535 stored) is too small.
constexpr double kStoreBits = 7.8;
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
                         std::int64_t row_elements, int level, int threads, int fd,
                         std::string path, std::string what)
    : dset_(dset),
      chunk_(std::move(chunk)),
      element_size_(element_size),
      row_elements_(row_elements),
      chunk_rows_(static_cast<std::int64_t>(chunk_.at(0))),
      chunk_elements_(row_elements),
      level_(level),
      threads_(std::max(1, threads)),
      fd_(fd),
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
  // Everything the threads use is allocated here, before they start (nothing in the parallel
  // region throws): per thread the chunk's bytes, its shuffle and a compressor (libdeflate's
  // state is several hundred KiB), per job of a round its compressed chunk.
  std::vector<Compressor> compressors;
  std::vector<std::vector<unsigned char>> raw, shuffled;
  for (int t = 0; t < threads; ++t) {
    compressors.emplace_back(libdeflate_alloc_compressor(level_));
    if (!compressors.back()) throw std::bad_alloc();
    raw.emplace_back(chunk_bytes);
    shuffled.emplace_back(chunk_bytes);
  }
  const std::size_t bound = libdeflate_zlib_compress_bound(compressors[0].get(), chunk_bytes) + 64 +
                            5 * (chunk_bytes / 65535 + 1);
  std::vector<std::vector<unsigned char>> out(std::min(batch, jobs.size()),
                                              std::vector<unsigned char>(bound));
  std::vector<std::size_t> sizes(out.size());
  const std::size_t inner =  // elements per step of the second axis
      chunk_.size() >= 2 && chunk_elements_ < row_elements_
          ? static_cast<std::size_t>(chunk_elements_) / static_cast<std::size_t>(chunk_[1])
          : 1;
  for (std::size_t b0 = 0; b0 < jobs.size(); b0 += batch) {
    const std::size_t nb = std::min(batch, jobs.size() - b0);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (std::size_t k = 0; k < nb; ++k) {
      const int t = omp_get_thread_num();
      unsigned char* buf = raw[static_cast<std::size_t>(t)].data();
      const Job& j = jobs[b0 + k];
      const std::size_t data_bytes = static_cast<std::size_t>(j.rows * j.count) * element_size_;
      const unsigned char* src = buf;
      if (j.pending) {
        src = pending_.data();
      } else {
        fill(j.row, j.rows, j.element, j.count, buf);
      }
      if (data_bytes < chunk_bytes) {  // an edge chunk: zeros beyond the extent
        if (src != buf) std::memcpy(buf, src, data_bytes);
        std::memset(buf + data_bytes, 0, chunk_bytes - data_bytes);
        src = buf;
      }
      unsigned char* sh = shuffled[static_cast<std::size_t>(t)].data();
      shuffle(src, chunk_bytes, element_size_, sh);
      sizes[k] = zlib_stream(compressors[static_cast<std::size_t>(t)].get(), sh, chunk_bytes,
                             element_size_, out[k].data(), bound);
    }
    // In file order, on this thread (HDF5 calls are not made from several threads).
    for (std::size_t k = 0; k < nb; ++k) {
      if (sizes[k] == 0)  // out is large enough for any chunk: not expected
        throw Error("cannot write HDF5 file " + path_ + ": " + what_ + ": compression failed");
      const Job& j = jobs[b0 + k];
      std::vector<hsize_t> offset(chunk_.size(), 0);
      offset[0] = static_cast<hsize_t>(j.row);
      if (chunk_.size() >= 2) offset[1] = static_cast<hsize_t>(j.element) / inner;
      if (H5Dwrite_chunk(dset_, H5P_DEFAULT, 0, offset.data(), sizes[k], out[k].data()) < 0)
        h5_fail(path_, what_ + ": direct chunk write");
    }
    // Start writing the file's dirty pages now, while the next round compresses (a hint: its
    // failure changes nothing, the commit's fsync still waits for every page).
    if (fd_ >= 0) ::sync_file_range(fd_, 0, 0, SYNC_FILE_RANGE_WRITE);
  }
}

}  // namespace pkscan::output::detail
