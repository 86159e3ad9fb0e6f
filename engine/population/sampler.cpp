// Virtual populations: log-normal variability around typical values with covariate effects.
//
// Numeric contract: every subject's draws come from its own generator, seeded from
// (seed, replicate, subject) alone, and its row is computed by the same sequence of operations
// whatever the thread count or the split into calls; rows are bit-identical on one platform.
#include <Eigen/Cholesky>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <pkscan/error.hpp>
#include <pkscan/population.hpp>
#include <string>

#include "core/parallel.hpp"
#include "core/validate.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace pkscan {

namespace {

constexpr const char* kWhere = "population";

// splitmix64's output function: a bijection of 64-bit words with good avalanche.
inline std::uint64_t mix64(std::uint64_t z) noexcept {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 31;
  return z;
}

inline std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }

// xoshiro256** (Blackman and Vigna), seeded from one 64-bit key through splitmix64.
class Xoshiro256 {
 public:
  explicit Xoshiro256(std::uint64_t key) noexcept {
    std::uint64_t x = key;
    for (std::uint64_t& w : s_) {
      x += 0x9E3779B97F4A7C15ull;
      w = mix64(x);
    }
    if ((s_[0] | s_[1] | s_[2] | s_[3]) == 0) s_[0] = 1;  // the one forbidden state
  }
  std::uint64_t next() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) on the 2^-53 grid.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t s_[4];
};

// The generator key of (seed, replicate, subject): each input passes through its own mixing
// round, so neighbouring replicates and subjects get unrelated streams.
inline std::uint64_t subject_key(std::uint64_t seed, std::uint64_t replicate,
                                 std::uint64_t subject) noexcept {
  std::uint64_t h = mix64(seed ^ 0x6A09E667F3BCC909ull);
  h = mix64(h + mix64(replicate ^ 0xBB67AE8584CAA73Bull));
  h = mix64(h + mix64(subject ^ 0x3C6EF372FE94F82Bull));
  return h;
}

// n standard normals by the Box-Muller transform (pairs; the second of the last pair is
// dropped when n is odd).
void normals(Xoshiro256& g, int n, double* z) noexcept {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  for (int i = 0; i < n; i += 2) {
    const double u1 = 1.0 - g.uniform();  // (0, 1]: log is finite
    const double u2 = g.uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = kTwoPi * u2;
    z[i] = r * std::cos(a);
    if (i + 1 < n) z[i + 1] = r * std::sin(a);
  }
}

}  // namespace

void residual_normals(std::uint64_t seed, std::int64_t replicate, std::int64_t subject,
                      std::int64_t n, double* z) noexcept {
  // Another round over the subject's key: a stream of its own, unrelated to the etas'.
  Xoshiro256 g(mix64(subject_key(seed, static_cast<std::uint64_t>(replicate),
                                 static_cast<std::uint64_t>(subject)) ^
                     0x510E527FADE682D1ull));
  for (std::int64_t i = 0; i < n; i += 2)
    normals(g, static_cast<int>(std::min<std::int64_t>(2, n - i)), z + i);
}

std::int64_t resampled_subject(std::uint64_t seed, std::int64_t replicate, std::int64_t subject,
                               std::int64_t n) noexcept {
  if (n <= 1) return 0;
  // A round of its own over the subject's key: unrelated to the etas', kappas' and residual
  // errors' streams.
  Xoshiro256 g(mix64(subject_key(seed, static_cast<std::uint64_t>(replicate),
                                 static_cast<std::uint64_t>(subject)) ^
                     0x5BE0CD19137E2179ull));
  const auto un = static_cast<std::uint64_t>(n);
  const std::uint64_t reject = (0 - un) % un;  // 2^64 mod n: the words of an incomplete cycle
  for (;;) {
    const std::uint64_t w = g.next();
    if (w >= reject) return static_cast<std::int64_t>(w % un);
  }
}

