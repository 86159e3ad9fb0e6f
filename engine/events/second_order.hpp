#pragma once
// Second-order sensitivities of the event solver: S_pq = d2x / dp dq for the pairs of a caller's
// columns (the Predictor's Hessians), carried beside the first-order ones (sensitivities.hpp).
//
// Over an interval of length d with constant A and infusion rates r:
//   S_pq(t + d) = K S_pq + dK_p s_q + dK_q s_p + d2K_pq x + d2G_pq r,
// with d2K_pq the second derivative of expm(A d) in the directions E_p = dA/dp, E_q and
// E_pq = d2A/dp dq (non-zero for a clearance and its volume). On the eigenbasis path
// (Daleckii-Krein, second order) V^-1 d2K_pq V = sum_m f[l_i, l_m, l_j] (E~_p,im E~_q,mj +
// E~_q,im E~_p,mj) + Phi o E~_pq, f = exp(. d), and likewise for G with g = (exp(. d) - 1) / .;
// the divided differences of exp at three points (and with 0, four) come from the exponential
// of a bidiagonal matrix (expm_derivative.hpp), exact for close or equal eigenvalues. On the
// fallback path d2K_pq and d2G_pq are blocks of a 5n x 5n block exponential.
//
// An event at a time tau(p) that moves with the parameters (a lagged arrival, tau_lag = 1; an
// infusion's end, tau_lag = 1 and tau_F = AMT / RATE; tau is linear in them), adding b(p) to the
// state (a bolus: b = F AMT e_cmt, b_F = AMT e_cmt) and changing the rates by -dr (dr = r- - r+),
// adds to S_pq, with A and E of the interval after the event (the first-order jump's):
//   -(E_q b + A b_q) tau_p - (E_p b + A b_p) tau_q - A (dr - A b) tau_p tau_q.
// (Differentiating the first-order jump s+ = s- + b_p + (xdot- - xdot+) tau_p once more, with
// the state after the event moved over the shifted interval: the terms of the propagator's
// dependence on the interval length cancel.)
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/rate_structure.hpp"
#include "events/sensitivities.hpp"

namespace pkscan::detail {

template <int N>
class SecondOrder {
 public:
  using Square = Eigen::Matrix<double, N, N>;

  // Starts an evaluation for the columns cols[0 .. m) (directions dir_of[col], -1 for none) with
  // the state directions [0, ps) of which [0, pa) move A.
  void begin(const int* cols, int m, const int* dir_of, int pa, int ps) {
    m_ = m;
    cols_ = cols;
    ps_ = ps;
    tau_.assign(static_cast<std::size_t>(m), 0.0);
    db_.assign(static_cast<std::size_t>(m), Vec<N>::Zero());
    pa_ = pa;
    md_.assign(static_cast<std::size_t>(m), -1);
    for (int a = 0; a < m; ++a) md_[static_cast<std::size_t>(a)] = dir_of[cols[a]];
    pairs_.clear();
    pair_of_.assign(static_cast<std::size_t>(m * m), -1);
    for (int a = 0; a < m; ++a)
      for (int b = a; b < m; ++b) {
        const int p = md_[static_cast<std::size_t>(a)], q = md_[static_cast<std::size_t>(b)];
        if (p < 0 || q < 0 || p >= ps || q >= ps) continue;
        pair_of_[static_cast<std::size_t>(a * m + b)] = static_cast<int>(pairs_.size());
        pair_of_[static_cast<std::size_t>(b * m + a)] = static_cast<int>(pairs_.size());
        pairs_.push_back({a, b, p, q});
      }
    s2_.assign(pairs_.size(), Vec<N>::Zero());
    epq_.assign(pairs_.size(), Mat<N>::Zero());
    etpq_.assign(pairs_.size(), Square::Zero());
    has_epq_.assign(pairs_.size(), 0);
    clear_caches();
  }
  bool active() const { return m_ > 0; }
  int columns() const { return m_; }
  // The direction of column a of the caller's list (-1: none).
  int direction(int a) const { return md_[static_cast<std::size_t>(a)]; }
  // The pair of columns a, b (-1 when S_ab is identically 0).
  int pair(int a, int b) const { return pair_of_[static_cast<std::size_t>(a * m_ + b)]; }
  // A reset: the state and its derivatives start again from 0.
  void clear() {
    for (Vec<N>& v : s2_) v.setZero();
  }

