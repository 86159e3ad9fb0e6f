// Diagnostics of a population model at its EBEs (pkscan/estimation.hpp,
// population_diagnostics): PRED, IPRED, RES, IRES, WRES, CWRES, CWRESI, IWRES per observation
// and the ETA and EPS shrinkage, with NONMEM's definitions.
#include <cmath>
#include <cstdint>
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

using detail::Matrix;
using detail::Shared;
using detail::Subject;
using detail::variance;
using detail::Vector;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// C^-1/2 r with the symmetric inverse square root of C (NaN when C is not positive definite or
// r is not finite).
Vector whiten(const Matrix& c, const Vector& r) {
  const Eigen::SelfAdjointEigenSolver<Matrix> eig(c);
  if (eig.info() != Eigen::Success || !(eig.eigenvalues().minCoeff() > 0.0) || !r.allFinite())
    return Vector::Constant(r.size(), kNaN);
  const Matrix& v = eig.eigenvectors();
  return v * (eig.eigenvalues().cwiseSqrt().cwiseInverse().asDiagonal() * (v.transpose() * r));
}

// The sample standard deviation (n - 1) of the finite values; NaN for fewer than two.
double sample_sd(const std::vector<double>& x) {
  double sum = 0.0;
  std::int64_t n = 0;
  for (double v : x)
    if (std::isfinite(v)) {
      sum += v;
      ++n;
    }
  if (n < 2) return kNaN;
  const double mean = sum / static_cast<double>(n);
  double ss = 0.0;
  for (double v : x)
    if (std::isfinite(v)) ss += (v - mean) * (v - mean);
  return std::sqrt(ss / static_cast<double>(n - 1));
}

// One subject's rows, written at `at` of each column.
struct Rows {
  PopulationDiagnostics& d;
  std::size_t at;
  void set(Eigen::Index j, std::vector<double> PopulationDiagnostics::*col, double v) const {
    (d.*col)[at + static_cast<std::size_t>(j)] = v;
  }
};

void subject_rows(const Shared& sh, std::int64_t s, const SubjectObjective& so,
                  Predictor::Workspace& ws, const Rows& out) {
  const PopulationModel& model = sh.model;
  Subject subj(sh, s, ws);
  const Eigen::Index n = subj.n();
  for (Eigen::Index j = 0; j < n; ++j) {
    out.d.subject[out.at + static_cast<std::size_t>(j)] = s;
    out.d.line[out.at + static_cast<std::size_t>(j)] = subj.record(j).line;
    out.set(j, &PopulationDiagnostics::time, subj.record(j).time);
    out.set(j, &PopulationDiagnostics::dv, subj.dv(j));
  }
  Vector f0, f;
  Matrix g0, g;
  const Vector zero = Vector::Zero(sh.q);
  const bool pop = subj.evaluate(zero, f0, g0);
  Vector eta = zero;
  for (int k = 0; k < sh.q; ++k) eta(k) = so.eta[static_cast<std::size_t>(k)];
  const bool ind = so.status != InnerStatus::NotFinite && subj.evaluate(eta, f, g);
  if (!pop) {
    f0 = Vector::Constant(n, kNaN);
    g0 = Matrix::Constant(n, sh.q, kNaN);
  }
  if (!ind) {
    f = Vector::Constant(n, kNaN);
    g = Matrix::Constant(n, sh.q, kNaN);
  }
  Vector res(n), r0(n), ri(n), cres(n);
  for (Eigen::Index j = 0; j < n; ++j) {
    res(j) = subj.dv(j) - f0(j);
    r0(j) = variance(model, f0(j));
    ri(j) = variance(model, f(j));
    cres(j) = subj.dv(j) - f(j) + g.row(j).dot(eta);  // DV - E_FOCE(DV)
    out.set(j, &PopulationDiagnostics::pred, f0(j));
    out.set(j, &PopulationDiagnostics::ipred, f(j));
    out.set(j, &PopulationDiagnostics::res, res(j));
    out.set(j, &PopulationDiagnostics::ires, subj.dv(j) - f(j));
    out.set(j, &PopulationDiagnostics::iwres,
            ri(j) > 0.0 ? (subj.dv(j) - f(j)) / std::sqrt(ri(j)) : kNaN);
  }
  const Vector wres = whiten(g0 * model.omega * g0.transpose() + Matrix(r0.asDiagonal()), res);
  const Matrix gog = g * model.omega * g.transpose();
  const Vector cwres = whiten(gog + Matrix(r0.asDiagonal()), cres);
  const Vector cwresi = whiten(gog + Matrix(ri.asDiagonal()), cres);
  for (Eigen::Index j = 0; j < n; ++j) {
    out.set(j, &PopulationDiagnostics::wres, wres(j));
    out.set(j, &PopulationDiagnostics::cwres, cwres(j));
    out.set(j, &PopulationDiagnostics::cwresi, cwresi(j));
  }
}

}  // namespace

PopulationDiagnostics population_diagnostics(const Predictor& predictor,
                                             const PopulationModel& model,
                                             const PopulationObjective& objective,
                                             const EstimationOptions& options) {
  detail::check_population_model(predictor, model, options);
  const std::int64_t subjects = predictor.subjects();
  const int q = static_cast<int>(model.eta_columns.size());
  if (static_cast<std::int64_t>(objective.subjects.size()) != subjects)
    throw InvalidArgument("population diagnostics: the objective has " +
                          std::to_string(objective.subjects.size()) +
                          " subjects, but the predictor has " + std::to_string(subjects));
  for (const SubjectObjective& so : objective.subjects)
    if (static_cast<int>(so.eta.size()) != q)
      throw InvalidArgument("population diagnostics: an EBE has " + std::to_string(so.eta.size()) +
                            " ETAs, but the model has " + std::to_string(q));

  // Each subject's first row: its observations follow in subject order.
  std::vector<std::size_t> first(static_cast<std::size_t>(subjects) + 1, 0);
  for (std::int64_t s = 0; s < subjects; ++s)
    first[static_cast<std::size_t>(s) + 1] =
        first[static_cast<std::size_t>(s)] +
        static_cast<std::size_t>(objective.subjects[static_cast<std::size_t>(s)].observations);
  const std::size_t rows = first.back();
  PopulationDiagnostics d;
  d.subject.resize(rows);
  d.line.resize(rows);
  for (std::vector<double>* c :
       {&d.time, &d.dv, &d.pred, &d.ipred, &d.res, &d.ires, &d.wres, &d.cwres, &d.cwresi, &d.iwres})
    c->assign(rows, kNaN);

  const Shared sh{predictor, model, options, Matrix(), 0.0, q};
  detail::for_each_subject(
      predictor, options.threads, [&](std::int64_t s, Predictor::Workspace& ws) {
        const SubjectObjective& so = objective.subjects[static_cast<std::size_t>(s)];
        if (so.observations > 0)
          subject_rows(sh, s, so, ws, Rows{d, first[static_cast<std::size_t>(s)]});
      });

  for (int k = 0; k < q; ++k) {
    std::vector<double> eta;
    for (const SubjectObjective& so : objective.subjects)
      eta.push_back(so.eta[static_cast<std::size_t>(k)]);
    d.eta_shrinkage.push_back(100.0 * (1.0 - sample_sd(eta) / std::sqrt(model.omega(k, k))));
  }
  d.eps_shrinkage = 100.0 * (1.0 - sample_sd(d.iwres));
  return d;
}

}  // namespace pkscan
