#pragma once
// The event record of the exact event-list simulation and its processing order, shared by the
// CPU event solver (events/solver.cpp) and the device's event walk (device/walk_kernels.hpp):
// plain data and PKSCAN_HD functions, no Eigen, so that nvcc compiles it for the device.
#include <cmath>
#include <cstdint>

#include "core/hd.hpp"

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
