#pragma once
// A regimen compiled against a time grid, independent of any subject's parameters.
//
// Steps are numbered 1..steps; step i goes from t_{i-1} to t_i. The schedule is a sorted list
// of breakpoints; breakpoint k covers steps [step_k, step_{k+1}) (the last one up to `steps`).
// Within it every step receives the same full-step infusion rate vector rate_k; its first step
// also receives the bolus doses given at t_{step_k} and the partial-step infusions that end
// inside that step. A breakpoint at step 1 always exists, so the breakpoints cover every step.
//
// Invariants (established by compile_schedule, relied on by every compute path):
// - breakpoints are strictly increasing in step, the first is step 1;
// - partial infusions always cover the start of their step: [t_{i-1}, t_{i-1} + covered),
//   0 < covered < dt, because dose times lie on the grid;
// - partial_lengths holds each distinct `covered` once; PartialInfusion::length_index points in it.
#include <cstdint>
#include <pkscan/types.hpp>
#include <vector>

#include "kernels/grid.hpp"

namespace pkscan::detail {

struct Schedule {
  int n = 0;                                   // compartments
  std::int64_t steps = 0;                      // last grid index simulated
  std::vector<double> initial;                 // n: bolus doses at t = 0
  std::vector<std::int64_t> bp_step;           // breakpoints' first steps
  std::vector<double> bp_rate;                 // n per breakpoint: full-step infusion rates
  std::vector<double> bp_bolus;                // n per breakpoint: bolus at end of first step
  std::vector<std::int64_t> bp_partial_begin;  // per breakpoint + 1: ranges into `partials`
  std::vector<PartialInfusion> partials;
  std::vector<double> partial_lengths;
  // bp_run[k]: number of consecutive breakpoints starting at k that are identical to k (same
  // length, rates, boluses and partial infusions), k itself included. A run of r identical
  // breakpoints is the r-th power of one affine map, which the power path applies by squaring.
  std::vector<std::int64_t> bp_run;
  std::int64_t breakpoints() const noexcept { return static_cast<std::int64_t>(bp_step.size()); }
  // Last step covered by breakpoint k.
  std::int64_t bp_last(std::int64_t k) const noexcept {
    return k + 1 < breakpoints() ? bp_step[static_cast<std::size_t>(k + 1)] - 1 : steps;
  }
  // The schedule as pointers into these vectors (kernels/grid.hpp), valid while it lives unchanged.
  ScheduleView view() const noexcept {
    ScheduleView v;
    v.n = n;
    v.steps = steps;
    v.breakpoints = breakpoints();
    v.initial = initial.data();
    v.bp_step = bp_step.data();
    v.bp_rate = bp_rate.data();
    v.bp_bolus = bp_bolus.data();
    v.bp_partial_begin = bp_partial_begin.data();
    v.partials = partials.data();
    v.bp_run = bp_run.data();
    return v;
  }
};

// Grid index of time t if t lies on the grid (within rounding), else -1.
std::int64_t grid_index(double t, double dt) noexcept;

// Compiles a validated regimen. Doses after the last grid time are dropped; infusions running
// past it are cut there.
Schedule compile_schedule(const std::vector<DoseEvent>& doses, const TimeGrid& grid, int n);

// Sorted grid indices that are reported (every index for OutputTimes::all).
std::vector<std::int64_t> output_steps(const OutputTimes& out, const TimeGrid& grid);

}  // namespace pkscan::detail
