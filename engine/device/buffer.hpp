#pragma once
// Memory and streams of a device::Runtime for the device paths (device_backend.cpp,
// device_dataset.cpp, device_events.cpp), and the copy out of staging memory.
#include <cstddef>

#include "device/runtime.hpp"

namespace pkscan::detail {

constexpr std::size_t kAlign = 256;  // device sub-buffer alignment

inline std::size_t align_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

// Copies `bytes` from staging memory into a result on up to `threads` threads, with
// non-temporal stores where the CPU has AVX (staging_copy.cpp).
void parallel_copy(void* dst, const void* src, std::size_t bytes, int threads);

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

// A stream and its timing events, drained before they (and the buffers declared before them)
// go: no copy is still running into memory that is being freed.
class DeviceStream {
 public:
  explicit DeviceStream(device::Runtime& rt) : rt_(&rt) {
    try {
      stream_ = rt.create_stream();
      for (void*& e : mark_) e = rt.create_timing_event();
    } catch (...) {
      release();
      throw;
    }
  }
  DeviceStream(const DeviceStream&) = delete;
  DeviceStream& operator=(const DeviceStream&) = delete;
  ~DeviceStream() { release(); }
  void* get() const noexcept { return stream_; }
  void mark(int i) { rt_->record(mark_[i], stream_); }
  double seconds(int from, int to) { return rt_->elapsed_seconds(mark_[from], mark_[to]); }

 private:
  void release() noexcept {
    if (stream_) rt_->synchronize_quietly(stream_);
    for (void*& e : mark_)
      if (e) rt_->destroy_event(e);
    if (stream_) rt_->destroy_stream(stream_);
    stream_ = nullptr;
  }
  device::Runtime* rt_;
  void* stream_ = nullptr;
  void* mark_[5] = {nullptr, nullptr, nullptr, nullptr, nullptr};
};

}  // namespace pkscan::detail
