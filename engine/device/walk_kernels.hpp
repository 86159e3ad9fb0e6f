#pragma once
// The event walk: one subject's events on one thread, from its plan (walk_job.hpp) and the
// call's parameter rows, on whatever system it is built for (CUDA with nvcc in launch_cuda.cu,
// OpenMP with g++ in runtime_host.cpp). It is the CPU event solver's simulation without
// sensitivities (events/solver.cpp: prepare_subject, simulate, advance_to), step for step: event
// order after lag and F (the same insertion sort), the parameter row governing each interval,
// running infusions in the same order, resets, steady states (events/steady_state_hd.hpp, the
// CPU's own code) and every step's K(d) and G(d) from the row's eigendecomposition
// (events/step_hd.hpp, the CPU's own code). So the host system gives the CPU's bits, and CUDA
// differs only through its exp and expm1 (launch_cuda.cu is built with --fmad=false).
//
// What the walk does not do, it leaves to the host's solver (status kWalkHost): rows without a
// fast eigendecomposition (the host marks them before the launch), and subjects with more than
// kWalkList infusions running, stops pending or implied steady-state infusions at once.
#include <cstdint>

#include "device/walk_job.hpp"
#include "events/event.hpp"
#include "events/steady_state_hd.hpp"
#include "events/step_hd.hpp"

namespace pkscan::device {

constexpr int kWalkList = 32;  // room in each of the walk's lists

// A parameter row (walk_job.hpp's layout) as steady_state_hd.hpp's propagator: K and G as the
// CPU's Propagator::step makes them on its fast path.
template <int N>
struct RowPropagator {
  const double* row;
  int np;
  PKSCAN_HD const double* a() const { return row + np; }
  PKSCAN_HD void step(double d, double* k, double* g, double* e, double* s) const {
    if (d == 0.0) {
      for (int i = 0; i < N * N; ++i) k[i] = g[i] = 0.0;
      for (int i = 0; i < N; ++i) k[i * N + i] = 1.0;
      return;
    }
    const double* v = row + np + N * N;
    detail::eigen_terms_hd<N>(v + 3 * N * N, d, e, s);
    detail::eigen_matrix_hd<N>(v, v + N * N, v + 2 * N * N, e, k);
    detail::eigen_matrix_hd<N>(v, v + N * N, v + 2 * N * N, s, g);
  }
};

// steady_state_hd.hpp's list of implied infusions, of fixed room.
struct WalkRuns {
  double rates[kWalkList];
  double ends[kWalkList];
  int n = 0;
  PKSCAN_HD int size() const { return n; }
  PKSCAN_HD double rate(int i) const { return rates[i]; }
  PKSCAN_HD double end(int i) const { return ends[i]; }
  PKSCAN_HD bool push(double rate, double end) {
    if (n == kWalkList) return false;
    rates[n] = rate;
    ends[n] = end;
    ++n;
    return true;
  }
  PKSCAN_HD void erase(int i) {
    for (int q = i; q + 1 < n; ++q) {
      rates[q] = rates[q + 1];
      ends[q] = ends[q + 1];
    }
    --n;
  }
};

// One subject's walk (the state of events/solver.cpp's Solver without sensitivities).
template <int N>
class Walker {
 public:
  PKSCAN_HD Walker(const WalkChunk& c, std::int64_t j, std::int64_t first_row)
      : c_(c),
        sj_(c.subject[j]),
        recs_(c.records + c.subject[j].records),
        stride_(row_stride(N, c.model.np)),
        rows_(c.rows + first_row * row_stride(N, c.model.np)),
        ev_(c.scratch + c.subject[j].scratch) {}

