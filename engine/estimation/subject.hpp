#pragma once
// One subject of a population model on the Predictor: its observations (EVID 0, MDV 0, a DV) and
// the predictions F and G = dF/dETA there at a given ETA (P = THETA * exp(ETA)). Shared by the
// objective (objective.cpp) and the diagnostics (diagnostics.cpp).
#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <pkscan/error.hpp>
#include <pkscan/estimation.hpp>
#include <pkscan/threads.hpp>
#include <vector>

namespace pkscan::detail {

using Matrix = Eigen::MatrixXd;
using Vector = Eigen::VectorXd;

// What the whole population shares: OMEGA's inverse and log-determinant, the ETA columns.
struct Shared {
  const Predictor& predictor;
  const PopulationModel& model;
  const EstimationOptions& options;
  Matrix omega_inv;
  double log_det_omega = 0.0;
  int q = 0;
};

// One subject's observations and its evaluations (per thread; buffers reused).
class Subject {
 public:
  Subject(const Shared& sh, std::int64_t s, Predictor::Workspace& ws) : sh_(sh), s_(s), ws_(ws) {
    // The predictions are at the EVID 0 records in dataset order; the observations are those
    // with MDV 0 and a DV.
    const DatasetSubject& subject = sh.predictor.dataset().subjects[static_cast<std::size_t>(s)];
    std::int64_t k = 0;
    for (const DatasetRecord& r : subject.records) {
      if (r.evid != 0) continue;
      if (!r.mdv && !std::isnan(r.dv)) {
        index_.push_back(k);
        dv_.push_back(r.dv);
        records_.push_back(&r);
      }
      ++k;
    }
    pred_.resize(static_cast<std::size_t>(sh.predictor.observations(s)));
    jac_.resize(pred_.size() * static_cast<std::size_t>(sh.predictor.parameters()));
    // The subject's typical row: THETA times its covariate effects.
    base_ = sh.model.theta_row;
    for (const ParameterEffect& e : sh.model.effects)
      base_[static_cast<std::size_t>(e.parameter)] *= e.factor(s, e.coefficient);
    row_ = base_;
  }

  Eigen::Index n() const { return static_cast<Eigen::Index>(index_.size()); }

  // F and G = dF/dETA at `eta`; false when the predictor rejects the parameters or a
  // prediction or derivative is not finite.
  bool evaluate(const Vector& eta, Vector& f, Matrix& g) {
    const std::vector<int>& cols = sh_.model.eta_columns;
    for (int k = 0; k < sh_.q; ++k) {
      const std::size_t c = static_cast<std::size_t>(cols[static_cast<std::size_t>(k)]);
      row_[c] = base_[c] * std::exp(eta(k));
    }
    try {
      sh_.predictor.predict_gradient(s_, row_.data(), pred_.data(), jac_.data(), ws_);
    } catch (const Error&) {
      return false;
    }
    return read(f, g);
  }

 private:
  // F and G from the predictions and Jacobian just computed.
  bool read(Vector& f, Matrix& g) const {
    const std::vector<int>& cols = sh_.model.eta_columns;
    const std::size_t np = static_cast<std::size_t>(sh_.predictor.parameters());
    f.resize(n());
    g.resize(n(), sh_.q);
    for (Eigen::Index j = 0; j < n(); ++j) {
      const std::size_t o = static_cast<std::size_t>(index_[static_cast<std::size_t>(j)]);
      f(j) = pred_[o];
      if (!std::isfinite(f(j))) return false;
      for (int k = 0; k < sh_.q; ++k) {
        const std::size_t c = static_cast<std::size_t>(cols[static_cast<std::size_t>(k)]);
        g(j, k) = jac_[o * np + c] * row_[c];  // dF/dETA = dF/dP * P
        if (!std::isfinite(g(j, k))) return false;
      }
    }
    return true;
  }

