#pragma once
// The event walk: one subject's events on one thread, from its plan (walk_job.hpp) and the
// call's parameter rows, on whatever system it is built for (CUDA with nvcc in one generated
// file per compartment count, launch_walk_cuda_<n>.cu, launched from cuda/launch_cuda.cu; OpenMP
// with g++ in runtime_host.cpp). It is the CPU event solver's simulation without sensitivities
// (events/solver_impl.hpp: prepare_subject, simulate, advance_to), step for step: the events its
// records make (kernels/event.hpp's record_events, as the CPU's plans) in the same order after lag
// and F (place_event, and a sort), the parameter row governing each interval, running infusions in
// the same order, resets, steady states (kernels/steady_state.hpp, the CPU's own code) and every
// step's K(d) and G(d) from the row's eigendecomposition (kernels/event_step.hpp, the CPU's own
// code). So the host system gives the CPU's bits, and CUDA differs only through its exp and expm1
// (the CUDA files are built with --fmad=false).
//
// With sensitivities (G) it also carries the solver's forward sensitivities on its fast path
// (walk_sensitivities.hpp; solver_impl.hpp: use, setup_row, propagate, stop_jump, the lag jump of a
// dose, the observation's Jacobian row) and writes each observation's Jacobian row; the divided
// differences are kernels/divided_differences.hpp, the CPU's own, but the small products are plain
// loops, not Eigen's, so the Jacobian is the CPU's to rounding, not to the bit.
//
// With full rows (simulate_dataset) it writes each observation's amounts and concentrations
// too, as the solver's simulate_rows.
//
// What the walk does not do, it leaves to the host's solver (status kWalkHost): rows without a
// fast eigendecomposition (the host marks them before the launch), and subjects with more than
// kWalkList infusions running, stops pending or implied steady-state infusions at once.
#include <cstdint>

#include "device/walk_job.hpp"
#include "kernels/divided_differences.hpp"
#include "kernels/event.hpp"
#include "kernels/event_step.hpp"
#include "kernels/steady_state.hpp"

