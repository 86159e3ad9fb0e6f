// Rows per call of a streamed run (see plan.hpp).
#include "api/plan.hpp"

#include <algorithm>
#include <pkscan/engine.hpp>
#include <pkscan/threads.hpp>

#include "core/block.hpp"

namespace pkscan::detail {

namespace {

// result_bytes of one parameter row of `problem`.
std::uint64_t row_bytes(const Problem& problem, const SimulateOptions& options) {
  Problem one;
  one.grid = problem.grid;
  one.output = problem.output;
  one.parameters = ParameterBatch(problem.parameters.info_ptr(), 1);
  return result_bytes(one, options);
}

}  // namespace

std::int64_t plan_chunk_rows(const Problem& problem, const SimulateOptions& options,
                             std::int64_t rows, std::int64_t requested, bool summaries_only) {
  const std::int64_t whole_rows = (rows + kSubjectBlock - 1) / kSubjectBlock * kSubjectBlock;
  std::int64_t chunk = requested;
  if (chunk <= 0) {
    const std::uint64_t per_row = std::max<std::uint64_t>(1, row_bytes(problem, options));
    chunk = static_cast<std::int64_t>(kChunkBytes / per_row);
    // The path of a call of that many rows (at least a block).
    const std::int64_t call_rows = std::max<std::int64_t>(chunk, kSubjectBlock);
    const Path path = resolve_path(problem, options, call_rows);
    // Summaries only on the batched CPU path: Engine::summarize_into summarises as it simulates
    // and keeps no trajectories, so a call holds only parameters and metrics; give every thread
    // a few blocks.
    if (summaries_only && path.method == Method::Batched && path.device == Device::Cpu) {
      const std::int64_t threads = resolve_threads(options.threads);
      chunk = std::max<std::int64_t>(chunk, 4 * threads * kSubjectBlock);
    }
    // Summaries only on the device (its summary: batched or power, 2 to 4 compartments): the
    // device keeps the trajectories and chunks them itself, and each call copies the summary's
    // sketch to the device and back (47 MiB each way for 1000 times x 3 compartments), so one
    // call takes up to 2^20 subjects (a chunk of 64 MiB of trajectories would be 2048 subjects
    // of 1000 steps: 489 calls and 46 GB of sketch copies for 1e6 subjects). Whether the device
    // summarises is decided for a call of that size (summary_path).
    constexpr std::int64_t kDeviceRows = std::int64_t{1} << 20;
    const std::size_t n = problem.parameters.info().compartments.size();
    if (summaries_only && n >= 2 && n <= 4) {
      const Path device =
          summary_path(problem, options, std::min(kDeviceRows, whole_rows), call_rows);
      if (device.device == Device::Cuda && device.method != Method::Scan)
        chunk = std::max<std::int64_t>(chunk, kDeviceRows);
    }
  }
  chunk = std::max<std::int64_t>(kSubjectBlock, chunk / kSubjectBlock * kSubjectBlock);
  return std::min(chunk, whole_rows);
}

std::int64_t pass_chunk_rows(const Problem& problem, const SimulateOptions& options,
                             std::int64_t rows) {
  const std::int64_t planned = plan_chunk_rows(problem, options, rows, 0, false);
  if (resolve_path(problem, options, planned).device == Device::Cuda)
    return std::min(planned, rows);
  const std::uint64_t per_row = std::max<std::uint64_t>(1, row_bytes(problem, options));
  const std::int64_t threads = resolve_threads(options.threads);
  const auto per_thread =
      static_cast<std::int64_t>(std::max<std::uint64_t>(16, kPassBytes / per_row));
  return std::max<std::int64_t>(1, std::min(rows, threads * per_thread));
}

}  // namespace pkscan::detail
