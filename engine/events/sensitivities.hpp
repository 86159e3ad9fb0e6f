#pragma once
// The first-order sensitivities of the event solver (events/solver.hpp states the numeric
// contract): the state of the directions, their derivatives of A and the step of an interval,
// on the eigenbasis (fast) path and the block-exponential (fallback) path. The solver derives
// from it; events/second_order.hpp reads it.
#include <Eigen/Dense>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "events/event_list.hpp"
#include "events/expm_derivative.hpp"

namespace pkscan::detail {

template <int N>
struct Sensitivities {
  using Square = Eigen::Matrix<double, N, N>;

  explicit Sensitivities(std::size_t np) {
    for (std::vector<Vec<N>>* v : {&s_, &tmp_, &tmp2_, &dy_, &saved_}) v->resize(np);
    for (std::vector<int>* v : {&dir_col_, &dir_of_}) v->resize(np);
    da_.resize(np);
    et_.resize(np);
  }

  Propagator<N> prop_;
  // Directions: [0, pa_) move A, [pa_, ps_) only the inputs (f_, lag_),
  // [ps_, p_) only the concentrations (volumes of observed compartments). ----
  int pa_ = 0, ps_ = 0, p_ = 0;
  std::vector<int> dir_col_;             // per direction: model column
  std::vector<int> dir_of_;              // per column: direction or -1
  std::vector<Vec<N>> s_;                // per state direction: dx/dp (eigenbasis when basis_fast_)
  bool basis_fast_ = false;              // s_ holds V^-1 s of the current propagator
  std::vector<Mat<N>> da_;               // per A direction: dA/dp (original coordinates)
  std::vector<Square> et_;               // per A direction: V^-1 dA/dp V (fast path)
  Square inv_;                           // 1 / (l_i - l_j) (fast path)
  std::vector<Vec<N>> tmp_, tmp2_, dy_;  // per direction scratch
  std::vector<Vec<N>> saved_;            // the sensitivities before an SS=2 steady state
  FrechetCache<N> fallback_;  // fallback path: dK_k, dG_k per interval length (current row)

  // The eigenbasis forms of da_ for the current propagator, and the sensitivities moved into its
  // basis (after prop_.reset() and da_ of the new row).
  void enter_basis() {
    fallback_.clear();
    basis_fast_ = prop_.fast();
    if (!basis_fast_) return;
    const Square& v = prop_.v();
    const Square& vi = prop_.vinv();
    for (int k = 0; k < pa_; ++k) et_[k].noalias() = vi * (da_[k] * v);
    const Vec<N>& l = prop_.lambda();
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < N; ++j) inv_(i, j) = l(i) != l(j) ? 1.0 / (l(i) - l(j)) : 0.0;
    for (int k = 0; k < ps_; ++k) s_[k] = vi * s_[k];
  }

  // Adds `v` (original coordinates) times `scale` to the sensitivity of direction k.
  void add_to(int k, const Vec<N>& v, double scale) {
    if (basis_fast_)
      s_[k].noalias() += prop_.vinv() * (v * scale);
    else
      s_[k] += v * scale;
  }
  // Adds scale * e_cmt.
  void add_unit(int k, int cmt, double scale) {
    if (basis_fast_)
      s_[k] += prop_.vinv().col(cmt) * scale;
    else
      s_[k](cmt) += scale;
  }
  // Sensitivity of direction k in original coordinates.
  Vec<N> orig(int k) const {
    if (basis_fast_) return prop_.v() * s_[k];
    return s_[k];
  }
  // Sets the sensitivity of direction k from original coordinates.
  void set_orig(int k, const Vec<N>& v) {
    if (basis_fast_)
      s_[k].noalias() = prop_.vinv() * v;
    else
      s_[k] = v;
  }

  // Phi o (V^-1 y)^T + Psi o (V^-1 r)^T over tau in the current (fast) propagator: with
  // E~_k = V^-1 dA/dp_k V, V^-1 (dK_k y + dG_k r) = rowsum(E~_k o W). e, sg: its eigen terms.
  Square eigen_weights(double tau, const Vec<N>& e, const Vec<N>& sg, const Vec<N>& y,
                       const Vec<N>& r, bool has_r) const {
    Square phi, psi;
    divided_differences<N>(prop_.lambda(), inv_, tau, e, sg, has_r, phi, psi);
    const Vec<N> yt = prop_.vinv() * y;
    Square w = phi * yt.asDiagonal();
    if (has_r) {
      const Vec<N> rt = prop_.vinv() * r;
      w += psi * rt.asDiagonal();
    }
    return w;
  }

  // dK_k(tau) y + dG_k(tau) r for every A direction, in original coordinates, into tmp_.
  void frechet(double tau, const Vec<N>& y, const Vec<N>& r) {
    for (int k = 0; k < pa_; ++k) tmp_[k].setZero();
    if (tau == 0.0 || pa_ == 0) return;
    const bool has_r = !r.isZero(0.0);
    if (prop_.fast()) {
      Vec<N> e, sg;
      prop_.eigen_terms(tau, e, sg);
      const Square w = eigen_weights(tau, e, sg, y, r, has_r);
      for (int k = 0; k < pa_; ++k) {
        const Vec<N> u = et_[k].cwiseProduct(w).rowwise().sum();
        tmp_[k].noalias() = prop_.v() * u;
      }
      return;
    }
    for (int k = 0; k < pa_; ++k) {
      Mat<N> dk, dg;
      block_frechet_dynamic(N, prop_.a().data(), da_[k].data(), tau, dk.data(), dg.data());
      tmp_[k].noalias() = dk * y;
      if (has_r) tmp_[k].noalias() += dg * r;
    }
  }

