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

#include <pkscan/config/load.hpp>
#include <pkscan/design.hpp>
#include <pkscan/population_run.hpp>
#include <string>

namespace pkscan::config {

/// The library's description of a streamed run file (its population, sweep and outputs).
PopulationRun to_population_run(const RunSpec& spec);

/// The library's description of a design simulation (spec.design(): subjects.dataset with
/// subjects.population).
DesignRun to_design_run(const RunSpec& spec);

/// Simulates a streamed run (spec.streaming() or an HDF5 path) with run_population() and writes
/// it to `path` (.csv or .h5) as one unit (sink.hpp); the sink is made (its files created under
/// temporary names) before anything is simulated. When it fails, no partial file is left and
/// the files of an earlier run at `path` are untouched.
/// @throws DomainError naming the replicate and subject for invalid sampled parameter values;
///         everything simulate() and the sinks throw
PopulationRunReport run_streaming(const RunSpec& spec, const std::string& path,
                                  const PopulationRunOptions& options = {});

}  // namespace pkscan::config
