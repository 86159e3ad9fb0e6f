#include "grid/backend.hpp"

#include <memory>
#include <pkscan/backend.hpp>
#include <pkscan/build_config.hpp>
#include <pkscan/error.hpp>
#include <pkscan/types.hpp>

#include "core/names.hpp"
#include "device/device.hpp"
#include "device/runtime.hpp"

namespace pkscan {

namespace {
constexpr detail::Named<Method> kMethods[] = {{Method::Auto, "auto"},
                                              {Method::Scan, "scan"},
                                              {Method::Batched, "batched"},
                                              {Method::Power, "power"}};
constexpr detail::Named<Device> kDevices[] = {
    {Device::Auto, "auto"}, {Device::Cpu, "cpu"}, {Device::Cuda, "cuda"}};
constexpr detail::Named<Precision> kPrecisions[] = {{Precision::Float64, "float64"},
                                                    {Precision::Float32, "float32"}};
constexpr detail::Named<Discretization> kDiscretizations[] = {{Discretization::Exact, "exact"},
                                                              {Discretization::Euler, "euler"}};
}  // namespace

std::string to_string(Method method) { return detail::name_of(kMethods, method); }
std::string to_string(Device device) { return detail::name_of(kDevices, device); }
Method method_from_string(std::string_view name) {
  return detail::value_named(kMethods, name, "method");
}
Device device_from_string(std::string_view name) {
  return detail::value_named(kDevices, name, "device");
}
std::string to_string(Precision precision) { return detail::name_of(kPrecisions, precision); }
Precision precision_from_string(std::string_view name) {
  return detail::value_named(kPrecisions, name, "precision");
}
std::string to_string(Discretization discretization) {
  return detail::name_of(kDiscretizations, discretization);
}
Discretization discretization_from_string(std::string_view name) {
  return detail::value_named(kDiscretizations, name, "discretization");
}

#if PKSCAN_HAS_CUDA
namespace device {
int cuda_device_count(std::string* why) noexcept;  // cuda/runtime_cuda.cpp
std::unique_ptr<Runtime> make_cuda_runtime();
}  // namespace device
#endif

int cuda_device_count(std::string* why) noexcept {
#if PKSCAN_HAS_CUDA
  return device::cuda_device_count(why);
#else
  if (why) *why = "this pkscan build has no CUDA support (nvcc was not found when it was built)";
  return 0;
#endif
}

namespace detail {
namespace {
RuntimeFactory runtime_factory = nullptr;  // set by tests only
}  // namespace

void set_device_runtime_factory(RuntimeFactory factory) noexcept { runtime_factory = factory; }

std::unique_ptr<device::Runtime> make_device_runtime() {
  if (runtime_factory) return runtime_factory();
#if PKSCAN_HAS_CUDA
  return device::make_cuda_runtime();
#else
  return nullptr;
#endif
}

namespace {
// Devices behind device 'cuda': CUDA's, or those of the system a test routed it to.
int device_count(std::string* why) {
  if (!runtime_factory) return cuda_device_count(why);
  const std::unique_ptr<device::Runtime> rt = runtime_factory();
  return rt ? rt->device_count(why) : 0;
}
}  // namespace
}  // namespace detail

bool is_backend_available(Method method, Device device, std::string* why) {
  if (device == Device::Cuda) {
    std::string reason;
    if (detail::device_count(&reason) == 0) {
      if (why) *why = "device 'cuda' is not available: " + reason;
      return false;
    }
    if (method == Method::Scan) {
      if (why) *why = "method 'scan' runs on the CPU only (use device: cpu or auto)";
      return false;
    }
  }
  // Device::Cuda here: a device is usable; methods batched, power and auto run there.
  return true;
}

namespace detail {

std::unique_ptr<Backend> make_reference_scan_backend();
std::unique_ptr<Backend> make_batched_cpu_backend();
std::unique_ptr<Backend> make_power_cpu_backend();

std::unique_ptr<Backend> make_backend(Method method, Device device) {
  std::string why;
  if (!is_backend_available(method, device, &why)) throw BackendUnavailable(why);
  if (device == Device::Cuda) {
    if (method == Method::Scan)
      throw BackendUnavailable("method 'scan' runs on the CPU only (use device: cpu or auto)");
    std::unique_ptr<device::Runtime> rt = make_device_runtime();
    if (!rt) throw BackendUnavailable("device 'cuda' is not available in this build");
    return make_device_backend(method == Method::Power ? Method::Power : Method::Batched,
                               std::move(rt));
  }
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
