#pragma once
// The event walk's forward sensitivities (walk_kernels.hpp's Walker with G): the members that
// carry them through steps, doses, stops and steady states, as the CPU event solver's fast path
// (events/solver_impl.hpp: propagate, frechet, stop_jump, steady_state_derivative). Walker declares
// them; walk_kernels.hpp includes this file after the class, so that its users see one header.
#include <cmath>
#include <cstdint>

#include "kernels/divided_differences.hpp"
#include "kernels/event.hpp"
#include "kernels/event_step.hpp"

namespace pkscan::device {

// v <- M v (M column-major N x N).
template <int N, bool G>
inline PKSCAN_HD void Walker<N, G>::mul(const double* m, double* v) {
  double t[N];
  for (int i = 0; i < N; ++i) {
    double a = m[i] * v[0];
    for (int j = 1; j < N; ++j) a += m[i + j * N] * v[j];
    t[i] = a;
  }
  for (int i = 0; i < N; ++i) v[i] = t[i];
}

// s_k += V^-1 e_cmt scale (original coordinates before any basis).
template <int N, bool G>
inline PKSCAN_HD void Walker<N, G>::add_unit(int k, int cmt, double scale) {
  if (!basis_) {
    s_[k][cmt] += scale;
    return;
  }
  const double* vinv = prop_ + c_.model.np + 2 * N * N;
  for (int i = 0; i < N; ++i) s_[k][i] += vinv[i + cmt * N] * scale;
}

// s_k += V^-1 v.
template <int N, bool G>
inline PKSCAN_HD void Walker<N, G>::add_to(int k, double* v) {
  if (basis_) mul(prop_ + c_.model.np + 2 * N * N, v);
  for (int i = 0; i < N; ++i) s_[k][i] += v[i];
}

// A x + r with the running infusions' rates r (a: row-major A).
template <int N, bool G>
inline PKSCAN_HD void Walker<N, G>::xdot(const double* a, double* out) const {
  double r[N];
  rates(r);
  for (int i = 0; i < N; ++i) {
    double acc = a[i * N] * x_[0];
    for (int j = 1; j < N; ++j) acc += a[i * N + j] * x_[j];
    out[i] = acc + r[i];
  }
}

// A x + r for a given state and rates.
template <int N, bool G>
inline PKSCAN_HD void Walker<N, G>::xdot_of(const double* a, const double* x, const double* r,
                                            double* out) {
  for (int i = 0; i < N; ++i) {
    double acc = a[i * N] * x[0];
    for (int j = 1; j < N; ++j) acc += a[i * N + j] * x[j];
    out[i] = acc + r[i];
  }
}

// The A of the interval that starts at t (Solver::jump_matrix; call after governing(t)).
template <int N, bool G>
inline PKSCAN_HD const double* Walker<N, G>::jump_matrix(double t) const {
  std::int64_t j = cursor_;
  while (j < sj_.record_count && recs_[j].time <= t) ++j;
  if (j == sj_.record_count) j = sj_.record_count - 1;
  return rows_ + static_cast<std::int64_t>(recs_[j].row) * stride_ + c_.model.np;
}

// An infusion of rate `rate` into cmt stopped at a time that moves with its dose's lag and F
// (Solver::stop_jump).
template <int N, bool G>
inline PKSCAN_HD void Walker<N, G>::stop_jump(std::int64_t seq, int cmt, double rate,
                                              bool with_lag) {
  const int lag_col = c_.model.lag_col[cmt];
  const int f_col = c_.model.f_col[cmt];
  const int kl = dir_of_[lag_col];
  const int kf = dir_of_[f_col];
  if (with_lag && kl >= 0 && free_in(seq, lag_col)) add_unit(kl, cmt, rate);
  if (kf >= 0 && free_in(seq, f_col)) add_unit(kf, cmt, recs_[seq].amt);
}

// W = Phi o (V^-1 y)^T + Psi o (V^-1 r)^T over tau in the current row's eigenbasis
// (Solver::eigen_weights); e, sg: the eigenvalue terms of tau. Column-major.
template <int N, bool G>
inline PKSCAN_HD void Walker<N, G>::weights(double tau, const double* e, const double* sg,
                                            const double* y, const double* r, bool has_r,
                                            double* w) const {
  const int np = c_.model.np;
  const double* l = prop_ + np + 4 * N * N;
  const double* vinv = prop_ + np + 2 * N * N;
  double phi[N * N], psi[N * N], yt[N], rt[N];
  for (int i = 0; i < N; ++i) {
    phi[i + i * N] = tau * e[i];
    for (int j = 0; j < i; ++j) {
      const double v = detail::phi_pair(l[i], l[j], e[i], e[j], tau, inv_[i + j * N]);
      phi[i + j * N] = v;
      phi[j + i * N] = v;
    }
  }
  if (has_r)
    for (int i = 0; i < N; ++i)
      for (int j = 0; j <= i; ++j) {
        const double v = detail::psi_pair(l[i], l[j], tau, phi[i + j * N], sg[i], sg[j]);
        psi[i + j * N] = v;
        psi[j + i * N] = v;
      }
  for (int i = 0; i < N; ++i) {
    yt[i] = y[i];
    rt[i] = has_r ? r[i] : 0.0;
  }
  mul(vinv, yt);
  if (has_r) mul(vinv, rt);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j)
      w[i + j * N] = phi[i + j * N] * yt[j] + (has_r ? psi[i + j * N] * rt[j] : 0.0);
}

