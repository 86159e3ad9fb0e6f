#pragma once
/// @file population_run.hpp
/// Population and sweep runs: the rows (replicates x sweep points x subjects) are simulated in
/// chunks of consecutive rows and streamed to a ResultSink, so memory stays bounded whatever
/// the number of subjects.
///
/// Row order: replicate (slowest), then sweep point (the first swept parameter varying slowest),
/// then subject. `id` counts rows from 1 within a replicate (sweep point-major), so a replicate
/// is one NONMEM-style table; the `replicate` column (when replicates > 1) and the swept
/// parameters follow the contract columns. A population subject's random draws depend only on
/// (seed, replicate, subject index): the same virtual subject appears at every sweep point
/// (paired comparison), and results do not depend on the thread count or the chunk size.

#include <cstdint>
#include <functional>
#include <pkscan/config/load.hpp>
#include <pkscan/result.hpp>
#include <string>

namespace pkscan::config {

/// Progress of a streamed run: rows done so far, of `total`.
using ProgressFn = std::function<void(std::int64_t done, std::int64_t total)>;

/// Options of run_streaming().
struct StreamOptions {
  /// Rows per chunk: 0 picks a chunk of about 64 MiB of results (always a multiple of 1024).
  std::int64_t chunk_rows = 0;
  ProgressFn progress;  ///< called after every chunk (may be empty)
};

/// What a streamed run did.
struct StreamReport {
  std::int64_t rows = 0;    ///< rows simulated
  std::int64_t chunks = 0;  ///< chunks
  RunSummary summary;       ///< path that ran (of the last chunk), summed timings
};

/// Total rows of a streamed run: replicates x sweep points x subjects.
std::int64_t stream_rows(const RunSpec& spec) noexcept;

/// Simulates a streamed run (spec.streaming() or an HDF5 path) and writes it to `path` (.csv or
/// .h5) as one unit (sink.hpp); when it fails, no partial file is left and the files of an
/// earlier run at `path` are untouched.
/// @throws DomainError naming the replicate and subject for invalid sampled parameter values;
///         everything simulate() and the sinks throw
StreamReport run_streaming(const RunSpec& spec, const std::string& path,
                           const StreamOptions& options = {});

}  // namespace pkscan::config
