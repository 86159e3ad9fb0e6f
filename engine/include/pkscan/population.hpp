#pragma once
/// @file population.hpp
/// Virtual populations: per-subject parameters drawn from a log-normal between-subject
/// variability model (NONMEM $OMEGA, full covariance) around typical values, scaled by
/// covariate effects.
///
/// For subject i of replicate r, every parameter column p is
///
///     p_i = typical_p * f_1(cov_i) * f_2(cov_i) * ... * exp(eta_ip)  (exp(eta_ip + kappa_iop)
///                                                                    at occasion o with IOV),
///
/// multiplied in that order: the covariate effects on p in the order they are listed, then
/// exp(eta) when p has variability (for a parameter without variability the factor is
/// omitted, not exp(0)). eta_i ~ N(0, Omega) is drawn as eta = L z with L the lower Cholesky
/// factor of Omega (Eigen LLT) and z independent standard normals.
///
/// Determinism: the draws of (replicate r, subject i) depend only on (seed, r, i). A
/// counter-based scheme derives a 256-bit state from those three numbers (splitmix64 mixing)
/// and seeds one xoshiro256** generator per subject; normals come from the Box-Muller transform
/// written here (std::normal_distribution is implementation-defined). A subject's row is
/// therefore the same whatever the number of threads, however a run is split into calls, and
/// whatever `count` the calls use. Rows are bit-identical on one platform; another C library
/// (log, sin, cos, exp) may change the last bits.

#include <Eigen/Core>
#include <cstdint>
#include <memory>
#include <pkscan/models/model.hpp>
#include <string>
#include <vector>

namespace pkscan {

/// How a covariate scales a parameter.
enum class CovariateModel {
  Power,        ///< p *= (cov / reference)^theta (allometric scaling); cov, reference > 0
  Exponential,  ///< p *= exp(theta * (cov - reference))
};

/// One covariate effect on one parameter.
struct CovariateEffect {
  int parameter = -1;  ///< column of the parameter (ModelInfo::parameters order)
  int covariate = -1;  ///< column of the covariate in PopulationSpec::covariates
  CovariateModel model = CovariateModel::Power;  ///< functional form
  double theta = 0.0;                            ///< exponent or slope, finite
  double reference = 1.0;  ///< reference value (e.g. 70 kg), finite; > 0 for Power
};

/// Description of a virtual population: how many subjects, the seed, the typical values, the
/// variability and the covariates. A plain value type; PopulationSampler checks it.
struct PopulationSpec {
  /// The model whose parameters are drawn (built-in or from make_linear_model).
  std::shared_ptr<const ModelInfo> model;
  /// Subjects per replicate, >= 1. Subject indices are 0-based, in [0, count).
  std::int64_t count = 0;
  /// Seed of the random draws; any value.
  std::uint64_t seed = 0;
  /// Typical value of every parameter column (ModelInfo::parameters order), starting at the
  /// model defaults (NaN = not given; an unused alternative such as `cl` next to `ke` stays
  /// NaN). A column with variability or a covariate effect needs a finite typical value.
  std::vector<double> typical;
  /// Columns with between-subject variability, in the order of Omega's rows. Distinct.
  std::vector<int> iiv;
  /// Covariance of eta (iiv.size() x iiv.size()): symmetric, variances >= 0. A zero variance
  /// needs zero covariances (that eta is 0 for everyone); the block of non-zero variances must
  /// be positive definite.
  Eigen::MatrixXd omega;
  /// Names of the covariates (columns of `covariates`), for messages.
  std::vector<std::string> covariate_names;
  /// Covariate values: count x covariate_names.size(), row-major (subject i is row i; the
  /// same rows serve every replicate). Finite; > 0 where a Power effect uses the column.
  std::vector<double> covariates;
  /// Covariate effects, applied in this order.
  std::vector<CovariateEffect> effects;
  /// Columns with between-occasion variability (IOV; NONMEM's `$OMEGA BLOCK(n) ... SAME`): each
  /// occasion of a subject draws its own kappa ~ N(0, iov_omega), and the exponent of the
  /// parameter is eta + kappa (kappa alone without iiv). Distinct; at most kMaxKappas. The
  /// occasions come from a dataset's occasion column (design runs, design.hpp).
  std::vector<int> iov;
  /// Covariance of kappa (iov.size() square), the same for every occasion; the rules of omega.
  Eigen::MatrixXd iov_omega;