// The sensitivities over a step of length d from the state x_old (Solver::propagate, fast
// path): s~_q <- e o s~_q + rowsum(E~_q o W).
template <int N, bool G>
inline PKSCAN_HD void Walker<N, G>::propagate(double d, const double* x_old, const double* r,
                                              bool has_r, const double* e, const double* sg) {
  if (pa_ > 0) {
    double w[N * N];
    weights(d, e, sg, x_old, r, has_r, w);
    const double* et = prop_ + row_stride(N, c_.model.np);
    for (int q = 0; q < pa_; ++q) {
      const double* eq = et + q * N * N;
      for (int i = 0; i < N; ++i) {
        double acc = e[i] * s_[q][i];
        for (int j = 0; j < N; ++j) acc += eq[i + j * N] * w[i + j * N];
        s_[q][i] = acc;
      }
    }
  }
  for (int q = pa_; q < ps_; ++q)
    for (int i = 0; i < N; ++i) s_[q][i] *= e[i];
}

// dK_k(tau) y + dG_k(tau) r for every A direction k, in original coordinates, into out
// (Solver::frechet, fast path).
template <int N, bool G>
inline PKSCAN_HD void Walker<N, G>::frechet(double tau, const double* y, const double* r,
                                            double (*out)[N]) const {
  for (int k = 0; k < pa_; ++k)
    for (int i = 0; i < N; ++i) out[k][i] = 0.0;
  if (tau == 0.0 || pa_ == 0) return;
  bool has_r = false;
  for (int i = 0; i < N; ++i) has_r = has_r || r[i] != 0.0;
  const int np = c_.model.np;
  double e[N], sg[N], w[N * N];
  detail::eigen_terms_hd<N>(prop_ + np + 4 * N * N, tau, e, sg);
  weights(tau, e, sg, y, r, has_r, w);
  const double* et = prop_ + row_stride(N, np);
  for (int k = 0; k < pa_; ++k) {
    const double* eq = et + k * N * N;
    double u[N];
    for (int i = 0; i < N; ++i) {
      double acc = 0.0;
      for (int j = 0; j < N; ++j) acc += eq[i + j * N] * w[i + j * N];
      u[i] = acc;
    }
    mul(prop_ + np + N * N, u);  // V u
    for (int i = 0; i < N; ++i) out[k][i] = u[i];
  }
}

// The sensitivities at a steady state's virtual arrival (SteadyHooks::arrival): the closed
// form's derivative of the steady state xs of dose d, moved into the eigenbasis.
template <int N, bool G>
inline PKSCAN_HD void Walker<N, G>::steady_arrival(const detail::Event& d, const double* xs) {
  bool finite = true;
  for (int i = 0; i < N; ++i) finite = finite && xs[i] - xs[i] == 0.0;
  if (finite) {
    steady_state_derivative(d, xs);
  } else {
    for (int k = 0; k < ps_; ++k)
      for (int i = 0; i < N; ++i) tmp2_[k][i] = ::nan("");
  }
  const double* vinv = prop_ + c_.model.np + 2 * N * N;
  for (int q = 0; q < ps_; ++q) {
    for (int i = 0; i < N; ++i) s_[q][i] = tmp2_[q][i];
    if (basis_) mul(vinv, s_[q]);
  }
}