  // E_pq = d2A/dp dq of a parameter row `pr` (dir(col): the A direction of a column, -1 for
  // none): -B / V^2 for a clearance and its source volume, 2 B CL / V^3 for the volume.
  template <class Dir>
  void set_row(const RateStructure& rs, const double* pr, Dir&& dir) {
    clear_epq();
    for (std::size_t i = 0; i < rs.micro.size(); ++i) {
      const int c = rs.clearance[i], v = rs.volume[i];
      if (!std::isnan(pr[rs.micro[i]]) || c < 0 || std::isnan(pr[c])) continue;
      const Eigen::Map<const Mat<N>> b(rs.b[i].data());
      const int kc = dir(c), kv = dir(v);
      if (kc >= 0 && kv >= 0) add_epq(kc, kv, Mat<N>(b * (-1.0 / (pr[v] * pr[v]))));
      if (kv >= 0) add_epq(kv, kv, Mat<N>(b * (2.0 * pr[c] / (pr[v] * pr[v] * pr[v]))));
    }
  }

  // The jump's tau and d b / dp (jump()): start_jump() clears them; set_tau(col, value) sets
  // d tau / d col where col is listed with a direction and value != 0 (returns whether it did);
  // set_db(col, cmt, value) likewise for component cmt of d b / d col.
  void start_jump() {
    std::fill(tau_.begin(), tau_.end(), 0.0);
    for (Vec<N>& v : db_) v.setZero();
  }
  bool set_tau(int col, double value) {
    const int a = listed(col);
    if (a < 0 || value == 0.0) return false;
    tau_[static_cast<std::size_t>(a)] = value;
    return true;
  }
  void set_db(int col, int cmt, double value) {
    const int a = listed(col);
    if (a >= 0) db_[static_cast<std::size_t>(a)](cmt) = value;
  }

  // The Hessian of an observation of compartment cmt (state x, volume v, the volume's direction
  // kv or -1) into h (m x m): d2c/dp dq = S_pq / v - [q = V] s_p / v^2 - [p = V] s_q / v^2
  // + 2 [p = q = V] x / v^3.
  void observe(const Sensitivities<N>& sv, const Vec<N>& x, int cmt, double v, int kv,
               double* h) const {
    const auto sc = [&](int p) {
      if (p < 0 || p >= ps_) return 0.0;
      return sv.basis_fast_ ? sv.prop_.v().row(cmt).dot(sv.s_[p]) : sv.s_[p](cmt);
    };
    for (int a = 0; a < m_; ++a)
      for (int b = a; b < m_; ++b) {
        const int i = pair(a, b);
        const int p = direction(a), q = direction(b);
        double value = i >= 0 ? component(sv, i, cmt) / v : 0.0;
        if (kv >= 0 && q == kv) value -= sc(p) / (v * v);
        if (kv >= 0 && p == kv) value -= sc(q) / (v * v);
        if (kv >= 0 && p == kv && q == kv) value += 2.0 * x(cmt) / (v * v * v);
        h[a * m_ + b] = value;
        h[b * m_ + a] = value;
      }
  }

  // E_pq of the next row: zero, then set by add_epq (directions p, q < pa).
  void clear_epq() {
    for (std::size_t i = 0; i < pairs_.size(); ++i) {
      epq_[i].setZero();
      has_epq_[i] = 0;
    }
  }
  void add_epq(int p, int q, const Mat<N>& value) {
    for (std::size_t i = 0; i < pairs_.size(); ++i)
      if ((pairs_[i].p == p && pairs_[i].q == q) || (pairs_[i].p == q && pairs_[i].q == p)) {
        epq_[i] += value;
        has_epq_[i] = 1;
      }
  }

  // Before the propagator changes rows: S into original coordinates.
  void leave_basis(const Sensitivities<N>& sv) {
    if (!sv.basis_fast_) return;
    for (Vec<N>& v : s2_) v = sv.prop_.v() * v;
  }
  // After the row's first-order set-up (Sensitivities::enter_basis) and its E_pq: S and E_pq in
  // its basis.
  void enter_basis(const Sensitivities<N>& sv) {
    clear_caches();
    if (!sv.basis_fast_) return;
    const Square& v = sv.prop_.v();
    const Square& vi = sv.prop_.vinv();
    for (std::size_t i = 0; i < pairs_.size(); ++i)
      if (has_epq_[i]) etpq_[i].noalias() = vi * (epq_[i] * v);
    for (Vec<N>& w : s2_) w = vi * w;
  }