namespace {

std::string name_of(const ModelInfo& m, int column) {
  return m.parameters[static_cast<std::size_t>(column)].name;
}

[[noreturn]] void bad_size(const std::string& what, std::size_t value, std::size_t want) {
  detail::throw_invalid(kWhere, what, std::to_string(value), std::to_string(want));
}

void check_correlation(const char* where, std::size_t n, const Eigen::MatrixXd& r) {
  if (static_cast<std::size_t>(r.rows()) != n || static_cast<std::size_t>(r.cols()) != n)
    detail::throw_invalid(where, "correlation matrix size",
                          std::to_string(r.rows()) + " x " + std::to_string(r.cols()),
                          std::to_string(n) + " x " + std::to_string(n) + " (one row per eta)");
  for (Eigen::Index i = 0; i < r.rows(); ++i) {
    if (r(i, i) != 1.0)
      detail::throw_domain(where,
                           "correlation(" + std::to_string(i) + ", " + std::to_string(i) + ")",
                           format_value(r(i, i)), "1");
    for (Eigen::Index j = 0; j < i; ++j) {
      const std::string at = "correlation(" + std::to_string(i) + ", " + std::to_string(j) + ")";
      if (!(std::fabs(r(i, j)) <= 1.0))
        detail::throw_domain(where, at, format_value(r(i, j)), "in [-1, 1]");
      if (r(i, j) != r(j, i))
        detail::throw_domain(where, at, format_value(r(i, j)),
                             "equal to correlation(" + std::to_string(j) + ", " +
                                 std::to_string(i) + ") = " + format_value(r(j, i)));
    }
  }
}

Eigen::MatrixXd omega_from(const char* where, const std::vector<double>& sd,
                           const Eigen::MatrixXd& r) {
  check_correlation(where, sd.size(), r);
  const Eigen::Index n = static_cast<Eigen::Index>(sd.size());
  Eigen::MatrixXd omega(n, n);
  for (Eigen::Index i = 0; i < n; ++i)
    for (Eigen::Index j = 0; j < n; ++j)
      omega(i, j) = sd[static_cast<std::size_t>(i)] * sd[static_cast<std::size_t>(j)] * r(i, j);
  return omega;
}

}  // namespace

PopulationSpec::PopulationSpec(ModelKind model, std::int64_t count, std::uint64_t seed)
    : PopulationSpec(
          std::shared_ptr<const ModelInfo>(std::shared_ptr<const ModelInfo>(), &model_info(model)),
          count, seed) {}

PopulationSpec::PopulationSpec(std::shared_ptr<const ModelInfo> m, std::int64_t n, std::uint64_t s)
    : model(std::move(m)), count(n), seed(s) {
  if (model)
    for (const ParameterInfo& p : model->parameters) typical.push_back(p.default_value);
}

int PopulationSpec::column(const std::string& name) const {
  if (!model) detail::throw_invalid(kWhere, "model", "not set", "a model description");
  const int c = parameter_index(*model, name);
  if (c < 0)
    throw InvalidArgument(std::string(kWhere) + ": parameter \"" + name +
                          "\" is not a parameter of " + model->name);
  return c;
}

void PopulationSpec::set_typical(const std::string& name, double value) {
  const int c = column(name);
  if (typical.size() != model->parameters.size())
    typical.resize(model->parameters.size(), std::numeric_limits<double>::quiet_NaN());
  typical[static_cast<std::size_t>(c)] = value;
}

Eigen::MatrixXd omega_from_sd(const std::vector<double>& sd, const Eigen::MatrixXd& correlation) {
  for (std::size_t i = 0; i < sd.size(); ++i)
    if (!(std::isfinite(sd[i]) && sd[i] >= 0.0))
      detail::throw_domain("omega_from_sd", "sd[" + std::to_string(i) + "]", format_value(sd[i]),
                           "finite and >= 0");
  return omega_from("omega_from_sd", sd, correlation);
}

Eigen::MatrixXd omega_from_variances(const std::vector<double>& variances,
                                     const Eigen::MatrixXd& correlation) {
  std::vector<double> sd(variances.size());
  for (std::size_t i = 0; i < variances.size(); ++i) {
    if (!(std::isfinite(variances[i]) && variances[i] >= 0.0))
      detail::throw_domain("omega_from_variances", "variance[" + std::to_string(i) + "]",
                           format_value(variances[i]), "finite and >= 0");
    sd[i] = std::sqrt(variances[i]);
  }
  return omega_from("omega_from_variances", sd, correlation);
}