  /// An empty spec (no model).
  PopulationSpec() = default;
  /// A spec for a built-in model with typical values at the model's defaults.
  PopulationSpec(ModelKind model, std::int64_t count, std::uint64_t seed = 0);
  /// A spec for any model description with typical values at its defaults.
  PopulationSpec(std::shared_ptr<const ModelInfo> model, std::int64_t count,
                 std::uint64_t seed = 0);
  /// Column of a parameter by name or alias. @throws InvalidArgument for an unknown name.
  int column(const std::string& name) const;
  /// Sets the typical value of a parameter (name or alias). @throws InvalidArgument.
  void set_typical(const std::string& name, double value);
};

/// Omega from standard deviations and a correlation matrix: Omega_ij = sd_i sd_j R_ij.
/// @param sd standard deviations, finite and >= 0
/// @param correlation symmetric, unit diagonal, entries in [-1, 1], sd.size() square
/// @throws InvalidArgument for mismatched sizes, DomainError for values out of range
Eigen::MatrixXd omega_from_sd(const std::vector<double>& sd, const Eigen::MatrixXd& correlation);

/// Omega from variances and a correlation matrix: Omega_ij = sqrt(var_i var_j) R_ij.
/// @throws as omega_from_sd (variances finite and >= 0)
Eigen::MatrixXd omega_from_variances(const std::vector<double>& variances,
                                     const Eigen::MatrixXd& correlation);

/// The lower Cholesky factor of a covariance block under the rule PopulationSampler applies to
/// the block of non-zero variances of Omega: Eigen's LLT succeeds and every pivot is clearly
/// positive, L_ii^2 > 1e-12 * block_ii.
/// @param block square and symmetric (the lower triangle is read)
/// @param lower if not null and the block passes: receives L
/// @return -1 when the block passes, else the 0-based row where the factorisation fails (the
///         leading (row + 1) x (row + 1) block is the smallest that is not positive definite)
Eigen::Index omega_cholesky(const Eigen::MatrixXd& block, Eigen::MatrixXd* lower = nullptr);

/// Residual error of simulated observations (NONMEM's EPS with $SIGMA), as standard deviations:
/// for the prediction IPRED (the observed compartment's concentration) and independent standard
/// normals e1, e2 of the observation,
///  - additive and proportional (either may be 0; both: combined): DV = IPRED (1 + prop e1) +
///    add e2 (NONMEM's Y = IPRED + IPRED*EPS(1) + EPS(2));
///  - exponential: DV = IPRED exp(exp e1) (log-normal around IPRED, always positive);
/// exponential cannot be combined with the others.
struct ResidualError {
  double additive = 0.0;      ///< SD of the additive part (concentration units), >= 0
  double proportional = 0.0;  ///< SD of the proportional part (a fraction of IPRED), >= 0
  double exponential = 0.0;   ///< SD of the log of DV / IPRED, >= 0
};

/// Standard normals of the residual errors of subject `subject` of replicate `replicate`: the
/// first `n` of a stream that depends only on (seed, replicate, subject) and is unrelated to the
/// subject's etas (the sampler's stream). Observation k uses z[2k] (e1) and z[2k + 1] (e2).
void residual_normals(std::uint64_t seed, std::int64_t replicate, std::int64_t subject,
                      std::int64_t n, double* z) noexcept;

/// The dataset subject that virtual subject `subject` of replicate `replicate` copies when a
/// design of `n` dataset subjects is resampled with replacement (DesignRun::count): uniform on
/// [0, n), from a stream that depends only on (seed, replicate, subject) and is unrelated to the
/// subject's etas, kappas and residual errors. The stream's 64-bit words below 2^64 mod n are
/// rejected and the first other word w gives w mod n, so every dataset subject is equally likely.
/// n < 1 returns 0.
std::int64_t resampled_subject(std::uint64_t seed, std::int64_t replicate, std::int64_t subject,
                               std::int64_t n) noexcept;

/// Most parameters with between-occasion variability (PopulationSpec::iov).
inline constexpr int kMaxKappas = 64;

/// Draws parameter rows of a checked PopulationSpec. Immutable after construction; sample()
/// may run from several threads at once.
class PopulationSampler {
 public:
  /// Checks `spec` and factors Omega.
  /// @throws InvalidArgument for sizes and indices (typical, iiv, omega, covariates, effects
  ///         that do not fit the model or each other; a repeated iiv column)
  /// @throws DomainError for values: non-finite entries, an asymmetric Omega, a negative
  ///         variance, covariances of a zero variance, an Omega block that is not positive
  ///         definite (naming the first parameter where the factorisation fails), a typical
  ///         value that is not finite where variability or an effect needs it, a Power
  ///         effect's reference or covariate value <= 0
  explicit PopulationSampler(PopulationSpec spec);
  /// The checked spec.
  const PopulationSpec& spec() const noexcept { return spec_; }
  /// Number of parameter columns of a row (ModelInfo::parameters).
  int parameters() const noexcept { return columns_; }
  /// Number of etas per subject (spec().iiv.size()).
  int etas() const noexcept { return static_cast<int>(spec_.iiv.size()); }
  /// Subjects per replicate.
  std::int64_t count() const noexcept { return spec_.count; }
  /// Number of kappas per occasion (spec().iov.size()).
  int kappas() const noexcept { return static_cast<int>(spec_.iov.size()); }
  /// Lower Cholesky factor of Omega (zero rows and columns where the variance is zero).
  const Eigen::MatrixXd& cholesky() const noexcept { return chol_; }