  // Moves S over an interval of length d, before the first-order step (sv.s_ still at the
  // interval's start). k: K(d); x_old: the state at the start; e, sg: the eigen terms (fast).
  void propagate(Sensitivities<N>& sv, double d, const Mat<N>& k, const Vec<N>& x_old,
                 const Vec<N>& r, bool has_r, const Vec<N>& e, const Vec<N>& sg) {
    if (pairs_.empty()) return;
    if (sv.basis_fast_) {
      propagate_fast(sv, d, x_old, r, has_r, e, sg);
      return;
    }
    const Mat<N>* dkg = sv.fallback_.get(sv.prop_.a(), sv.da_.data(), sv.pa_, d);
    const Mat<N>* d2 = second_blocks(sv, d);
    for (std::size_t i = 0; i < pairs_.size(); ++i) {
      const Pair& pq = pairs_[i];
      Vec<N> y = k * s2_[i];
      if (pq.p < pa_) y.noalias() += dkg[2 * pq.p] * sv.s_[pq.q];
      if (pq.q < pa_) y.noalias() += dkg[2 * pq.q] * sv.s_[pq.p];
      if (pq.p < pa_ && pq.q < pa_) {
        y.noalias() += d2[2 * i] * x_old;
        if (has_r) y.noalias() += d2[2 * i + 1] * r;
      }
      s2_[i] = y;
    }
  }

  // The jump of an event whose time moves (module comment), with tau and d b / dp as set after
  // start_jump(): b the bolus it adds, dr = r- - r+, `a` and `ea` (per A direction) the A and
  // dA/dp of the interval after the event.
  void jump(Sensitivities<N>& sv, const Vec<N>& b, const Vec<N>& dr, const Mat<N>& a,
            const Mat<N>* ea) {
    const double* tau = tau_.data();
    const Vec<N>* bq = db_.data();
    const Vec<N> fjump = dr - a * b;  // xdot- - xdot+
    for (std::size_t i = 0; i < pairs_.size(); ++i) {
      const Pair& pq = pairs_[i];
      const double tp = tau[pq.a], tq = tau[pq.b];
      if (tp == 0.0 && tq == 0.0) continue;
      Vec<N> delta = -(a * fjump) * (tp * tq);
      const auto moved = [&](int dir, int col, double t) {  // -(E b + A b') t
        if (t == 0.0) return;
        Vec<N> v = a * bq[col];
        if (dir < pa_) v.noalias() += ea[dir] * b;
        delta -= v * t;
      };
      moved(pq.q, pq.b, tp);
      moved(pq.p, pq.a, tq);
      add(sv, i, delta);
    }
  }

  // SS=2: the state's S before the steady state is added (save), then added back (restore_add).
  void save() { saved_ = s2_; }
  void restore_add() {
    for (std::size_t i = 0; i < s2_.size(); ++i) s2_[i] += saved_[i];
  }

  // The steady state's dependence on its phase (kernels/steady_state.hpp: the state at the record
  // time t0 is the steady state `ii - lag` after the last implied arrival; d/d lag = -(A xs +
  // r_before), the first-order term): S_{lag,lag} += A (A xs + r_before), S_{lag,p} -= E_p xs +
  // A s_p (s_p before the lag's own first-order term). kl: the lag's direction.
  void steady_state_phase(Sensitivities<N>& sv, int kl, const Vec<N>& xs, const Vec<N>& r_before) {
    const Mat<N>& a = sv.prop_.a();
    for (std::size_t i = 0; i < pairs_.size(); ++i) {
      const Pair& pq = pairs_[i];
      if (pq.p != kl && pq.q != kl) continue;
      Vec<N> delta;
      if (pq.p == kl && pq.q == kl) {
        delta = a * (a * xs + r_before);
      } else {
        const int p = pq.p == kl ? pq.q : pq.p;
        delta = -(a * sv.orig(p));
        if (p < pa_) delta -= sv.da_[p] * xs;
      }
      add(sv, i, delta);
    }
  }