Eigen::Index omega_cholesky(const Eigen::MatrixXd& block, Eigen::MatrixXd* lower) {
  // A pivot that is not clearly positive (relative to its variance) is a singular or indefinite
  // block. The factor of a leading block is the leading part of the whole factor, so the first
  // failing row is found by factoring growing leading blocks.
  auto factor_ok = [&](Eigen::Index n, Eigen::MatrixXd* l) {
    const Eigen::LLT<Eigen::MatrixXd> llt(block.topLeftCorner(n, n));
    if (llt.info() != Eigen::Success) return false;
    const Eigen::MatrixXd f = llt.matrixL();
    for (Eigen::Index a = 0; a < n; ++a)
      if (!(f(a, a) * f(a, a) > 1e-12 * block(a, a))) return false;
    if (l) *l = f;
    return true;
  };
  const Eigen::Index k = block.rows();
  if (k == 0 || factor_ok(k, lower)) return -1;
  Eigen::Index bad = 1;
  while (bad < k && factor_ok(bad, nullptr)) ++bad;
  return bad - 1;
}

namespace {

// Checks the variability of `cols` (parameter columns; `list` names them in messages: "iiv" or
// "iov") with covariance `om` (`omega` names it: "omega" or "iov_omega") and factors it: of_column
// maps each parameter column to its index in cols or -1, nonzero lists the indices with a
// non-zero variance, chol is the lower factor with zero rows and columns for zero variances.
void factor_variability(const PopulationSpec& spec, int columns, const std::vector<int>& cols,
                        const Eigen::MatrixXd& om, const std::string& list,
                        const std::string& omega, std::vector<int>& of_column,
                        std::vector<int>& nonzero, Eigen::MatrixXd& chol) {
  const ModelInfo& model = *spec.model;
  const std::size_t m = cols.size();
  of_column.assign(static_cast<std::size_t>(columns), -1);
  for (std::size_t a = 0; a < m; ++a) {
    const int c = cols[a];
    if (c < 0 || c >= columns)
      detail::throw_invalid(kWhere, list + "[" + std::to_string(a) + "] (a parameter column)",
                            std::to_string(c), "in [0, " + std::to_string(columns) + ")");
    if (of_column[static_cast<std::size_t>(c)] >= 0)
      detail::throw_invalid(kWhere, list + "[" + std::to_string(a) + "]", name_of(model, c),
                            "a parameter not already listed");
    of_column[static_cast<std::size_t>(c)] = static_cast<int>(a);
    if (!std::isfinite(spec.typical[static_cast<std::size_t>(c)]))
      detail::throw_domain(detail::At{"typical[" + std::to_string(c) + "]"}, kWhere,
                           "typical value of " + name_of(model, c),
                           format_value(spec.typical[static_cast<std::size_t>(c)]),
                           "finite (it has " + list + ")");
  }
  if (static_cast<std::size_t>(om.rows()) != m || static_cast<std::size_t>(om.cols()) != m)
    detail::throw_invalid(
        kWhere, omega + " size", std::to_string(om.rows()) + " x " + std::to_string(om.cols()),
        std::to_string(m) + " x " + std::to_string(m) + " (one row per " + list + ")");
  auto omega_at = [&omega](std::size_t i, std::size_t j) {
    return detail::At{omega + "[" + std::to_string(i) + "][" + std::to_string(j) + "]"};
  };
  auto label = [&](std::size_t i, std::size_t j) {
    return omega + "(" + name_of(model, cols[i]) + ", " + name_of(model, cols[j]) + ")";
  };
  for (std::size_t i = 0; i < m; ++i) {
    const auto ii = static_cast<Eigen::Index>(i);
    if (!(std::isfinite(om(ii, ii)) && om(ii, ii) >= 0.0))
      detail::throw_domain(omega_at(i, i), kWhere, label(i, i), format_value(om(ii, ii)),
                           "a finite variance >= 0");
    for (std::size_t j = 0; j < i; ++j) {
      const auto jj = static_cast<Eigen::Index>(j);
      if (!std::isfinite(om(ii, jj)) || !std::isfinite(om(jj, ii)))
        detail::throw_domain(omega_at(i, j), kWhere, label(i, j), format_value(om(ii, jj)),
                             "finite");
      const double scale = std::sqrt(om(ii, ii) * om(jj, jj));
      if (std::fabs(om(ii, jj) - om(jj, ii)) > 1e-12 * scale)
        detail::throw_domain(omega_at(i, j), kWhere, label(i, j), format_value(om(ii, jj)),
                             "equal to " + label(j, i) + " = " + format_value(om(jj, ii)) + " (" +
                                 omega + " is symmetric)");
    }
  }
  for (std::size_t i = 0; i < m; ++i) {
    const auto ii = static_cast<Eigen::Index>(i);
    if (om(ii, ii) > 0.0) {
      nonzero.push_back(static_cast<int>(i));
      continue;
    }
    for (std::size_t j = 0; j < m; ++j)
      if (j != i && om(ii, static_cast<Eigen::Index>(j)) != 0.0)
        detail::throw_domain(omega_at(std::max(i, j), std::min(i, j)), kWhere, label(i, j),
                             format_value(om(ii, static_cast<Eigen::Index>(j))),
                             "0 because the variance of " + name_of(model, cols[i]) + " is 0");
  }
  // Cholesky factor of the block of non-zero variances (omega_cholesky: the rule is there).
  const Eigen::Index k = static_cast<Eigen::Index>(nonzero.size());
  Eigen::MatrixXd block(k, k);
  for (Eigen::Index a = 0; a < k; ++a)
    for (Eigen::Index b = 0; b < k; ++b)
      block(a, b) =
          a >= b ? om(nonzero[static_cast<std::size_t>(a)], nonzero[static_cast<std::size_t>(b)])
                 : om(nonzero[static_cast<std::size_t>(b)], nonzero[static_cast<std::size_t>(a)]);
  Eigen::MatrixXd lower;
  if (const Eigen::Index failed = omega_cholesky(block, &lower); failed >= 0) {
    const Eigen::Index bad = failed + 1;
    std::string names;
    for (Eigen::Index a = 0; a < bad; ++a)
      names += (a ? ", " : "") +
               name_of(model, cols[static_cast<std::size_t>(nonzero[static_cast<std::size_t>(a)])]);
    const std::string value =
        "not positive definite (its factorisation fails at " +
        name_of(model, cols[static_cast<std::size_t>(nonzero[static_cast<std::size_t>(bad - 1)])]) +
        ")";
    // About the whole block, not one value: no rule for a front end to reword.
    throw DomainError(std::string(kWhere) + ": the " + omega + " block of " + names + " is " +
                          value +
                          ", but must be positive definite (correlations strictly inside (-1, "
                          "1), no parameter a combination of the others)",
                      omega, value, "");
  }
  chol = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(m), static_cast<Eigen::Index>(m));
  for (Eigen::Index a = 0; a < k; ++a)
    for (Eigen::Index b = 0; b <= a; ++b)
      chol(nonzero[static_cast<std::size_t>(a)], nonzero[static_cast<std::size_t>(b)]) =
          lower(a, b);
}

}  // namespace