// Derivatives of the steady state xs of dose e (original coordinates) into tmp2_ for every
// state direction (Solver::steady_state_derivative, fast path); the current row is e's.
template <int N, bool G>
inline PKSCAN_HD void Walker<N, G>::steady_state_derivative(const detail::Event& e,
                                                            const double* xs) {
  const int np = c_.model.np;
  for (int k = 0; k < ps_; ++k)
    for (int i = 0; i < N; ++i) tmp2_[k][i] = 0.0;
  const double amt = recs_[e.seq].amt;
  const int f_col = c_.model.f_col[e.cmt];
  const int kf = free_in(e.seq, f_col) ? dir_of_[f_col] : -1;
  const double* a = prop_ + np;  // row-major
  const RowPropagator<N> pr{prop_, np};
  double lu[N * N];
  int rp[N], cp[N];
  if (e.ii == 0.0) {  // constant infusion: A xs + r = 0, dxs = -A^-1 dA xs
    for (int i = 0; i < N * N; ++i) lu[i] = a[i];
    detail::lu_full_hd<N>(lu, rp, cp);
    const double* et = prop_ + row_stride(N, np);
    for (int k = 0; k < pa_; ++k) {
      double u[N], v[N];  // dA xs = V E~_k V^-1 xs
      for (int i = 0; i < N; ++i) u[i] = xs[i];
      mul(prop_ + np + 2 * N * N, u);
      const double* eq = et + k * N * N;
      for (int i = 0; i < N; ++i) {
        double acc = 0.0;
        for (int j = 0; j < N; ++j) acc += eq[i + j * N] * u[j];
        v[i] = acc;
      }
      mul(prop_ + np + N * N, v);
      detail::lu_solve_hd<N>(lu, rp, cp, v, v);
      for (int i = 0; i < N; ++i) tmp2_[k][i] = -v[i];
    }
    return;
  }
  double kii[N * N], gii[N * N], es[N] = {}, ss[N] = {};
  pr.step(e.ii, kii, gii, es, ss);
  for (int i = 0; i < N; ++i)
    for (int j = 0; j < N; ++j) lu[i * N + j] = (i == j ? 1.0 : 0.0) - kii[i * N + j];
  detail::lu_full_hd<N>(lu, rp, cp);
  const double zero[N] = {};
  if (e.rate <= 0.0) {  // bolus: y = (I - K)^-1 b, xs = K y
    double b[N] = {}, y[N];
    b[e.cmt] = e.amount;
    detail::lu_solve_hd<N>(lu, rp, cp, b, y);
    frechet(e.ii, y, zero, tmp_);  // dK y
    for (int k = 0; k < ps_; ++k) {
      double rhs[N], dy[N], kdy[N];
      for (int i = 0; i < N; ++i) rhs[i] = k < pa_ ? tmp_[k][i] : 0.0;
      if (k == kf) rhs[e.cmt] += amt;
      detail::lu_solve_hd<N>(lu, rp, cp, rhs, dy);
      detail::matvec_hd<N>(kii, dy, kdy);
      for (int i = 0; i < N; ++i) tmp2_[k][i] = (k < pa_ ? tmp_[k][i] : 0.0) + kdy[i];
    }
    return;
  }
  // Infusion of duration D: xs = sum_{k<k0} G(k ii) r + K(k0 ii - D) y, y = (I-K)^-1 G(D) r.
  double r[N] = {};
  r[e.cmt] = e.rate;
  const double dur = e.duration;
  const double d_dur = amt / e.rate;  // dD/dF
  const std::int64_t k0 = detail::steady_state_k0(dur, e.ii);
  for (std::int64_t q = 1; q < k0; ++q) {
    frechet(static_cast<double>(q) * e.ii, zero, r, tmp_);
    for (int k = 0; k < pa_; ++k)
      for (int i = 0; i < N; ++i) tmp2_[k][i] += tmp_[k][i];
  }
  double kd[N * N], gd[N * N], kt[N * N], gt[N * N], gr[N], y[N];
  pr.step(dur, kd, gd, es, ss);
  const double tau2 = static_cast<double>(k0) * e.ii - dur;
  pr.step(tau2, kt, gt, es, ss);
  detail::matvec_hd<N>(gd, r, gr);
  detail::lu_solve_hd<N>(lu, rp, cp, gr, y);
  // dy = (I - K)^-1 (dK(ii) y + dG(D) r + K(D) r dD)
  frechet(e.ii, y, zero, tmp_);
  for (int k = 0; k < pa_; ++k)
    for (int i = 0; i < N; ++i) dy_[k][i] = tmp_[k][i];
  frechet(dur, zero, r, tmp_);
  for (int k = 0; k < pa_; ++k)
    for (int i = 0; i < N; ++i) dy_[k][i] += tmp_[k][i];
  for (int k = pa_; k < ps_; ++k)
    for (int i = 0; i < N; ++i) dy_[k][i] = 0.0;
  if (kf >= 0) {
    double kr[N];
    detail::matvec_hd<N>(kd, r, kr);
    for (int i = 0; i < N; ++i) dy_[kf][i] += kr[i] * d_dur;
  }
  for (int k = 0; k < ps_; ++k) detail::lu_solve_hd<N>(lu, rp, cp, dy_[k], dy_[k]);
  // dxs += dK(tau2) y + K(tau2) dy - A K(tau2) y dD
  frechet(tau2, y, zero, tmp_);
  for (int k = 0; k < ps_; ++k) {
    double kdy[N];
    detail::matvec_hd<N>(kt, dy_[k], kdy);
    for (int i = 0; i < N; ++i) tmp2_[k][i] += (k < pa_ ? tmp_[k][i] : 0.0) + kdy[i];
  }
  if (kf >= 0) {
    double ky[N], aky[N];
    detail::matvec_hd<N>(kt, y, ky);
    detail::matvec_hd<N>(a, ky, aky);
    for (int i = 0; i < N; ++i) tmp2_[kf][i] -= aky[i] * d_dur;
  }
}

}  // namespace pkscan::device
