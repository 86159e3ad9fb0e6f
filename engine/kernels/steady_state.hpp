#pragma once
// Steady states of SS dose records in closed form, one source for the CPU event solver
// (events/event_list.hpp wraps it for its Propagator) and the device's event walk
// (device/walk_kernels.hpp): the same operations in the same order on both, so the host system's
// device results are the CPU's bits.
//
// The propagator `pr` (Prop) gives a() (A, row-major N x N) and step(d, k, g, e, s): K(d) and
// G(d) (row-major), and the eigenvalue terms e, s when it has them (left as they are otherwise);
// d = 0 gives K = I, G = 0. `runs` (Runs) is a list of implied infusions still running (rate, end
// time): size(), rate(i), end(i), push(rate, end) (false when full), erase(i) (keeps the order).
#include <cstdint>

#include "kernels/event.hpp"
#include "kernels/event_step.hpp"
#include "kernels/hd.hpp"

namespace pkscan::detail {

// Steady state just before a dose given every ii (the dose at this time not included), into x.
// Appends the infusions of earlier doses still running at d.time to `runs` (rate, ends at).
// A steady state that does not exist (no elimination: I - K(ii), or A for a constant infusion,
// singular) or cannot be computed to 8 digits (condition number above kMaxSolveCondition) is NaN.
// Returns false only when `runs` is full.
template <int N, class Prop, class Runs>
PKSCAN_HD bool steady_state_hd(Prop& pr, const Event& d, Runs& runs, double* x) {
  double r[N], m[N * N], t[N], y[N];
  int rp[N], cp[N];
  for (int i = 0; i < N; ++i) x[i] = r[i] = 0.0;
  r[d.cmt] = d.rate;
  if (d.ii == 0.0) {  // constant infusion at steady state: 0 = A x + r
    const double* a = pr.a();
    for (int i = 0; i < N * N; ++i) m[i] = a[i];
    // No equilibrium without elimination (A singular): the steady state does not exist. Nor is
    // one trusted when A is too near singular for the solve to keep 8 digits.
    const double norm = norm1_hd<N>(m);
    if (!lu_full_hd<N>(m, rp, cp) || !well_conditioned_hd<N>(norm, m, rp, cp)) {
      for (int i = 0; i < N; ++i) x[i] = ::nan("");
      return true;
    }
    for (int i = 0; i < N; ++i) t[i] = -r[i];
    lu_solve_hd<N>(m, rp, cp, t, x);
    return true;
  }
  double kii[N * N], gii[N * N], e[N], s[N];  // e, s: not used
  for (int i = 0; i < N; ++i) e[i] = s[i] = 0.0;
  pr.step(d.ii, kii, gii, e, s);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j) m[i * N + j] = (i == j ? 1.0 : 0.0) - kii[i * N + j];
  // Without elimination I - K(ii) is singular and the doses accumulate without bound. Rounding
  // can leave it just invertible (a solution of 1e16 times the dose), so a system too near
  // singular to keep 8 digits counts as singular too.
  const double norm = norm1_hd<N>(m);
  if (!lu_full_hd<N>(m, rp, cp) || !well_conditioned_hd<N>(norm, m, rp, cp)) {
    for (int i = 0; i < N; ++i) x[i] = ::nan("");
    return true;
  }
  if (d.rate <= 0.0) {  // bolus: sum_{k>=1} K(k ii) b = K(ii) (I - K(ii))^-1 b
    for (int i = 0; i < N; ++i) t[i] = 0.0;
    t[d.cmt] = d.amount;
    lu_solve_hd<N>(m, rp, cp, t, y);
    matvec_hd<N>(kii, y, x);
    return true;
  }
  // Infusion of duration D every ii: infusions started k*ii ago with k*ii < D are running
  // (contributing G(k ii) r), the others finished (sum over k >= k0 of K(k ii - D) G(D) r).
  const double dur = d.duration;
  const std::int64_t k0 = steady_state_k0(dur, d.ii);
  double* kk = kii;  // reused: K(ii) is not needed any more
  double* gg = gii;
  for (std::int64_t k = 1; k < k0; ++k) {
    pr.step(static_cast<double>(k) * d.ii, kk, gg, e, s);
    matvec_hd<N>(gg, r, t);
    for (int i = 0; i < N; ++i) x[i] += t[i];
    if (!runs.push(d.rate, d.time - static_cast<double>(k) * d.ii + dur)) return false;
  }
  double kd[N * N], gd[N * N];
  pr.step(dur, kd, gd, e, s);
  pr.step(static_cast<double>(k0) * d.ii - dur, kk, gg, e, s);
  matvec_hd<N>(gd, r, t);
  lu_solve_hd<N>(m, rp, cp, t, y);
  matvec_hd<N>(kk, y, t);
  for (int i = 0; i < N; ++i) x[i] += t[i];
  return true;
}

