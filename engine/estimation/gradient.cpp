// The FOCE and FOCEI objectives' gradient (pkscan/estimation.hpp, population_gradient) by the
// formula of
// Almquist, Leander and Jirstrand (2015, J Pharmacokinet Pharmacodyn 42:191-209, eq. 23 and 27):
// with L = sum(e^2/R + log R) + ETA' OMEGA^-1 ETA, the EBE minimizing it, M FOCEI's expected
// data information and H = OMEGA^-1 + M, each subject's
//   dOBJI/da = dL/da + d log|OMEGA|/da + tr(H^-1 (dOMEGA^-1/da + dM/da))
//              + sum_k tr(H^-1 dM/dETA_k) dEBE_k/da,   dEBE/da = -(d2L/dETA2)^-1 d2L/dETAda,
// all partial derivatives at the EBE (dL/dETA = 0 there, so the EBE's own movement adds nothing
// to L). Every term is a derivative of F along some direction: a direction moves F by f_a,
// G = dF/dETA by g_a and R by R_a, and the same three formulas (dL/da, d2L/dETAda, dM/da) serve
// THETA, SIGMA and each ETA (f_a = G_l, g_a = d2F/dETA dETA_l). The second derivatives of F,
// d2F/dETA2 and d2F/dETA dP for every column P, are the Predictor's exact ones
// (Predictor::predict_hessian). FOCE is the same formula with R held at the population
// prediction (R0 = R(F(ETA = 0))) and M = G' R0^-1 G: at the EBE its linearized OBJI,
// log|C| + e~' C^-1 e~, equals 2 phi + log|OMEGA| + log|OMEGA^-1 + M| (Woodbury and the
// determinant lemma with OMEGA^-1 ETA = G' R0^-1 e there), R0 moves with THETA and SIGMA through
// F0 and dF0/dP, and not with ETA.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/estimation.hpp>
#include <pkscan/threads.hpp>
#include <string>
#include <vector>

#include "estimation/subject.hpp"

