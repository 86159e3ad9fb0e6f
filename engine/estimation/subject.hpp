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
};

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

// NONMEM's residual variance of a prediction f: SIGMA_add + SIGMA_prop f^2.
inline double variance(const PopulationModel& m, double f) {
  return m.sigma_additive + m.sigma_proportional * f * f;
}

}  // namespace pkscan::detail