// Hooks of record_steady_state_hd() that do nothing (the CPU solver's sensitivities follow the
// steady state through its own hooks, events/solver_impl.hpp).
struct NoSteadyStateHooks {
  // The state x just before the virtual arrival at a.time (before its dose).
  PKSCAN_HD void arrival(const Event&, const double*) {}
  // The virtual arrival's bolus of a.amount into a.cmt.
  PKSCAN_HD void bolus(const Event&) {}
  // The state moved over dt from x_old with rates r (k: the step's K; e, s: its eigenvalue
  // terms, zero when the propagator has none).
  PKSCAN_HD void step(double, const double*, const double*, const double*, const double*,
                      const double*) {}
  // An implied infusion of rate `rate` into d.cmt ended (its end moves with F).
  PKSCAN_HD void stop(const Event&, double) {}
};

// The steady state of SS dose record `d` (d.time = the record's time t0; d.amount after F,
// d.rate, d.duration, d.ii, d.cmt) at t0, into x, for a dose that arrives `lag` after its record
// time: the implied doses, given every ii since long before, arrived last at t0 - phase
// (steady_state_phase), and the state at t0 is the steady state that far into the cycle. The
// record's own dose is not included (it arrives at t0 + lag, a kDose event). `runs` receives the
// implied infusions still running at t0 (rate, end time). `r_before` receives the summed rates
// of the implied infusions just before t0 (d x / d t0 = A x + r_before: the derivative with
// respect to the phase). A constant infusion (ii 0) gives the equilibrium -A^-1 r and no runs
// (NONMEM: the infusion terminates at the event time of the SS dose record). Returns false only
// when `runs` is full.
template <int N, class Prop, class Runs, class Hooks>
PKSCAN_HD bool record_steady_state_hd(Prop& pr, const Event& d, double lag, Runs& runs,
                                      double* r_before, Hooks& hooks, double* x) {
  for (int i = 0; i < N; ++i) r_before[i] = 0.0;
  if (d.ii == 0.0) {
    if (!steady_state_hd<N>(pr, d, runs, x)) return false;
    hooks.arrival(d, x);
    return true;
  }
  const double phase = steady_state_phase(d.ii, lag);
  if (phase == d.ii) {  // no lag: the steady state just before a dose, in closed form
    if (!steady_state_hd<N>(pr, d, runs, x)) return false;
    for (int i = 0; i < runs.size(); ++i) r_before[d.cmt] += runs.rate(i);
    hooks.arrival(d, x);
    return true;
  }
  // The last implied arrival, at t0 - phase; then advance by phase.
  Event a = d;
  a.time = d.time - phase;
  const int first = runs.size();
  if (!steady_state_hd<N>(pr, a, runs, x)) return false;
  hooks.arrival(a, x);
  if (a.rate > 0.0) {
    if (a.amount > 0.0 && !runs.push(a.rate, a.time + a.duration)) return false;
  } else {
    x[a.cmt] += a.amount;
    hooks.bolus(a);
  }
  double t = a.time;
  double k[N * N], g[N * N], e[N], s[N], r[N];
  for (int i = 0; i < N; ++i) e[i] = s[i] = 0.0;
  while (true) {
    // The next end of an implied infusion before t0, or t0 (std::min and std::max's choices).
    double tb = d.time;
    for (int i = first; i < runs.size(); ++i) {
      const double end = t < runs.end(i) ? runs.end(i) : t;
      tb = end < tb ? end : tb;
    }
    for (int i = 0; i < N; ++i) r[i] = 0.0;
    for (int i = first; i < runs.size(); ++i) r[d.cmt] += runs.rate(i);
    if (tb > t) {
      pr.step(tb - t, k, g, e, s);
      hooks.step(tb - t, k, x, r, e, s);
      step_state_hd<N>(k, g, x, r, x);
      for (int i = 0; i < N; ++i) r_before[i] = r[i];
      t = tb;
    }
    // Implied infusions ending by now stop (at t0 too: they do not run past it).
    for (int i = first; i < runs.size();)
      if (runs.end(i) <= t) {
        hooks.stop(d, runs.rate(i));
        runs.erase(i);
      } else {
        ++i;
      }
    if (t >= d.time) break;
  }
  return true;
}

}  // namespace pkscan::detail
