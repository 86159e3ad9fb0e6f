#pragma once
/// @file engine.hpp
/// Entry points: check a problem, estimate its size, simulate it.

#include <cstdint>
#include <pkscan/options.hpp>
#include <pkscan/result.hpp>
#include <pkscan/types.hpp>

namespace pkscan {

/// Checks a problem and options without simulating. Everything simulate() would reject is
/// rejected here with the same exception and message.
/// @throws InvalidArgument for malformed input (shapes, unknown names, unsorted output times)
/// @throws DomainError for values out of range (non-positive dt, negative dose, off-grid time,
///         an euler step too long for the rates, a result larger than max_result_bytes)
/// @throws BackendUnavailable when the method/device is not available
void check(const Problem& problem, const SimulateOptions& options = {});

/// Bytes simulate() will allocate for the result of this problem (amounts, plus
/// concentrations when asked). Does not validate.
std::uint64_t result_bytes(const Problem& problem, const SimulateOptions& options = {}) noexcept;

/// The largest result simulate() accepts: options.max_result_bytes, or when that is 0, 80% of
/// the memory available now (MemAvailable).
std::uint64_t result_byte_limit(const SimulateOptions& options = {}) noexcept;

/// Simulates every subject of `problem`. Thread-safe for concurrent calls on distinct problems.
/// Numerical trouble in a subject is reported in SimulationResult::status(), not thrown.
/// @throws everything check() throws; DeviceError for CUDA failures.
SimulationResult simulate(const Problem& problem, const SimulateOptions& options = {});

}  // namespace pkscan
