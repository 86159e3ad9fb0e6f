#include "grid/schedule.hpp"

#include <algorithm>
#include <cmath>

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

}  // namespace pkscan::detail

namespace pkscan {
std::int64_t TimeGrid::index_of(double t) const noexcept { return detail::grid_index(t, dt); }
}  // namespace pkscan

namespace pkscan::detail {

Schedule compile_schedule(const std::vector<DoseEvent>& doses, const TimeGrid& grid, int n) {
  Schedule s;
  s.n = n;
  s.steps = grid.steps;
  s.initial.assign(static_cast<std::size_t>(n), 0.0);
  const double dt = grid.dt;
  const std::size_t un = static_cast<std::size_t>(n);

  // Everything that happens at a step, sorted by step (vectors and one sort: regimens with
  // tens of thousands of repeated doses compile in milliseconds).
  enum Kind : int { kStop = 0, kStart = 1, kPartial = 2, kBolus = 3, kMark = 4 };
  struct Event {
    std::int64_t step;
    int kind;
    int index;      // infusion id, or compartment for a bolus
    double amount;  // bolus amount
  };
  std::vector<Event> events;
  std::vector<Infusion> infusions;
  events.push_back({1, kMark, 0, 0.0});
  for (const DoseEvent& d : doses) {
    const std::int64_t first = grid_index(d.time, dt);
    const std::int64_t every = d.repeat > 0 ? grid_index(d.every, dt) : 0;
    double rate = 0.0, whole = 0.0, covered = 0.0;
    if (d.is_infusion()) {
      rate = d.rate > 0.0 ? d.rate : d.amount / d.duration;
      const double duration = d.rate > 0.0 ? d.amount / d.rate : d.duration;
      if (!(duration > 0.0) || !(rate > 0.0)) continue;  // zero amount: nothing enters
      whole = std::floor(duration / dt);
      covered = duration - whole * dt;
      // Ends on the grid (within rounding): no partial step. An infusion shorter than the
      // rounding tolerance is not rounded away: it stays a partial step of its own length.
      if (const std::int64_t on_grid = grid_index(duration, dt); on_grid >= 1) {
        whole = static_cast<double>(on_grid);
        covered = 0.0;
      }
      if (covered <= 0.0 || covered >= dt) covered = 0.0;
    }
    for (std::int64_t k = 0; k <= d.repeat; ++k) {
      const std::int64_t at = first + k * every;
      if (at > grid.steps) break;  // doses after the last grid time are ignored
      if (!d.is_infusion()) {
        if (at == 0)
          s.initial[static_cast<std::size_t>(d.compartment)] += d.amount;
        else
          events.push_back({at, kBolus, d.compartment, d.amount});
        continue;
      }
      const Infusion f{at, d.compartment, rate, static_cast<std::int64_t>(whole), covered};
      const int id = static_cast<int>(infusions.size());
      infusions.push_back(f);
      if (f.full > 0) {
        events.push_back({f.start + 1, kStart, id, 0.0});
        events.push_back({f.start + f.full + 1, kStop, id, 0.0});
      }
      if (f.covered > 0.0) {
        events.push_back({f.start + f.full + 1, kPartial, id, 0.0});
        events.push_back({f.start + f.full + 2, kMark, 0, 0.0});
      }
    }
  }
  // Stable: events of one step keep their dose-line order, so sums are formed in input order.
  std::stable_sort(events.begin(), events.end(),
                   [](const Event& a, const Event& b) { return a.step < b.step; });

  std::vector<int> active;  // infusions covering the whole current step, sorted by id
  s.bp_partial_begin.push_back(0);
  std::size_t e = 0;
  while (e < events.size()) {
    const std::int64_t step = events[e].step;
    if (step > grid.steps) break;
    std::vector<double> bolus(un, 0.0);
    std::size_t e_end = e;
    while (e_end < events.size() && events[e_end].step == step) ++e_end;
    for (std::size_t i = e; i < e_end; ++i) {
      const Event& ev = events[i];
      if (ev.kind == kStop) active.erase(std::find(active.begin(), active.end(), ev.index));
    }
    bool added = false;
    for (std::size_t i = e; i < e_end; ++i) {
      const Event& ev = events[i];
      if (ev.kind == kStart) active.push_back(ev.index), added = true;
      if (ev.kind == kBolus) bolus[static_cast<std::size_t>(ev.index)] += ev.amount;
    }
    if (added) std::sort(active.begin(), active.end());
    if (step >= 1) {
      s.bp_step.push_back(step);
      // Rates are summed afresh from the active set (not as running +/- deltas), so a
      // breakpoint with no active infusion has exactly zero rate.
      std::vector<double> rate(un, 0.0);
      for (int id : active) {
        const Infusion& f = infusions[static_cast<std::size_t>(id)];
        rate[static_cast<std::size_t>(f.compartment)] += f.rate;
      }
      s.bp_rate.insert(s.bp_rate.end(), rate.begin(), rate.end());
      for (std::size_t i = e; i < e_end; ++i) {
        if (events[i].kind != kPartial) continue;
        const Infusion& f = infusions[static_cast<std::size_t>(events[i].index)];
        auto pos = std::find(s.partial_lengths.begin(), s.partial_lengths.end(), f.covered);
        const int idx = static_cast<int>(pos - s.partial_lengths.begin());
        if (pos == s.partial_lengths.end()) s.partial_lengths.push_back(f.covered);
        s.partials.push_back({f.compartment, f.rate, idx});
      }
      s.bp_bolus.insert(s.bp_bolus.end(), bolus.begin(), bolus.end());
      s.bp_partial_begin.push_back(static_cast<std::int64_t>(s.partials.size()));
    }
    e = e_end;
  }

  // Runs of identical breakpoints, from the back.
  const std::int64_t nbp = s.breakpoints();
  s.bp_run.assign(static_cast<std::size_t>(nbp), 1);
  auto same = [&](std::int64_t a, std::int64_t b) {
    if (s.bp_last(a) - s.bp_step[static_cast<std::size_t>(a)] !=
        s.bp_last(b) - s.bp_step[static_cast<std::size_t>(b)])
      return false;
    for (std::size_t r = 0; r < un; ++r) {
      if (s.bp_rate[static_cast<std::size_t>(a) * un + r] !=
              s.bp_rate[static_cast<std::size_t>(b) * un + r] ||
          s.bp_bolus[static_cast<std::size_t>(a) * un + r] !=
              s.bp_bolus[static_cast<std::size_t>(b) * un + r])
        return false;
    }
    const std::int64_t pa = s.bp_partial_begin[static_cast<std::size_t>(a)];
    const std::int64_t pb = s.bp_partial_begin[static_cast<std::size_t>(b)];
    const std::int64_t na = s.bp_partial_begin[static_cast<std::size_t>(a + 1)] - pa;
    if (na != s.bp_partial_begin[static_cast<std::size_t>(b + 1)] - pb) return false;
    for (std::int64_t i = 0; i < na; ++i) {
      const PartialInfusion& x = s.partials[static_cast<std::size_t>(pa + i)];
      const PartialInfusion& y = s.partials[static_cast<std::size_t>(pb + i)];
      if (x.compartment != y.compartment || x.rate != y.rate || x.length_index != y.length_index)
        return false;
    }
    return true;
  };
  for (std::int64_t k = nbp - 2; k >= 0; --k)
    if (same(k, k + 1))
      s.bp_run[static_cast<std::size_t>(k)] = s.bp_run[static_cast<std::size_t>(k + 1)] + 1;
  return s;
}

std::vector<std::int64_t> output_steps(const OutputTimes& out, const TimeGrid& grid) {
  if (!out.all) return out.steps;
  std::vector<std::int64_t> v(static_cast<std::size_t>(grid.steps + 1));
  for (std::int64_t i = 0; i <= grid.steps; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}

}  // namespace pkscan::detail
