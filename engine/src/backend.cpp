#include "detail/backend.hpp"

#include <pkscan/backend.hpp>
#include <pkscan/build_config.hpp>
#include <pkscan/error.hpp>

namespace pkscan {

std::string to_string(Method method) {
  switch (method) {
    case Method::Auto:
      return "auto";
    case Method::Scan:
      return "scan";
    case Method::Batched:
      return "batched";
    case Method::Power:
      return "power";
  }
  return "auto";
}

std::string to_string(Device device) {
  switch (device) {
    case Device::Auto:
      return "auto";
    case Device::Cpu:
      return "cpu";
    case Device::Cuda:
      return "cuda";
  }
  return "auto";
}

Method method_from_string(std::string_view name) {
  if (name == "auto") return Method::Auto;
  if (name == "scan") return Method::Scan;
  if (name == "batched") return Method::Batched;
  if (name == "power") return Method::Power;
  throw InvalidArgument("method is \"" + std::string(name) +
                        "\", but must be one of auto, scan, batched, power");
}

Device device_from_string(std::string_view name) {
  if (name == "auto") return Device::Auto;
  if (name == "cpu") return Device::Cpu;
  if (name == "cuda") return Device::Cuda;
  throw InvalidArgument("device is \"" + std::string(name) +
                        "\", but must be one of auto, cpu, cuda");
}

#if PKSCAN_HAS_CUDA
namespace cuda {
int device_count(std::string* why) noexcept;  // cuda/device_query.cu
}
#endif

int cuda_device_count(std::string* why) noexcept {
#if PKSCAN_HAS_CUDA
  return cuda::device_count(why);
#else
  if (why) *why = "this pkscan build has no CUDA support (nvcc was not found when it was built)";
  return 0;
#endif
}

bool is_backend_available(Method method, Device device, std::string* why) {
  if (device == Device::Cuda) {
    std::string reason;
    if (cuda_device_count(&reason) == 0) {
      if (why) *why = "device 'cuda' is not available: " + reason;
      return false;
    }
    if (method == Method::Scan) {
      if (why) *why = "method 'scan' runs on the CPU only (use device: cpu or auto)";
      return false;
    }
  }
  // Device::Cuda here: compiled in (cuda_device_count() > 0 needs PKSCAN_HAS_CUDA) and a device
  // is usable; methods batched, power and auto run there.
  return true;
}

namespace detail {

std::unique_ptr<Backend> make_reference_scan_backend();
std::unique_ptr<Backend> make_batched_cpu_backend();
std::unique_ptr<Backend> make_power_cpu_backend();
#if PKSCAN_HAS_CUDA
std::unique_ptr<Backend> make_cuda_batched_backend();  // cuda/cuda_backend.cpp
std::unique_ptr<Backend> make_cuda_power_backend();
#endif

std::unique_ptr<Backend> make_backend(Method method, Device device) {
  std::string why;
  if (!is_backend_available(method, device, &why)) throw BackendUnavailable(why);
#if PKSCAN_HAS_CUDA
  if (device == Device::Cuda) {
    if (method == Method::Power) return make_cuda_power_backend();
    if (method == Method::Batched || method == Method::Auto) return make_cuda_batched_backend();
    throw BackendUnavailable("method '" + to_string(method) +
                             "' runs on the CPU only (use device: cpu or auto)");
  }
#endif
  switch (method) {
    case Method::Auto:
    case Method::Scan:
      return make_reference_scan_backend();
    case Method::Batched:
      return make_batched_cpu_backend();
    case Method::Power:
      return make_power_cpu_backend();
  }
  throw BackendUnavailable("method '" + to_string(method) +
                           "' is not compiled into this pkscan build");
}

}  // namespace detail
}  // namespace pkscan