 public:
  // evaluate() with the exact second derivatives d2F_j / dP_a dP_b of each observation with
  // respect to the columns `cols` (distinct; Predictor::predict_hessian) into hp[j] (m x m, with
  // respect to P, not ETA).
  bool evaluate_second(const Vector& eta, const std::vector<int>& cols, Vector& f, Matrix& g,
                       std::vector<Matrix>& hp) {
    const std::vector<int>& etas = sh_.model.eta_columns;
    for (int k = 0; k < sh_.q; ++k) {
      const std::size_t c = static_cast<std::size_t>(etas[static_cast<std::size_t>(k)]);
      row_[c] = base_[c] * std::exp(eta(k));
    }
    const Eigen::Index m = static_cast<Eigen::Index>(cols.size());
    hess_.resize(pred_.size() * static_cast<std::size_t>(m * m));
    try {
      sh_.predictor.predict_hessian(s_, row_.data(), cols.data(), static_cast<int>(m), pred_.data(),
                                    jac_.data(), hess_.data(), ws_);
    } catch (const Error&) {
      return false;
    }
    if (!read(f, g)) return false;
    hp.resize(static_cast<std::size_t>(n()));
    for (Eigen::Index j = 0; j < n(); ++j) {
      const std::size_t o = static_cast<std::size_t>(index_[static_cast<std::size_t>(j)]);
      Matrix& h = hp[static_cast<std::size_t>(j)];
      h = Eigen::Map<const Matrix>(hess_.data() + o * static_cast<std::size_t>(m * m), m, m);
      if (!h.allFinite()) return false;
    }
    return true;
  }

  // After a successful evaluate(): dF/dP of observation j with respect to column `col`, and the
  // parameter row P evaluated.
  double jacobian(Eigen::Index j, int col) const {
    const std::size_t o = static_cast<std::size_t>(index_[static_cast<std::size_t>(j)]);
    return jac_[o * static_cast<std::size_t>(sh_.predictor.parameters()) +
                static_cast<std::size_t>(col)];
  }
  const std::vector<double>& row() const { return row_; }

  double dv(Eigen::Index j) const { return dv_[static_cast<std::size_t>(j)]; }
  // The dataset record of observation j.
  const DatasetRecord& record(Eigen::Index j) const {
    return *records_[static_cast<std::size_t>(j)];
  }