PopulationSampler::PopulationSampler(PopulationSpec spec) : spec_(std::move(spec)) {
  if (!spec_.model) detail::throw_invalid(kWhere, "model", "not set", "a model description");
  const ModelInfo& model = *spec_.model;
  columns_ = static_cast<int>(model.parameters.size());
  if (spec_.count < 1) detail::throw_invalid(kWhere, "count", std::to_string(spec_.count), ">= 1");
  if (spec_.typical.size() != model.parameters.size())
    bad_size("typical values (one per parameter of " + model.name + ")", spec_.typical.size(),
             model.parameters.size());

  // Variability: columns, Omega's shape and values (between subjects, and between occasions).
  factor_variability(spec_, columns_, spec_.iiv, spec_.omega, "iiv", "omega", eta_of_column_,
                     nonzero_, chol_);
  factor_variability(spec_, columns_, spec_.iov, spec_.iov_omega, "iov", "iov_omega",
                     kappa_of_column_, iov_nonzero_, iov_chol_);
  if (spec_.iov.size() > static_cast<std::size_t>(kMaxKappas))
    detail::throw_invalid(kWhere, "iov size", std::to_string(spec_.iov.size()),
                          "<= " + std::to_string(kMaxKappas) + " parameters");

  // Covariates and effects.
  const std::size_t ncov = spec_.covariate_names.size();
  if (spec_.covariates.size() != static_cast<std::size_t>(spec_.count) * ncov)
    bad_size("covariates size (count x " + std::to_string(ncov) + " covariates)",
             spec_.covariates.size(), static_cast<std::size_t>(spec_.count) * ncov);
  for (std::size_t i = 0; i < spec_.covariates.size(); ++i)
    if (!std::isfinite(spec_.covariates[i]))
      detail::throw_domain(detail::At{"covariates[" + std::to_string(i / ncov) + "][" +
                                      std::to_string(i % ncov) + "]"},
                           kWhere,
                           "covariate " + spec_.covariate_names[i % ncov] + " of subject " +
                               std::to_string(i / ncov + 1),
                           format_value(spec_.covariates[i]), "finite");
  effects_of_column_.assign(static_cast<std::size_t>(columns_), {});
  for (std::size_t e = 0; e < spec_.effects.size(); ++e) {
    const CovariateEffect& f = spec_.effects[e];
    const std::string at = "effect " + std::to_string(e);
    const std::string field = "effects[" + std::to_string(e) + "].";
    if (f.parameter < 0 || f.parameter >= columns_)
      detail::throw_invalid(detail::At{field + "parameter"}, kWhere, at + " parameter column",
                            std::to_string(f.parameter),
                            "in [0, " + std::to_string(columns_) + ")");
    if (f.covariate < 0 || static_cast<std::size_t>(f.covariate) >= ncov)
      detail::throw_invalid(detail::At{field + "covariate"}, kWhere, at + " covariate column",
                            std::to_string(f.covariate), "in [0, " + std::to_string(ncov) + ")");
    const std::string on = at + " (" +
                           spec_.covariate_names[static_cast<std::size_t>(f.covariate)] + " on " +
                           name_of(model, f.parameter) + ")";
    if (!std::isfinite(f.theta))
      detail::throw_domain(detail::At{field + "theta"}, kWhere, on + " theta",
                           format_value(f.theta), "finite");
    if (!std::isfinite(spec_.typical[static_cast<std::size_t>(f.parameter)]))
      detail::throw_domain(detail::At{"typical[" + std::to_string(f.parameter) + "]"}, kWhere,
                           "typical value of " + name_of(model, f.parameter),
                           format_value(spec_.typical[static_cast<std::size_t>(f.parameter)]),
                           "finite (it has a covariate effect)");
    if (f.model == CovariateModel::Power) {
      if (!(std::isfinite(f.reference) && f.reference > 0.0))
        detail::throw_domain(detail::At{field + "reference"}, kWhere, on + " reference",
                             format_value(f.reference), "finite and > 0 for a power effect");
      for (std::int64_t i = 0; i < spec_.count; ++i) {
        const double v = spec_.covariates[static_cast<std::size_t>(i) * ncov +
                                          static_cast<std::size_t>(f.covariate)];
        if (!(v > 0.0))
          detail::throw_domain(detail::At{"covariates[" + std::to_string(i) + "][" +
                                          std::to_string(f.covariate) + "]"},
                               kWhere,
                               "covariate " +
                                   spec_.covariate_names[static_cast<std::size_t>(f.covariate)] +
                                   " of subject " + std::to_string(i + 1),
                               format_value(v), "> 0 (it has a power effect)");
      }
    } else if (!std::isfinite(f.reference)) {
      detail::throw_domain(detail::At{field + "reference"}, kWhere, on + " reference",
                           format_value(f.reference), "finite");
    }
    effects_of_column_[static_cast<std::size_t>(f.parameter)].push_back(static_cast<int>(e));
  }
}

