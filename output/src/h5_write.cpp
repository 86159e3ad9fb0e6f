// Writing pkscan's HDF5 result files: the helpers both HDF5 sinks share (h5_write.hpp).
#include "h5_write.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <pkscan/error.hpp>
#include <pkscan/output/temp_files.hpp>

#if __has_include(<pkscan/build_config.hpp>)
#include <pkscan/build_config.hpp>
#endif
#ifndef PKSCAN_VERSION_STRING
#define PKSCAN_VERSION_STRING "0.1.0"
#endif

namespace pkscan::output {

namespace {

// The innermost (most specific) message of HDF5's error stack, then clears the stack.
herr_t take_innermost(unsigned n, const H5E_error2_t* e, void* out) {
  if (n == 0 && e != nullptr && e->desc != nullptr) *static_cast<std::string*>(out) = e->desc;
  return 0;
}

std::string hdf5_message() {
  std::string msg;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, take_innermost, &msg);
  H5Eclear2(H5E_DEFAULT);
  for (char& c : msg)
    if (c == '\n' || c == '\r') c = ' ';
  return msg;
}

}  // namespace

[[noreturn]] __attribute__((cold, noinline)) void detail::h5_fail(const std::string& path,
                                                                  const std::string& what) {
  const std::string msg = hdf5_message();
  throw Error("cannot write HDF5 file " + path + ": " + what + (msg.empty() ? "" : ": " + msg));
}

namespace h5 {

Id checked(hid_t id, Id::Closer close, const std::string& path, const std::string& what) {
  if (id < 0) detail::h5_fail(path, what);
  return Id(id, close);
}

void check(herr_t status, const std::string& path, const std::string& what) {
  if (status < 0) detail::h5_fail(path, what);
}

std::size_t elements(const std::vector<hsize_t>& dims) {
  std::size_t n = 1;
  for (hsize_t d : dims) n *= static_cast<std::size_t>(d);
  return n;
}

namespace {

// Elements of one row (subject) of a dataset with these dimensions (all but the first).
std::size_t row_elements(const std::vector<hsize_t>& dims) {
  std::size_t n = 1;
  for (std::size_t i = 1; i < dims.size(); ++i) n *= static_cast<std::size_t>(dims[i]);
  return n;
}

}  // namespace

std::vector<hsize_t> chunk_shape(const std::vector<hsize_t>& dims, std::size_t elem) {
  std::vector<hsize_t> chunk = dims;
  const std::size_t row_bytes = std::max<std::size_t>(1, row_elements(dims)) * elem;
  if (row_bytes <= kChunkBytes) {
    hsize_t rows = static_cast<hsize_t>(kChunkBytes / row_bytes);
    if (dims[0] > 0) rows = std::min(rows, dims[0]);
    chunk[0] = std::max<hsize_t>(1, rows);
  } else {
    chunk[0] = 1;
    std::size_t rest = elem;  // bytes of one element of the second axis
    for (std::size_t i = 2; i < dims.size(); ++i) rest *= static_cast<std::size_t>(dims[i]);
    chunk[1] = std::max<hsize_t>(1, std::min<hsize_t>(dims[1], kChunkBytes / rest));
  }
  for (hsize_t& c : chunk) c = std::max<hsize_t>(1, c);
  return chunk;
}

Id string_type(const std::string& path) {
  Id t = checked(H5Tcopy(H5T_C_S1), H5Tclose, path, "string type");
  check(H5Tset_size(t.get(), H5T_VARIABLE), path, "string type");
  check(H5Tset_cset(t.get(), H5T_CSET_UTF8), path, "string type");
  return t;
}

void write_string_attribute(hid_t loc, const char* name, const std::string& value,
                            const std::string& path) {
  const std::string what = std::string("attribute ") + name;
  Id type = string_type(path);
  Id space = checked(H5Screate(H5S_SCALAR), H5Sclose, path, what);
  Id attr = checked(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    H5Aclose, path, what);
  const char* p = value.c_str();
  check(H5Awrite(attr.get(), type.get(), &p), path, what);
}

void write_strings_attribute(hid_t loc, const char* name, const std::vector<std::string>& values,
                             const std::string& path) {
  const std::string what = std::string("attribute ") + name;
  Id type = string_type(path);
  const hsize_t n = values.size();
  Id space = checked(values.empty() ? H5Screate(H5S_NULL) : H5Screate_simple(1, &n, nullptr),
                     H5Sclose, path, what);
  Id attr = checked(H5Acreate2(loc, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    H5Aclose, path, what);
  if (values.empty()) return;
  std::vector<const char*> p;
  p.reserve(values.size());
  for (const std::string& v : values) p.push_back(v.c_str());
  check(H5Awrite(attr.get(), type.get(), p.data()), path, what);
}

void write_int8_attribute(hid_t loc, const char* name, std::int8_t value, const std::string& path) {
  const std::string what = std::string("attribute ") + name;
  Id space = checked(H5Screate(H5S_SCALAR), H5Sclose, path, what);
  Id attr = checked(H5Acreate2(loc, name, H5T_STD_I8LE, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                    H5Aclose, path, what);
  check(H5Awrite(attr.get(), H5T_NATIVE_INT8, &value), path, what);
}

void write_provenance(hid_t root, const std::string& run_file, const std::string& run_text,
                      const ModelInfo& model, const std::string& path) {
  write_string_attribute(root, "run_file", run_file, path);
  write_string_attribute(root, "run_text", run_text, path);
  write_string_attribute(root, "model", model.name, path);
  write_strings_attribute(root, "compartments", model.compartments, path);
  write_string_attribute(root, "pkscan_version", PKSCAN_VERSION_STRING, path);
}

Id create_dataset(hid_t loc, const char* name, hid_t file_type, const std::vector<hsize_t>& dims,
                  bool extendible, const std::string& path) {
  const std::string what = std::string("dataset ") + name;
  const int rank = static_cast<int>(dims.size());
  std::vector<hsize_t> maxdims = dims;
  if (extendible) maxdims[0] = H5S_UNLIMITED;
  Id space = checked(
      rank == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(rank, dims.data(), maxdims.data()),
      H5Sclose, path, what);
  Id dcpl = checked(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, path, what);
  // No modification times in the object headers: the same run writes the same bytes.
  check(H5Pset_obj_track_times(dcpl.get(), false), path, what + ": track times");
  Id dapl = checked(H5Pcreate(H5P_DATASET_ACCESS), H5Pclose, path, what);
  if (rank > 0 && (extendible || elements(dims) > 0)) {
    const std::vector<hsize_t> chunk = chunk_shape(dims, H5Tget_size(file_type));
    check(H5Pset_chunk(dcpl.get(), rank, chunk.data()), path, what + ": chunk shape");
    check(H5Pset_shuffle(dcpl.get()), path, what + ": shuffle filter");
    check(H5Pset_deflate(dcpl.get(), kDeflateLevel), path, what + ": gzip filter");
    // w0 = 1: chunks written completely leave the cache first; the partly written one stays.
    check(H5Pset_chunk_cache(dapl.get(), 521, kCacheBytes, 1.0), path, what + ": chunk cache");
  }
  return checked(H5Dcreate2(loc, name, file_type, space.get(), H5P_DEFAULT, dcpl.get(), dapl.get()),
                 H5Dclose, path, what);
}

Id create_group(hid_t loc, const char* name, const std::string& path) {
  const std::string what = std::string("group ") + name;
  Id gcpl = checked(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, path, what);
  check(H5Pset_obj_track_times(gcpl.get(), false), path, what + ": track times");
  return checked(H5Gcreate2(loc, name, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose, path, what);
}

void extend(hid_t dset, hsize_t rows, const std::string& path) {
  Id space = checked(H5Dget_space(dset), H5Sclose, path, "extend");
  hsize_t dims[3] = {0, 0, 0};
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 1 || rank > 3 || H5Sget_simple_extent_dims(space.get(), dims, nullptr) < 0)
    detail::h5_fail(path, "extend");
  dims[0] = rows;
  check(H5Dset_extent(dset, dims), path, "extend");
}

void write_block(hid_t dset, hid_t mem_type, const std::vector<hsize_t>& start,
                 const std::vector<hsize_t>& count, const void* data, const std::string& path,
                 const std::string& what) {
  if (elements(count) == 0) return;
  Id file_space = checked(H5Dget_space(dset), H5Sclose, path, what);
  check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(),
                            nullptr),
        path, what);
  Id mem_space = checked(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr),
                         H5Sclose, path, what);
  check(H5Dwrite(dset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, data), path, what);
}

