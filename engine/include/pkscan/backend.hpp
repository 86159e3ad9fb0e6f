#pragma once
/// @file backend.hpp
/// Compute methods and devices, their names, and whether they are available.

#include <string>
#include <string_view>

namespace pkscan {

/// How the recurrence is computed.
enum class Method {
  Auto,     ///< pick the fastest available path for the problem
  Scan,     ///< sequential reference scan, one subject after another
  Batched,  ///< batched over subjects (SIMD lanes and threads on CPU; one thread per subject on
            ///< GPU)
  Power,    ///< parallel power: K^(2^j) by repeated squaring; log-depth scan and sparse jumps
};

/// Where it is computed.
enum class Device {
  Auto,  ///< CUDA when available and worthwhile, else CPU
  Cpu,   ///< host CPU
  Cuda,  ///< NVIDIA GPU
};

/// Run-file name of a method ("scan").
std::string to_string(Method method);
/// Run-file name of a device ("cpu").
std::string to_string(Device device);
/// Parses a method name. @throws InvalidArgument listing the accepted names.
Method method_from_string(std::string_view name);
/// Parses a device name. @throws InvalidArgument listing the accepted names.
Device device_from_string(std::string_view name);

/// True when `method` on `device` is compiled into this build and usable on this machine.
/// Auto counts as available. When false and `why` is given, *why says why.
bool is_backend_available(Method method, Device device, std::string* why = nullptr);

/// Number of usable CUDA devices (0 when CUDA is not built or no driver/device is present).
/// When 0 and `why` is given, *why says why. Never throws.
int cuda_device_count(std::string* why = nullptr) noexcept;

}  // namespace pkscan