  // S of the steady state xs of dose e at its (virtual) arrival, replacing the state's S, in
  // closed form: the first-order forms of Sensitivities::steady_state_derivative differentiated
  // once more (their first derivatives are sv.tmp2_ on entry). kf: the direction of the dose's F
  // (or -1), amt: its AMT. Constant infusion: A xs + r = 0. Bolus: xs = K y, (I - K) y = b.
  // Infusion of duration D = F AMT / R: xs = sum_{k < k0} G(k ii) r + K(tau2) y,
  // (I - K) y = G(D) r, tau2 = k0 ii - D.
  void steady_state(Sensitivities<N>& sv, const Event& e, const Vec<N>& xs, int kf, double amt) {
    if (pairs_.empty()) return;
    std::vector<Vec<N>>& out = ss_;
    out.assign(pairs_.size(), Vec<N>::Zero());
    if (!xs.allFinite()) {
      for (Vec<N>& v : out) v.setConstant(std::numeric_limits<double>::quiet_NaN());
      install(sv, out);
      return;
    }
    dx_.assign(sv.tmp2_.begin(), sv.tmp2_.begin() + ps_);  // d xs / dp
    const Mat<N>& a = sv.prop_.a();
    const Vec<N> zero = Vec<N>::Zero();
    const auto ea = [&](int p, const Vec<N>& v) { return p < pa_ ? Vec<N>(sv.da_[p] * v) : zero; };
    if (e.ii == 0.0) {  // A S_pq = -(E_pq xs + E_p dxs_q + E_q dxs_p)
      const auto lu = a.fullPivLu();
      for (std::size_t i = 0; i < pairs_.size(); ++i) {
        const Pair& pq = pairs_[i];
        Vec<N> v = ea(pq.p, dx_[pq.q]) + ea(pq.q, dx_[pq.p]);
        if (has_epq_[i]) v += epq_[i] * xs;
        out[i] = -lu.solve(v);
      }
      install(sv, out);
      return;
    }
    Mat<N> kii, gii;
    sv.prop_.step(e.ii, kii, gii);
    const Square m = Square::Identity() - kii;
    const auto lu = m.fullPivLu();
    Vec<N> r = Vec<N>::Zero(), c = Vec<N>::Zero();
    const bool bolus = e.rate <= 0.0;
    double dur = 0.0, d_dur = 0.0, tau2 = 0.0;
    Mat<N> kd, gd, kt, gt;
    std::int64_t k0 = 0;
    if (bolus) {
      c(e.cmt) = e.amount;
    } else {
      r(e.cmt) = e.rate;
      dur = e.duration;
      d_dur = kf >= 0 ? amt / e.rate : 0.0;
      k0 = steady_state_k0(dur, e.ii);
      tau2 = static_cast<double>(k0) * e.ii - dur;
      sv.prop_.step(dur, kd, gd);
      sv.prop_.step(tau2, kt, gt);
      c = gd * r;
      for (std::int64_t k = 1; k < k0; ++k) {  // sum_k d2G(k ii) r
        second_terms(sv, static_cast<double>(k) * e.ii, zero, r);
        for (std::size_t i = 0; i < pairs_.size(); ++i) out[i] += d2_[i];
      }
    }
    const Vec<N> y = lu.solve(c);
    // c_p = dc/dp: bolus b_F = AMT e_cmt; infusion dG_p(D) r + [p = F] K(D) r dD/dF.
    std::vector<Vec<N>>& cp = cp_;
    cp.assign(static_cast<std::size_t>(ps_), zero);
    if (bolus) {
      if (kf >= 0) cp[static_cast<std::size_t>(kf)](e.cmt) = amt;
    } else {
      frechet_all(sv, dur, zero, r, cp);
      if (kf >= 0) cp[static_cast<std::size_t>(kf)] += kd * r * d_dur;
    }
    // y_p = (I - K)^-1 (c_p + dK_p(ii) y)
    std::vector<Vec<N>>& yp = yp_;
    frechet_all(sv, e.ii, y, zero, yp);
    for (int p = 0; p < ps_; ++p) yp[p] = lu.solve(Vec<N>(yp[p] + cp[p]));
    // dK_p(ii) y_q for the pairs' q, and c_pq (infusion)
    std::vector<std::vector<Vec<N>>>& kyq = kyq_;
    kyq.resize(static_cast<std::size_t>(ps_));
    for (int q = 0; q < ps_; ++q) frechet_all(sv, e.ii, yp[q], zero, kyq[q]);
    std::vector<Vec<N>> cpq(pairs_.size(), zero);
    if (!bolus) {
      second_terms(sv, dur, zero, r);
      cpq = d2_;
      std::vector<Vec<N>> dkdr;
      frechet_all(sv, dur, r, zero, dkdr);  // dK_p(D) r
      for (std::size_t i = 0; i < pairs_.size(); ++i) {
        const Pair& pq = pairs_[i];
        if (pq.q == kf) cpq[i] += dkdr[pq.p] * d_dur;
        if (pq.p == kf) cpq[i] += dkdr[pq.q] * d_dur;
        if (pq.p == kf && pq.q == kf) cpq[i] += a * (kd * r) * (d_dur * d_dur);
      }
    }
    // y_pq = (I - K)^-1 (c_pq + d2K_pq(ii) y + dK_p(ii) y_q + dK_q(ii) y_p)
    second_terms(sv, e.ii, y, zero);
    std::vector<Vec<N>> ypq(pairs_.size());
    for (std::size_t i = 0; i < pairs_.size(); ++i) {
      const Pair& pq = pairs_[i];
      ypq[i] = lu.solve(Vec<N>(cpq[i] + d2_[i] + kyq[pq.q][pq.p] + kyq[pq.p][pq.q]));
    }
    if (bolus) {  // xs = K(ii) y: S = d2K y + dK_p y_q + dK_q y_p + K y_pq
      for (std::size_t i = 0; i < pairs_.size(); ++i) {
        const Pair& pq = pairs_[i];
        out[i] = d2_[i] + kyq[pq.q][pq.p] + kyq[pq.p][pq.q] + kii * ypq[i];
      }
      install(sv, out);
      return;
    }
    // K(tau2) y with tau2_p = -[p = F] dD/dF: (K y)_pq = K_pq y + K_p y_q + K_q y_p + K y_pq, with
    // K_p v = dK_p(tau2) v + tau2_p A K v and K_pq y = d2K_pq(tau2) y + tau2_q (E_p K y +
    // A dK_p(tau2) y) + tau2_p (E_q K y + A dK_q(tau2) y) + A^2 K y tau2_p tau2_q.
    const auto t2 = [&](int p) { return p == kf ? -d_dur : 0.0; };
    const Vec<N> kty = kt * y;
    second_terms(sv, tau2, y, zero);
    std::vector<Vec<N>> dkty;
    frechet_all(sv, tau2, y, zero, dkty);
    std::vector<std::vector<Vec<N>>>& ktq = ktq_;
    ktq.resize(static_cast<std::size_t>(ps_));
    for (int q = 0; q < ps_; ++q) frechet_all(sv, tau2, yp[q], zero, ktq[q]);
    for (std::size_t i = 0; i < pairs_.size(); ++i) {
      const Pair& pq = pairs_[i];
      const double tp = t2(pq.p), tq = t2(pq.q);
      Vec<N> v = d2_[i] + kt * ypq[i];
      v += (ea(pq.p, kty) + a * dkty[pq.p]) * tq + (ea(pq.q, kty) + a * dkty[pq.q]) * tp;
      v += a * (a * kty) * (tp * tq);
      v += ktq[pq.q][pq.p] + a * (kt * yp[pq.q]) * tp;  // K_p y_q
      v += ktq[pq.p][pq.q] + a * (kt * yp[pq.p]) * tq;  // K_q y_p
      out[i] += v;
    }
    install(sv, out);
  }

