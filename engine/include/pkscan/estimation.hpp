#pragma once
/// @file estimation.hpp
/// Population (mixed-effects) objectives in NONMEM's form, on the exact first derivatives of the
/// Predictor.
///
/// The model: each subject's parameter row is the typical row (THETA and fixed values) with
/// the parameters that carry inter-individual variability multiplied by exp(ETA),
/// P = THETA * exp(ETA), ETA ~ N(0, OMEGA) (OMEGA diagonal or a full block). The residual error
/// is NONMEM's Y = F + F * EPS1 + EPS2 with the variances of $SIGMA: the residual variance of an
/// observation is R = SIGMA_add + SIGMA_prop * F^2 (proportional error: SIGMA_add = 0; additive:
/// SIGMA_prop = 0).
///
/// The objective is NONMEM's: -2 log likelihood without the n log(2 pi) constant, a sum over
/// subjects of OBJI. With e = DV - F, for one subject (formulas of the methods as NONMEM
/// computes them; Wang 2007, J Pharmacokinet Pharmacodyn 34:575-593):
/// - FO: the model linearized at ETA = 0, OBJI = log|C| + e0' C^-1 e0, C = G0 OMEGA G0' +
///   diag(R0), with e0, G0 = dF/dETA and R0 at ETA = 0.
/// - FOCE (without interaction): the same linearization at the subject's EBE, with the residual
///   variance R0 held at the population prediction (ETA = 0): e~ = DV - F(EBE) + G EBE,
///   C = G OMEGA G' + diag(R0). The EBE minimizes sum(e^2 / R0) + ETA' OMEGA^-1 ETA.
/// - FOCEI (with interaction): the residual variance at the individual prediction,
///   OBJI = sum(e^2 / R + log R) + EBE' OMEGA^-1 EBE + log det(I + OMEGA M),
///   M = sum_j (g_j g_j' / R_j + r_j r_j' / (2 R_j^2)), g = dF/dETA, r = dR/dETA, all at the
///   EBE, which minimizes the conditional objective sum(e^2 / R + log R) + ETA' OMEGA^-1 ETA.
/// - Laplace (with interaction): the Laplace approximation of the integral over ETA at the same
///   EBE, OBJI = sum(e^2 / R + log R) + EBE' OMEGA^-1 EBE + log|OMEGA| + log|OMEGA^-1 + D / 2|,
///   D the Hessian of sum(e^2 / R + log R) with respect to ETA (with h = d2F/dETA2 and
///   r = dR/dETA: sum 2 g g'/R - 2 e h/R + 2 e (g r' + r g')/R^2 + (2 e^2/R^3 - 1/R^2) r r' +
///   (1 - e^2/R) d2R/dETA2 / R). h is the Predictor's exact second derivative
///   (Predictor::predict_hessian).
///
/// The EBEs are found by damped Gauss-Newton on the exact derivatives dF/dETA (the Hessian
/// OMEGA^-1 + M, a backtracking line search), after 10 iterations by Newton steps on the exact
/// Hessian of the conditional objective where it is positive definite (d2F/dETA2 exact, from
/// Predictor::predict_hessian), until the gradient of half the conditional objective is
/// below EstimationOptions::inner_tolerance in every component. A step to a point
/// where the objective cannot be evaluated (a prediction or residual variance that is not finite
/// or not > 0, parameters out of the model's domain) is shortened, never an exception.
///
/// The observations are the records with EVID 0, MDV 0 and a DV (as Predictor::log_likelihood).
/// A subject without observations contributes 0 (its EBE is 0).

#include <Eigen/Dense>
#include <cstdint>
#include <limits>
#include <optional>
#include <pkscan/predictor.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace pkscan {

/// The population method.
enum class EstimationMethod {
  Fo,     ///< first order (NONMEM METHOD=0)
  Foce,   ///< first order conditional estimation (METHOD=1)
  Focei,  ///< FOCE with interaction (METHOD=1 INTERACTION)
  /// Laplace with interaction (METHOD=1 LAPLACIAN INTERACTION): FOCEI's EBEs, the exact data
  /// Hessian in place of FOCEI's expected one
  Laplace,
};

/// "fo", "foce", "focei" or "laplace".
std::string to_string(EstimationMethod method);

/// Parses a method name (to_string's, any case).
/// @throws InvalidArgument "estimation method is "x", but must be fo, foce, focei or laplace"
EstimationMethod estimation_method_from_string(std::string_view name);