void PopulationSampler::sample(std::int64_t replicate, std::int64_t first_subject,
                               std::int64_t count, double* rows, double* etas_out,
                               int threads) const {
  const char* where = "PopulationSampler::sample";
  if (replicate < 0) detail::throw_invalid(where, "replicate", std::to_string(replicate), ">= 0");
  if (first_subject < 0)
    detail::throw_invalid(where, "first_subject", std::to_string(first_subject), ">= 0");
  if (count < 0) detail::throw_invalid(where, "count", std::to_string(count), ">= 0");
  if (first_subject + count > spec_.count)
    detail::throw_invalid(where, "first_subject + count", std::to_string(first_subject + count),
                          "<= " + std::to_string(spec_.count) + " (subjects per replicate)");
  if (count > 0 && rows == nullptr) detail::throw_invalid(where, "rows", "null", "not null");
  if (threads < 0) detail::throw_invalid(where, "threads", std::to_string(threads), ">= 0");
  if (count == 0) return;

  const int m = etas();
  const std::size_t ncov = spec_.covariate_names.size();
  const int nt = resolve_threads(threads);
  static_cast<void>(nt);  // read by the OpenMP pragma only
  detail::RegionError error;
#pragma omp parallel num_threads(nt)
  {
    std::vector<double> eta;
    error.guard([&] { eta.resize(static_cast<std::size_t>(m) + 1); });
#pragma omp for schedule(static)
    for (std::int64_t j = 0; j < count; ++j) {
      if (error.failed()) continue;
      const std::int64_t subject = first_subject + j;
      subject_etas(replicate, subject, eta.data());
      individual(eta.data(), nullptr,
                 spec_.covariates.data() + static_cast<std::size_t>(subject) * ncov,
                 rows + j * columns_);
      if (etas_out)
        std::memcpy(etas_out + j * m, eta.data(), static_cast<std::size_t>(m) * sizeof(double));
    }
  }
  error.rethrow();
}

