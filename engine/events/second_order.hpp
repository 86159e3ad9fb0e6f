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
      if (sv.basis_fast_)
        s2_[i].noalias() += sv.prop_.vinv() * delta;
      else
        s2_[i] += delta;
    }
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
        if (has_epq_[i]) {
          y += etpq_[i].cwiseProduct(phi) * xt;
          if (has_r) y += etpq_[i].cwiseProduct(psi) * rt;
        }
        if (t == nullptr) t = divided_tensors(sv, d);
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
      }
      s2_[i] = y;
    }
  }
};

}  // namespace pkscan::detail
