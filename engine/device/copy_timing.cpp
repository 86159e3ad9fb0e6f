// detail::measure_device_copies (copy_timing.hpp): copies on the device's runtime, timed by its
// events.
#include "device/copy_timing.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <pkscan/backend.hpp>
#include <pkscan/error.hpp>
#include <string>

#include "device/runtime.hpp"
#include "device/device.hpp"

namespace pkscan::detail {

DeviceCopySeconds measure_device_copies(std::size_t bytes, int repeat) {
  std::string why;
  if (!is_backend_available(Method::Batched, Device::Cuda, &why)) throw BackendUnavailable(why);
  const std::unique_ptr<device::Runtime> rt = make_device_runtime();
  if (!rt) throw BackendUnavailable("device 'cuda' is not available in this build");
  // Every handle is released on the way out, errors included.
  struct Held {
    device::Runtime& rt;
    void* src = nullptr;
    void* dst = nullptr;
    void* host = nullptr;
    void* stream = nullptr;
    void* mark[3] = {nullptr, nullptr, nullptr};
    ~Held() {
      if (stream) rt.synchronize_quietly(stream);
      for (void* e : mark)
        if (e) rt.destroy_event(e);
      if (stream) rt.destroy_stream(stream);
      rt.free(src);
      rt.free(dst);
      rt.free_staging(host);
    }
  } h{*rt};
  const std::size_t b = bytes > 0 ? bytes : 1;
  h.src = rt->alloc(b);
  h.dst = rt->alloc(b);
  h.host = rt->alloc_staging(b);
  std::memset(h.host, 0x5a, b);
  h.stream = rt->create_stream();
  for (void*& e : h.mark) e = rt->create_timing_event();
  rt->copy_to_device(h.src, h.host, b, h.stream);  // the source holds data, not fresh pages
  DeviceCopySeconds best{1e300, 1e300};
  for (int i = 0; i < std::max(1, repeat); ++i) {
    rt->record(h.mark[0], h.stream);
    rt->copy_on_device(h.dst, h.src, b, h.stream);
    rt->record(h.mark[1], h.stream);
    rt->copy_to_host(h.host, h.src, b, h.stream);
    rt->record(h.mark[2], h.stream);
    rt->synchronize(h.stream);
    best.device_to_device =
        std::min(best.device_to_device, rt->elapsed_seconds(h.mark[0], h.mark[1]));
    best.device_to_host = std::min(best.device_to_host, rt->elapsed_seconds(h.mark[1], h.mark[2]));
  }
  return best;
}

}  // namespace pkscan::detail
