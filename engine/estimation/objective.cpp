// NONMEM's FO, FOCE and FOCEI objectives at fixed parameters (pkscan/estimation.hpp): each
// subject's EBE by damped Gauss-Newton on the Predictor's exact dF/dETA, then its OBJI.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
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

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kNewtonAfter = 10;  // inner Gauss-Newton iterations before Newton steps

using detail::Shared;
using detail::Subject;
using detail::variance;
using Matrix = Eigen::MatrixXd;
using Vector = Eigen::VectorXd;

// Half the conditional objective at one point, its gradient and Gauss-Newton Hessian (without
// OMEGA's terms, which the caller adds). FOCEI: R at the individual prediction; FOCE: R0 given.
struct Local {
  double half = 0.0;  // 0.5 * sum(e^2 / R + log R)
  Vector grad;        // d half / d ETA
  Matrix m;           // M = sum(g g' / R + r r' / (2 R^2)) (FOCE: sum g g' / R0)
};

bool local(const PopulationModel& model, const Subject& subj, const Vector& f, const Matrix& g,
           const Vector* r0, Local& out) {
  const Eigen::Index q = g.cols();
  out.half = 0.0;
  out.grad.setZero(q);
  out.m.setZero(q, q);
  for (Eigen::Index j = 0; j < f.size(); ++j) {
    const double e = subj.dv(j) - f(j);
    const double rv = r0 ? (*r0)(j) : variance(model, f(j));
    if (!(rv > 0.0) || !std::isfinite(rv)) return false;
    out.half += 0.5 * (e * e / rv + std::log(rv));
    // r = dR/dETA = c g with c = 2 SIGMA_prop F (0 where R is held), so that the gradient
    // moves along g and M by a multiple of g g' (scalar loops: no temporaries).
    const double c = r0 ? 0.0 : 2.0 * model.sigma_proportional * f(j);
    const double wg = -e / rv + c * 0.5 * (1.0 - e * e / rv) / rv;
    const double wm = 1.0 / rv + c * c / (2.0 * rv * rv);
    for (Eigen::Index a = 0; a < q; ++a) {
      const double ga = g(j, a);
      out.grad(a) += wg * ga;
      for (Eigen::Index b = 0; b < q; ++b) out.m(a, b) += wm * ga * g(j, b);
    }
  }
  return std::isfinite(out.half) && out.grad.allFinite() && out.m.allFinite();
}

// The linearized objective of FO and FOCE at `eta` (FO: 0): log|C| + e~' C^-1 e~ with
// e~ = DV - F + G eta, C = G OMEGA G' + diag(R0), through OMEGA^-1 + G' R0^-1 G (q x q).
double linearized(const Shared& sh, const Subject& subj, const Vector& eta, const Vector& f,
                  const Matrix& g, const Vector& r0) {
  const Eigen::Index n = f.size();
  Vector et(n);
  double sum_log_r = 0.0, quad = 0.0;
  for (Eigen::Index j = 0; j < n; ++j) {
    et(j) = subj.dv(j) - f(j) + g.row(j).dot(eta);
    sum_log_r += std::log(r0(j));
    quad += et(j) * et(j) / r0(j);
  }
  const Matrix w = r0.cwiseInverse().asDiagonal() * g;  // R0^-1 G
  const Matrix h = sh.omega_inv + g.transpose() * w;
  const Eigen::LLT<Matrix> llt(h);
  if (llt.info() != Eigen::Success) return kNaN;
  const Vector b = w.transpose() * et;  // G' R0^-1 e~
  quad -= b.dot(llt.solve(b));          // Woodbury
  const Matrix lh = llt.matrixL();
  const double log_det_h = 2.0 * lh.diagonal().array().log().sum();
  // log|C| = sum log R0 + log|OMEGA| + log|OMEGA^-1 + G' R0^-1 G| (determinant lemma)
  const double v = sum_log_r + sh.log_det_omega + log_det_h + quad;
  return std::isfinite(v) ? v : kNaN;
}