  // Component `cmt` of S_pq of pair i in original coordinates.
  double component(const Sensitivities<N>& sv, int i, int cmt) const {
    const Vec<N>& v = s2_[static_cast<std::size_t>(i)];
    return sv.basis_fast_ ? sv.prop_.v().row(cmt).dot(v) : v(cmt);
  }

 private:
  struct Pair {
    int a, b;  // columns of the caller's list, a <= b
    int p, q;  // their directions
  };
  int m_ = 0, pa_ = 0, ps_ = 0;
  const int* cols_ = nullptr;
  std::vector<int> md_, pair_of_;
  std::vector<Vec<N>> saved_, ss_, dx_, cp_, yp_, d2_;  // steady states' scratch
  std::vector<std::vector<Vec<N>>> kyq_, ktq_;
  std::vector<double> tau_;  // per listed column: d tau / d column of the current jump
  std::vector<Vec<N>> db_;   // per listed column: d b / d column of the current jump

  // The index of column `col` in the caller's list (-1: not listed).
  int listed(int col) const {
    for (int a = 0; a < m_; ++a)
      if (cols_[a] == col) return a;
    return -1;
  }
  std::vector<Pair> pairs_;
  std::vector<Vec<N>> s2_;  // per pair: S_pq (eigenbasis when the solver's basis is fast)
  std::vector<Mat<N>> epq_;
  std::vector<Square> etpq_;
  std::vector<char> has_epq_;
  // Per interval length of the current row: the fast path's f[l_i, l_m, l_j] and
  // g[l_i, l_m, l_j] (2 N^3 values), or the fallback's d2K, d2G of every pair.
  std::vector<double> lengths_;
  std::vector<std::vector<double>> tensors_;
  std::vector<std::vector<Mat<N>>> blocks_;