/// The form of a covariate effect in a population model: how a subject's covariate value `c`
/// scales a parameter, with coefficient b.
enum class EffectForm {
  Power,        ///< (c / reference)^b (allometric scaling); c, reference > 0
  Exponential,  ///< exp(b (c - reference))
  Linear,       ///< 1 + b (c - reference), which must stay > 0
  Categorical,  ///< 1 + b where c == level, 1 elsewhere (NONMEM's THETA(1) * (1 + THETA(k) * IND))
};

/// "power", "exponential", "linear" or "categorical".
std::string to_string(EffectForm form);

/// One covariate effect: the subject's parameter is THETA times the effect's factor (times every
/// other effect's on that parameter) times exp(ETA) where the parameter has one.
struct ParameterEffect {
  int parameter = -1;     ///< column (ModelInfo::parameters), with a finite THETA
  std::string covariate;  ///< its name (messages, output)
  EffectForm form = EffectForm::Power;
  double coefficient = 0.0;  ///< b, finite
  double reference = 1.0;    ///< Power, Exponential, Linear: the reference value
  double level = 0.0;        ///< Categorical: the value of the category that b applies to
  /// The covariate's value per subject (Predictor order), finite; one value per subject.
  std::vector<double> values;
  /// The factor for subject s at coefficient b.
  double factor(std::int64_t s, double b) const;
  /// d log(factor) / d b for subject s at coefficient b.
  double log_derivative(std::int64_t s, double b) const;
};

/// The values of the dataset's covariate column `name` (Dataset::covariate_columns), one per
/// subject in dataset order, for ParameterEffect::values.
/// @throws InvalidArgument when there is no such column; ConfigError (the file and line) for a
///         cell that is not a finite number or a subject whose records hold different values
std::vector<double> subject_covariate(const Dataset& data, const std::string& name);

/// A population model at fixed parameters.
struct PopulationModel {
  /// The typical parameter row (Predictor::parameters() values in ModelInfo::parameters order):
  /// THETA of the parameters with variability, the values of the others (NaN for unused ones).
  std::vector<double> theta_row;
  /// Parameter column of each ETA, distinct: the subject's value is theta_row[c] * exp(ETA_k).
  std::vector<int> eta_columns;
  /// OMEGA (q x q, q = eta_columns.size()), symmetric positive definite.
  Eigen::MatrixXd omega;
  /// $SIGMA variances, finite and >= 0, not both 0.
  double sigma_proportional = 0.0;
  double sigma_additive = 0.0;
  /// Covariate effects, applied in this order (none: every subject's typical row is theta_row).
  std::vector<ParameterEffect> effects;
};

/// How the objective is computed.
struct EstimationOptions {
  EstimationMethod method = EstimationMethod::Focei;
  /// The inner problem stops when every component of the gradient of half the conditional
  /// objective with respect to ETA is at most this (> 0).
  double inner_tolerance = 1e-10;
  /// Gauss-Newton iterations per subject at most (>= 1).
  int max_inner_iterations = 500;
  /// Threads over subjects (0: the process default, pkscan/threads.hpp), at most one per 16
  /// subjects.
  int threads = 0;
  /// fit_population: take the FOCE and FOCEI outer gradient by central differences of the
  /// objective too, instead of population_gradient (for comparisons).
  bool finite_difference_gradient = false;
};

/// How a subject's inner problem ended.
enum class InnerStatus {
  Converged,      ///< the gradient is below the tolerance (FO: always)
  MaxIterations,  ///< not converged within max_inner_iterations
  Stalled,        ///< no step decreased the objective before the gradient reached the tolerance
  NotFinite,      ///< the objective cannot be evaluated at ETA = 0 (or, FO/FOCE, at the EBE)
};

/// "converged", "max_iterations", "stalled" or "not_finite".
std::string to_string(InnerStatus status);

/// One subject's part.
struct SubjectObjective {
  std::vector<double> eta;        ///< the EBE (FO: 0, as NONMEM's FO without POSTHOC)
  double obji = 0.0;              ///< its term of the objective (NaN when not finite)
  std::int64_t observations = 0;  ///< observations used
  int iterations = 0;             ///< Gauss-Newton iterations
  double gradient = 0.0;          ///< max-norm of the inner gradient at the EBE
  InnerStatus status = InnerStatus::Converged;
};

/// The objective and its parts.
struct PopulationObjective {
  double ofv = 0.0;  ///< sum of the subjects' OBJI (NaN when one is not finite)
  std::vector<SubjectObjective> subjects;  ///< Predictor order
  /// Whether the objective is finite.
  bool finite() const noexcept;
  /// Subjects whose inner problem did not converge.
  std::int64_t unconverged() const noexcept;
};