void write_all(hid_t dset, hid_t mem_type, const void* data, const std::string& path,
               const std::string& what) {
  check(H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), path, what);
}

TempName::TempName(const std::string& target) {
  const int fd = create_temp_file(target, path_);
  ::close(fd);  // HDF5 opens it by name
}

TempName::~TempName() {
  if (!path_.empty()) remove_temp_file(path_);
}

Id file_access(const std::string& path) {
  Id fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, path, "create");
  // The metadata cache (chunk indexes) grows adaptively up to 32 MiB by default; cap it so
  // the writer's memory stays small whatever the number of chunks.
  H5AC_cache_config_t mdc;
  mdc.version = H5AC__CURR_CACHE_CONFIG_VERSION;
  check(H5Pget_mdc_config(fapl.get(), &mdc), path, "create: metadata cache");
  mdc.max_size = kMetadataCacheBytes;
  mdc.min_size = std::min<std::size_t>(mdc.min_size, kMetadataCacheBytes);
  mdc.initial_size = std::min<std::size_t>(mdc.initial_size, kMetadataCacheBytes);
  mdc.set_initial_size = 1;
  check(H5Pset_mdc_config(fapl.get(), &mdc), path, "create: metadata cache");
  return fapl;
}

Id create_file(const TempName& temp, hid_t fapl, const std::string& path) {
  return checked(H5Fcreate(temp.path().c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), H5Fclose, path,
                 "create");
}

void commit_file(TempName& temp, const std::string& path) {
  const int fd = ::open(temp.path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd);
    throw Error("cannot write HDF5 file " + path + ": " + why);
  }
  ::close(fd);
  commit_temp_files(path, {{temp.path(), path}}, {});
  temp.release();
}

}  // namespace h5

}  // namespace pkscan::output
