#pragma once
// RAII for the HDF5 C library, shared by the HDF5 result sink (sink_h5.cpp) and the HDF5 reader
// (read_h5.cpp). Not installed.
#include <hdf5.h>

#include <utility>

namespace pkscan::output::hdf5 {

// Switches HDF5's automatic error printing off for the lifetime of the object (a library never
// prints); on destruction clears the error stack and restores the previous handler.
class QuietHdf5 {
 public:
  QuietHdf5() {
    if (H5Eget_auto2(H5E_DEFAULT, &func_, &data_) < 0) func_ = nullptr;
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;
  ~QuietHdf5() {
    H5Eclear2(H5E_DEFAULT);
    H5Eset_auto2(H5E_DEFAULT, func_, data_);
  }

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// An HDF5 identifier closed by its own close function (H5Dclose, H5Sclose, ...). Move-only; a
// negative identifier (a failed call) holds nothing.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer close) : id_(id), close_(close) {}
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
      close_ = o.close_;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { reset(); }
  hid_t get() const noexcept { return id_; }
  explicit operator bool() const noexcept { return id_ >= 0; }
  // Closes now; returns the close function's status (0 when nothing was open).
  herr_t close() noexcept {
    const herr_t r = id_ >= 0 ? close_(id_) : 0;
    id_ = -1;
    return r;
  }
  void reset() noexcept { close(); }

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

}  // namespace pkscan::output::hdf5