/// NONMEM's objective of `model` on the predictor's dataset by `options.method`, with each
/// subject's EBE. Numerical trouble is reported in the result (a NaN objective, a subject's
/// status), never thrown. With `start` (a result on the same predictor, e.g. at nearby
/// parameters), each subject's inner search starts at its EBE there instead of at 0 (where it
/// can be evaluated); the EBEs found are the same to the inner tolerance.
/// @throws InvalidArgument for a model that does not fit the predictor (theta_row's size, an ETA
///         column out of range or given twice, OMEGA's shape), an OMEGA that is not symmetric
///         or not positive definite, SIGMA values out of range, or options out of range
PopulationObjective population_objective(const Predictor& predictor, const PopulationModel& model,
                                         const EstimationOptions& options,
                                         const PopulationObjective* start = nullptr);

}  // namespace pkscan

namespace pkscan {

/// What a population fit estimates, starting from `initial`.
struct PopulationFitSpec {
  /// The model at the initial estimates (population_objective's rules).
  PopulationModel initial;
  /// Columns of initial.theta_row whose THETA is estimated, with their bounds (lower < init <
  /// upper; infinite for none).
  std::vector<int> theta_columns;
  std::vector<double> theta_lower;
  std::vector<double> theta_upper;
  /// Estimate every element of OMEGA (a block) rather than its diagonal only (the off-diagonal
  /// elements then stay as given).
  bool omega_block = false;
  /// Estimate OMEGA at all (false: held at initial.omega).
  bool estimate_omega = true;
  /// Estimate the SIGMA variances that are > 0 in `initial` (false: held).
  bool estimate_sigma = true;
  /// Indices into initial.effects whose coefficients are estimated (unbounded).
  std::vector<int> effect_indices;
};

/// One iterate of a population fit: a row of NONMEM's .ext table.
struct FitIteration {
  int iteration = 0;      ///< 0: the initial estimates
  PopulationModel model;  ///< THETA, OMEGA, SIGMA there
  double ofv = 0.0;       ///< the objective there
};

/// The end of a population fit.
struct PopulationFit {
  PopulationModel estimates;      ///< THETA, OMEGA, SIGMA at the end
  PopulationObjective objective;  ///< the objective and EBEs there
  int iterations = 0;             ///< quasi-Newton iterations
  int evaluations = 0;            ///< objective evaluations (gradients included)
  int gradients = 0;              ///< analytic gradients (FOCE, FOCEI), each also one evaluation
  bool converged = false;         ///< the gradient tolerance was met
  std::string message;            ///< how it ended, one line
  /// The initial estimates and every accepted iterate, in order (the last is `estimates`).
  std::vector<FitIteration> history;
};

/// Minimizes population_objective over the estimated THETA, OMEGA and SIGMA by BFGS with a
/// backtracking line search on NONMEM-like unconstrained parameters: a bounded THETA through a
/// logit (log with one bound), OMEGA through its Cholesky factor with log diagonal, SIGMA through
/// log variances. FOCE's and FOCEI's gradient is population_gradient's; the other methods' (and
/// theirs with options.finite_difference_gradient, or where population_gradient cannot be
/// evaluated) is
/// by central differences of the objective (step 1e-4 in those parameters; the EBEs are re-found
/// at every point). It stops when every component is below 1e-4, or after `max_evaluations`
/// objective evaluations (an analytic gradient counts as one). A point where the objective is
/// not finite is a rejected step.
/// @throws InvalidArgument as population_objective at the initial estimates, for bounds that do
///         not enclose their initial value, or max_evaluations < 1
PopulationFit fit_population(const Predictor& predictor, const PopulationFitSpec& spec,
                             const EstimationOptions& options, int max_evaluations);

}  // namespace pkscan

