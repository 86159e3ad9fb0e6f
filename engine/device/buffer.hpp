#pragma once
// Memory of a device::Runtime for the device paths (device_backend.cpp, device_dataset.cpp).
#include <cstddef>

#include "device/runtime.hpp"

namespace pkscan::detail {

constexpr std::size_t kAlign = 256;  // device sub-buffer alignment

inline std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// An allocation of the runtime (device or staging memory), grown on demand; contents are not
// preserved.
class Buffer {
 public:
  Buffer(device::Runtime& rt, bool staging) noexcept : rt_(&rt), staging_(staging) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }

  void* ptr() const noexcept { return ptr_; }
  std::size_t bytes() const noexcept { return bytes_; }
  void release() noexcept {
    if (ptr_) staging_ ? rt_->free_staging(ptr_) : rt_->free(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  void reserve(std::size_t need) {
    if (need <= bytes_) return;
    release();  // free first: the old and new buffer need not fit together
    ptr_ = staging_ ? rt_->alloc_staging(need) : rt_->alloc(need);
    bytes_ = need;
  }

 private:
  device::Runtime* rt_;
  bool staging_;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace pkscan::detail
