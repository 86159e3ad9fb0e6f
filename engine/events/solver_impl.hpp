#pragma once
// The event solver's definition (solver.hpp states its numeric contract): one class per
// compartment count. Included only by the six files CMake generates, one per count N = 1..6, each
// instantiating make_event_solver_of<N>: apart they compile in less time than in one file, and in
// parallel (docs/performance.md, "Building").
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "core/rate_structure.hpp"
#include "events/event_list.hpp"
#include "events/second_order.hpp"
#include "events/sensitivities.hpp"
#include "events/solver.hpp"
#include "kernels/event_step.hpp"

namespace pkscan::detail {

// Internal linkage, as in a source file: this header is the body of one generated file per
// compartment count, and GCC inlines and specializes the solver's members only when nothing
// outside that file can call them (docs/performance.md, "Thresholds").
namespace {  // NOLINT(google-build-namespaces, cert-dcl59-cpp)

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct VirtualStop {
  double time;
  std::int64_t id;
  int cmt;
  double rate;
  std::int64_t seq;     // the steady-state dose record
  bool moves_with_lag;  // its time moves with the record's lag (lag < II)
};

template <int N>
class Solver final : public EventSolver, Sensitivities<N> {
  using S = Sensitivities<N>;
  using S::add_to, S::add_unit, S::basis_fast_, S::da_, S::dir_col_, S::dir_of_, S::dy_,
      S::enter_basis, S::frechet, S::orig, S::pa_, S::p_, S::prop_, S::propagate, S::ps_, S::s_,
      S::saved_, S::set_orig, S::tmp2_, S::tmp_;

 public:
  Solver(const DatasetSetup& setup, std::size_t max_rows, std::size_t max_events)
      : Sensitivities<N>(static_cast<std::size_t>(setup.np)), setup_(&setup) {
    const std::size_t np = static_cast<std::size_t>(setup.np);
    rows_.reserve(max_rows * np);
    ev_.reserve(max_events);
    running_.reserve(max_events);
    vstops_.reserve(16);
    runs_.reserve(16);
  }

  void predict(const SubjectPlan& plan, std::int64_t s, const double* params, double* out,
               double* jac) override {
    const auto write = [out](std::int64_t row, std::int64_t, double, int, const double*, double c) {
      out[row] = c;
    };
    cols_ = nullptr;
    m_ = 0;
    if (jac != nullptr)
      simulate<true>(plan, s, params, jac, write);
    else
      simulate<false>(plan, s, params, nullptr, write);
  }

  void predict_hessian(const SubjectPlan& plan, std::int64_t s, const double* params, double* out,
                       double* jac, const int* cols, int m, double* hess) override {
    const auto write = [out](std::int64_t row, std::int64_t, double, int, const double*, double c) {
      out[row] = c;
    };
    cols_ = cols;
    m_ = m;
    hess_ = hess;
    std::fill(hess, hess + static_cast<std::size_t>(plan.obs_count * m * m), 0.0);
    simulate<true>(plan, s, params, jac, write);
  }

  bool simulate_rows(const SubjectPlan& plan, std::int64_t s, const double* params,
                     DatasetResult& out, std::int64_t first_row, bool index_columns) override {
    // The whole output row: amounts, concentrations with the volumes in force at this record,
    // the observed compartment's concentration, and the row's index columns.
    const ModelInfo& m = *setup_->model;
    bool finite = true;
    const auto write = [&](std::int64_t obs, std::int64_t seq, double time, int cmt,
                           const double* pr, double c) {
      const std::size_t row = static_cast<std::size_t>(first_row + obs);
      double* o = out.amounts.data() + row * N;
      double* co = out.concentrations.data() + row * N;
      for (int r = 0; r < N; ++r) {
        o[r] = x_(r);
        // The observed compartment's concentration is c already (the same division).
        co[r] = r == cmt ? c : x_(r) / pr[m.volume_parameter[static_cast<std::size_t>(r)]];
        finite = finite && std::isfinite(x_(r));
      }
      out.prediction[row] = c;
      if (!index_columns) return;
      out.subject[row] = s;
      out.record[row] = seq;
      out.time[row] = time;
      out.compartment[row] = cmt;
    };
    simulate<false>(plan, s, params, nullptr, write);
    return finite;
  }