namespace pkscan {

namespace {

using detail::Direction;
using detail::Matrix;
using detail::Point;
using detail::Shared;
using detail::Subject;
using detail::variance;
using detail::Vector;
using Kind = EstimatedParameter::Kind;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Setup {
  const PopulationFitSpec& spec;
  std::vector<EstimatedParameter> params;
  std::vector<int> cols;           // columns whose dF/dP is read: ETA columns, then THETAs
  std::vector<Matrix> omega_dirs;  // dOMEGA / d(element) per OMEGA parameter
};

// One subject's gradient (params order) at its EBE `eta_hat`; false when a point cannot be
// evaluated.
bool subject_gradient(const Shared& sh, const Setup& st, std::int64_t s, Subject& subj,
                      const Vector& eta, Vector& out) {
  const PopulationModel& model = sh.model;
  const int q = sh.q;
  const Eigen::Index n = subj.n();
  const std::size_t nc = st.cols.size();
  out.setZero(static_cast<Eigen::Index>(st.params.size()));
  if (n == 0) return true;
  Point p;
  Vector fx;
  Matrix gx;
  // FOCE holds R at the population prediction F0 = F(ETA = 0): R0 moves with THETA and SIGMA
  // (through F0 and dF0/dP) but not with ETA.
  const bool foce = sh.options.method == EstimationMethod::Foce;
  Vector f0;
  Matrix j0;  // dF0/dP, columns st.cols
  std::vector<double> prow0;
  if (foce) {
    if (!subj.evaluate(Vector::Zero(q), f0, gx)) return false;
    prow0 = subj.row();
    j0.resize(n, static_cast<Eigen::Index>(nc));
    for (Eigen::Index j = 0; j < n; ++j)
      for (std::size_t c = 0; c < nc; ++c)
        j0(j, static_cast<Eigen::Index>(c)) = subj.jacobian(j, st.cols[c]);
  }
  if (!subj.evaluate(eta, p.f, p.g)) return false;
  const std::vector<double> prow = subj.row();  // P at the EBE
  Matrix jc(n, static_cast<Eigen::Index>(nc));  // dF/dP at the EBE, columns st.cols
  for (Eigen::Index j = 0; j < n; ++j)
    for (std::size_t c = 0; c < nc; ++c)
      jc(j, static_cast<Eigen::Index>(c)) = subj.jacobian(j, st.cols[c]);
  // dl[l](j, c) = d(dF_j/dP_cols[c]) / dETA_l from the Predictor's exact second derivatives:
  // d2F/dP_c dP_l times P_l (the ETA columns lead st.cols).
  std::vector<Matrix> dl(static_cast<std::size_t>(q), Matrix(n, static_cast<Eigen::Index>(nc)));
  std::vector<Matrix> hp;
  if (!subj.evaluate_second(eta, st.cols, fx, gx, hp)) return false;
  for (int l = 0; l < q; ++l)
    for (Eigen::Index j = 0; j < n; ++j)
      for (std::size_t c = 0; c < nc; ++c)
        dl[static_cast<std::size_t>(l)](j, static_cast<Eigen::Index>(c)) =
            hp[static_cast<std::size_t>(j)](static_cast<Eigen::Index>(c), l) *
            prow[static_cast<std::size_t>(st.cols[static_cast<std::size_t>(l)])];
  // SIGMA_prop where R moves with ETA (FOCEI); 0 where it is held (FOCE).
  const double sp = foce ? 0.0 : model.sigma_proportional;
  p.e.resize(n);
  p.rv.resize(n);
  p.r.resize(n, q);
  for (Eigen::Index j = 0; j < n; ++j) {
    p.e(j) = subj.dv(j) - p.f(j);
    p.rv(j) = variance(model, foce ? f0(j) : p.f(j));
    if (!(p.rv(j) > 0.0)) return false;
    p.r.row(j) = (2.0 * sp * p.f(j)) * p.g.row(j);
  }
  // h[j](k, l) = d2F_j / dETA_k dETA_l = dl[l](j, k) P_k + delta_kl G_jk (symmetrized).
  std::vector<Matrix> h(static_cast<std::size_t>(n), Matrix(q, q));
  for (Eigen::Index j = 0; j < n; ++j) {
    Matrix& hj = h[static_cast<std::size_t>(j)];
    for (int k = 0; k < q; ++k)
      for (int l = 0; l < q; ++l)
        hj(k, l) = dl[static_cast<std::size_t>(l)](j, k) *
                       prow[static_cast<std::size_t>(st.cols[static_cast<std::size_t>(k)])] +
                   (k == l ? p.g(j, k) : 0.0);
    hj = 0.5 * (hj + hj.transpose()).eval();
  }

  // The ETA directions: the exact Hessian of L and dM/dETA_l.
  Matrix hess;
  std::vector<Matrix> m_eta;
  detail::eta_directions(p, h, sp, hess, &m_eta);
  hess += 2.0 * sh.omega_inv;
  hess = 0.5 * (hess + hess.transpose()).eval();
  Direction d;
  d.f.resize(n);
  d.r.resize(n);
  d.g.resize(n, q);
  d.rr.resize(n, q);
  double l = 0.0;
  Vector le;
  Matrix ma;
  const Eigen::LLT<Matrix> hess_llt(hess);
  Matrix mm = Matrix::Zero(q, q);
  for (Eigen::Index j = 0; j < n; ++j) {
    const auto g = p.g.row(j).transpose();
    const auto r = p.r.row(j).transpose();
    mm += g * g.transpose() / p.rv(j) + r * r.transpose() / (2.0 * p.rv(j) * p.rv(j));
  }
  const Eigen::LLT<Matrix> hm_llt(sh.omega_inv + mm);
  if (hess_llt.info() != Eigen::Success || hm_llt.info() != Eigen::Success) return false;
  const Matrix hm_inv = hm_llt.solve(Matrix::Identity(q, q));
  Vector c(q);  // tr(H^-1 dM/dETA_k)
  for (int k = 0; k < q; ++k) c(k) = (hm_inv * m_eta[static_cast<std::size_t>(k)]).trace();
  const Vector w = hess_llt.solve(c);  // so that the EBE term is -w' d2L/dETAda

  for (std::size_t i = 0; i < st.params.size(); ++i) {
    const EstimatedParameter& par = st.params[i];
    d.f.setZero();
    d.r.setZero();
    d.g.setZero();
    d.rr.setZero();
    double extra = 0.0;  // the OMEGA terms
    Vector le_extra = Vector::Zero(q);
    if (par.kind == Kind::Theta || par.kind == Kind::Effect) {
      // Both scale one column: d log P / da = 1 / THETA, or the effect's d log(factor) / db.
      const ParameterEffect* effect =
          par.kind == Kind::Effect ? &model.effects[static_cast<std::size_t>(par.index)] : nullptr;
      const int col = effect ? effect->parameter : par.index;
      const double lambda =
          effect ? effect->log_derivative(s, effect->coefficient) : 1.0 / par.value;
      const std::size_t ci = static_cast<std::size_t>(
          std::find(st.cols.begin(), st.cols.end(), col) - st.cols.begin());
      const double ratio = prow[static_cast<std::size_t>(col)] * lambda;  // dP/da
      for (Eigen::Index j = 0; j < n; ++j) {
        d.f(j) = jc(j, static_cast<Eigen::Index>(ci)) * ratio;
        d.r(j) = foce ? 2.0 * model.sigma_proportional * f0(j) *
                            j0(j, static_cast<Eigen::Index>(ci)) *
                            prow0[static_cast<std::size_t>(col)] * lambda
                      : 2.0 * sp * p.f(j) * d.f(j);
        for (int k = 0; k < q; ++k) {
          d.g(j, k) = dl[static_cast<std::size_t>(k)](j, static_cast<Eigen::Index>(ci)) * ratio;
          if (model.eta_columns[static_cast<std::size_t>(k)] == col)
            d.g(j, k) += p.g(j, k) * lambda;
        }
        d.rr.row(j) = 2.0 * sp * (d.f(j) * p.g.row(j) + p.f(j) * d.g.row(j));
      }
    } else if (par.kind == Kind::Sigma) {
      for (Eigen::Index j = 0; j < n; ++j) {
        if (par.index == 0) {  // proportional
          const double fr = foce ? f0(j) : p.f(j);
          d.r(j) = fr * fr;
          if (!foce) d.rr.row(j) = 2.0 * p.f(j) * p.g.row(j);
        } else {
          d.r(j) = 1.0;
        }
      }
    } else {
      const Matrix& e = st.omega_dirs[i];
      const Matrix dinv = -sh.omega_inv * e * sh.omega_inv;
      extra = eta.dot(dinv * eta) + (sh.omega_inv * e).trace() + (hm_inv * dinv).trace();
      le_extra = 2.0 * dinv * eta;
    }
    along(p, d, l, le, ma);
    out(static_cast<Eigen::Index>(i)) = l + extra + (hm_inv * ma).trace() - w.dot(le + le_extra);
  }
  return out.allFinite();
}

}  // namespace

PopulationGradient population_gradient(const Predictor& predictor, const PopulationFitSpec& spec,
                                       const EstimationOptions& options,
                                       const PopulationObjective* start) {
  if (options.method != EstimationMethod::Focei && options.method != EstimationMethod::Foce)
    throw InvalidArgument("population gradient: the method is " + to_string(options.method) +
                          ", but only foce and focei have an analytic gradient");
  PopulationGradient out;
  out.objective = population_objective(predictor, spec.initial, options, start);
  const PopulationModel& model = spec.initial;
  Setup st{spec, estimated_parameters(spec), {}, {}};
  out.parameters = st.params;
  st.cols = model.eta_columns;
  std::vector<int> scaled = spec.theta_columns;
  for (int e : spec.effect_indices)
    scaled.push_back(model.effects[static_cast<std::size_t>(e)].parameter);
  for (int c : scaled)
    if (std::find(st.cols.begin(), st.cols.end(), c) == st.cols.end()) st.cols.push_back(c);
  const int q = static_cast<int>(model.eta_columns.size());
  st.omega_dirs.resize(st.params.size());
  for (std::size_t i = 0; i < st.params.size(); ++i)
    if (st.params[i].kind == Kind::Omega) {
      Matrix e = Matrix::Zero(q, q);
      e(st.params[i].index, st.params[i].index2) = 1.0;
      e(st.params[i].index2, st.params[i].index) = 1.0;
      st.omega_dirs[i] = e;
    }
  const std::int64_t n = predictor.subjects();
  const Eigen::Index np = static_cast<Eigen::Index>(st.params.size());
  out.subjects = Matrix::Constant(n, np, kNaN);
  if (!out.objective.finite()) return out;

  const Shared sh = detail::make_shared(predictor, model, options);
  detail::for_each_subject(
      predictor, options.threads, [&](std::int64_t s, Predictor::Workspace& ws) {
        const SubjectObjective& so = out.objective.subjects[static_cast<std::size_t>(s)];
        if (so.status == InnerStatus::NotFinite) return;
        Subject subj(sh, s, ws);
        const Vector eta = Eigen::Map<const Vector>(so.eta.data(), q);
        Vector g;
        if (subject_gradient(sh, st, s, subj, eta, g)) out.subjects.row(s) = g.transpose();
      });
  // Summed in subject order: the same bits for any thread count.
  out.gradient = Vector::Zero(np);
  for (std::int64_t s = 0; s < n; ++s) out.gradient += out.subjects.row(s).transpose();
  out.ok = out.gradient.allFinite();
  return out;
}

}  // namespace pkscan