  // Moves the sensitivities over an interval of length d (x_old: the state at its start).
  // e, sg: the eigenvalue terms of the step (fast path).
  void propagate(double d, const Mat<N>& k, const Vec<N>& x_old, const Vec<N>& r, bool has_r,
                 const Vec<N>& e, const Vec<N>& sg) {
    if (basis_fast_) {
      if (pa_ > 0) {
        const Square w = eigen_weights(d, e, sg, x_old, r, has_r);
        for (int q = 0; q < pa_; ++q) {
          Vec<N>& sq = s_[q];
          const Square& eq = et_[q];
          for (int i = 0; i < N; ++i) {
            double acc = e(i) * sq(i);
            for (int j = 0; j < N; ++j) acc += eq(i, j) * w(i, j);
            sq(i) = acc;
          }
        }
      }
      for (int q = pa_; q < ps_; ++q) s_[q] = s_[q].cwiseProduct(e);
      return;
    }
    // Fallback: dK_k, dG_k from block exponentials, cached per length for this row.
    const Mat<N>* dkg = fallback_.get(prop_.a(), da_.data(), pa_, d);
    for (int q = 0; q < pa_; ++q) {
      Vec<N> y = k * s_[q];
      y.noalias() += dkg[2 * q] * x_old;
      if (has_r) y.noalias() += dkg[2 * q + 1] * r;
      s_[q] = y;
    }
    for (int q = pa_; q < ps_; ++q) s_[q] = k * s_[q];
  }

  // Derivatives of the steady state xs of dose e (original coordinates) into tmp2_ for every
  // state direction, with prop_ the propagator of its parameters; kf: the direction of its F (or
  // -1), amt: its record's AMT.
  void steady_state_derivative(const Event& e, const Vec<N>& xs, int kf, double amt) {
    for (int k = 0; k < ps_; ++k) tmp2_[k].setZero();
    if (!xs.allFinite()) {
      for (int k = 0; k < ps_; ++k) tmp2_[k].setConstant(std::numeric_limits<double>::quiet_NaN());
      return;
    }
    const Mat<N>& a = prop_.a();
    if (e.ii == 0.0) {  // constant infusion: A xs + r = 0, dxs = -A^-1 dA xs
      const auto lu = a.fullPivLu();
      for (int k = 0; k < pa_; ++k) tmp2_[k] = -lu.solve(Vec<N>(da_[k] * xs));
      return;
    }
    Mat<N> kii, gii;
    prop_.step(e.ii, kii, gii);
    const Square i_minus_k = Square::Identity() - kii;
    const auto lu = i_minus_k.fullPivLu();
    const Vec<N> zero = Vec<N>::Zero();
    if (e.rate <= 0.0) {  // bolus: y = (I - K)^-1 b, xs = K y
      Vec<N> b = Vec<N>::Zero();
      b(e.cmt) = e.amount;
      const Vec<N> y = lu.solve(b);
      frechet(e.ii, y, zero);  // dK y
      for (int k = 0; k < ps_; ++k) {
        Vec<N> rhs = k < pa_ ? tmp_[k] : zero;
        if (k == kf) rhs(e.cmt) += amt;
        const Vec<N> dy = lu.solve(rhs);
        tmp2_[k] = (k < pa_ ? tmp_[k] : zero) + kii * dy;
      }
      return;
    }
    // Infusion of duration D: xs = sum_{k<k0} G(k ii) r + K(k0 ii - D) y, y = (I-K)^-1 G(D) r.
    Vec<N> r = Vec<N>::Zero();
    r(e.cmt) = e.rate;
    const double dur = e.duration;
    const double d_dur = amt / e.rate;  // dD/dF
    const std::int64_t k0 = steady_state_k0(dur, e.ii);
    for (std::int64_t q = 1; q < k0; ++q) {
      frechet(static_cast<double>(q) * e.ii, zero, r);
      for (int k = 0; k < pa_; ++k) tmp2_[k] += tmp_[k];
    }
    Mat<N> kd, gd, kt, gt;
    prop_.step(dur, kd, gd);
    const double tau2 = static_cast<double>(k0) * e.ii - dur;
    prop_.step(tau2, kt, gt);
    const Vec<N> y = lu.solve(Vec<N>(gd * r));
    // dy = (I - K)^-1 (dK(ii) y + dG(D) r + K(D) r dD)
    frechet(e.ii, y, zero);
    for (int k = 0; k < pa_; ++k) dy_[k] = tmp_[k];
    frechet(dur, zero, r);
    for (int k = 0; k < pa_; ++k) dy_[k] += tmp_[k];
    for (int k = pa_; k < ps_; ++k) dy_[k].setZero();
    if (kf >= 0) dy_[kf] += kd * r * d_dur;
    for (int k = 0; k < ps_; ++k) dy_[k] = lu.solve(dy_[k]);
    // dxs += dK(tau2) y + K(tau2) dy - A K(tau2) y dD
    frechet(tau2, y, zero);
    for (int k = 0; k < ps_; ++k) {
      if (k < pa_) tmp2_[k] += tmp_[k];
      tmp2_[k] += kt * dy_[k];
    }
    if (kf >= 0) tmp2_[kf] -= a * (kt * y) * d_dur;
  }
};

}  // namespace pkscan::detail
