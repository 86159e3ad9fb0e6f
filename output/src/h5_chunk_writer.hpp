#pragma once
// Parallel compression of the HDF5 sink's large datasets (private to pkscan::output).
//
// The trajectories of a run are most of an HDF5 result, and HDF5's own filter pipeline compresses
// them on one thread, far below a disk's write speed (docs/performance.md, "Thresholds").
// ChunkWriter assembles whole chunks of a dataset created with HDF5's shuffle and deflate
// filters, runs the same two filters itself on all threads (the shuffle's byte transposition,
// then a zlib stream made by libdeflate at the dataset's level: the format HDF5's deflate filter
// writes, which every HDF5 reader decodes without plugins) and writes each compressed chunk in
// file order with H5Dwrite_chunk (HDF5's direct chunk write). Values read back are the values
// written.
#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "h5_write.hpp"  // h5_fail

namespace pkscan::output::detail {

// Produces rows [row, row + rows) of a dataset, elements [element, element + count) of each row,
// row after row, into `out` (elements of the dataset's element size). Called from several
// threads at once, for disjoint blocks; must not throw.
using FillRows = std::function<void(std::int64_t row, std::int64_t rows, std::int64_t element,
                                    std::int64_t count, void* out)>;

class ChunkWriter {
 public:
  // `dset` is chunked with `chunk` (rows first: either several whole rows, or one row and a
  // block of the second axis with whole remaining axes), shuffled and deflated at `level`, and
  // has `row_elements` elements of `element_size` bytes per row. `threads` compress.
  // `fd` is the file's descriptor (HDF5's sec2 driver), or -1: after each round of writes the
  // kernel is asked to start writing those pages to the disk, so that the commit's fsync does
  // not find the whole file still in memory.
  ChunkWriter(hid_t dset, std::vector<hsize_t> chunk, std::size_t element_size,
              std::int64_t row_elements, int level, int threads, int fd, std::string path,
              std::string what);

  // Rows [first, first + rows) in order (first = the rows written so far); `total` is the
  // dataset's final row count, or 0 when it is not known yet (then finish() writes the last
  // partial chunk).
  void write(std::int64_t first, std::int64_t rows, std::int64_t total, const FillRows& fill);

  // Writes the partial chunk still held (rows not filling a chunk), padded with zeros beyond the
  // dataset's extent, as HDF5 stores edge chunks.
  void finish();

 private:
  struct Job {
    std::int64_t row;      // first row
    std::int64_t rows;     // rows of data (<= chunk rows)
    std::int64_t element;  // first element of each row
    std::int64_t count;    // elements of each row in the chunk (<= chunk elements)
    bool pending;          // the data is pending_ (assembled over several write() calls)
  };
  void run(const std::vector<Job>& jobs, const FillRows& fill);

  hid_t dset_;
  std::vector<hsize_t> chunk_;
  std::size_t element_size_;
  std::int64_t row_elements_;
  std::int64_t chunk_rows_;      // rows per chunk
  std::int64_t chunk_elements_;  // elements of a row per chunk (row_elements_ unless split)
  int level_;
  int threads_;
  int fd_;
  std::string path_;
  std::string what_;
  std::vector<unsigned char> pending_;  // rows [pending_row_, pending_row_ + pending_rows_)
  std::int64_t pending_row_ = 0;
  std::int64_t pending_rows_ = 0;
};

}  // namespace pkscan::output::detail