namespace pkscan {

/// Which covariance matrix of the estimates a covariance step gives (NONMEM's $COV MATRIX).
enum class CovarianceKind {
  Sandwich,  ///< R^-1 S R^-1 (NONMEM's default)
  R,         ///< R^-1 (MATRIX=R)
  S,         ///< S^-1 (MATRIX=S)
};

/// "sandwich", "r" or "s".
std::string to_string(CovarianceKind kind);

/// Parses a covariance kind name (to_string's, any case).
/// @throws InvalidArgument "covariance is "x", but must be sandwich, r, s or none"
CovarianceKind covariance_kind_from_string(std::string_view name);

/// One estimated quantity of a covariance step, on NONMEM's scale.
struct EstimatedParameter {
  enum class Kind { Theta, Effect, Omega, Sigma } kind = Kind::Theta;
  /// Theta: column of theta_row; Effect: index into PopulationModel::effects (its coefficient);
  /// Omega: row; Sigma: 0 proportional, 1 additive
  int index = 0;
  int index2 = 0;  ///< Omega: column (<= index)
  double value = 0.0;
};

/// The quantities `spec` estimates, on NONMEM's scale, in the order of the covariance step and
/// the gradient: the estimated THETAs (spec.theta_columns), the estimated effect coefficients
/// (spec.effect_indices), OMEGA's elements (the lower triangle
/// by rows for a block, else the diagonal) when estimated, then the SIGMA variances that are > 0
/// when estimated (proportional, additive); values at spec.initial.
std::vector<EstimatedParameter> estimated_parameters(const PopulationFitSpec& spec);

/// The name of an estimated quantity as the estimates file and Python give it: "theta.<parameter>",
/// "effect.<parameter>.<covariate>", "omega.<row parameter>.<column parameter>" (the parameters of
/// ETA index and index2 of `model`), "sigma.proportional" or "sigma.additive".
std::string estimated_parameter_name(const ModelInfo& info, const PopulationModel& model,
                                     const EstimatedParameter& p);

/// The FOCE or FOCEI objective with its gradient.
struct PopulationGradient {
  std::vector<EstimatedParameter> parameters;  ///< estimated_parameters(spec)
  Eigen::VectorXd gradient;                    ///< dOFV / d(parameter), NONMEM's scale
  /// Per subject (rows, Predictor order) the gradient of its OBJI (NaN where it cannot be
  /// evaluated); the rows add up to `gradient`.
  Eigen::MatrixXd subjects;
  PopulationObjective objective;  ///< the objective and EBEs at spec.initial
  bool ok = false;                ///< the gradient is finite
};

/// The FOCE or FOCEI objective at spec.initial and its gradient with respect to the quantities
/// `spec` estimates, on NONMEM's scale (a THETA; an OMEGA element, moving OMEGA_ij and OMEGA_ji
/// together; a SIGMA variance), by the formula of Almquist, Leander and Jirstrand (2015,
/// J Pharmacokinet Pharmacodyn 42:191-209, eq. 23 and 27): the partial derivatives at each EBE
/// plus the EBE's movement through the implicit function theorem, which needs the second
/// derivatives of the predictions with respect to ETA and THETA: the Predictor's exact ones
/// (Predictor::predict_hessian). FOCE: the same formula with the residual variance held at the
/// population prediction F(ETA = 0), which moves with THETA and SIGMA. `start`: as
/// population_objective.
/// @throws InvalidArgument as population_objective, or for a method other than foce and focei
PopulationGradient population_gradient(const Predictor& predictor, const PopulationFitSpec& spec,
                                       const EstimationOptions& options,
                                       const PopulationObjective* start = nullptr);

/// The covariance step's result.
struct CovarianceStep {
  std::vector<EstimatedParameter> parameters;  ///< THETA, OMEGA (lower triangle), SIGMA
  /// R = (Hessian of the OFV) / 2 and S = sum_i (grad OBJI_i)(grad OBJI_i)' / 4, over the
  /// parameters (the information matrix and the cross-product of the subjects' scores).
  Eigen::MatrixXd r, s;
  Eigen::MatrixXd covariance;  ///< by the kind asked for (empty when !ok)
  Eigen::VectorXd se;          ///< standard errors (sqrt of the covariance's diagonal)
  /// The covariance scaled to a unit diagonal (empty when !ok).
  Eigen::MatrixXd correlation;
  /// The eigenvalues of `correlation`, ascending (empty when !ok).
  Eigen::VectorXd eigenvalues;
  /// The largest over the smallest eigenvalue of `correlation`, as NONMEM prints it (NaN when
  /// !ok).
  double condition_number = std::numeric_limits<double>::quiet_NaN();
  bool ok = false;
  std::string message;  ///< why not ok: "R is not positive definite", ...
};

/// The covariance step at the estimates of `spec.initial`, over the quantities `spec`
/// estimates, on NONMEM's scale (THETA, the elements of OMEGA, the SIGMA variances). FOCE and
/// FOCEI: S from each subject's population_gradient, R from central differences of
/// population_gradient
/// (relative step 1e-4). The other methods: R is the Hessian of the objective by central second
/// differences (relative step 1e-3; off-diagonal elements of OMEGA step 1e-3
/// sqrt(OMEGA_ii OMEGA_jj)), S from the central first differences of each subject's OBJI. The
/// EBEs are found again at every point (never held fixed).
/// Numerical trouble (R or S not positive definite, an objective that is not finite at a step)
/// is reported in the result.
/// @throws InvalidArgument as fit_population
CovarianceStep covariance_step(const Predictor& predictor, const PopulationFitSpec& spec,
                               const EstimationOptions& options, CovarianceKind kind);

}  // namespace pkscan