// Half the exact Hessian of sum(e^2 / R + log R) with respect to ETA at `eta` (F = f, dF/dETA =
// g there), into `half_d`; d2F/dETA2 from the Predictor's exact second derivatives:
// d2F/dETA_k dETA_l = d2F/dP_k dP_l P_k P_l + [k = l] G_k. False when a point cannot be evaluated.
bool data_hessian(const Shared& sh, Subject& subj, const Vector& eta, const Vector& f,
                  const Matrix& g, const Vector* r0, Matrix& half_d) {
  const int q = sh.q;
  const Eigen::Index n = f.size();
  std::vector<Matrix> h(static_cast<std::size_t>(n), Matrix::Zero(q, q));
  Vector fp;
  Matrix gp;
  std::vector<Matrix> hp;
  if (!subj.evaluate_second(eta, sh.model.eta_columns, fp, gp, hp)) return false;
  const std::vector<int>& cols = sh.model.eta_columns;
  const std::vector<double>& row = subj.row();
  for (Eigen::Index j = 0; j < n; ++j)
    for (int k = 0; k < q; ++k)
      for (int l = 0; l < q; ++l) {
        const double pk = row[static_cast<std::size_t>(cols[static_cast<std::size_t>(k)])];
        const double pl = row[static_cast<std::size_t>(cols[static_cast<std::size_t>(l)])];
        h[static_cast<std::size_t>(j)](k, l) =
            hp[static_cast<std::size_t>(j)](k, l) * pk * pl + (k == l ? g(j, k) : 0.0);
      }
  // With r0 (FOCE) the residual variance is held: R = r0, dR/dETA = 0.
  const double sp = r0 ? 0.0 : sh.model.sigma_proportional;
  detail::Point p;
  p.f = f;
  p.g = g;
  p.e.resize(n);
  p.rv.resize(n);
  p.r.resize(n, q);
  for (Eigen::Index j = 0; j < n; ++j) {
    Matrix& hj = h[static_cast<std::size_t>(j)];
    hj = 0.5 * (hj + hj.transpose()).eval();
    p.e(j) = subj.dv(j) - f(j);
    p.rv(j) = r0 ? (*r0)(j) : variance(sh.model, f(j));
    p.r.row(j) = (2.0 * sp * f(j)) * g.row(j);
  }
  Matrix d;
  detail::eta_directions(p, h, sp, d, nullptr);
  d = 0.5 * (d + d.transpose()).eval();
  half_d = 0.5 * d;
  return half_d.allFinite();
}