  // Writes the subject's predictions; false when a list ran out of room.
  PKSCAN_HD bool run() {
    using namespace detail;
    prepare();
    for (int i = 0; i < N; ++i) x_[i] = 0.0;
    std::int64_t next_id = sj_.infusion_ids;
    std::int64_t cancel_below = -1;
    x_time_ = count_ > 0 ? ev_[0].time : 0.0;
    for (std::int64_t q = 0; q < count_; ++q) {
      const Event e = ev_[q];
      if (e.time > sj_.last_obs) break;  // nothing after the last observation is reported
      advance_to(e.time);
      switch (e.kind) {
        case kStop:
          stop_infusion(e.id);
          break;
        case kReset:
          for (int i = 0; i < N; ++i) x_[i] = 0.0;
          nrun_ = 0;
          cancel_below = cancel_below < e.seq ? e.seq : cancel_below;
          nstop_ = 0;
          break;
        case kSteady: {
          if (e.ss == 1) cancel_below = cancel_below < e.seq ? e.seq : cancel_below;
          // The SS record's own parameter values (not those of other records at its time).
          RowPropagator<N> pr{use(e.seq), c_.model.np};
          const double lag = params(e.seq)[c_.model.lag_col[e.cmt]];
          WalkRuns runs;
          NoSteadyStateHooks hooks;
          double r_before[N], xs[N];
          if (!record_steady_state_hd<N>(pr, e, lag, runs, r_before, hooks, xs)) return false;
          if (e.ss == 1) {
            for (int i = 0; i < N; ++i) x_[i] = xs[i];
            nrun_ = 0;
            nstop_ = 0;
          } else {
            for (int i = 0; i < N; ++i) x_[i] += xs[i];
          }
          for (int i = 0; i < runs.size(); ++i) {
            if (nrun_ == kWalkList || nstop_ == kWalkList) return false;
            const std::int64_t id = next_id++;
            running_[nrun_++] = Running{id, e.cmt, runs.rate(i)};
            add_stop(runs.end(i), id);
          }
          break;
        }
        case kDose:
          if (e.seq < cancel_below) break;  // cancelled by a later reset or SS=1 record
          if (e.rate > 0.0) {
            if (e.amount > 0.0) {
              if (nrun_ == kWalkList) return false;
              running_[nrun_++] = Running{e.id, e.cmt, e.rate};
            }
          } else {
            x_[e.cmt] += e.amount;
          }
          break;
        case kObserve: {
          const int cmt = recs_[e.seq].obs_cmt;
          c_.prediction[sj_.out + e.row] = x_[cmt] / params(e.seq)[c_.model.vol_col[cmt]];
          break;
        }
        case kBoundary:
          break;
      }
    }
    return true;
  }

 private:
  struct Stop {
    double time;
    std::int64_t id;
  };

  PKSCAN_HD const double* params(std::int64_t seq) const {
    return rows_ + static_cast<std::int64_t>(recs_[seq].row) * stride_;
  }
  // The row of record seq (its parameters govern the interval ending at its time).
  PKSCAN_HD const double* use(std::int64_t seq) { return params(seq); }

  PKSCAN_HD void insert(const detail::Event& e) {
    std::int64_t j = count_++;
    while (j > 0 && detail::before(e, ev_[j - 1])) {
      ev_[j] = ev_[j - 1];
      --j;
    }
    ev_[j] = e;
  }

  // The subject's events in processing order for this call's lags and F (Solver's
  // prepare_subject).
  PKSCAN_HD void prepare() {
    using namespace detail;
    const WalkModel& m = c_.model;
    count_ = 0;
    for (std::int64_t q = 0; q < sj_.events; ++q) {
      const WalkTemplate t = c_.templates[sj_.templates + q];
      Event e = t.e;
      if (e.kind == kDose || e.kind == kStop || e.kind == kSteady) {
        const double* pj = params(e.seq);
        const WalkRecord& r = recs_[e.seq];
        const double f = pj[m.f_col[e.cmt]];
        const double lag = pj[m.lag_col[e.cmt]];
        const double amount = f * r.amt;
        const double duration = e.rate > 0.0 ? amount / e.rate : 0.0;
        if (e.kind == kSteady) {  // at the record's own time
          e.amount = amount;
          e.duration = duration;
        } else if (e.kind == kDose) {
          e.time = t.e.time + lag;
          e.cls = (t.addl_k == 0 && lag == 0.0) ? 2 : 1;
          e.amount = amount;
          e.duration = duration;
          // Nothing of a lagged dose record happens at its own time, but its parameters still
          // end an interval there.
          if (t.addl_k == 0 && lag != 0.0 && r.evid != 4 && r.ss == 0)
            insert(Event{r.time, 2, e.seq, 0, kBoundary});
        } else {  // the arrival of its dose plus the duration
          e.time = r.time + static_cast<double>(t.addl_k) * r.ii + lag + duration;
        }
      }
      insert(e);
    }
  }

