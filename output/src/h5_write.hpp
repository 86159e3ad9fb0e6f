#pragma once
// Writing pkscan's HDF5 result files (private to pkscan::output), shared by the sink of grid and
// population runs (sink_h5.cpp) and the sink of design runs (design_h5.cpp), so that both make
// files the same way (docs/output.md):
// - the file is created under a registered temporary name next to the target (TempName), with
//   a capped metadata cache (file_access), and renamed into place only when complete and synced
//   (commit_file); a sink destroyed before that closes and removes it;
// - datasets indexed by row are chunked along the rows, shuffled and gzip-compressed
//   (create_dataset), objects carry no modification times (the same run writes the same bytes);
// - attributes are variable-length UTF-8 strings (h5py reads str), the root carries the run's
//   provenance (write_provenance);
// - every HDF5 call is checked: a failure throws pkscan::Error("cannot write HDF5 file PATH:
//   what: HDF5's innermost message") (detail::h5_fail). Callers switch HDF5's automatic error
//   printing off (hdf5::QuietHdf5) while they call these.
#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <pkscan/models/model.hpp>
#include <string>
#include <vector>

#include "hdf5_handle.hpp"

namespace pkscan::output::detail {

// Throws pkscan::Error("cannot write HDF5 file PATH: WHAT: HDF5's message") and clears HDF5's
// error stack.
[[noreturn]] void h5_fail(const std::string& path, const std::string& what);

}  // namespace pkscan::output::detail

namespace pkscan::output::h5 {

using hdf5::Id;

// Target size of one HDF5 chunk: large enough for gzip to work well and for few chunk-index
// entries, small enough that reading one subject's trajectory decompresses little.
constexpr std::size_t kChunkBytes = std::size_t{256} << 10;
// Chunk cache per dataset: holds the partly written chunk at a boundary between two of the
// caller's chunks (the caller's chunks need not align with HDF5's) plus a few full ones.
constexpr std::size_t kCacheBytes = std::size_t{2} << 20;
// Largest size of HDF5's metadata cache (chunk index nodes, object headers) for one file.
constexpr std::size_t kMetadataCacheBytes = std::size_t{4} << 20;
// gzip level: 1 compresses shuffled PK trajectories nearly as well as 4, at a fraction of the
// time (docs/output.md).
constexpr unsigned kDeflateLevel = 1;

// Wraps a freshly returned identifier; a negative one is an error (h5_fail).
Id checked(hid_t id, Id::Closer close, const std::string& path, const std::string& what);
// A negative status is an error (h5_fail).
void check(herr_t status, const std::string& path, const std::string& what);

// Elements of a dataset of these dimensions.
std::size_t elements(const std::vector<hsize_t>& dims);

// Chunk shape for a dataset of `dims` (rows first) with elements of `elem` bytes: whole rows
// (one subject's complete trajectory in one chunk) of as many consecutive rows as fit in
// kChunkBytes; when one row is larger than that, one row and a block of the second axis.
std::vector<hsize_t> chunk_shape(const std::vector<hsize_t>& dims, std::size_t elem);

// A variable-length UTF-8 string type (h5py reads its values as str).
Id string_type(const std::string& path);

void write_string_attribute(hid_t loc, const char* name, const std::string& value,
                            const std::string& path);
// An array of strings (an empty list: a null dataspace).
void write_strings_attribute(hid_t loc, const char* name, const std::vector<std::string>& values,
                             const std::string& path);
// A scalar int8 attribute.
void write_int8_attribute(hid_t loc, const char* name, std::int8_t value, const std::string& path);

// The root attributes every result carries: run_file, run_text, model, compartments (array),
// pkscan_version.
void write_provenance(hid_t root, const std::string& run_file, const std::string& run_text,
                      const ModelInfo& model, const std::string& path);

// Creates dataset `name` of `file_type`. With `extendible`, the first axis may grow beyond
// dims[0] (row count unknown). Non-empty (or extendible) datasets are chunked (chunk_shape),
// shuffled and gzip-compressed, with a chunk cache of kCacheBytes; empty ones are contiguous.
Id create_dataset(hid_t loc, const char* name, hid_t file_type, const std::vector<hsize_t>& dims,
                  bool extendible, const std::string& path);

// Creates group `name` (no modification times).
Id create_group(hid_t loc, const char* name, const std::string& path);

// Grows `dset` (of rank at most 3) to `rows` along its first axis (created extendible).
void extend(hid_t dset, hsize_t rows, const std::string& path);

// Writes `data` (memory layout = the block, row-major) into the block of `dset` that starts at
// `start` and spans `count` (nothing for an empty block).
void write_block(hid_t dset, hid_t mem_type, const std::vector<hsize_t>& start,
                 const std::vector<hsize_t>& count, const void* data, const std::string& path,
                 const std::string& what);

// Writes a whole dataset in one call.
void write_all(hid_t dset, hid_t mem_type, const void* data, const std::string& path,
               const std::string& what);

// A registered temporary file next to the target (temp_files.hpp), removed by the destructor
// unless released. Declare it before the HDF5 handles in a sink, so the file is closed before it
// is removed, also when the constructor throws.
class TempName {
 public:
  explicit TempName(const std::string& target);
  TempName(const TempName&) = delete;
  TempName& operator=(const TempName&) = delete;
  ~TempName();
  const std::string& path() const noexcept { return path_; }
  void release() noexcept { path_.clear(); }

 private:
  std::string path_;
};

// File access properties: the sec2 driver with the metadata cache capped at
// kMetadataCacheBytes, so the writer's memory stays small whatever the number of chunks.
Id file_access(const std::string& path);

// Creates (truncates) the HDF5 file at `temp`'s path with `fapl`.
Id create_file(const TempName& temp, hid_t fapl, const std::string& path);

// Commits a closed file: syncs `temp` to disk and renames it over `path` (commit_temp_files:
// under the registry's lock, so a signal never splits it), then releases `temp`.
void commit_file(TempName& temp, const std::string& path);

}  // namespace pkscan::output::h5