 private:
  using Square = Eigen::Matrix<double, N, N>;

  // ---- State of one evaluation. ----
  const DatasetSetup* setup_;
  const SubjectPlan* plan_ = nullptr;
  const std::vector<EventRecord>* recs_ = nullptr;  // the plan's records
  int np_ = 0;
  std::vector<double> rows_;  // the subject's parameter rows
  std::vector<Event> ev_;
  std::vector<EventTemplate> remade_;  // the events of a plan that keeps none
  std::vector<Running> running_;
  std::vector<VirtualStop> vstops_;  // ascending (time, id)
  std::vector<std::pair<double, double>> runs_;
  int prop_row_ = -1;
  std::size_t cursor_ = 0;
  Vec<N> x_;

  const double* row_ptr(int row) const {
    return rows_.data() + static_cast<std::size_t>(row) * static_cast<std::size_t>(np_);
  }
  const double* p(std::int64_t j) const {
    return row_ptr(plan_->row_of[static_cast<std::size_t>(j)]);
  }
  bool free_in(std::int64_t j, int col) const {
    const RowTemplate& rt =
        plan_->rows[static_cast<std::size_t>(plan_->row_of[static_cast<std::size_t>(j)])];
    return ((rt.overridden >> col) & 1u) == 0;
  }

  std::int64_t governing(double t) {
    const std::vector<EventRecord>& rs = *recs_;
    while (cursor_ < rs.size() && rs[cursor_].time < t) ++cursor_;
    if (cursor_ == rs.size()) return static_cast<std::int64_t>(rs.size()) - 1;
    return static_cast<std::int64_t>(cursor_);
  }

  // The propagator for the parameters of record j; with sensitivities, also dA/dp of that row and
  // the sensitivities moved into its basis.
  template <bool G>
  Propagator<N>& use(std::int64_t j) {
    const int row = plan_->row_of[static_cast<std::size_t>(j)];
    if (row == prop_row_) return prop_;
    if (G && h_.active()) h_.leave_basis(*this);
    if (G && basis_fast_)
      for (int k = 0; k < ps_; ++k) s_[k] = prop_.v() * s_[k];
    Mat<N> a;
    rate_matrix(*setup_->model, row_ptr(row), a.data());
    prop_.reset(a);
    prop_row_ = row;
    if (G) setup_row(row);
    return prop_;
  }

  // dA/dp_k of row `row` for the A directions into da (pa_ matrices; a column that the row's
  // dataset cells override has none).
  void row_derivatives(int row, Mat<N>* da) const {
    const double* pr = row_ptr(row);
    const std::uint64_t overridden = plan_->rows[static_cast<std::size_t>(row)].overridden;
    auto dir_if_free = [&](int col) -> int {
      if (col < 0 || ((overridden >> col) & 1u)) return -1;
      const int k = dir_of_[static_cast<std::size_t>(col)];
      return k < pa_ ? k : -1;
    };
    for (int k = 0; k < pa_; ++k) da[k].setZero();
    const RateStructure& rs = setup_->rates;
    for (std::size_t i = 0; i < rs.micro.size(); ++i) {
      const Eigen::Map<const Mat<N>> b(rs.b[i].data());
      const int mc = rs.micro[i];
      if (!std::isnan(pr[mc])) {
        const int k = dir_if_free(mc);
        if (k >= 0) da[k] += b;
        continue;
      }
      const int c = rs.clearance[i], v = rs.volume[i];
      if (c < 0 || std::isnan(pr[c])) continue;
      const int kc = dir_if_free(c), kv = dir_if_free(v);
      if (kc >= 0) da[kc] += b / pr[v];
      if (kv >= 0) da[kv] -= b * (pr[c] / (pr[v] * pr[v]));
    }
  }

  // dA/dp of row `row` for the A directions, their eigenbasis forms, and the basis change; with
  // second derivatives, also d2A/dp dq and S in the new basis.
  void setup_row(int row) {
    row_derivatives(row, da_.data());
    enter_basis();
    if (!h_.active()) return;
    const std::uint64_t overridden = plan_->rows[static_cast<std::size_t>(row)].overridden;
    h_.set_row(setup_->rates, row_ptr(row), [&](int col) {
      if (col < 0 || ((overridden >> col) & 1u)) return -1;
      const int k = dir_of_[static_cast<std::size_t>(col)];
      return k < pa_ ? k : -1;
    });
    h_.enter_basis(*this);
  }

