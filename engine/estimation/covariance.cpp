// The covariance step (pkscan/estimation.hpp, covariance_step) on NONMEM's scale, the EBEs found
// again at every point: FOCE and FOCEI take S from the subjects' exact gradients and R from
// central differences of the exact gradient; FO and Laplace take R and S from central
// differences of the objective and of each subject's OBJI.
#include <cctype>
#include <cmath>
#include <limits>
#include <pkscan/error.hpp>
#include <pkscan/estimation.hpp>
#include <string>
#include <vector>

#include "estimation/subject.hpp"

namespace pkscan {

namespace {

using Matrix = Eigen::MatrixXd;
using Vector = Eigen::VectorXd;
using Kind = EstimatedParameter::Kind;

constexpr double kRelativeStep = 1e-3;

}  // namespace

std::vector<EstimatedParameter> estimated_parameters(const PopulationFitSpec& spec) {
  std::vector<EstimatedParameter> out;
  const PopulationModel& m = spec.initial;
  for (int c : spec.theta_columns)
    out.push_back({Kind::Theta, c, 0, m.theta_row[static_cast<std::size_t>(c)]});
  for (int e : spec.effect_indices)
    out.push_back({Kind::Effect, e, 0, m.effects[static_cast<std::size_t>(e)].coefficient});
  if (spec.estimate_omega) {
    const int q = static_cast<int>(m.eta_columns.size());
    for (int r = 0; r < q; ++r)
      for (int c = 0; c <= r; ++c)
        if (r == c || spec.omega_block) out.push_back({Kind::Omega, r, c, m.omega(r, c)});
  }
  if (spec.estimate_sigma) {
    if (m.sigma_proportional > 0.0) out.push_back({Kind::Sigma, 0, 0, m.sigma_proportional});
    if (m.sigma_additive > 0.0) out.push_back({Kind::Sigma, 1, 0, m.sigma_additive});
  }
  return out;
}

std::string estimated_parameter_name(const ModelInfo& info, const PopulationModel& model,
                                     const EstimatedParameter& p) {
  const auto column = [&](int k) {
    return info.parameters[static_cast<std::size_t>(model.eta_columns[static_cast<std::size_t>(k)])]
        .name;
  };
  switch (p.kind) {
    case Kind::Theta:
      return "theta." + info.parameters[static_cast<std::size_t>(p.index)].name;
    case Kind::Effect: {
      const ParameterEffect& e = model.effects[static_cast<std::size_t>(p.index)];
      return "effect." + info.parameters[static_cast<std::size_t>(e.parameter)].name + "." +
             e.covariate;
    }
    case Kind::Omega:
      return "omega." + column(p.index) + "." + column(p.index2);
    case Kind::Sigma:
      break;
  }
  return p.index == 0 ? "sigma.proportional" : "sigma.additive";
}

namespace {

void set(PopulationModel& m, const EstimatedParameter& p, double v) {
  switch (p.kind) {
    case Kind::Theta:
      m.theta_row[static_cast<std::size_t>(p.index)] = v;
      break;
    case Kind::Effect:
      m.effects[static_cast<std::size_t>(p.index)].coefficient = v;
      break;
    case Kind::Omega:
      m.omega(p.index, p.index2) = m.omega(p.index2, p.index) = v;
      break;
    case Kind::Sigma:
      (p.index == 0 ? m.sigma_proportional : m.sigma_additive) = v;
      break;
  }
}

class Differences {
 public:
  Differences(const Predictor& predictor, const PopulationFitSpec& spec,
              const EstimationOptions& options)
      : predictor_(predictor), spec_(spec), options_(options), params_(estimated_parameters(spec)) {
    base_ = population_objective(predictor, spec.initial, options);
    for (const EstimatedParameter& p : params_) {
      double h = kRelativeStep * std::abs(p.value);
      if (p.kind == Kind::Omega && p.index != p.index2)
        h = kRelativeStep * std::sqrt(spec.initial.omega(p.index, p.index) *
                                      spec.initial.omega(p.index2, p.index2));
      if (!(h > 0.0)) h = kRelativeStep;
      steps_.push_back(h);
    }
  }

  const std::vector<EstimatedParameter>& parameters() const { return params_; }
  const PopulationObjective& base() const { return base_; }
  double step(std::size_t i) const { return steps_[i]; }

  // The objective with parameters i and j moved by di and dj steps (j < 0: i alone).
  PopulationObjective at(std::size_t i, double di, int j, double dj) const {
    PopulationModel m = spec_.initial;
    set(m, params_[i], params_[i].value + di * steps_[i]);
    if (j >= 0) {
      const std::size_t k = static_cast<std::size_t>(j);
      set(m, params_[k], params_[k].value + dj * steps_[k]);
    }
    try {
      return population_objective(predictor_, m, options_, &base_);
    } catch (const InvalidArgument&) {  // OMEGA no longer positive definite
      PopulationObjective bad;
      bad.ofv = std::numeric_limits<double>::quiet_NaN();
      return bad;
    }
  }