  // Adds `delta` (original coordinates) to S of pair i.
  void add(const Sensitivities<N>& sv, std::size_t i, const Vec<N>& delta) {
    if (sv.basis_fast_)
      s2_[i].noalias() += sv.prop_.vinv() * delta;
    else
      s2_[i] += delta;
  }
  // Sets S from original coordinates.
  void install(const Sensitivities<N>& sv, const std::vector<Vec<N>>& v) {
    for (std::size_t i = 0; i < s2_.size(); ++i)
      s2_[i] = sv.basis_fast_ ? Vec<N>(sv.prop_.vinv() * v[i]) : v[i];
  }
  // dK_p(tau) w + dG_p(tau) v for every state direction p (0 for those that do not move A), in
  // original coordinates (Sensitivities::frechet).
  void frechet_all(Sensitivities<N>& sv, double tau, const Vec<N>& w, const Vec<N>& v,
                   std::vector<Vec<N>>& out) const {
    out.assign(static_cast<std::size_t>(ps_), Vec<N>::Zero());
    sv.frechet(tau, w, v);
    for (int p = 0; p < pa_; ++p) out[static_cast<std::size_t>(p)] = sv.tmp_[p];
  }
  // d2K_pq(tau) w + d2G_pq(tau) v of every pair whose directions both move A (others 0), in
  // original coordinates, into d2_.
  void second_terms(Sensitivities<N>& sv, double tau, const Vec<N>& w, const Vec<N>& v) {
    d2_.assign(pairs_.size(), Vec<N>::Zero());
    if (tau == 0.0) return;
    const bool has_v = !v.isZero(0.0);
    if (sv.prop_.fast()) {
      Vec<N> e, sg;
      sv.prop_.eigen_terms(tau, e, sg);
      Square phi, psi;
      divided_differences<N>(sv.prop_.lambda(), sv.inv_, tau, e, sg, has_v, phi, psi);
      const Square& vi = sv.prop_.vinv();
      const Vec<N> wt = vi * w;
      const Vec<N> vt = has_v ? Vec<N>(vi * v) : Vec<N>(Vec<N>::Zero());
      const double* t = divided_tensors(sv, tau);
      for (std::size_t i = 0; i < pairs_.size(); ++i)
        if (pairs_[i].p < pa_ && pairs_[i].q < pa_)
          d2_[i] = sv.prop_.v() * aa_term(sv, i, phi, psi, t, wt, vt, has_v);
      return;
    }
    const Mat<N>* d2 = second_blocks(sv, tau);
    for (std::size_t i = 0; i < pairs_.size(); ++i) {
      if (pairs_[i].p >= pa_ || pairs_[i].q >= pa_) continue;
      d2_[i] = d2[2 * i] * w;
      if (has_v) d2_[i] += d2[2 * i + 1] * v;
    }
  }

  void clear_caches() {
    lengths_.clear();
    tensors_.clear();
    blocks_.clear();
  }
  int cached(double d) {
    for (std::size_t i = 0; i < lengths_.size(); ++i)
      if (lengths_[i] == d) return static_cast<int>(i);
    if (lengths_.size() >= 16) clear_caches();
    lengths_.push_back(d);
    tensors_.emplace_back();
    blocks_.emplace_back();
    return -1;
  }

