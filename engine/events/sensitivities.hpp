#pragma once
// The first-order sensitivities of the event solver (events/solver.hpp states the numeric
// contract): the state of the directions, their derivatives of A and the step of an interval,
// on the eigenbasis (fast) path and the block-exponential (fallback) path. The solver derives
// from it; events/second_order.hpp reads it.
#include <Eigen/Dense>
#include <cstddef>
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
};

}  // namespace pkscan::detail