SubjectObjective solve_subject(const Shared& sh, std::int64_t s, Predictor::Workspace& ws,
                               const std::vector<double>* warm) {
  const PopulationModel& model = sh.model;
  const EstimationMethod method = sh.options.method;
  Subject subj(sh, s, ws);
  SubjectObjective out;
  out.observations = static_cast<std::int64_t>(subj.n());
  out.eta.assign(static_cast<std::size_t>(sh.q), 0.0);
  if (subj.n() == 0) return out;  // OBJI 0: log det(I + OMEGA 0) = 0

  Vector eta = Vector::Zero(sh.q);
  Vector f, f_try;
  Matrix g, g_try;
  auto not_finite = [&]() {
    out.obji = kNaN;
    out.status = InnerStatus::NotFinite;
    return out;
  };
  if (!subj.evaluate(eta, f, g)) return not_finite();
  Vector r0;  // FO, FOCE: the residual variance at the population prediction
  const bool interaction = method == EstimationMethod::Focei || method == EstimationMethod::Laplace;
  if (!interaction) {
    r0.resize(subj.n());
    for (Eigen::Index j = 0; j < subj.n(); ++j) {
      r0(j) = variance(model, f(j));
      if (!(r0(j) > 0.0) || !std::isfinite(r0(j))) return not_finite();
    }
  }
  if (method == EstimationMethod::Fo) {
    out.obji = linearized(sh, subj, eta, f, g, r0);
    if (std::isnan(out.obji)) return not_finite();
    return out;
  }

  // The inner problem: minimize phi(eta) = half + 0.5 eta' OMEGA^-1 eta by Gauss-Newton with
  // the Hessian OMEGA^-1 + M (positive definite) and a backtracking (Armijo) line search.
  const Vector* rp = method == EstimationMethod::Foce ? &r0 : nullptr;
  Local at, trial;
  if (warm && warm->size() == static_cast<std::size_t>(sh.q)) {
    // A warm start (a previous EBE) where the objective can be evaluated; else ETA = 0.
    const Vector e0 = Eigen::Map<const Vector>(warm->data(), sh.q);
    if (e0.allFinite() && subj.evaluate(e0, f_try, g_try) &&
        local(model, subj, f_try, g_try, rp, trial)) {
      eta = e0;
      f.swap(f_try);
      g.swap(g_try);
    }
  }
  if (!local(model, subj, f, g, rp, at)) return not_finite();
  auto phi = [&](const Local& l, const Vector& e) {
    return l.half + 0.5 * e.dot(sh.omega_inv * e);
  };
  double value = phi(at, eta);
  Vector grad = at.grad + sh.omega_inv * eta;
  out.status = InnerStatus::MaxIterations;
  int it = 0;
  for (;; ++it) {
    if (grad.lpNorm<Eigen::Infinity>() <= sh.options.inner_tolerance) {
      out.status = InnerStatus::Converged;
      break;
    }
    if (it >= sh.options.max_inner_iterations) break;
    // Gauss-Newton steps; after kNewtonAfter of them, Newton steps on the exact Hessian where it
    // is positive definite (Gauss-Newton converges only linearly where the residuals are large).
    Eigen::LLT<Matrix> llt(sh.omega_inv + at.m);
    if (it >= kNewtonAfter) {
      Matrix half_d;
      if (data_hessian(sh, subj, eta, f, g, rp, half_d)) {
        const Eigen::LLT<Matrix> newton(sh.omega_inv + half_d);
        if (newton.info() == Eigen::Success) llt = newton;
      }
    }
    if (llt.info() != Eigen::Success) {
      out.status = InnerStatus::Stalled;
      break;
    }
    const Vector step = -llt.solve(grad);
    const double slope = grad.dot(step);  // < 0
    // Near the minimum the decrease (about slope / 2) is below the rounding of phi: a step that
    // predicts such a decrease is taken when it does not increase phi beyond rounding.
    const double tiny = 1e-13 * (1.0 + std::abs(value));
    bool accepted = false;
    double t = 1.0;
    for (int k = 0; k < 60; ++k, t *= 0.5) {
      const Vector e = eta + t * step;
      if (!subj.evaluate(e, f_try, g_try) || !local(model, subj, f_try, g_try, rp, trial)) continue;
      const double v = phi(trial, e);
      if (!std::isfinite(v)) continue;
      if (v <= value + 1e-4 * t * slope || (-slope < tiny && v <= value + tiny)) {
        eta = e;
        value = v;
        f.swap(f_try);
        g.swap(g_try);
        std::swap(at, trial);
        grad = at.grad + sh.omega_inv * eta;
        accepted = true;
        break;
      }
    }
    if (!accepted) {
      out.status = InnerStatus::Stalled;
      break;
    }
  }
  out.iterations = it;
  out.gradient = grad.lpNorm<Eigen::Infinity>();
  for (int k = 0; k < sh.q; ++k) out.eta[static_cast<std::size_t>(k)] = eta(k);

  if (method == EstimationMethod::Foce) {
    out.obji = linearized(sh, subj, eta, f, g, r0);
  } else {
    // FOCEI: 2 phi + log det(I + OMEGA M) = 2 phi + log|OMEGA| + log|OMEGA^-1 + M|; Laplace:
    // the same with D / 2 in place of M.
    Matrix m = at.m;
    if (method == EstimationMethod::Laplace && !data_hessian(sh, subj, eta, f, g, nullptr, m)) {
      out.obji = kNaN;
      out.status = InnerStatus::NotFinite;
      return out;
    }
    const Eigen::LLT<Matrix> llt(sh.omega_inv + m);
    if (llt.info() != Eigen::Success) {
      out.obji = kNaN;
    } else {
      const Matrix l = llt.matrixL();
      out.obji = 2.0 * value + sh.log_det_omega + 2.0 * l.diagonal().array().log().sum();
    }
  }
  if (!std::isfinite(out.obji)) {
    out.obji = kNaN;
    out.status = InnerStatus::NotFinite;
  }
  return out;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string to_string(EstimationMethod method) {
  switch (method) {
    case EstimationMethod::Fo:
      return "fo";
    case EstimationMethod::Foce:
      return "foce";
    case EstimationMethod::Focei:
      return "focei";
    case EstimationMethod::Laplace:
      return "laplace";
  }
  return "focei";
}

EstimationMethod estimation_method_from_string(std::string_view name) {
  const std::string n = lower(name);
  if (n == "fo") return EstimationMethod::Fo;
  if (n == "foce") return EstimationMethod::Foce;
  if (n == "focei") return EstimationMethod::Focei;
  if (n == "laplace") return EstimationMethod::Laplace;
  throw InvalidArgument("estimation method is \"" + std::string(name) +
                        "\", but must be fo, foce, focei or laplace");
}

std::string to_string(InnerStatus status) {
  switch (status) {
    case InnerStatus::Converged:
      return "converged";
    case InnerStatus::MaxIterations:
      return "max_iterations";
    case InnerStatus::Stalled:
      return "stalled";
    case InnerStatus::NotFinite:
      return "not_finite";
  }
  return "not_finite";
}

std::string to_string(EffectForm form) {
  switch (form) {
    case EffectForm::Power:
      return "power";
    case EffectForm::Exponential:
      return "exponential";
    case EffectForm::Linear:
      return "linear";
    case EffectForm::Categorical:
      return "categorical";
  }
  return "power";
}

std::vector<double> subject_covariate(const Dataset& data, const std::string& name) {
  const auto& cols = data.covariate_columns;
  const auto at = std::find(cols.begin(), cols.end(), name);
  if (at == cols.end()) throw InvalidArgument("\"" + name + "\" is not a column of the dataset");
  const std::size_t col = static_cast<std::size_t>(at - cols.begin());
  std::vector<double> out;
  for (const DatasetSubject& subject : data.subjects) {
    double value = kNaN;
    for (const DatasetRecord& r : subject.records) {
      const std::string& cell = r.covariates[col];
      char* end = nullptr;
      const double v = std::strtod(cell.c_str(), &end);
      if (cell.empty() || end == nullptr || *end != '\0' || !std::isfinite(v))
        throw ConfigError(data.file, r.line, 0,
                          name + " is \"" + cell +
                              "\", but a covariate effect needs a finite number on every record");
      if (!std::isnan(value) && v != value)
        throw ConfigError(data.file, r.line, 0,
                          name + " of subject ID " + subject.id + " is " + format_value(v) +
                              " here and " + format_value(value) +
                              " before; a covariate effect needs one value per subject");
      value = v;
    }
    out.push_back(value);
  }
  return out;
}

double ParameterEffect::factor(std::int64_t s, double b) const {
  const double c = values[static_cast<std::size_t>(s)];
  switch (form) {
    case EffectForm::Power:
      return std::pow(c / reference, b);
    case EffectForm::Exponential:
      return std::exp(b * (c - reference));
    case EffectForm::Linear:
      return 1.0 + b * (c - reference);
    case EffectForm::Categorical:
      return c == level ? 1.0 + b : 1.0;
  }
  return 1.0;
}

double ParameterEffect::log_derivative(std::int64_t s, double b) const {
  const double c = values[static_cast<std::size_t>(s)];
  switch (form) {
    case EffectForm::Power:
      return std::log(c / reference);
    case EffectForm::Exponential:
      return c - reference;
    case EffectForm::Linear:
      return (c - reference) / (1.0 + b * (c - reference));
    case EffectForm::Categorical:
      return c == level ? 1.0 / (1.0 + b) : 0.0;
  }
  return 0.0;
}

bool PopulationObjective::finite() const noexcept { return std::isfinite(ofv); }

std::int64_t PopulationObjective::unconverged() const noexcept {
  std::int64_t n = 0;
  for (const SubjectObjective& s : subjects) n += s.status != InnerStatus::Converged ? 1 : 0;
  return n;
}

namespace detail {

void check_population_model(const Predictor& predictor, const PopulationModel& model,
                            const EstimationOptions& options) {
  const int np = predictor.parameters();
  if (static_cast<int>(model.theta_row.size()) != np)
    throw InvalidArgument("population model: theta_row has " +
                          std::to_string(model.theta_row.size()) + " values, but the model " +
                          predictor.model().name + " has " + std::to_string(np) + " parameters");
  const int q = static_cast<int>(model.eta_columns.size());
  for (int k = 0; k < q; ++k) {
    const int c = model.eta_columns[static_cast<std::size_t>(k)];
    if (c < 0 || c >= np)
      throw InvalidArgument("population model: ETA " + std::to_string(k + 1) + " is on column " +
                            std::to_string(c) + ", but the model has columns 0.." +
                            std::to_string(np - 1));
    for (int l = 0; l < k; ++l)
      if (model.eta_columns[static_cast<std::size_t>(l)] == c)
        throw InvalidArgument("population model: parameter " +
                              predictor.model().parameters[static_cast<std::size_t>(c)].name +
                              " has two ETAs");
  }
  if (model.omega.rows() != q || model.omega.cols() != q)
    throw InvalidArgument("population model: OMEGA is " + std::to_string(model.omega.rows()) +
                          " x " + std::to_string(model.omega.cols()) + ", but there are " +
                          std::to_string(q) + " ETAs");
  if (!model.omega.allFinite() || (q > 0 && !model.omega.isApprox(model.omega.transpose(), 1e-12)))
    throw InvalidArgument("population model: OMEGA is not a finite symmetric matrix");
  for (double v : {model.sigma_proportional, model.sigma_additive})
    if (!(std::isfinite(v) && v >= 0.0))
      throw InvalidArgument("population model: a SIGMA variance is " + format_value(v) +
                            ", but must be finite and >= 0");
  if (!(model.sigma_proportional > 0.0 || model.sigma_additive > 0.0))
    throw InvalidArgument("population model: SIGMA is 0 (no residual error)");
  for (std::size_t i = 0; i < model.effects.size(); ++i) {
    const ParameterEffect& e = model.effects[i];
    const std::string what =
        "population model: effect " + std::to_string(i + 1) + " (" + e.covariate + ")";
    if (e.parameter < 0 || e.parameter >= np ||
        !std::isfinite(model.theta_row[static_cast<std::size_t>(e.parameter)]))
      throw InvalidArgument(what + " is on a column without a finite THETA");
    if (static_cast<std::int64_t>(e.values.size()) != predictor.subjects())
      throw InvalidArgument(what + " has " + std::to_string(e.values.size()) +
                            " values, but there are " + std::to_string(predictor.subjects()) +
                            " subjects");
    if (!std::isfinite(e.coefficient) || !std::isfinite(e.reference) || !std::isfinite(e.level))
      throw InvalidArgument(what + ": its coefficient, reference and level must be finite");
    for (std::size_t s = 0; s < e.values.size(); ++s) {
      const double f = std::isfinite(e.values[s])
                           ? e.factor(static_cast<std::int64_t>(s), e.coefficient)
                           : std::numeric_limits<double>::quiet_NaN();
      if (!(std::isfinite(f) && f > 0.0))
        throw InvalidArgument(what + ": the factor of subject ID " +
                              predictor.dataset().subjects[s].id + " is " + format_value(f) +
                              ", but must be finite and > 0");
    }
  }
  if (!(options.inner_tolerance > 0.0) || options.max_inner_iterations < 1)
    throw InvalidArgument(
        "estimation options: inner_tolerance must be > 0 and max_inner_iterations >= 1");
}

}  // namespace detail

PopulationObjective population_objective(const Predictor& predictor, const PopulationModel& model,
                                         const EstimationOptions& options,
                                         const PopulationObjective* start) {
  detail::check_population_model(predictor, model, options);
  const Shared sh = detail::make_shared(predictor, model, options);

  PopulationObjective out;
  const std::int64_t n = predictor.subjects();
  out.subjects.resize(static_cast<std::size_t>(n));
  detail::for_each_subject(
      predictor, options.threads, [&](std::int64_t s, Predictor::Workspace& ws) {
        const std::vector<double>* warm =
            start && start->subjects.size() == static_cast<std::size_t>(n)
                ? &start->subjects[static_cast<std::size_t>(s)].eta
                : nullptr;
        out.subjects[static_cast<std::size_t>(s)] = solve_subject(sh, s, ws, warm);
      });
  // Summed in subject order: the same bits for any thread count.
  double sum = 0.0;
  for (const SubjectObjective& s : out.subjects) sum += s.obji;
  out.ofv = std::isfinite(sum) ? sum : kNaN;
  return out;
}

}  // namespace pkscan
