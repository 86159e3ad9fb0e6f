// Population fits (pkscan/estimation.hpp, fit_population): BFGS over NONMEM-like unconstrained
// parameters. FOCE's and FOCEI's gradient is population_gradient's (Almquist et al. 2015) chained
// to those parameters; the other methods' is a central difference of the objective, with the EBEs
// re-found at every point (inner gradient tolerance 1e-10, so the objective is smooth to about
// 1e-12 and a central difference with step 1e-4 is accurate to about 1e-8).
#include <algorithm>
#include <cmath>
#include <limits>
#include <pkscan/error.hpp>
#include <pkscan/estimation.hpp>
#include <string>
#include <utility>
#include <vector>

#include "estimation/subject.hpp"

namespace pkscan {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kStep = 1e-4;               // central-difference step in the parameters x
constexpr double kGradientTolerance = 1e-4;  // max |dOFV/dx| at convergence
// Also converged: the objective changed by at most kStallChange relative over kStallSteps
// accepted steps in a row (the change is at the rounding of the objective: scipy's L-BFGS-B
// stops on the same kind of test, factr * eps) with the gradient's max-norm below
// kStallGradient (the objective's rounding noise then limits the gradient test).
constexpr double kStallChange = 1e-13;
constexpr int kStallSteps = 3;
constexpr double kStallGradient = 1e-2;
constexpr double kMaxStep = 2.0;  // largest change of one x in one step

using Matrix = Eigen::MatrixXd;
using Vector = Eigen::VectorXd;

// A THETA's unconstrained parameter: logit between two bounds, log above (below) one bound,
// scaled by its initial magnitude without bounds.
struct ThetaMap {
  double lower, upper, scale;
  double to_x(double v) const {
    const bool l = std::isfinite(lower), u = std::isfinite(upper);
    if (l && u) return std::log((v - lower) / (upper - v));
    if (l) return std::log(v - lower);
    if (u) return std::log(upper - v);
    return v / scale;
  }
  // d value / dx at `v`.
  double derivative(double v) const {
    const bool l = std::isfinite(lower), u = std::isfinite(upper);
    if (l && u) return (v - lower) * (upper - v) / (upper - lower);
    if (l) return v - lower;
    if (u) return -(upper - v);
    return scale;
  }
  double from_x(double x) const {
    const bool l = std::isfinite(lower), u = std::isfinite(upper);
    if (l && u) return lower + (upper - lower) / (1.0 + std::exp(-x));
    if (l) return lower + std::exp(x);
    if (u) return upper - std::exp(x);
    return x * scale;
  }
};

class Problem {
 public:
  Problem(const Predictor& predictor, const PopulationFitSpec& spec,
          const EstimationOptions& options)
      : predictor_(predictor), spec_(spec), options_(options) {
    const PopulationModel& m = spec.initial;
    const std::size_t nt = spec.theta_columns.size();
    if (spec.theta_lower.size() != nt || spec.theta_upper.size() != nt)
      throw InvalidArgument("population fit: theta_lower and theta_upper need " +
                            std::to_string(nt) + " values each");
    for (std::size_t i = 0; i < nt; ++i) {
      const int c = spec.theta_columns[i];
      if (c < 0 || c >= static_cast<int>(m.theta_row.size()))
        throw InvalidArgument("population fit: an estimated THETA's column is out of range");
      const double v = m.theta_row[static_cast<std::size_t>(c)];
      const double lo = spec.theta_lower[i], hi = spec.theta_upper[i];
      if (!(lo < v && v < hi))
        throw InvalidArgument("population fit: THETA " +
                              predictor.model().parameters[static_cast<std::size_t>(c)].name +
                              " is " + format_value(v) + ", but must lie strictly between its " +
                              "bounds " + format_value(lo) + " and " + format_value(hi));
      thetas_.push_back({lo, hi, v != 0.0 ? std::abs(v) : 1.0});
    }
    const double inf = std::numeric_limits<double>::infinity();
    for (int e : spec.effect_indices) {
      if (e < 0 || e >= static_cast<int>(m.effects.size()))
        throw InvalidArgument("population fit: an estimated effect's index is out of range");
      const double b = m.effects[static_cast<std::size_t>(e)].coefficient;
      effects_.push_back({-inf, inf, b != 0.0 ? std::abs(b) : 1.0});
    }
    q_ = static_cast<int>(m.eta_columns.size());
    if (spec.estimate_omega && q_ > 0) {
      const Eigen::LLT<Matrix> llt(m.omega);
      if (llt.info() != Eigen::Success)
        throw InvalidArgument("population model: OMEGA is not positive definite");
      chol_ = llt.matrixL();
    }
  }

