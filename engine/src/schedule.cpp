#include "detail/schedule.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace pkscan::detail {

namespace {
// Relative tolerance, in steps, under which a time counts as on the grid ("0.3 with dt 0.1").
constexpr double kGridTolerance = 1e-9;

struct Infusion {
  std::int64_t start;  // grid index where it starts
  int compartment;
  double rate;
  std::int64_t full;  // full steps covered: start+1 .. start+full
  double covered;     // length covered in step start+full+1 (0 = none)
};
}  // namespace

std::int64_t grid_index(double t, double dt) noexcept {
  const double q = t / dt;
  if (!std::isfinite(q) || q < -0.5 || q > 9.0e15) return -1;
  const double r = std::nearbyint(q);
  // Absolute tolerance in steps plus a relative part for the rounding of t/dt at large indices.
  if (std::fabs(q - r) > kGridTolerance + 1e-13 * std::fabs(r)) return -1;
  return static_cast<std::int64_t>(r);
}

Schedule compile_schedule(const std::vector<DoseEvent>& doses, const TimeGrid& grid, int n) {
  Schedule s;
  s.n = n;
  s.steps = grid.steps;
  s.initial.assign(static_cast<std::size_t>(n), 0.0);
  const double dt = grid.dt;

  std::map<std::int64_t, std::vector<double>> bolus;  // step -> bolus vector
  std::vector<Infusion> infusions;
  for (const DoseEvent& d : doses) {
    const std::int64_t first = grid_index(d.time, dt);
    const std::int64_t every = d.repeat > 0 ? grid_index(d.every, dt) : 0;
    for (std::int64_t k = 0; k <= d.repeat; ++k) {
      const std::int64_t at = first + k * every;
      if (at > grid.steps) break;  // doses after the last grid time are ignored
      if (!d.is_infusion()) {
        if (at == 0) {
          s.initial[static_cast<std::size_t>(d.compartment)] += d.amount;
        } else {
          auto& v = bolus[at];
          v.resize(static_cast<std::size_t>(n), 0.0);
          v[static_cast<std::size_t>(d.compartment)] += d.amount;
        }
        continue;
      }
      const double rate = d.rate > 0.0 ? d.rate : d.amount / d.duration;
      const double duration = d.rate > 0.0 ? d.amount / d.rate : d.duration;
      if (!(duration > 0.0) || !(rate > 0.0)) continue;  // zero amount: nothing enters
      const double q = duration / dt;
      double whole = std::floor(q);
      double covered = duration - whole * dt;
      const double nearest = std::nearbyint(q);
      if (std::fabs(q - nearest) <= kGridTolerance + 1e-13 * std::fabs(nearest)) {
        whole = nearest;  // ends on the grid (within rounding): no partial step
        covered = 0.0;
      }
      Infusion inf{at, d.compartment, rate, static_cast<std::int64_t>(whole), covered};
      if (inf.covered <= 0.0 || inf.covered >= dt) inf.covered = 0.0;
      infusions.push_back(inf);
    }
  }

  // Sweep over the steps where anything changes: boluses, infusions starting full coverage,
  // ending full coverage, partial steps and the step after a partial step.
  std::map<std::int64_t, std::vector<int>> starts, stops, partial_at;
  std::map<std::int64_t, bool> marks;
  marks[1] = true;
  for (const auto& kv : bolus) marks[kv.first] = true;
  for (std::size_t i = 0; i < infusions.size(); ++i) {
    const Infusion& f = infusions[i];
    const int id = static_cast<int>(i);
    if (f.full > 0) {
      starts[f.start + 1].push_back(id);
      stops[f.start + f.full + 1].push_back(id);
      marks[f.start + 1] = true;
      marks[f.start + f.full + 1] = true;
    }
    if (f.covered > 0.0) {
      partial_at[f.start + f.full + 1].push_back(id);
      marks[f.start + f.full + 1] = true;
      marks[f.start + f.full + 2] = true;
    }
  }

  const std::size_t un = static_cast<std::size_t>(n);
  std::vector<int> active;  // infusions covering the whole of the current step, sorted by id
  s.bp_partial_begin.push_back(0);
  for (const auto& kv : marks) {
    const std::int64_t step = kv.first;
    if (auto it = stops.find(step); it != stops.end())
      for (int id : it->second) active.erase(std::find(active.begin(), active.end(), id));
    if (auto it = starts.find(step); it != starts.end()) {
      active.insert(active.end(), it->second.begin(), it->second.end());
      std::sort(active.begin(), active.end());
    }
    if (step < 1 || step > grid.steps) continue;
    s.bp_step.push_back(step);
    // Rates are summed afresh from the active set (not as running +/- deltas), so a breakpoint
    // with no active infusion has exactly zero rate.
    std::vector<double> rate(un, 0.0);
    for (int id : active) {
      const Infusion& f = infusions[static_cast<std::size_t>(id)];
      rate[static_cast<std::size_t>(f.compartment)] += f.rate;
    }
    s.bp_rate.insert(s.bp_rate.end(), rate.begin(), rate.end());
    if (auto it = partial_at.find(step); it != partial_at.end()) {
      for (int id : it->second) {
        const Infusion& f = infusions[static_cast<std::size_t>(id)];
        auto pos = std::find(s.partial_lengths.begin(), s.partial_lengths.end(), f.covered);
        const int idx = static_cast<int>(pos - s.partial_lengths.begin());
        if (pos == s.partial_lengths.end()) s.partial_lengths.push_back(f.covered);
        s.partials.push_back({f.compartment, f.rate, idx});
      }
    }
    auto b = bolus.find(step);
    if (b != bolus.end())
      s.bp_bolus.insert(s.bp_bolus.end(), b->second.begin(), b->second.end());
    else
      s.bp_bolus.insert(s.bp_bolus.end(), un, 0.0);
    s.bp_partial_begin.push_back(static_cast<std::int64_t>(s.partials.size()));
  }
  return s;
}

std::vector<std::int64_t> output_steps(const OutputTimes& out, const TimeGrid& grid) {
  if (!out.all) return out.steps;
  std::vector<std::int64_t> v(static_cast<std::size_t>(grid.steps + 1));
  for (std::int64_t i = 0; i <= grid.steps; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

}  // namespace pkscan::detail