namespace pkscan {

/// Diagnostics of a population model at its EBEs, with NONMEM's definitions (NONMEM 7 help,
/// "PRED,RES,WRES"; Hooker, Staatz and Karlsson 2007, Pharm Res 24:2187-2197 for CWRES; Savic
/// and Karlsson 2009, AAPS J 11:558-569 for shrinkage). One entry per observation (EVID 0, MDV
/// 0, a DV), subjects in Predictor order and records in dataset order. With F(ETA) the
/// subject's predictions, G = dF/dETA, R(F) = SIGMA_add + SIGMA_prop F^2 and EBE the subject's
/// EBE (FO: 0, so that IPRED = PRED):
/// - PRED = F(0), IPRED = F(EBE), RES = DV - PRED, IRES = DV - IPRED;
/// - WRES = C0^-1/2 RES, C0 = G(0) OMEGA G(0)' + diag(R(PRED)) (the FO covariance of the data);
/// - CWRES = C^-1/2 (DV - F(EBE) + G(EBE) EBE), C = G(EBE) OMEGA G(EBE)' + diag(R(PRED))
///   (conditional, without interaction); CWRESI the same with diag(R(IPRED)) (with
///   interaction, NONMEM's CWRESI: the FOCEI form);
/// - IWRES = IRES / sqrt(R(IPRED)).
/// C^-1/2 is the symmetric inverse square root (the eigendecomposition's, as the CWRES reference
/// implementation in Xpose computes it). A value that cannot be computed (a prediction that is
/// not finite, a subject whose EBE search failed) is NaN.
struct PopulationDiagnostics {
  std::vector<std::int64_t> subject;  ///< the observation's subject (Predictor order)
  std::vector<std::int64_t> line;     ///< its record's line in the dataset file
  std::vector<double> time, dv, pred, ipred, res, ires, wres, cwres, cwresi, iwres;
  /// Per ETA, NONMEM's ETAshrinkSD in percent: 100 (1 - SD(EBE_k) / sqrt(OMEGA_kk)), SD the
  /// sample standard deviation (n - 1) over every subject (NONMEM's default ETASTYPE=0).
  std::vector<double> eta_shrinkage;
  /// NONMEM's EPSshrinkSD in percent: 100 (1 - SD(IWRES)) over every observation.
  double eps_shrinkage = std::numeric_limits<double>::quiet_NaN();
};

/// The diagnostics of `model` with the EBEs of `objective` (population_objective's result for
/// the same predictor and model).
/// @throws InvalidArgument as population_objective, or when `objective` has another subject
///         count or ETA count
PopulationDiagnostics population_diagnostics(const Predictor& predictor,
                                             const PopulationModel& model,
                                             const PopulationObjective& objective,
                                             const EstimationOptions& options);

/// A population estimation as `pkscan fit FILE.yaml` and Python's pkscan.fit() run it: the
/// objective at the initial estimates, the fit (max_evaluations > 0), the covariance step
/// (when asked for, after a fit that converged or at the estimates given) and the diagnostics
/// at the estimates.
struct PopulationEstimate {
  PopulationModel estimates;                 ///< the fit's estimates, or the initial ones
  PopulationObjective objective;             ///< the objective and EBEs at `estimates`
  bool fitted = false;                       ///< a fit ran (max_evaluations > 0)
  PopulationFit fit;                         ///< the fit, when fitted
  std::optional<CovarianceStep> covariance;  ///< the covariance step, when it ran
  PopulationDiagnostics diagnostics;         ///< at `estimates`
  double estimation_seconds = 0.0;           ///< wall time of the objective or the fit
  double covariance_seconds = 0.0;           ///< wall time of the covariance step
};

/// Runs a population estimation of `spec`: max_evaluations 0 evaluates the objective at the
/// initial estimates (NONMEM's MAXEVAL=0), otherwise fit_population; then covariance_step of
/// `covariance` (none: no step), skipped after a fit that did not converge; then the
/// diagnostics.
/// @throws InvalidArgument as fit_population, or max_evaluations < 0
/// @throws DomainError when the objective is not finite at the initial estimates (naming the
///         first subject where it is not)
PopulationEstimate estimate_population(const Predictor& predictor, const PopulationFitSpec& spec,
                                       const EstimationOptions& options, int max_evaluations,
                                       std::optional<CovarianceKind> covariance);

}  // namespace pkscan