  // ---- Second order (predict_hessian): the caller's columns and S_pq. ----
  const int* cols_ = nullptr;
  int m_ = 0;
  double* hess_ = nullptr;
  SecondOrder<N> h_;
  std::vector<Mat<N>> ejump_;

  // The second-order jump of an event at t whose time moves with the listed columns
  // (SecondOrder::jump, after its start_jump and set_tau): b the bolus, dr = r- - r+.
  void second_jump(double t, const Vec<N>& b, const Vec<N>& dr) {
    if (std::isnan(t)) {  // inside a steady state's phase: its own row
      h_.jump(*this, b, dr, prop_.a(), da_.data());
      return;
    }
    governing(t);
    Mat<N> a;
    jump_matrix(t, a);
    const std::vector<EventRecord>& rs = *recs_;
    std::size_t j = cursor_;
    while (j < rs.size() && rs[j].time <= t) ++j;
    if (j == rs.size()) j = rs.size() - 1;
    const int row = plan_->row_of[j];
    const Mat<N>* ea = da_.data();
    if (row != prop_row_) {
      ejump_.resize(static_cast<std::size_t>(pa_));
      row_derivatives(row, ejump_.data());
      ea = ejump_.data();
    }
    h_.jump(*this, b, dr, a, ea);
  }

  // The second-order jumps of a dose arrival (a bolus amount, or an infusion's rate) and of an
  // infusion's end, for the listed lag and F of record seq.
  void arrival_second(std::int64_t seq, int cmt, double t, double bolus, double rate) {
    const ModelInfo& m = *setup_->model;
    const int lag = m.lag_parameter[static_cast<std::size_t>(cmt)];
    const int f = m.f_parameter[static_cast<std::size_t>(cmt)];
    h_.start_jump();
    if (!h_.set_tau(lag, free_in(seq, lag) ? 1.0 : 0.0)) return;
    Vec<N> b = Vec<N>::Zero(), dr = Vec<N>::Zero();
    if (rate > 0.0) {
      dr(cmt) = -rate;
    } else {
      b(cmt) = bolus;
      if (free_in(seq, f)) h_.set_db(f, cmt, (*recs_)[static_cast<std::size_t>(seq)].amt);
    }
    second_jump(t, b, dr);
  }
  // t: NaN for an implied infusion ending inside a steady state's phase (the row of the SS record).
  void stop_second(std::int64_t seq, int cmt, double t, double rate, bool with_lag = true) {
    const ModelInfo& m = *setup_->model;
    const int lag = m.lag_parameter[static_cast<std::size_t>(cmt)];
    const int f = m.f_parameter[static_cast<std::size_t>(cmt)];
    h_.start_jump();
    const bool moves = with_lag && h_.set_tau(lag, free_in(seq, lag) ? 1.0 : 0.0);
    const double amt = (*recs_)[static_cast<std::size_t>(seq)].amt;
    if (!(h_.set_tau(f, free_in(seq, f) ? amt / rate : 0.0) || moves)) return;
    Vec<N> dr = Vec<N>::Zero();
    dr(cmt) = rate;
    second_jump(t, Vec<N>::Zero(), dr);
  }

  Vec<N> rates() const {
    Vec<N> r = Vec<N>::Zero();
    for (const Running& q : running_) r(q.cmt) += q.rate;
    return r;
  }

  // Directions of this evaluation: the columns whose derivative can be non-zero.
  void setup_directions(const double* params) {
    std::fill(dir_of_.begin(), dir_of_.end(), -1);
    p_ = setup_->directions(*plan_, params, dir_col_.data(), pa_, ps_);
    for (int k = 0; k < p_; ++k) dir_of_[static_cast<std::size_t>(dir_col_[k])] = k;
    for (int k = 0; k < ps_; ++k) s_[k].setZero();
    basis_fast_ = false;
  }

