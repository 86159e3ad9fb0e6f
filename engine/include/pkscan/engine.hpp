#pragma once
/// @file engine.hpp
/// Entry points: check a problem, estimate its size, simulate it.

#include <cstdint>
#include <memory>
#include <pkscan/options.hpp>
#include <pkscan/result.hpp>
#include <pkscan/summary.hpp>
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
/// the memory available now (MemAvailable, or what an address-space limit such as `ulimit -v`
/// leaves the process, when that is less).
std::uint64_t result_byte_limit(const SimulateOptions& options = {}) noexcept;

/// The method and device simulate() runs for these options: Method::Auto and Device::Auto are
/// resolved from the number of subjects, the horizon, the output sparsity and the devices
/// present; explicit choices are returned as given. Does not validate. Rules (docs/performance.md):
/// device auto picks cuda when a device is present, the batched or power path is compiled for
/// it, the work is at least 1e7 subject-steps over at least 1e5 subjects, and there is at most
/// one output time per 16 steps (trajectories that cross the bus to the host are written
/// faster by the CPU); method auto picks power when the output is sparse (at least 64 steps per
/// output time on average), batched when there are at least 4 subjects, power for fewer
/// subjects over at least 16384 steps with more than one thread (parallel over time), and scan
/// otherwise. Engine::summarize_into under device auto also takes the device's summary for a
/// call of at least 1e5 subjects and 1e9 subject-steps whatever the output times, since only the
/// summaries cross the bus.
struct Path {
  Method method;  ///< never Auto
  Device device;  ///< never Auto
};
/// See Path.
Path resolve_path(const Problem& problem, const SimulateOptions& options = {});

/// Owns what is expensive to create and worth reusing across calls: the compiled dosing
/// schedule (reused while the doses, grid and model stay the same, as in a fitting loop where
/// only parameters change) and the compute backends with their buffers (CUDA device memory).
/// Movable, not copyable. Not thread-safe: use one Engine per thread.
class Engine {
 public:
  Engine();
  ~Engine();
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  /// Simulates every subject; see pkscan::simulate. @throws as pkscan::simulate.
  SimulationResult simulate(const Problem& problem, const SimulateOptions& options = {});
  /// Simulates into `result`, reusing its storage; see pkscan::simulate_into.
  void simulate_into(const Problem& problem, const SimulateOptions& options,
                     SimulationResult& result);
  /// Simulates `problem` and adds every subject to `summary` and to the exposure metrics, as
  /// simulate_into(problem, options, result) followed by summary.add(result,
  /// metric_compartment, last_dose_time, metrics) would, with bit-identical results, but
  /// without storing the trajectories when it can: on the batched CPU path (method batched,
  /// or auto resolving to it; 2 to 4 compartments; options.concentrations false) once the
  /// summary estimates its percentiles by the sketch and its next subject starts a block of
  /// 1024 subjects, each thread simulates blocks of 1024 subjects over windows of 32 output
  /// times and summarises each window while it is in its cache (fused). Otherwise it runs the
  /// two steps. `result` receives the subjects' statuses, volumes, output times and the run
  /// summary; its amounts are empty after a fused run. Returns true when the run was fused.
  /// @throws as simulate_into and TimeSummary::add
  bool summarize_into(const Problem& problem, const SimulateOptions& options, TimeSummary& summary,
                      int metric_compartment, double last_dose_time, double* metrics,
                      SimulationResult& result);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Simulates every subject of `problem`. Thread-safe for concurrent calls on distinct problems.
/// Numerical trouble in a subject is reported in SimulationResult::status(), not thrown.
/// @throws everything check() throws; DeviceError for CUDA failures.
SimulationResult simulate(const Problem& problem, const SimulateOptions& options = {});

/// Same as simulate(), writing into `result` and reusing its storage when it is large enough:
/// repeated calls of the same size (a fitting loop, a benchmark) allocate nothing for the
/// result. On an exception `result` is left in an unspecified but valid state.
void simulate_into(const Problem& problem, const SimulateOptions& options,
                   SimulationResult& result);

}  // namespace pkscan