  const Mat<N>* second_blocks(const Sensitivities<N>& sv, double d) {
    const int at = cached(d);
    if (at >= 0) return blocks_[static_cast<std::size_t>(at)].data();
    std::vector<Mat<N>>& out = blocks_.back();
    out.resize(2 * pairs_.size());
    for (std::size_t i = 0; i < pairs_.size(); ++i) {
      const Pair& pq = pairs_[i];
      if (pq.p >= pa_ || pq.q >= pa_) continue;
      block_second_dynamic(N, sv.prop_.a().data(), sv.da_[pq.p].data(), sv.da_[pq.q].data(),
                           has_epq_[i] ? epq_[i].data() : nullptr, d, out[2 * i].data(),
                           out[2 * i + 1].data());
    }
    return out.data();
  }

  // f[l_i, l_m, l_j] at [(i N + m) N + j] and g[...] after them, for length d.
  const double* divided_tensors(const Sensitivities<N>& sv, double d) {
    const int at = cached(d);
    if (at >= 0) return tensors_[static_cast<std::size_t>(at)].data();
    std::vector<double>& t = tensors_.back();
    t.resize(2 * N * N * N);
    const Vec<N>& l = sv.prop_.lambda();
    for (int i = 0; i < N; ++i)
      for (int mm = 0; mm < N; ++mm)
        for (int j = 0; j <= i; ++j) {
          double f3, f4;
          exp_divided_differences(l(i) * d, l(mm) * d, l(j) * d, f3, f4);
          const std::size_t ij = static_cast<std::size_t>((i * N + mm) * N + j);
          const std::size_t ji = static_cast<std::size_t>((j * N + mm) * N + i);
          t[ij] = t[ji] = d * d * f3;
          t[N * N * N + ij] = t[N * N * N + ji] = d * d * d * f4;
        }
    return t.data();
  }

  // V^-1 (d2K_pq w + d2G_pq v) of pair i (both directions move A) in the eigenbasis, from the
  // step's Phi, Psi and divided-difference tensors t; xt = V^-1 w, rt = V^-1 v.
  Vec<N> aa_term(const Sensitivities<N>& sv, std::size_t i, const Square& phi, const Square& psi,
                 const double* t, const Vec<N>& xt, const Vec<N>& rt, bool has_r) const {
    const Pair& pq = pairs_[i];
    Vec<N> y = Vec<N>::Zero();
    if (has_epq_[i]) {
      y += etpq_[i].cwiseProduct(phi) * xt;
      if (has_r) y += etpq_[i].cwiseProduct(psi) * rt;
    }
    const Square& ep = sv.et_[pq.p];
    const Square& eq = sv.et_[pq.q];
    for (int ii = 0; ii < N; ++ii) {
      double acc = 0.0;
      for (int mm = 0; mm < N; ++mm) {
        const double* f = t + (ii * N + mm) * N;
        const double* g = f + N * N * N;
        double aq = 0.0, ap = 0.0;  // sum_j E~_q,mj w_j, sum_j E~_p,mj w_j
        for (int j = 0; j < N; ++j) {
          const double w = f[j] * xt(j) + (has_r ? g[j] * rt(j) : 0.0);
          aq += eq(mm, j) * w;
          ap += ep(mm, j) * w;
        }
        acc += ep(ii, mm) * aq + eq(ii, mm) * ap;
      }
      y(ii) += acc;
    }
    return y;
  }

  void propagate_fast(const Sensitivities<N>& sv, double d, const Vec<N>& x_old, const Vec<N>& r,
                      bool has_r, const Vec<N>& e, const Vec<N>& sg) {
    Square phi, psi;
    divided_differences<N>(sv.prop_.lambda(), sv.inv_, d, e, sg, has_r, phi, psi);
    const Square& vi = sv.prop_.vinv();
    const Vec<N> xt = vi * x_old;
    const Vec<N> rt = has_r ? Vec<N>(vi * r) : Vec<N>(Vec<N>::Zero());
    const double* t = nullptr;
    for (std::size_t i = 0; i < pairs_.size(); ++i) {
      const Pair& pq = pairs_[i];
      Vec<N> y = s2_[i].cwiseProduct(e);
      if (pq.p < pa_) y += (sv.et_[pq.p].cwiseProduct(phi) * sv.s_[pq.q]);
      if (pq.q < pa_) y += (sv.et_[pq.q].cwiseProduct(phi) * sv.s_[pq.p]);
      if (pq.p < pa_ && pq.q < pa_) {
        if (t == nullptr) t = divided_tensors(sv, d);
        y += aa_term(sv, i, phi, psi, t, xt, rt, has_r);
      }
      s2_[i] = y;
    }
  }
};

}  // namespace pkscan::detail