  // The i-th estimated effect of m.
  const ParameterEffect& effect(const PopulationModel& m, std::size_t i) const {
    return m.effects[static_cast<std::size_t>(spec_.effect_indices[i])];
  }
  ParameterEffect& effect(PopulationModel& m, std::size_t i) const {
    return m.effects[static_cast<std::size_t>(spec_.effect_indices[i])];
  }

  int size() const {
    int n = static_cast<int>(thetas_.size() + effects_.size());
    if (spec_.estimate_omega) n += spec_.omega_block ? q_ * (q_ + 1) / 2 : q_;
    if (spec_.estimate_sigma)
      n += (spec_.initial.sigma_proportional > 0.0 ? 1 : 0) +
           (spec_.initial.sigma_additive > 0.0 ? 1 : 0);
    return n;
  }

  Vector start() const {
    Vector x(size());
    Eigen::Index k = 0;
    const PopulationModel& m = spec_.initial;
    for (std::size_t i = 0; i < thetas_.size(); ++i)
      x(k++) = thetas_[i].to_x(m.theta_row[static_cast<std::size_t>(spec_.theta_columns[i])]);
    for (std::size_t i = 0; i < effects_.size(); ++i)
      x(k++) = effects_[i].to_x(effect(m, i).coefficient);
    if (spec_.estimate_omega)
      for (int r = 0; r < q_; ++r)
        for (int c = 0; c <= r; ++c) {
          if (r == c)
            x(k++) = spec_.omega_block ? std::log(chol_(r, r)) : 0.5 * std::log(m.omega(r, r));
          else if (spec_.omega_block)
            x(k++) = chol_(r, c);
        }
    if (spec_.estimate_sigma) {
      if (m.sigma_proportional > 0.0) x(k++) = std::log(m.sigma_proportional);
      if (m.sigma_additive > 0.0) x(k++) = std::log(m.sigma_additive);
    }
    return x;
  }

  PopulationModel model(const Vector& x) const {
    PopulationModel m = spec_.initial;
    Eigen::Index k = 0;
    for (std::size_t i = 0; i < thetas_.size(); ++i)
      m.theta_row[static_cast<std::size_t>(spec_.theta_columns[i])] = thetas_[i].from_x(x(k++));
    for (std::size_t i = 0; i < effects_.size(); ++i)
      effect(m, i).coefficient = effects_[i].from_x(x(k++));
    if (spec_.estimate_omega) {
      if (spec_.omega_block) {
        Matrix l = Matrix::Zero(q_, q_);
        for (int r = 0; r < q_; ++r)
          for (int c = 0; c <= r; ++c) l(r, c) = r == c ? std::exp(x(k++)) : x(k++);
        m.omega = l * l.transpose();
      } else {
        for (int r = 0; r < q_; ++r) m.omega(r, r) = std::exp(2.0 * x(k++));
      }
    }
    if (spec_.estimate_sigma) {
      if (m.sigma_proportional > 0.0) m.sigma_proportional = std::exp(x(k++));
      if (m.sigma_additive > 0.0) m.sigma_additive = std::exp(x(k++));
    }
    return m;
  }

  // The objective at x; +infinity where it cannot be evaluated (a rejected step). The inner
  // searches start at the EBEs of the current iterate (base); `keep` receives the result.
  double value(const Vector& x, PopulationObjective* keep = nullptr) {
    ++evaluations;
    if (!x.allFinite()) return kInf;
    try {
      PopulationObjective r = population_objective(predictor_, model(x), options_,
                                                   base.subjects.empty() ? nullptr : &base);
      const double v = r.finite() ? r.ofv : kInf;
      if (keep) *keep = std::move(r);
      return v;
    } catch (const InvalidArgument&) {  // OMEGA no longer positive definite, SIGMA out of range
      return kInf;
    }
  }

  PopulationObjective base;  // the objective and EBEs at the current iterate

