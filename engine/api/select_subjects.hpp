#pragma once
// A result holding some of another result's subjects (the subjects of one stratum of a chunk,
// which run_population's stratified summaries add on their own).
#include <cstdint>
#include <pkscan/result.hpp>

namespace pkscan::detail {

// `to` becomes the subjects idx[0..n) of `from` (in that order): their amounts, concentrations
// where stored, volumes and statuses, with `from`'s output times, precision and run summary.
// Reuses `to`'s storage.
void select_subjects(const SimulationResult& from, const std::int64_t* idx, std::int64_t n,
                     SimulationResult& to);

}  // namespace pkscan::detail
