#pragma once
// How many rows of a streamed run (a population, sweep or replicates: run_population) the engine
// takes per call, decided where the engine's paths are chosen: about 64 MiB of results per
// call, more where the engine keeps no trajectories (a summaries-only run on the batched CPU
// path, which summarises as it simulates, or on the device, which chunks the trajectories
// itself), always whole blocks of detail::kSubjectBlock subjects.
#include <cstdint>
#include <pkscan/engine.hpp>
#include <pkscan/options.hpp>
#include <pkscan/types.hpp>

namespace pkscan::detail {

// Whether a call of `subjects` subjects over `steps` steps is much work over enough subjects to
// fill a GPU (one device thread per subject): at least 1e5 subjects and 1e7 subject-steps
// (docs/performance.md, "How auto chooses").
bool fills_the_device(std::int64_t subjects, std::int64_t steps) noexcept;

// Subject-steps from which a summaries-only call under device auto goes to the device: its
// summary is 2.1-2.3x faster than the CPU's fused path on 16 cores, but a process's first device
// call pays for starting CUDA (0.2-0.5 s), so a one-shot `pkscan run` of 1e5 to 2e5 subjects x 1e3
// steps took longer on the device and 1e6 subjects about as long (docs/performance.md, "How auto
// chooses").
constexpr double kDeviceSummaryWork = 1e9;

// The path Engine::summarize_into takes for a summaries-only call of `subjects` subjects of
// `problem` (whose parameter rows are not read beyond resolve_path's use): resolve_path's,
// except that device auto takes the device's summary for a call that fills the device
// (fills_the_device) with at least kDeviceSummaryWork subject-steps, on a batched or power path
// compiled for cuda, whatever the output times, since only the summary crosses the bus. The
// caller falls back to resolve_path's path where the device cannot summarise the call.
// @throws as resolve_path
Path summary_path(const Problem& problem, const SimulateOptions& options, std::int64_t subjects);
// As summary_path, for a call of `rows` parameter rows of `problem` (whose batch may hold any
// number: only its model is read), without making that batch.
Path summary_path(const Problem& problem, const SimulateOptions& options, std::int64_t subjects,
                  std::int64_t rows);
// resolve_path for a call of `rows` parameter rows of `problem` (whose batch may hold any number:
// only its model is read), without making that batch.
Path resolve_path(const Problem& problem, const SimulateOptions& options, std::int64_t rows);

// Target size of one call's results.
constexpr std::uint64_t kChunkBytes = 64ull << 20;

// Rows per call for a streamed run of `rows` rows of `problem` (its parameter rows are not read:
// only its model, grid, doses and outputs) with `options` (concentrations off: the sinks and
// summaries divide by volumes as they read). `requested` > 0 is the caller's choice, rounded down
// to whole blocks (at least one); 0 lets the engine choose. `summaries_only`: the run keeps no
// trajectories, only summaries and metrics. The result is at most `rows` rounded up to a block.
// @throws as resolve_path
std::int64_t plan_chunk_rows(const Problem& problem, const SimulateOptions& options,
                             std::int64_t rows, std::int64_t requested, bool summaries_only);

// Rows per call of a pass of exact percentiles (run_population simulates a complete summary
// group again and reads each value once, at once; TimeSummary::begin_pass): about kPassBytes of
// results per thread, so that the values are read back from the cache they were just written
// to, where a call of kChunkBytes writes and reads them through memory (2 to 4 times slower on
// the 2-core machine); on the device, plan_chunk_rows's. At most `rows`.
constexpr std::uint64_t kPassBytes = 4096ull << 10;
std::int64_t pass_chunk_rows(const Problem& problem, const SimulateOptions& options,
                             std::int64_t rows);

}  // namespace pkscan::detail
