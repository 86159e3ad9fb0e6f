#pragma once
// The reference recurrence for one subject given its rate matrix directly. Used by the reference
// backend, by faster backends' per-subject fallbacks, and by tests that need models the registry
// does not have (a sink compartment for mass balance).
#include <cstdint>
#include <pkscan/result.hpp>
#include <vector>

#include "grid/schedule.hpp"
#include "grid/transition.hpp"

namespace pkscan::detail {

// Scans one subject with rate matrix `a` and writes out_steps.size() * N values to `out`.
// Returns the subject's status (NonFinite when any written value is not finite).
template <int N, class Real>
SubjectStatus reference_scan_matrix(const Mat<N>& a, double dt, Discretization disc,
                                    const Schedule& s, const std::vector<std::int64_t>& out_steps,
                                    Real* out);

}  // namespace pkscan::detail