  // Parameter rows of the subject (validated) and its events in processing order.
  void prepare_subject(const SubjectPlan& plan, std::int64_t s, const double* params) {
    prepare_rows(plan, s, params);
    prepare_events();
  }
  void prepare_rows(const SubjectPlan& plan, std::int64_t s, const double* params) {
    const DatasetSetup& setup = *setup_;
    plan_ = &plan;
    recs_ = &plan.records;
    np_ = setup.np;
    setup.fill_rows(plan, s, params, rows_);
  }
  void prepare_events() {
    const ModelInfo& m = *setup_->model;
    // A kept plan without its events (build_plan with a scratch) has them made again here.
    const std::vector<EventTemplate>* templates = &plan_->events;
    if (templates->empty() && plan_->event_count > 0) {
      remake_events(*plan_, remade_);
      templates = &remade_;
    }
    ev_.resize(templates->size() + plan_->lag_boundaries);  // no allocation once warm
    std::size_t count = 0;
    // Insertion sort: the template order is the order for lag 0 and F 1, so few moves.
    const auto insert = [&](const Event& e) {
      std::size_t j = count++;
      while (j > 0 && before(e, ev_[j - 1])) {
        ev_[j] = ev_[j - 1];
        --j;
      }
      ev_[j] = e;
    };
    for (const EventTemplate& t : *templates) {
      const EventRecord& r = plan_->records[static_cast<std::size_t>(t.e.seq)];
      Event e;
      if (place_event(t, r, p(t.e.seq), m.f_parameter.data(), m.lag_parameter.data(), e))
        insert(Event{r.time, 2, e.seq, 0, kBoundary});
      insert(e);
    }
    ev_.resize(count);
    running_.clear();
    vstops_.clear();
    prop_row_ = -1;
    cursor_ = 0;
    x_.setZero();
  }

  // The rate matrix of the interval that starts at t (the one an event at t moves into when it
  // moves later): that of the first record after t. Call after governing(t).
  void jump_matrix(double t, Mat<N>& a) const {
    const std::vector<EventRecord>& rs = *recs_;
    std::size_t j = cursor_;
    while (j < rs.size() && rs[j].time <= t) ++j;
    if (j == rs.size()) j = rs.size() - 1;
    const int row = plan_->row_of[j];
    if (row == prop_row_)
      a = prop_.a();
    else
      rate_matrix(*setup_->model, row_ptr(row), a.data());
  }

  // Removes the running infusion `id`; returns its rate (0 when it was not running).
  bool stop_infusion(std::int64_t id) {
    for (std::size_t i = 0; i < running_.size(); ++i)
      if (running_[i].id == id) {
        running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
        return true;
      }
    return false;
  }

  // Jump of an infusion stop of rate R into cmt at a time that moves with the dose's lag
  // (d tau = 1, when `with_lag`) and F (d tau = AMT / R): s += R e_cmt d tau.
  void stop_jump(std::int64_t seq, int cmt, double rate, bool with_lag = true) {
    const ModelInfo& m = *setup_->model;
    const int lag_col = m.lag_parameter[static_cast<std::size_t>(cmt)];
    const int f_col = m.f_parameter[static_cast<std::size_t>(cmt)];
    const int kl = dir_of_[static_cast<std::size_t>(lag_col)];
    const int kf = dir_of_[static_cast<std::size_t>(f_col)];
    if (with_lag && kl >= 0 && free_in(seq, lag_col)) add_unit(kl, cmt, rate);
    if (kf >= 0 && free_in(seq, f_col))
      add_unit(kf, cmt, (*recs_)[static_cast<std::size_t>(seq)].amt);
  }

