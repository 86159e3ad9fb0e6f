#pragma once
// How many rows of a streamed run (a population, sweep or replicates: run_population) the engine
// takes per call, decided where the engine's paths are chosen: about 64 MiB of results per
// call, more where the engine keeps no trajectories (a summaries-only run on the batched CPU
// path, which summarises as it simulates, or on the device, which chunks the trajectories
// itself), always whole blocks of detail::kSubjectBlock subjects.
#include <cstdint>
#include <pkscan/options.hpp>
#include <pkscan/types.hpp>

namespace pkscan::detail {

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

}  // namespace pkscan::detail