  // The record whose parameters govern the interval ending at t.
  PKSCAN_HD std::int64_t governing(double t) {
    while (cursor_ < sj_.record_count && recs_[cursor_].time < t) ++cursor_;
    return cursor_ == sj_.record_count ? sj_.record_count - 1 : cursor_;
  }

  PKSCAN_HD void stop_infusion(std::int64_t id) {
    for (int i = 0; i < nrun_; ++i)
      if (running_[i].id == id) {
        for (int q = i; q + 1 < nrun_; ++q) running_[q] = running_[q + 1];
        --nrun_;
        return;
      }
  }

  // A stop of an implied infusion, in (time, id) order.
  PKSCAN_HD void add_stop(double time, std::int64_t id) {
    int at = 0;
    while (at < nstop_ &&
           (stops_[at].time < time || (stops_[at].time == time && stops_[at].id < id)))
      ++at;
    for (int q = nstop_; q > at; --q) stops_[q] = stops_[q - 1];
    stops_[at] = Stop{time, id};
    ++nstop_;
  }

  // Moves the state to time t, stopping implied infusions on the way (Solver's advance_to).
  PKSCAN_HD void advance_to(double t) {
    while (x_time_ < t) {
      double tb = t;
      if (nstop_ > 0 && stops_[0].time < tb)
        tb = x_time_ < stops_[0].time ? stops_[0].time : x_time_;
      if (tb > x_time_) {
        const double* row = use(governing(tb));
        const double d = tb - x_time_;
        double r[N], k[N * N], g[N * N], e[N], s[N];
        for (int i = 0; i < N; ++i) r[i] = 0.0;
        for (int i = 0; i < nrun_; ++i) r[running_[i].cmt] += running_[i].rate;
        const double* v = row + c_.model.np + N * N;
        detail::eigen_terms_hd<N>(v + 3 * N * N, d, e, s);
        detail::eigen_matrix_hd<N>(v, v + N * N, v + 2 * N * N, e, k);
        if (nrun_ > 0) detail::eigen_matrix_hd<N>(v, v + N * N, v + 2 * N * N, s, g);
        detail::step_state_hd<N>(k, g, x_, nrun_ > 0 ? r : nullptr, x_);
        x_time_ = tb;
      }
      while (nstop_ > 0 && stops_[0].time <= x_time_) {
        const std::int64_t id = stops_[0].id;
        for (int q = 0; q + 1 < nstop_; ++q) stops_[q] = stops_[q + 1];
        --nstop_;
        stop_infusion(id);
      }
    }
  }

  const WalkChunk& c_;
  const WalkSubject sj_;
  const WalkRecord* recs_;
  const std::int64_t stride_;
  const double* rows_;
  detail::Event* ev_;
  std::int64_t count_ = 0;
  std::int64_t cursor_ = 0;
  double x_time_ = 0.0;
  double x_[N];
  detail::Running running_[kWalkList];
  int nrun_ = 0;
  Stop stops_[kWalkList];
  int nstop_ = 0;
};

template <int N>
struct EventWalk {
  WalkChunk c;

  PKSCAN_HD void operator()(std::int64_t j) const {
    const std::int64_t first_row = c.first_row[j];
    bool ok = false;
    if (first_row >= 0) {
      Walker<N> w(c, j, first_row);
      ok = w.run();
    }
    c.status[j] = ok ? kWalkOk : kWalkHost;
  }
};

}  // namespace pkscan::device