  // The sensitivities through record_steady_state() (the steady state of an SS record): set
  // from the closed form's derivative at the last implied arrival, moved over the phase with the
  // record's A, with the jumps of the bolus and of implied infusions ending (their ends move
  // with F; the phase's dependence on the lag is added by the caller).
  struct SteadyHooks {
    Solver& sv;
    using CVec = Eigen::Map<const Vec<N>>;
    void arrival(const Event& a, const double* x) {
      sv.steady_state_derivative(a, CVec(x));
      for (int q = 0; q < sv.ps_; ++q) sv.set_orig(q, sv.tmp2_[q]);
    }
    // The bolus F AMT: d/dF = AMT into its compartment (the F part of stop_jump).
    void bolus(const Event& a) { sv.stop_jump(a.seq, a.cmt, 0.0, false); }
    void step(double dt, const double* k, const double* x_old, const double* r, const double* e,
              const double* sg) {
      const Vec<N> rv = CVec(r);
      const Mat<N> km = Eigen::Map<const Mat<N>>(k);
      if (sv.h_.active())
        sv.h_.propagate(sv, dt, km, CVec(x_old), rv, !rv.isZero(0.0), CVec(e), CVec(sg));
      sv.propagate(dt, km, CVec(x_old), rv, !rv.isZero(0.0), CVec(e), CVec(sg));
    }
    void stop(const Event& d, double rate) {
      sv.stop_jump(d.seq, d.cmt, rate, false);
      if (sv.h_.active()) sv.stop_second(d.seq, d.cmt, kNaN, rate, false);
    }
  };

  // Inlined into simulate() (once per event; a call costs a few percent of a dataset run:
  // docs/performance.md, "Thresholds").
  template <bool G>
  __attribute__((always_inline)) inline void advance_to(double t, Mat<N>& k, Mat<N>& g) {
    while (x_time_ < t) {
      double tb = t;
      if (!vstops_.empty() && vstops_.front().time < tb)
        tb = std::max(x_time_, vstops_.front().time);
      if (tb > x_time_) {
        Propagator<N>& pr = use<G>(governing(tb));
        const double d = tb - x_time_;
        const Vec<N> r = rates();
        Vec<N> e = Vec<N>::Zero(), sg = Vec<N>::Zero();
        if (G)
          pr.step(d, k, g, e, sg);
        else
          pr.step(d, k, g);
        if (G && h_.active()) h_.propagate(*this, d, k, x_, r, !running_.empty(), e, sg);
        if (G) propagate(d, k, x_, r, !running_.empty(), e, sg);
        step_state_hd<N>(k.data(), g.data(), x_.data(), running_.empty() ? nullptr : r.data(),
                         x_.data());
        x_time_ = tb;
      }
      while (!vstops_.empty() && vstops_.front().time <= x_time_) {
        const VirtualStop vs = vstops_.front();
        vstops_.erase(vstops_.begin());
        if (stop_infusion(vs.id) && G) {
          stop_jump(vs.seq, vs.cmt, vs.rate, vs.moves_with_lag);
          if (h_.active()) stop_second(vs.seq, vs.cmt, vs.time, vs.rate, vs.moves_with_lag);
        }
      }
    }
  }
  double x_time_ = 0.0;

  // Derivatives of the steady state xs of dose e into tmp2_
  // (Sensitivities::steady_state_derivative) and, with second derivatives, S
  // (SecondOrder::steady_state).
  void steady_state_derivative(const Event& e, const Vec<N>& xs) {
    const int f_col = setup_->model->f_parameter[static_cast<std::size_t>(e.cmt)];
    const int kf = free_in(e.seq, f_col) ? dir_of_[static_cast<std::size_t>(f_col)] : -1;
    const double amt = (*recs_)[static_cast<std::size_t>(e.seq)].amt;
    S::steady_state_derivative(e, xs, kf, amt);
    if (h_.active()) h_.steady_state(*this, e, xs, kf, amt);
  }

  // Runs the subject's events; at each observation calls observe(event, compartment, parameter
  // row, concentration) with x_ the state there, and with G fills jac.
  // Whether no row of the subject lags a dose (with bolus_only plans: the template order and
  // times are the events', and only the amounts take F).
  bool unlagged() const {
    const ModelInfo& m = *setup_->model;
    for (std::size_t t = 0; t < plan_->rows.size(); ++t) {
      const double* row = row_ptr(static_cast<int>(t));
      for (int c = 0; c < N; ++c)
        if (((plan_->dosed >> c) & 1u) && row[m.lag_parameter[static_cast<std::size_t>(c)]] != 0.0)
          return false;
    }
    return true;
  }