  // The gradient at x, whose objective is fx and whose EBEs are `base`: FOCE's and FOCEI's
  // analytic gradient (population_gradient) chained to x, else (or where it cannot be
  // evaluated) central differences.
  Vector gradient(const Vector& x, double fx) {
    if (detail::has_analytic_gradient(options_.method) && !options_.finite_difference_gradient) {
      Vector g = analytic(x);
      if (g.allFinite()) return g;
    }
    return differences(x, fx);
  }

  Vector analytic(const Vector& x) {
    ++gradients;
    ++evaluations;  // the objective at x, found again from the EBEs there
    PopulationFitSpec at = spec_;
    at.initial = model(x);
    const PopulationGradient pg = population_gradient(predictor_, at, options_, &base);
    if (!pg.ok) return Vector::Constant(x.size(), std::numeric_limits<double>::quiet_NaN());
    // d(NONMEM scale)/dx, in estimated_parameters' order (the order of x).
    Vector g(x.size());
    Eigen::Index k = 0;
    const PopulationModel& m = at.initial;
    for (std::size_t i = 0; i < thetas_.size(); ++i, ++k)
      g(k) = pg.gradient(k) *
             thetas_[i].derivative(m.theta_row[static_cast<std::size_t>(spec_.theta_columns[i])]);
    for (std::size_t i = 0; i < effects_.size(); ++i, ++k)
      g(k) = pg.gradient(k) * effects_[i].derivative(effect(m, i).coefficient);
    if (spec_.estimate_omega) {
      if (spec_.omega_block) {
        // OMEGA = L L': dOMEGA/dL_rc = E_rc L' + L E_cr; x is L_rc, log L_rr on the diagonal.
        Matrix l = Matrix::Zero(q_, q_);
        {
          Eigen::Index t = k;
          for (int r = 0; r < q_; ++r)
            for (int c = 0; c <= r; ++c, ++t) l(r, c) = r == c ? std::exp(x(t)) : x(t);
        }
        Matrix gw = Matrix::Zero(q_, q_);  // gradient by OMEGA element (lower triangle)
        {
          Eigen::Index t = k;
          for (int r = 0; r < q_; ++r)
            for (int c = 0; c <= r; ++c, ++t) gw(r, c) = pg.gradient(t);
        }
        for (int r = 0; r < q_; ++r)
          for (int c = 0; c <= r; ++c, ++k) {
            double sum = 0.0;
            for (int a = 0; a < q_; ++a)
              for (int b = 0; b <= a; ++b) {
                const double d = (a == r ? l(b, c) : 0.0) + (b == r ? l(a, c) : 0.0);
                sum += gw(a, b) * d;
              }
            g(k) = sum * (r == c ? l(r, r) : 1.0);
          }
      } else {
        for (int r = 0; r < q_; ++r, ++k) g(k) = pg.gradient(k) * 2.0 * m.omega(r, r);
      }
    }
    if (spec_.estimate_sigma) {
      if (m.sigma_proportional > 0.0) g(k) = pg.gradient(k) * m.sigma_proportional, ++k;
      if (m.sigma_additive > 0.0) g(k) = pg.gradient(k) * m.sigma_additive, ++k;
    }
    return g;
  }

  // Central differences (one-sided where one side cannot be evaluated).
  Vector differences(const Vector& x, double fx) {
    Vector g(x.size());
    for (Eigen::Index i = 0; i < x.size(); ++i) {
      Vector a = x, b = x;
      a(i) += kStep;
      b(i) -= kStep;
      const double fa = value(a), fb = value(b);
      if (std::isfinite(fa) && std::isfinite(fb))
        g(i) = (fa - fb) / (2.0 * kStep);
      else if (std::isfinite(fa))
        g(i) = (fa - fx) / kStep;
      else if (std::isfinite(fb))
        g(i) = (fx - fb) / kStep;
      else
        g(i) = 0.0;
    }
    return g;
  }

  int evaluations = 0;
  int gradients = 0;  // analytic gradients

 private:
  const Predictor& predictor_;
  const PopulationFitSpec& spec_;
  const EstimationOptions& options_;
  std::vector<ThetaMap> thetas_;
  std::vector<ThetaMap> effects_;  // the estimated coefficients, unbounded

  int q_ = 0;
  Matrix chol_;
};

}  // namespace