  /// The parameter row of one subject (the formula at the top of this file): typical values,
  /// the covariate effects at `covariates` (one value per covariate_names), then exp(eta) or,
  /// for columns with IOV when `kappa` is given, exp(eta + kappa). The same operations as
  /// sample(), so a row from sample()'s etas and the subject's covariates is the same bits.
  /// @param eta etas() values; kappa kappas() values or null; row parameters() values
  /// Power effects need covariate values > 0 (not checked here).
  void individual(const double* eta, const double* kappa, const double* covariates,
                  double* row) const noexcept;
  /// The etas (etas() values) of subject `subject` of replicate `replicate`, the bits sample()
  /// draws for it: eta = L z with L cholesky() and z standard normals from a stream that depends
  /// only on (seed, replicate, subject). For one subject's work inside a caller's own loop over
  /// subjects (no parallel region, no allocation).
  void subject_etas(std::int64_t replicate, std::int64_t subject, double* eta) const noexcept;
  /// The kappas (kappas() values) of occasion `occasion` of subject `subject` of replicate
  /// `replicate`: kappa = L z with L the factor of iov_omega and z standard normals from a stream
  /// that depends only on (seed, replicate, subject, occasion), unrelated to the etas' and the
  /// residual errors' streams. Any occasion number (the occasion column's value) may be used.
  void occasion(std::int64_t replicate, std::int64_t subject, std::int64_t occasion,
                double* kappa) const noexcept;

  /// Fills the parameter rows of subjects first_subject .. first_subject + count - 1 of
  /// replicate `replicate` (both 0-based), in parallel over subjects with OpenMP.
  /// Columns without variability or effects get the typical value (NaN stays NaN).
  /// @param rows count x parameters() doubles, row-major
  /// @param etas if not null: count x etas() doubles, row-major, the drawn etas
  /// @param threads OpenMP threads, 0 = the default (threads.hpp)
  /// @throws InvalidArgument when replicate < 0, first_subject < 0, count < 0,
  ///         first_subject + count > this->count(), rows is null with count > 0, threads < 0
  void sample(std::int64_t replicate, std::int64_t first_subject, std::int64_t count, double* rows,
              double* etas = nullptr, int threads = 0) const;

 private:
  PopulationSpec spec_;
  int columns_ = 0;
  Eigen::MatrixXd chol_;            // m x m lower factor, zero rows/cols for zero variances
  std::vector<int> nonzero_;        // indices (into iiv) of non-zero variances, in order
  std::vector<int> eta_of_column_;  // per column: index into iiv or -1
  Eigen::MatrixXd iov_chol_;        // the same for iov_omega
  std::vector<int> iov_nonzero_;
  std::vector<int> kappa_of_column_;                 // per column: index into iov or -1
  std::vector<std::vector<int>> effects_of_column_;  // per column: indices into effects
};

}  // namespace pkscan