  // simulate<false> of a bolus_only plan without lags: the templates in order, each dose's
  // amount F AMT of its record's row; the same steps and the same bits as simulate's general
  // walk, without placing and sorting the events.
  template <class Observe>
  void simulate_bolus(Observe&& observe) {
    const ModelInfo& m = *setup_->model;
    prop_row_ = -1;
    cursor_ = 0;
    x_.setZero();
    const std::vector<BolusStep>& steps = plan_->bolus;
    x_time_ = steps.empty() ? 0.0 : steps.front().time;
    Mat<N> k, g;
    for (const BolusStep& t : steps) {
      if (t.time > plan_->last_obs) break;  // nothing after the last observation is reported
      if (x_time_ < t.time) {
        Propagator<N>& pr = use<false>(t.governing);
        const Mat<N>& kt = pr.transition(t.time - x_time_, k, g);
        step_state_hd<N>(kt.data(), g.data(), x_.data(), nullptr, x_.data());
        x_time_ = t.time;
      }
      if (t.kind == kDose) {
        x_(t.cmt) += p(t.seq)[m.f_parameter[static_cast<std::size_t>(t.cmt)]] * t.amt;
      } else if (t.kind == kObserve) {
        const double* pr = p(t.seq);
        const int cmt = t.cmt;
        observe(t.row, t.seq, t.time, cmt, pr,
                x_(cmt) / pr[m.volume_parameter[static_cast<std::size_t>(cmt)]]);
      }
    }
  }