void PopulationSampler::subject_etas(std::int64_t replicate, std::int64_t subject,
                                     double* eta) const noexcept {
  const int m = etas();
  const int k = static_cast<int>(nonzero_.size());
  Xoshiro256 g(subject_key(spec_.seed, static_cast<std::uint64_t>(replicate),
                           static_cast<std::uint64_t>(subject)));
  // z in eta[0, k), then eta[nonzero_[a]] = sum over b <= a of L z[b], for a from the last: the
  // slot written (nonzero_[a] >= a, increasing) never holds a z still to be read.
  normals(g, k, eta);
  for (int a = k - 1; a >= 0; --a) {
    const int ia = nonzero_[static_cast<std::size_t>(a)];
    double s = 0.0;
    for (int b = 0; b <= a; ++b) s += chol_(ia, nonzero_[static_cast<std::size_t>(b)]) * eta[b];
    eta[ia] = s;
  }
  // The etas of zero variance are 0.
  for (int c = 0, a = 0; c < m; ++c) {
    if (a < k && nonzero_[static_cast<std::size_t>(a)] == c)
      ++a;
    else
      eta[c] = 0.0;
  }
}

void PopulationSampler::individual(const double* eta, const double* kappa, const double* covariates,
                                   double* row) const noexcept {
  for (int c = 0; c < columns_; ++c) {
    double p = spec_.typical[static_cast<std::size_t>(c)];
    for (int e : effects_of_column_[static_cast<std::size_t>(c)]) {
      const CovariateEffect& f = spec_.effects[static_cast<std::size_t>(e)];
      const double x = covariates[f.covariate];
      p *= f.model == CovariateModel::Power ? std::pow(x / f.reference, f.theta)
                                            : std::exp(f.theta * (x - f.reference));
    }
    const int a = eta_of_column_[static_cast<std::size_t>(c)];
    const int o = kappa ? kappa_of_column_[static_cast<std::size_t>(c)] : -1;
    if (o >= 0)
      p *= std::exp((a >= 0 ? eta[a] : 0.0) + kappa[o]);
    else if (a >= 0)
      p *= std::exp(eta[a]);
    row[c] = p;
  }
}

void PopulationSampler::occasion(std::int64_t replicate, std::int64_t subject,
                                 std::int64_t occasion, double* kappa) const noexcept {
  const int m = kappas();
  const int k = static_cast<int>(iov_nonzero_.size());
  // A round of its own over the subject's key and the occasion: unrelated to the etas' and the
  // residual errors' streams, and to the other occasions'.
  Xoshiro256 g(mix64(subject_key(spec_.seed, static_cast<std::uint64_t>(replicate),
                                 static_cast<std::uint64_t>(subject)) ^
                     0x9B05688C2B3E6C1Full) +
               mix64(static_cast<std::uint64_t>(occasion) ^ 0x1F83D9ABFB41BD6Bull));
  double z[kMaxKappas];
  normals(g, k, z);
  for (int a = 0; a < m; ++a) kappa[a] = 0.0;
  for (int a = 0; a < k; ++a) {
    const int ia = iov_nonzero_[static_cast<std::size_t>(a)];
    double s = 0.0;
    for (int b = 0; b <= a; ++b)
      s += iov_chol_(ia, iov_nonzero_[static_cast<std::size_t>(b)]) * z[b];
    kappa[ia] = s;
  }
}

}  // namespace pkscan
