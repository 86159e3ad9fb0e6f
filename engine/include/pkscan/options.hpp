#pragma once
/// @file options.hpp
/// Options of one simulate() call.

#include <cstdint>
#include <pkscan/backend.hpp>
#include <pkscan/types.hpp>

namespace pkscan {

/// Options of one simulate() call. Defaults are what a user wants for a one-off run.
struct SimulateOptions {
  Method method = Method::Auto;              ///< compute path
  Device device = Device::Auto;              ///< compute device
  Precision precision = Precision::Float64;  ///< scan precision
  int threads = 0;                           ///< CPU threads; 0 = the default (threads.hpp)
  bool concentrations = true;                ///< also fill SimulationResult concentrations
  /// Largest result (bytes) simulate() may allocate; 0 = 80% of the memory available now
  /// (read from the system for results above 64 MiB only: reading it costs more than a small
  /// simulation).
  /// Larger runs are rejected with DomainError before anything is allocated.
  std::uint64_t max_result_bytes = 0;
};

}  // namespace pkscan
