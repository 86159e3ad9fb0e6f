#pragma once
// The rows of a population run's chunk beyond its amounts (run.cpp): simulated observations with
// residual error, and the dose lines grouped by how their amounts scale.
#include <cstdint>
#include <pkscan/population_run.hpp>
#include <pkscan/result.hpp>
#include <vector>

namespace pkscan::detail {

// IPRED (the observed compartment's concentration, float64) and DV with the run's residual
// error for the chunk's rows [first, first + n) (`r` holds them), and BLQ flags with an LLOQ.
void observe(const PopulationRun& run, const RunLayout& layout, const SimulationResult& r,
             std::int64_t first, std::int64_t n, std::int64_t per_rep, std::int64_t n_base,
             std::int64_t first_subject, std::vector<double>& ipred, std::vector<double>& dv,
             std::vector<std::int8_t>& blq);

// The dose lines of a run grouped by how their amounts scale (DoseScaling): each part is
// simulated on its own and the parts add up, each subject's scaled by its factor (a linear
// model's amounts are linear in its doses). Lines without scaling form the first part.
struct DosePart {
  const DoseScaling* scaling = nullptr;  // null: amounts as given
  std::vector<DoseEvent> doses;          // a band line's amount is 1 (the band gives it)
};

std::vector<DosePart> dose_parts(const std::vector<DoseEvent>& doses,
                                 const std::vector<DoseScaling>& scaling);

}  // namespace pkscan::detail