 private:
  const Shared& sh_;
  std::int64_t s_;
  Predictor::Workspace& ws_;
  std::vector<std::int64_t> index_;  // observation -> prediction index
  std::vector<double> dv_;
  std::vector<const DatasetRecord*> records_;
  std::vector<double> pred_;
  std::vector<double> jac_;
  std::vector<double> base_;  // THETA with the subject's covariate effects
  std::vector<double> row_;
  std::vector<double> hess_;
};

// The movement of each observation along one direction a: dF/da, dR/da, dG/da, dr/da (r =
// dR/dETA).
struct Direction {
  Vector f;   // n
  Vector r;   // n: dR/da
  Matrix g;   // n x q
  Matrix rr;  // n x q: d(dR/dETA)/da
};

// What the subject's point gives every direction.
struct Point {
  Vector e, rv, f;  // residual, variance, prediction
  Matrix g, r;      // dF/dETA, dR/dETA (n x q)
};

// dL/da (data part), d2L/dETA da (data part, q) and dM/da (q x q) along `d`.
inline void along(const Point& p, const Direction& d, double& l, Vector& le, Matrix& m) {
  const Eigen::Index n = p.f.size(), q = p.g.cols();
  l = 0.0;
  le.setZero(q);
  m.setZero(q, q);
  for (Eigen::Index j = 0; j < n; ++j) {
    const double e = p.e(j), rv = p.rv(j), fa = d.f(j), ra = d.r(j);
    const double i1 = 1.0 / rv, i2 = i1 * i1, i3 = i2 * i1;
    const double u = 1.0 - e * e * i1, ua = 2.0 * e * fa * i1 + e * e * ra * i2;
    l += -2.0 * e * fa * i1 + u * ra * i1;
    // le += (2 fa / R + 2 e R_a / R^2) g - (2 e / R) g_a + (u_a / R - u R_a / R^2) r + (u / R) r_a
    // m += (g_a g' + g g_a') / R - R_a g g' / R^2 + (r_a r' + r r_a') / (2 R^2) - R_a r r' / R^3
    // (scalar loops: no temporaries)
    const double cg = 2.0 * fa * i1 + 2.0 * e * ra * i2, cga = -2.0 * e * i1;
    const double cr = ua * i1 - u * ra * i2, crr = u * i1;
    for (Eigen::Index a = 0; a < q; ++a) {
      const double ga = p.g(j, a), gaa = d.g(j, a), ra_ = p.r(j, a), rraa = d.rr(j, a);
      le(a) += cg * ga + cga * gaa + cr * ra_ + crr * rraa;
      for (Eigen::Index b = 0; b < q; ++b) {
        const double gb = p.g(j, b), gab = d.g(j, b), rb = p.r(j, b), rrab = d.rr(j, b);
        m(a, b) += (gaa * gb + ga * gab) * i1 - ra * i2 * ga * gb +
                   (rraa * rb + ra_ * rrab) * (0.5 * i2) - ra * i3 * ra_ * rb;
      }
    }
  }
}

// Along each ETA direction l (f moves by G_l, G by h[j].col(l), R by r_l): the columns of the
// Hessian D of sum(e^2 / R + log R) with respect to ETA into `d` and, with `m_eta`, dM/dETA_l.
// sp: SIGMA_prop (0 where R is held, as FOCE holds it).
inline void eta_directions(const Point& p, const std::vector<Matrix>& h, double sp, Matrix& d,
                           std::vector<Matrix>* m_eta) {
  const Eigen::Index n = p.f.size(), q = p.g.cols();
  Direction dir;
  dir.f.resize(n);
  dir.r.resize(n);
  dir.g.resize(n, q);
  dir.rr.resize(n, q);
  d.setZero(q, q);
  if (m_eta) m_eta->resize(static_cast<std::size_t>(q));
  double l = 0.0;
  Vector le;
  Matrix ma;
  for (Eigen::Index k = 0; k < q; ++k) {
    for (Eigen::Index j = 0; j < n; ++j) {
      dir.f(j) = p.g(j, k);
      dir.r(j) = p.r(j, k);
      dir.g.row(j) = h[static_cast<std::size_t>(j)].col(k).transpose();
      dir.rr.row(j) = 2.0 * sp * (p.g(j, k) * p.g.row(j) + p.f(j) * dir.g.row(j));
    }
    along(p, dir, l, le, ma);
    d.col(k) = le;
    if (m_eta) (*m_eta)[static_cast<std::size_t>(k)] = ma;
  }
}

// The Shared of a checked model: OMEGA's inverse (symmetrized) and log-determinant.
// @throws InvalidArgument when OMEGA is not positive definite
inline Shared make_shared(const Predictor& predictor, const PopulationModel& model,
                          const EstimationOptions& options) {
  const int q = static_cast<int>(model.eta_columns.size());
  Shared sh{predictor, model, options, Matrix(), 0.0, q};
  const Eigen::LLT<Matrix> llt(model.omega);
  if (llt.info() != Eigen::Success)
    throw InvalidArgument("population model: OMEGA is not positive definite");
  sh.omega_inv = llt.solve(Matrix::Identity(q, q));
  sh.omega_inv = 0.5 * (sh.omega_inv + sh.omega_inv.transpose()).eval();
  const Matrix l = llt.matrixL();
  sh.log_det_omega = 2.0 * l.diagonal().array().log().sum();
  return sh;
}

// Runs fn(s, workspace) for every subject of `predictor`: a thread per at least 16 subjects (an
// inner problem takes microseconds, so small datasets do not pay for starting threads on every
// evaluation), each with its own Predictor workspace.
template <class Fn>
void for_each_subject(const Predictor& predictor, int threads_option, Fn&& fn) {
  const std::int64_t n = predictor.subjects();
  const int threads = static_cast<int>(
      std::max<std::int64_t>(1, std::min<std::int64_t>(resolve_threads(threads_option), n / 16)));
  std::vector<std::unique_ptr<Predictor::Workspace>> workspaces(static_cast<std::size_t>(threads));
  parallel_for(n, threads, [&](std::int64_t s, int worker) {
    std::unique_ptr<Predictor::Workspace>& ws = workspaces[static_cast<std::size_t>(worker)];
    if (!ws) ws = predictor.make_workspace();
    fn(s, *ws);
  });
}

// population_objective's checks of a model and options.
// @throws InvalidArgument
void check_population_model(const Predictor& predictor, const PopulationModel& model,
                            const EstimationOptions& options);

// Whether population_gradient serves `method` (FOCE and FOCEI).
inline bool has_analytic_gradient(EstimationMethod method) {
  return method == EstimationMethod::Foce || method == EstimationMethod::Focei;
}

// NONMEM's residual variance of a prediction f: SIGMA_add + SIGMA_prop f^2.
inline double variance(const PopulationModel& m, double f) {
  return m.sigma_additive + m.sigma_proportional * f * f;
}

}  // namespace pkscan::detail