 private:
  const Predictor& predictor_;
  const PopulationFitSpec& spec_;
  const EstimationOptions& options_;
  std::vector<EstimatedParameter> params_;
  std::vector<double> steps_;
  PopulationObjective base_;
};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string to_string(CovarianceKind kind) {
  switch (kind) {
    case CovarianceKind::Sandwich:
      return "sandwich";
    case CovarianceKind::R:
      return "r";
    case CovarianceKind::S:
      return "s";
  }
  return "sandwich";
}

CovarianceKind covariance_kind_from_string(std::string_view name) {
  const std::string n = lower(name);
  if (n == "sandwich") return CovarianceKind::Sandwich;
  if (n == "r") return CovarianceKind::R;
  if (n == "s") return CovarianceKind::S;
  throw InvalidArgument("covariance is \"" + std::string(name) +
                        "\", but must be sandwich, r, s or none");
}

CovarianceStep covariance_step(const Predictor& predictor, const PopulationFitSpec& spec,
                               const EstimationOptions& options, CovarianceKind kind) {
  CovarianceStep out;
  const Differences d(predictor, spec, options);
  out.parameters = d.parameters();
  const std::size_t n = out.parameters.size();
  const Eigen::Index ni = static_cast<Eigen::Index>(n);
  if (!d.base().finite()) {
    out.message = "the objective is not finite at the estimates";
    return out;
  }
  const double f0 = d.base().ofv;
  const std::size_t subjects = d.base().subjects.size();
  Matrix h(ni, ni);
  Matrix g(static_cast<Eigen::Index>(subjects), ni);  // d OBJI_i / d p
  const bool analytic = detail::has_analytic_gradient(options.method);
  if (analytic) {
    // FOCE, FOCEI: S from each subject's analytic gradient, R from central differences of the
    // analytic gradient (relative step 1e-4: the differences' error is second order).
    const PopulationGradient at = population_gradient(predictor, spec, options, &d.base());
    if (!at.ok) {
      out.message = "the gradient is not finite at the estimates";
      return out;
    }
    g = at.subjects;
    for (std::size_t i = 0; i < n; ++i) {
      const double hi = 0.1 * d.step(i);
      PopulationFitSpec up = spec, down = spec;
      set(up.initial, out.parameters[i], out.parameters[i].value + hi);
      set(down.initial, out.parameters[i], out.parameters[i].value - hi);
      const PopulationGradient gu = population_gradient(predictor, up, options, &d.base());
      const PopulationGradient gd = population_gradient(predictor, down, options, &d.base());
      if (!gu.ok || !gd.ok) {
        out.message = "the gradient is not finite a step away from the estimates";
        return out;
      }
      h.col(static_cast<Eigen::Index>(i)) = (gu.gradient - gd.gradient) / (2.0 * hi);
    }
    h = 0.5 * (h + h.transpose()).eval();
  }
  for (std::size_t i = 0; i < n && !analytic; ++i) {
    const PopulationObjective up = d.at(i, 1, -1, 0), down = d.at(i, -1, -1, 0);
    if (!up.finite() || !down.finite()) {
      out.message = "the objective is not finite a step away from the estimates";
      return out;
    }
    const double hi = d.step(i);
    const Eigen::Index ii = static_cast<Eigen::Index>(i);
    h(ii, ii) = (up.ofv - 2.0 * f0 + down.ofv) / (hi * hi);
    for (std::size_t s = 0; s < subjects; ++s)
      g(static_cast<Eigen::Index>(s), ii) =
          (up.subjects[s].obji - down.subjects[s].obji) / (2 * hi);
    for (std::size_t j = 0; j < i; ++j) {
      const int jj = static_cast<int>(j);
      const PopulationObjective pp = d.at(i, 1, jj, 1), pm = d.at(i, 1, jj, -1),
                                mp = d.at(i, -1, jj, 1), mm = d.at(i, -1, jj, -1);
      if (!pp.finite() || !pm.finite() || !mp.finite() || !mm.finite()) {
        out.message = "the objective is not finite a step away from the estimates";
        return out;
      }
      const double v = (pp.ofv - pm.ofv - mp.ofv + mm.ofv) / (4.0 * hi * d.step(j));
      h(ii, static_cast<Eigen::Index>(j)) = h(static_cast<Eigen::Index>(j), ii) = v;
    }
  }
  out.r = 0.5 * h;
  out.s = 0.25 * g.transpose() * g;
  const Eigen::LLT<Matrix> r_llt(out.r);
  const Eigen::LLT<Matrix> s_llt(out.s);
  const Matrix identity = Matrix::Identity(ni, ni);
  if (kind != CovarianceKind::S && r_llt.info() != Eigen::Success) {
    out.message = "R (the Hessian of the objective) is not positive definite";
    return out;
  }
  if (kind == CovarianceKind::S && s_llt.info() != Eigen::Success) {
    out.message = "S (the cross-product of the subjects' gradients) is not positive definite";
    return out;
  }
  switch (kind) {
    case CovarianceKind::Sandwich: {
      const Matrix r_inv = r_llt.solve(identity);
      out.covariance = r_inv * out.s * r_inv;
      break;
    }
    case CovarianceKind::R:
      out.covariance = r_llt.solve(identity);
      break;
    case CovarianceKind::S:
      out.covariance = s_llt.solve(identity);
      break;
  }
  out.se = out.covariance.diagonal().cwiseMax(0.0).cwiseSqrt();
  out.ok = out.se.allFinite() && (out.se.array() > 0.0).all();
  if (!out.ok) {
    out.message = "the covariance matrix is not finite or has a variance that is not > 0";
    return out;
  }
  // NONMEM's correlation matrix and its condition number (largest / smallest eigenvalue).
  const Vector inv_se = out.se.cwiseInverse();
  out.correlation = inv_se.asDiagonal() * out.covariance * inv_se.asDiagonal();
  const Eigen::SelfAdjointEigenSolver<Matrix> eig(out.correlation, Eigen::EigenvaluesOnly);
  out.eigenvalues = eig.eigenvalues();
  const double smallest = eig.eigenvalues().minCoeff();
  out.condition_number = smallest > 0.0 ? eig.eigenvalues().maxCoeff() / smallest
                                        : std::numeric_limits<double>::infinity();
  return out;
}

}  // namespace pkscan
