#pragma once
// The event record of the exact event-list simulation and its processing order, shared by the
// CPU event solver (events/solver_impl.hpp) and the device's event walk (device/walk_kernels.hpp):
// plain data and PKSCAN_HD functions, no Eigen, so that nvcc compiles it for the device.
#include <cmath>
#include <cstdint>

#include "kernels/hd.hpp"

namespace pkscan::detail {

// kSteady: the steady state of an SS dose record, set (SS=1) or added (SS=2) at the record's
// own time; the record's doses (its own, lagged or not, and ADDL) are kDose events.
enum Kind : int { kStop = 0, kReset = 1, kDose = 2, kObserve = 3, kBoundary = 4, kSteady = 5 };

struct Event {
  double time;
  int cls;           // at equal times: 0 infusion stops, 1 generated arrivals, 2 records
  std::int64_t seq;  // record index (file order)
  int sub;           // order within a record: boundary 0, reset 1, steady state 2, dose 3
  Kind kind;
  int cmt = 0;
  double amount = 0.0;  // after F
  double rate = 0.0;    // > 0: infusion
  double duration = 0.0;
  int ss = 0;
  double ii = 0.0;
  std::int64_t id = -1;   // infusion id
  std::int64_t row = -1;  // output row (observations)
};

// A dataset event before the parameters are known (events/plan.hpp's SubjectPlan, and the
// device's event walk): its time without lag (for stops, without lag and duration), the dose
// number within its record.
struct EventTemplate {
  Event e;
  std::int64_t addl_k = 0;
};

// A dataset record as the event list reads it (DatasetRecord without its vectors), for the CPU's
// plans and the device's event walk, which makes its events itself (record_events).
struct EventRecord {
  double time = 0.0;
  double amt = 0.0;
  double rate = 0.0;
  double ii = 0.0;
  std::int64_t addl = 0;
  std::int32_t evid = 0;
  std::int32_t ss = 0;
  std::int32_t dose_cmt = 0;  // doses: the dosed compartment (0-based, CMT or the default)
  std::int32_t obs_cmt = 0;   // observations: the observed compartment (0-based)
  std::int32_t row = 0;       // the parameter row of the record within its subject
  std::int32_t dose = 0;      // 1 for a record that gives a dose (EVID 1 or 4)
};

// What a subject's records have made so far: infusion ids, observations, and dose records that
// need a boundary at their own time when lagged (the solver adds one per such record with
// lag != 0).
struct PlanCounts {
  std::int64_t next_id = 0;
  std::int64_t obs = 0;
  std::int64_t lag_boundaries = 0;
};

// The events of record `seq` before the parameters are known, handed to emit(EventTemplate) in a
// fixed order (the plan sorts them with `before`, a total order on them). Every record time
// bounds an interval (its parameters govern the interval ending there): observations, resets,
// steady states and unlagged doses are events at the record's time; other records need a
// boundary (for a lagged dose the solver adds it). An infusion always has a stop (with F 0 it
// coincides with the arrival and changes nothing).
template <class Emit>
PKSCAN_HD void record_events(const EventRecord& r, std::int64_t seq, PlanCounts& counts,
                             Emit&& emit) {
  if (r.evid == 2) emit(EventTemplate{Event{r.time, 2, seq, 0, kBoundary}, 0});
  if (r.evid == 0) {
    Event o{r.time, 2, seq, 3, kObserve};
    o.row = counts.obs++;
    emit(EventTemplate{o, 0});
    return;
  }
  if (r.evid == 3 || r.evid == 4) emit(EventTemplate{Event{r.time, 2, seq, 1, kReset}, 0});
  if (r.dose == 0) return;
  const int cmt = r.dose_cmt;
  if (r.evid != 4 && r.ss == 0) ++counts.lag_boundaries;
  const bool infusion = r.rate > 0.0;
  if (r.ss > 0) {  // the steady state at the record's own time (amount and duration: F)
    Event st{r.time, 2, seq, 2, kSteady};
    st.cmt = cmt;
    st.amount = r.amt;
    st.rate = infusion ? r.rate : 0.0;
    st.duration = infusion ? r.amt / r.rate : 0.0;
    st.ss = r.ss;
    st.ii = r.ii;
    emit(EventTemplate{st, 0});
    // A constant infusion at steady state (AMT 0, II 0) ends at the record's time (NONMEM).
    if (r.ii == 0.0) return;
  }
  for (std::int64_t k = 0; k <= r.addl; ++k) {
    const double t = r.time + static_cast<double>(k) * r.ii;
    Event d{t, k == 0 ? 2 : 1, seq, 3, kDose};
    d.cmt = cmt;
    d.amount = r.amt;
    d.rate = infusion ? r.rate : 0.0;
    d.duration = infusion ? r.amt / r.rate : 0.0;
    d.ii = r.ii;
    if (infusion) {
      d.id = counts.next_id++;
      Event stop{t + d.duration, 0, seq, 0, kStop};
      stop.id = d.id;
      stop.cmt = cmt;
      stop.rate = r.rate;
      emit(EventTemplate{stop, k});
    }
    emit(EventTemplate{d, k});
  }
}

// Event t of record r after the F and lag of r's parameter row `row` (f_cols, lag_cols: per
// compartment, the row's columns), into e: doses arrive lag later (a lagged or additional dose
// is a generated arrival), infusion stops move with the arrival and the duration F AMT / RATE,
// steady states take the amount and duration at the record's own time. Returns true when a
// boundary at the record's own time must be inserted too: nothing of a lagged dose record
// happens there, but its parameters still end an interval there.
PKSCAN_HD inline bool place_event(const EventTemplate& t, const EventRecord& r, const double* row,
                                  const int* f_cols, const int* lag_cols, Event& e) {
  e = t.e;
  if (e.kind != kDose && e.kind != kStop && e.kind != kSteady) return false;
  const double f = row[f_cols[e.cmt]];
  const double lag = row[lag_cols[e.cmt]];
  const double amount = f * r.amt;
  const double duration = e.rate > 0.0 ? amount / e.rate : 0.0;
  if (e.kind == kSteady) {  // at the record's own time
    e.amount = amount;
    e.duration = duration;
    return false;
  }
  if (e.kind == kStop) {  // the arrival of its dose plus the duration
    e.time = r.time + static_cast<double>(t.addl_k) * r.ii + lag + duration;
    return false;
  }
  e.time = t.e.time + lag;
  e.cls = (t.addl_k == 0 && lag == 0.0) ? 2 : 1;
  e.amount = amount;
  e.duration = duration;
  return t.addl_k == 0 && lag != 0.0 && r.evid != 4 && r.ss == 0;
}

// The processing order: time, then class (stops, generated arrivals, records), then file order.
PKSCAN_HD inline bool before(const Event& a, const Event& b) {
  if (a.time != b.time) return a.time < b.time;
  if (a.cls != b.cls) return a.cls < b.cls;
  if (a.seq != b.seq) return a.seq < b.seq;
  return a.sub < b.sub;
}

struct Running {
  std::int64_t id;
  int cmt;
  double rate;
};

// Number of infusions of a steady-state infusion dose (duration `dur`, interval `ii` > 0) that
// were started k*ii ago with k >= 1 and are still running: those with k < k0.
PKSCAN_HD inline std::int64_t steady_state_k0(double dur, double ii) {
  std::int64_t k0 = static_cast<std::int64_t>(::ceil(dur / ii - 1e-12));
  if (k0 < 1) k0 = 1;
  return k0;
}

// Phase of an SS dose record's steady state at its own time (NONMEM, help "SS DOSE EVENT
// RECORD": steady state "is computed as if there were no ALAG, and then there is an advance to
// the appropriate point in the steady-state cycle (II-ALAG)"): the time since the last implied
// dose arrived, ii - lag, and 0 when lag >= ii (no advance).
PKSCAN_HD inline double steady_state_phase(double ii, double lag) {
  return lag < ii ? ii - lag : 0.0;
}

}  // namespace pkscan::detail