namespace pkscan::device {

constexpr int kWalkList = 32;        // room in each of the walk's lists
constexpr int kWalkDirections = 64;  // sensitivity directions (events/plan.hpp's kMaxColumns)

// A parameter row (walk_job.hpp's layout) as kernels/steady_state.hpp's propagator: K and G as the
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

// kernels/steady_state.hpp's list of implied infusions, of fixed room.
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

// One subject's walk (the state of events/solver_impl.hpp's Solver, with sensitivities when G).
template <int N, bool G>
class Walker {
 public:
  PKSCAN_HD Walker(const WalkChunk& c, std::int64_t j, std::int64_t first_row)
      : c_(c),
        sj_(c.subject[j]),
        recs_(c.records + c.subject[j].records),
        stride_(c.row_stride),
        rows_(c.rows + first_row * c.row_stride),
        ev_(c.scratch + c.subject[j].scratch),
        first_row_(first_row) {
    if (G) {
      const std::int32_t* d = c.directions + j * (c.model.np + 3);
      pa_ = d[0];
      ps_ = d[1];
      p_ = d[2];
      dir_col_ = d + 3;
      for (int col = 0; col < c.model.np; ++col) dir_of_[col] = -1;
      for (int k = 0; k < p_; ++k) dir_of_[dir_col_[k]] = k;
      for (int k = 0; k < ps_; ++k)
        for (int i = 0; i < N; ++i) s_[k][i] = 0.0;
    }
  }

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
          if (stop_infusion(e.id) && G) stop_jump(e.seq, e.cmt, e.rate);
          break;
        case kReset:
          for (int i = 0; i < N; ++i) x_[i] = 0.0;
          nrun_ = 0;
          cancel_below = cancel_below < e.seq ? e.seq : cancel_below;
          nstop_ = 0;
          if (G)
            for (int k = 0; k < ps_; ++k)
              for (int i = 0; i < N; ++i) s_[k][i] = 0.0;
          break;
        case kSteady: {
          if (e.ss == 1) cancel_below = cancel_below < e.seq ? e.seq : cancel_below;
          // The SS record's own parameter values (not those of other records at its time).
          RowPropagator<N> pr{use(e.seq), c_.model.np};
          const int lag_col = c_.model.lag_col[e.cmt];
          const double lag = params(e.seq)[lag_col];
          WalkRuns runs;
          double r_before[N], xs[N];
          if (G) {
            if (e.ss == 2)
              for (int q = 0; q < ps_; ++q)
                for (int i = 0; i < N; ++i) saved_[q][i] = s_[q][i];
            SteadyHooks hooks{*this};
            if (!record_steady_state_hd<N>(pr, e, lag, runs, r_before, hooks, xs)) return false;
            // The phase ii - lag moves back as the lag grows: d xs / d lag = -(A xs + r).
            const int kl = free_in(e.seq, lag_col) ? dir_of_[lag_col] : -1;
            if (kl >= 0 && e.ii > 0.0 && lag < e.ii) {
              double v[N];
              xdot_of(pr.a(), xs, r_before, v);
              for (int i = 0; i < N; ++i) v[i] = -v[i];
              add_to(kl, v);
            }
            if (e.ss == 2)
              for (int q = 0; q < ps_; ++q)
                for (int i = 0; i < N; ++i) s_[q][i] += saved_[q][i];
          } else {
            NoSteadyStateHooks hooks;
            if (!record_steady_state_hd<N>(pr, e, lag, runs, r_before, hooks, xs)) return false;
          }
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
            add_stop(Stop{runs.end(i), id, e.seq, e.cmt, runs.rate(i), e.ii > 0.0 && lag < e.ii});
          }
          break;
        }
        case kDose: {
          if (e.seq < cancel_below) break;  // cancelled by a later reset or SS=1 record
          const int lag_col = c_.model.lag_col[e.cmt];
          const int f_col = c_.model.f_col[e.cmt];
          int kl = -1, kf = -1;
          double xdot_before[N] = {};
          const double* a_jump = nullptr;
          if (G) {
            // The A of the interval ending here.
            use(governing(e.time));
            kl = free_in(e.seq, lag_col) ? dir_of_[lag_col] : -1;
            kf = free_in(e.seq, f_col) ? dir_of_[f_col] : -1;
            if (kl >= 0) {
              a_jump = jump_matrix(e.time);
              xdot(a_jump, xdot_before);
            }
          }
          if (e.rate > 0.0) {
            if (e.amount > 0.0) {
              if (nrun_ == kWalkList) return false;
              running_[nrun_++] = Running{e.id, e.cmt, e.rate};
            }
          } else {
            x_[e.cmt] += e.amount;
            if (G && kf >= 0) add_unit(kf, e.cmt, recs_[e.seq].amt);
          }
          if (G && kl >= 0) {
            // s += xdot- - xdot+ (d tau / d lag = 1).
            double after[N], jump[N];
            xdot(a_jump, after);
            for (int i = 0; i < N; ++i) jump[i] = xdot_before[i] - after[i];
            add_to(kl, jump);
          }
          break;
        }
        case kObserve: {
          const int cmt = recs_[e.seq].obs_cmt;
          const double* pr = params(e.seq);
          const int vcol = c_.model.vol_col[cmt];
          const double v = pr[vcol];
          const double conc = x_[cmt] / v;
          c_.prediction[sj_.out + e.row] = conc;
          if (c_.amounts != nullptr) {  // the whole row (Solver::simulate_rows)
            const std::int64_t at = (sj_.out + e.row) * N;
            for (int i = 0; i < N; ++i) {
              c_.amounts[at + i] = x_[i];
              c_.concentrations[at + i] = x_[i] / pr[c_.model.vol_col[i]];
              finite_ = finite_ && x_[i] - x_[i] == 0.0;  // false for inf and NaN
            }
          }
          if (G) {
            double* jr = c_.jacobian + (sj_.out + e.row) * c_.model.np;
            for (int col = 0; col < c_.model.np; ++col) jr[col] = 0.0;
            for (int q = 0; q < ps_; ++q) {
              double sc;
              if (basis_) {
                const double* vm = prop_ + c_.model.np + N * N;  // V, column-major
                sc = vm[cmt] * s_[q][0];
                for (int i = 1; i < N; ++i) sc += vm[cmt + i * N] * s_[q][i];
              } else {
                sc = s_[q][cmt];
              }
              jr[dir_col_[q]] = sc / v;
            }
            const int kv = dir_of_[vcol];
            if (kv >= 0 && free_in(e.seq, vcol)) jr[vcol] -= conc / v;
          }
          break;
        }
        case kBoundary:
          break;
      }
    }
    return true;
  }

  // After run(): whether every amount of the rows written is finite (full rows only).
  PKSCAN_HD bool finite() const { return finite_; }

 private:
  struct Stop {
    double time;
    std::int64_t id;
    std::int64_t seq;  // the steady-state dose record
    int cmt;
    double rate;
    bool moves_with_lag;  // its time moves with the record's lag (lag < II)
  };

  // record_steady_state_hd's hooks with sensitivities (Solver::SteadyHooks).
  struct SteadyHooks {
    Walker& w;
    PKSCAN_HD void arrival(const detail::Event& a, const double* x) { w.steady_arrival(a, x); }
    // The bolus F AMT: d/dF = AMT into its compartment (the F part of stop_jump).
    PKSCAN_HD void bolus(const detail::Event& a) { w.stop_jump(a.seq, a.cmt, 0.0, false); }
    PKSCAN_HD void step(double dt, const double*, const double* x_old, const double* r,
                        const double* e, const double* sg) {
      bool has_r = false;
      for (int i = 0; i < N; ++i) has_r = has_r || r[i] != 0.0;
      w.propagate(dt, x_old, r, has_r, e, sg);
    }
    PKSCAN_HD void stop(const detail::Event& d, double rate) {
      w.stop_jump(d.seq, d.cmt, rate, false);
    }
  };

  PKSCAN_HD const double* params(std::int64_t seq) const {
    return rows_ + static_cast<std::int64_t>(recs_[seq].row) * stride_;
  }
  PKSCAN_HD bool free_in(std::int64_t seq, int col) const {
    return ((c_.overridden[first_row_ + recs_[seq].row] >> col) & 1u) == 0;
  }

  // The propagator of record seq's row (its parameters govern the interval ending at its time);
  // with sensitivities, they move into its eigenbasis (Solver::use and setup_row).
  PKSCAN_HD const double* use(std::int64_t seq) {
    const int row = recs_[seq].row;
    if (row == prop_row_) return prop_;
    const double* next = rows_ + static_cast<std::int64_t>(row) * stride_;
    if (G) {
      const int np = c_.model.np;
      if (basis_)  // back to original coordinates: s = V s~
        for (int k = 0; k < ps_; ++k) mul(prop_ + np + N * N, s_[k]);
      for (int k = 0; k < ps_; ++k) mul(next + np + 2 * N * N, s_[k]);  // s~ = V^-1 s
      const double* l = next + np + 4 * N * N;
      for (int i = 0; i < N; ++i)
        for (int j = 0; j < N; ++j) inv_[i + j * N] = l[i] != l[j] ? 1.0 / (l[i] - l[j]) : 0.0;
      basis_ = true;
    }
    prop_row_ = row;
    prop_ = next;
    return prop_;
  }

  // The sensitivities (G): walk_sensitivities.hpp.
  PKSCAN_HD static void mul(const double* m, double* v);
  PKSCAN_HD void add_unit(int k, int cmt, double scale);
  PKSCAN_HD void add_to(int k, double* v);
  PKSCAN_HD void xdot(const double* a, double* out) const;
  PKSCAN_HD static void xdot_of(const double* a, const double* x, const double* r, double* out);
  PKSCAN_HD const double* jump_matrix(double t) const;
  PKSCAN_HD void stop_jump(std::int64_t seq, int cmt, double rate, bool with_lag = true);
  PKSCAN_HD void weights(double tau, const double* e, const double* sg, const double* y,
                         const double* r, bool has_r, double* w) const;
  PKSCAN_HD void propagate(double d, const double* x_old, const double* r, bool has_r,
                           const double* e, const double* sg);
  PKSCAN_HD void frechet(double tau, const double* y, const double* r, double (*out)[N]) const;
  PKSCAN_HD void steady_arrival(const detail::Event& d, const double* xs);
  PKSCAN_HD void steady_state_derivative(const detail::Event& e, const double* xs);

  // The running infusions' rates by compartment.
  PKSCAN_HD void rates(double* r) const {
    for (int i = 0; i < N; ++i) r[i] = 0.0;
    for (int i = 0; i < nrun_; ++i) r[running_[i].cmt] += running_[i].rate;
  }

  // Adds e to the subject's events: by insertion into processing order while the moves stay
  // within a budget of 8 per event (events that come nearly in order, as most records make
  // them), then appended for heap_sort (long ADDL runs with many records between their doses).
  PKSCAN_HD void insert(const detail::Event& e) {
    std::int64_t j = count_++;
    if (over_budget()) {
      ev_[j] = e;
      return;
    }
    while (j > 0 && detail::before(e, ev_[j - 1])) {
      ev_[j] = ev_[j - 1];
      --j;
    }
    ev_[j] = e;
    moves_ += count_ - 1 - j;
  }

  // Whether the insertion has moved more than 8 per event (as the CPU's sort_events).
  PKSCAN_HD bool over_budget() const { return moves_ > 8 * (sj_.events + 8); }

  // Sorts the subject's events into processing order in place (heapsort: no extra memory, n log
  // n). `before` is a strict total order on a subject's events (no two share time, class,
  // record and place within it), so any sort gives the CPU's order.
  PKSCAN_HD void heap_sort() {
    const std::int64_t n = count_;
    const auto sift = [this](std::int64_t root, std::int64_t end) {
      while (true) {
        std::int64_t child = 2 * root + 1;
        if (child >= end) return;
        if (child + 1 < end && detail::before(ev_[child], ev_[child + 1])) ++child;
        if (!detail::before(ev_[root], ev_[child])) return;
        const detail::Event t = ev_[root];
        ev_[root] = ev_[child];
        ev_[child] = t;
        root = child;
      }
    };
    for (std::int64_t k = n / 2 - 1; k >= 0; --k) sift(k, n);
    for (std::int64_t end = n - 1; end > 0; --end) {
      const detail::Event t = ev_[0];
      ev_[0] = ev_[end];
      ev_[end] = t;
      sift(0, end);
    }
  }

  // The subject's events in processing order for this call's lags and F: its records' events
  // (the CPU plan's record_events) placed as the Solver's prepare_subject places them
  // (place_event).
  PKSCAN_HD void prepare() {
    using namespace detail;
    const WalkModel& m = c_.model;
    count_ = 0;
    moves_ = 0;
    PlanCounts counts;
    for (std::int64_t seq = 0; seq < sj_.record_count; ++seq) {
      const WalkRecord& r = recs_[seq];
      record_events(r, seq, counts, [&](const EventTemplate& t) {
        Event e;
        if (place_event(t, r, params(seq), m.f_col, m.lag_col, e))
          insert(Event{r.time, 2, seq, 0, kBoundary});
        insert(e);
      });
    }
    if (over_budget()) heap_sort();
  }

  // The record whose parameters govern the interval ending at t.
  PKSCAN_HD std::int64_t governing(double t) {
    while (cursor_ < sj_.record_count && recs_[cursor_].time < t) ++cursor_;
    return cursor_ == sj_.record_count ? sj_.record_count - 1 : cursor_;
  }

  PKSCAN_HD bool stop_infusion(std::int64_t id) {
    for (int i = 0; i < nrun_; ++i)
      if (running_[i].id == id) {
        for (int q = i; q + 1 < nrun_; ++q) running_[q] = running_[q + 1];
        --nrun_;
        return true;
      }
    return false;
  }

  // A stop of an implied infusion, in (time, id) order.
  PKSCAN_HD void add_stop(const Stop& st) {
    int at = 0;
    while (at < nstop_ &&
           (stops_[at].time < st.time || (stops_[at].time == st.time && stops_[at].id < st.id)))
      ++at;
    for (int q = nstop_; q > at; --q) stops_[q] = stops_[q - 1];
    stops_[at] = st;
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
        rates(r);
        const double* v = row + c_.model.np + N * N;
        detail::eigen_terms_hd<N>(v + 3 * N * N, d, e, s);
        detail::eigen_matrix_hd<N>(v, v + N * N, v + 2 * N * N, e, k);
        if (nrun_ > 0)
          detail::eigen_matrix_hd<N>(v, v + N * N, v + 2 * N * N, s, g);
        else
          for (int i = 0; i < N * N; ++i) g[i] = 0.0;  // not read (no rates)
        if (G) propagate(d, x_, r, nrun_ > 0, e, s);
        detail::step_state_hd<N>(k, g, x_, nrun_ > 0 ? r : nullptr, x_);
        x_time_ = tb;
      }
      while (nstop_ > 0 && stops_[0].time <= x_time_) {
        const Stop st = stops_[0];
        for (int q = 0; q + 1 < nstop_; ++q) stops_[q] = stops_[q + 1];
        --nstop_;
        if (stop_infusion(st.id) && G) stop_jump(st.seq, st.cmt, st.rate, st.moves_with_lag);
      }
    }
  }

  const WalkChunk& c_;
  const WalkSubject sj_;
  const WalkRecord* recs_;
  const std::int64_t stride_;
  const double* rows_;
  detail::Event* ev_;
  const std::int64_t first_row_;
  int prop_row_ = -1;
  const double* prop_ = nullptr;
  // Sensitivities (G): directions [0, pa_) move A, [pa_, ps_) only the inputs, [ps_, p_) only
  // the concentrations; s_ in the current row's eigenbasis once basis_.
  int pa_ = 0, ps_ = 0, p_ = 0;
  const std::int32_t* dir_col_ = nullptr;
  std::int8_t dir_of_[G ? kWalkDirections : 1];
  double s_[G ? kWalkDirections : 1][N];
  // Scratch of the steady states' derivatives (per direction).
  double saved_[G ? kWalkDirections : 1][N];
  double tmp_[G ? kWalkDirections : 1][N];
  double tmp2_[G ? kWalkDirections : 1][N];
  double dy_[G ? kWalkDirections : 1][N];
  double inv_[G ? N * N : 1];
  bool basis_ = false;
  bool finite_ = true;
  std::int64_t count_ = 0;
  std::int64_t moves_ = 0;
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
    std::uint8_t status = kWalkHost;
    if (first_row >= 0) {
      if (c.jacobian != nullptr) {
        Walker<N, true> w(c, j, first_row);
        if (w.run()) status = kWalkOk;
      } else {
        Walker<N, false> w(c, j, first_row);
        if (w.run()) status = w.finite() ? kWalkOk : kWalkNonFinite;
      }
    }
    c.status[j] = status;
  }
};

}  // namespace pkscan::device

// The definitions of Walker's sensitivity members.
#include "device/walk_sensitivities.hpp"