PopulationFit fit_population(const Predictor& predictor, const PopulationFitSpec& spec,
                             const EstimationOptions& options, int max_evaluations) {
  if (max_evaluations < 1) throw InvalidArgument("population fit: max_evaluations must be >= 1");
  // The initial estimates must make a valid model (throws InvalidArgument otherwise).
  population_objective(predictor, spec.initial, options);
  Problem problem(predictor, spec, options);
  const int n = problem.size();
  PopulationFit out;
  Vector x = problem.start();
  double f = problem.value(x, &problem.base);
  if (!std::isfinite(f)) {
    out.estimates = spec.initial;
    out.objective = population_objective(predictor, spec.initial, options);
    out.evaluations = problem.evaluations;
    out.gradients = problem.gradients;
    out.message = "the objective is not finite at the initial estimates";
    return out;
  }
  out.history.push_back({0, spec.initial, f});
  Vector g = problem.gradient(x, f);
  Matrix h = Matrix::Identity(n, n);  // inverse Hessian approximation
  bool scaled = false;
  int stalled = 0;  // accepted steps in a row that changed the objective by <= kStallChange
  out.message = "the maximum number of evaluations was reached";
  for (int it = 0;; ++it) {
    out.iterations = it;
    if (n == 0 || g.lpNorm<Eigen::Infinity>() <= kGradientTolerance) {
      out.converged = true;
      out.message = "converged: the gradient is below " + format_value(kGradientTolerance);
      break;
    }
    if (stalled >= kStallSteps && g.lpNorm<Eigen::Infinity>() <= kStallGradient) {
      out.converged = true;
      out.message = "converged: the objective changed by less than " + format_value(kStallChange) +
                    " (relative) over " + std::to_string(kStallSteps) +
                    " steps, gradient max-norm " + format_value(g.lpNorm<Eigen::Infinity>());
      break;
    }
    const int per_gradient =
        detail::has_analytic_gradient(options.method) && !options.finite_difference_gradient
            ? 1
            : 2 * n;
    if (problem.evaluations + per_gradient + 1 > max_evaluations) break;
    Vector p = -h * g;
    if (!(g.dot(p) < 0.0)) {  // not a descent direction: restart from steepest descent
      h.setIdentity();
      scaled = false;
      p = -g;
    }
    if (!scaled) p *= std::min(1.0, 1.0 / g.lpNorm<Eigen::Infinity>());
    const double longest = p.lpNorm<Eigen::Infinity>();
    if (longest > kMaxStep) p *= kMaxStep / longest;
    const double slope = g.dot(p);
    double t = 1.0, fn = kInf;
    Vector xn;
    PopulationObjective trial;
    bool accepted = false;
    for (int k = 0; k < 40 && problem.evaluations < max_evaluations; ++k, t *= 0.5) {
      xn = x + t * p;
      fn = problem.value(xn, &trial);
      if (std::isfinite(fn) && fn <= f + 1e-4 * t * slope) {
        accepted = true;
        break;
      }
    }
    if (!accepted) {
      if (scaled) {  // retry once from steepest descent
        h.setIdentity();
        scaled = false;
        continue;
      }
      out.message = "no step decreased the objective (gradient max-norm " +
                    format_value(g.lpNorm<Eigen::Infinity>()) + ")";
      break;
    }
    problem.base = std::move(trial);
    const Vector gn = problem.gradient(xn, fn);
    const Vector s = xn - x, y = gn - g;
    const double sy = s.dot(y);
    if (sy > 1e-12 * s.norm() * y.norm()) {
      if (!scaled) {
        h = Matrix::Identity(n, n) * (sy / y.dot(y));
        scaled = true;
      }
      const double rho = 1.0 / sy;
      const Matrix i_rsy = Matrix::Identity(n, n) - rho * s * y.transpose();
      h = i_rsy * h * i_rsy.transpose() + rho * s * s.transpose();
    }
    stalled = f - fn <= kStallChange * std::max(1.0, std::fabs(f)) ? stalled + 1 : 0;
    x = xn;
    f = fn;
    g = gn;
    out.history.push_back({it + 1, problem.model(x), f});
  }
  out.estimates = problem.model(x);
  out.objective = population_objective(predictor, out.estimates, options, &problem.base);
  out.evaluations = problem.evaluations + 1;
  out.gradients = problem.gradients;
  return out;
}

}  // namespace pkscan