  template <bool G, class Observe>
  void simulate(const SubjectPlan& plan, std::int64_t s, const double* params, double* jac,
                Observe&& observe) {
    if (!G && plan.bolus_only) {
      prepare_rows(plan, s, params);
      if (unlagged()) {
        simulate_bolus(observe);
        return;
      }
      prepare_events();
    } else {
      prepare_subject(plan, s, params);
    }
    const ModelInfo& m = *setup_->model;
    const std::vector<EventRecord>& recs = *recs_;
    const std::size_t np = static_cast<std::size_t>(np_);
    if (G) {
      setup_directions(params);
      h_.begin(cols_, m_, dir_of_.data(), pa_, ps_);
      std::fill(jac, jac + static_cast<std::size_t>(plan_->obs_count) * np, 0.0);
    }
    std::int64_t next_id = plan_->infusion_ids;
    x_time_ = ev_.empty() ? 0.0 : ev_.front().time;
    Mat<N> k, g;
    std::int64_t cancel_below = -1;
    Vec<N> xdot_before = Vec<N>::Zero();
    Mat<N> a_jump = Mat<N>::Zero();
    for (const Event& e : ev_) {
      if (e.time > plan_->last_obs) break;  // nothing after the last observation is reported
      advance_to<G>(e.time, k, g);
      switch (e.kind) {
        case kStop:
          if (stop_infusion(e.id) && G) {
            stop_jump(e.seq, e.cmt, e.rate);
            if (h_.active()) stop_second(e.seq, e.cmt, e.time, e.rate);
          }
          break;
        case kReset:
          x_.setZero();
          running_.clear();
          cancel_below = std::max(cancel_below, e.seq);
          vstops_.clear();
          if (G)
            for (int q = 0; q < ps_; ++q) s_[q].setZero();
          if (G) h_.clear();
          break;
        case kSteady: {
          if (e.ss == 1) cancel_below = std::max(cancel_below, e.seq);
          // The SS record's own parameter values (not those of other records at its time).
          Propagator<N>& pr = use<G>(e.seq);
          const double lag = p(e.seq)[m.lag_parameter[static_cast<std::size_t>(e.cmt)]];
          if (G && e.ss == 2) {
            for (int q = 0; q < ps_; ++q) saved_[q] = s_[q];
            if (h_.active()) h_.save();
          }
          runs_.clear();
          Vec<N> r_before;
          Vec<N> xs;
          if (G) {
            SteadyHooks hooks{*this};
            xs = detail::record_steady_state(pr, e, lag, runs_, r_before, hooks);
            // The phase ii - lag moves back as the lag grows: d xs / d lag = -(A xs + r).
            const int lag_col = m.lag_parameter[static_cast<std::size_t>(e.cmt)];
            const int kl =
                free_in(e.seq, lag_col) ? dir_of_[static_cast<std::size_t>(lag_col)] : -1;
            if (kl >= 0 && e.ii > 0.0 && lag < e.ii) {
              if (h_.active()) h_.steady_state_phase(*this, kl, xs, r_before);
              add_to(kl, Vec<N>(-(pr.a() * xs + r_before)), 1.0);
            }
            if (e.ss == 2) {
              for (int q = 0; q < ps_; ++q) s_[q] += saved_[q];
              if (h_.active()) h_.restore_add();
            }
          } else {
            detail::NoSteadyStateHooks hooks;
            xs = detail::record_steady_state(pr, e, lag, runs_, r_before, hooks);
          }
          if (e.ss == 1) {
            x_ = xs;
            running_.clear();
            vstops_.clear();
          } else {
            x_ += xs;
          }
          for (const auto& run : runs_) {
            const std::int64_t id = next_id++;
            running_.push_back({id, e.cmt, run.first});
            VirtualStop vs{run.second, id, e.cmt, run.first, e.seq, e.ii > 0.0 && lag < e.ii};
            auto it = vstops_.begin();
            while (it != vstops_.end() &&
                   (it->time < vs.time || (it->time == vs.time && it->id < vs.id)))
              ++it;
            vstops_.insert(it, vs);
          }
          break;
        }
        case kDose: {
          if (e.seq < cancel_below) break;  // cancelled by a later reset or SS=1 record
          const int lag_col = m.lag_parameter[static_cast<std::size_t>(e.cmt)];
          const int f_col = m.f_parameter[static_cast<std::size_t>(e.cmt)];
          int kl = -1, kf = -1;
          if (G) {
            // The A of the interval ending here (also the steady state's parameters).
            use<G>(governing(e.time));
            kl = free_in(e.seq, lag_col) ? dir_of_[static_cast<std::size_t>(lag_col)] : -1;
            kf = free_in(e.seq, f_col) ? dir_of_[static_cast<std::size_t>(f_col)] : -1;
            if (kl >= 0) {
              jump_matrix(e.time, a_jump);
              xdot_before = a_jump * x_ + rates();
            }
          }
          if (e.rate > 0.0) {
            if (e.amount > 0.0) running_.push_back({e.id, e.cmt, e.rate});
          } else {
            x_(e.cmt) += e.amount;
            if (G && kf >= 0) add_unit(kf, e.cmt, recs[static_cast<std::size_t>(e.seq)].amt);
          }
          if (G && kl >= 0) {
            // s += xdot- - xdot+ (d tau / d lag = 1).
            const Vec<N> jump = xdot_before - (a_jump * x_ + rates());
            add_to(kl, jump, 1.0);
            if (h_.active()) arrival_second(e.seq, e.cmt, e.time, e.amount, e.rate);
          }
          break;
        }
        case kObserve: {
          const double* pr = p(e.seq);
          const int cmt = recs[static_cast<std::size_t>(e.seq)].obs_cmt;
          const int vcol = m.volume_parameter[static_cast<std::size_t>(cmt)];
          const double v = pr[vcol];
          const double c = x_(cmt) / v;
          observe(e.row, e.seq, e.time, cmt, pr, c);
          if (G) {
            double* jr = jac + static_cast<std::size_t>(e.row) * np;
            for (int q = 0; q < ps_; ++q) {
              const double sc = basis_fast_ ? prop_.v().row(cmt).dot(s_[q]) : s_[q](cmt);
              jr[dir_col_[static_cast<std::size_t>(q)]] = sc / v;
            }
            const int kv = dir_of_[static_cast<std::size_t>(vcol)];
            if (kv >= 0 && free_in(e.seq, vcol)) jr[vcol] -= c / v;
            if (h_.active())
              h_.observe(*this, x_, cmt, v, kv >= 0 && free_in(e.seq, vcol) ? kv : -1,
                         hess_ + static_cast<std::size_t>(e.row * m_ * m_));
          }
          break;
        }
        case kBoundary:
          break;
      }
    }
  }
};

}  // namespace

template <int N>
std::unique_ptr<EventSolver> make_event_solver_of(const DatasetSetup& setup, std::size_t max_rows,
                                                  std::size_t max_events) {
  return std::make_unique<Solver<N>>(setup, max_rows, max_events);
}

}  // namespace pkscan::detail
