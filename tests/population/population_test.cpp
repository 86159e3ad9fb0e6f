// Virtual populations: log-normal variability with a full Omega, covariate effects, the
// counter-based determinism of the draws, and the checks of a PopulationSpec.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <pkscan/error.hpp>
#include <pkscan/population.hpp>
#include <string>
#include <vector>

namespace pkscan {
namespace {

// A three-compartment spec with clearance parameters and a full 3 x 3 Omega on ka, cl and
// v_central.
PopulationSpec correlated_spec(std::int64_t count, std::uint64_t seed) {
  PopulationSpec s(ModelKind::ThreeCompartment, count, seed);
  s.set_typical("ka", 1.2);
  s.set_typical("cl", 3.0);
  s.set_typical("q", 1.5);
  s.set_typical("v_central", 20.0);
  s.set_typical("v_peripheral", 60.0);
  s.iiv = {s.column("ka"), s.column("cl"), s.column("v_central")};
  s.omega = Eigen::MatrixXd(3, 3);
  // sd 0.3, 0.25, 0.2; correlations 0.5 (ka, cl), -0.3 (ka, v), 0.6 (cl, v)
  s.omega << 0.09, 0.5 * 0.3 * 0.25, -0.3 * 0.3 * 0.2,  //
      0.5 * 0.3 * 0.25, 0.0625, 0.6 * 0.25 * 0.2,       //
      -0.3 * 0.3 * 0.2, 0.6 * 0.25 * 0.2, 0.04;
  return s;
}

template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong exception: ") + e.what();
  }
  return "no exception";
}

TEST(Population, LogParametersHaveTheTypicalMedianAndOmegaCovariance) {
  constexpr std::int64_t n = 100000;
  const PopulationSpec spec = correlated_spec(n, 12345);
  const PopulationSampler sampler(spec);
  ASSERT_EQ(sampler.etas(), 3);
  std::vector<double> rows(static_cast<std::size_t>(n * sampler.parameters()));
  std::vector<double> etas(static_cast<std::size_t>(n * 3));
  sampler.sample(0, 0, n, rows.data(), etas.data());

  const int cols[3] = {spec.iiv[0], spec.iiv[1], spec.iiv[2]};
  double mean[3] = {0, 0, 0};
  double cov[3][3] = {};
  std::vector<double> y(static_cast<std::size_t>(n * 3));
  for (std::int64_t i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a) {
      const double p = rows[static_cast<std::size_t>(i * sampler.parameters() + cols[a])];
      const double v = std::log(p / spec.typical[static_cast<std::size_t>(cols[a])]);
      y[static_cast<std::size_t>(i * 3 + a)] = v;
      mean[a] += v / static_cast<double>(n);
      // the returned etas are the log-deviations
      ASSERT_NEAR(etas[static_cast<std::size_t>(i * 3 + a)], v, 1e-12);
    }
  for (std::int64_t i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b)
        cov[a][b] += (y[static_cast<std::size_t>(i * 3 + a)] - mean[a]) *
                     (y[static_cast<std::size_t>(i * 3 + b)] - mean[b]) /
                     static_cast<double>(n - 1);
  for (int a = 0; a < 3; ++a) {
    // mean of log(p): log(typical), standard error sqrt(omega_aa / n)
    const double se = std::sqrt(spec.omega(a, a) / static_cast<double>(n));
    EXPECT_NEAR(mean[a], 0.0, 4.5 * se) << "eta " << a;
    for (int b = 0; b < 3; ++b) {
      // standard error of a Gaussian sample covariance: sqrt((s_aa s_bb + s_ab^2) / (n - 1))
      const double se_cov =
          std::sqrt((spec.omega(a, a) * spec.omega(b, b) + spec.omega(a, b) * spec.omega(a, b)) /
                    static_cast<double>(n - 1));
      EXPECT_NEAR(cov[a][b], spec.omega(a, b), 4.5 * se_cov) << "cov " << a << "," << b;
    }
  }
  // Parameters without variability keep their typical value; unused alternatives stay NaN.
  const ModelInfo& m = *spec.model;
  for (std::int64_t i = 0; i < n; i += 997) {
    const double* r = rows.data() + i * sampler.parameters();
    EXPECT_EQ(r[parameter_index(m, "q")], 1.5);
    EXPECT_EQ(r[parameter_index(m, "v_peripheral")], 60.0);
    EXPECT_EQ(r[parameter_index(m, "v_depot")], 1.0);  // model default
    EXPECT_TRUE(std::isnan(r[parameter_index(m, "ke")]));
    EXPECT_TRUE(std::isnan(r[parameter_index(m, "k12")]));
  }
}

TEST(Population, NormalsAreStandard) {
  // A single eta with variance 1: its draws should look standard normal (mean 0, variance 1,
  // about 4.55% beyond 2 sd), a check of the Box-Muller transform itself.
  constexpr std::int64_t n = 100000;
  PopulationSpec s(ModelKind::TwoCompartment, n, 7);
  s.set_typical("ka", 1.0);
  s.set_typical("ke", 0.1);
  s.set_typical("v_central", 10.0);
  s.iiv = {s.column("ka")};
  s.omega = Eigen::MatrixXd::Identity(1, 1);
  const PopulationSampler sampler(s);
  std::vector<double> rows(static_cast<std::size_t>(n * sampler.parameters()));
  std::vector<double> etas(static_cast<std::size_t>(n));
  sampler.sample(0, 0, n, rows.data(), etas.data());
  double m = 0, v = 0;
  std::int64_t tail = 0;
  for (double e : etas) {
    m += e / n;
    tail += std::fabs(e) > 2.0;
  }
  for (double e : etas) v += (e - m) * (e - m) / (n - 1);
  EXPECT_NEAR(m, 0.0, 4.5 / std::sqrt(double(n)));
  EXPECT_NEAR(v, 1.0, 4.5 * std::sqrt(2.0 / n));
  const double p = 0.0455003;  // P(|Z| > 2)
  EXPECT_NEAR(static_cast<double>(tail) / n, p, 4.5 * std::sqrt(p * (1 - p) / n));
}

TEST(Population, CovariateEffectsFollowTheFormulas) {
  constexpr std::int64_t n = 50;
  PopulationSpec s(ModelKind::ThreeCompartment, n, 1);
  s.set_typical("ka", 1.0);
  s.set_typical("cl", 4.0);
  s.set_typical("q", 2.0);
  s.set_typical("v_central", 30.0);
  s.set_typical("v_peripheral", 50.0);
  s.covariate_names = {"wt", "age"};
  for (std::int64_t i = 0; i < n; ++i) {
    s.covariates.push_back(40.0 + 1.7 * static_cast<double>(i));  // wt
    s.covariates.push_back(20.0 + 0.9 * static_cast<double>(i));  // age
  }
  const int cl = s.column("cl"), vc = s.column("v_central"), q = s.column("q");
  s.effects = {{cl, 0, CovariateModel::Power, 0.75, 70.0},
               {vc, 0, CovariateModel::Power, 1.0, 70.0},
               {cl, 1, CovariateModel::Exponential, -0.01, 40.0},
               {q, 1, CovariateModel::Exponential, 0.02, 40.0}};
  const PopulationSampler sampler(s);
  std::vector<double> rows(static_cast<std::size_t>(n * sampler.parameters()));
  sampler.sample(3, 0, n, rows.data());
  for (std::int64_t i = 0; i < n; ++i) {
    const double wt = 40.0 + 1.7 * static_cast<double>(i);
    const double age = 20.0 + 0.9 * static_cast<double>(i);
    const double* r = rows.data() + i * sampler.parameters();
    EXPECT_DOUBLE_EQ(r[cl], 4.0 * std::pow(wt / 70.0, 0.75) * std::exp(-0.01 * (age - 40.0)));
    EXPECT_DOUBLE_EQ(r[vc], 30.0 * (wt / 70.0));
    EXPECT_DOUBLE_EQ(r[q], 2.0 * std::exp(0.02 * (age - 40.0)));
    EXPECT_EQ(r[s.column("ka")], 1.0);
  }
}

TEST(Population, CovariatesCombineWithVariability) {
  constexpr std::int64_t n = 200;
  PopulationSpec s = correlated_spec(n, 99);
  s.covariate_names = {"wt"};
  for (std::int64_t i = 0; i < n; ++i) s.covariates.push_back(50.0 + static_cast<double>(i % 40));
  s.effects = {{s.column("cl"), 0, CovariateModel::Power, 0.75, 70.0}};
  const PopulationSampler sampler(s);
  std::vector<double> rows(static_cast<std::size_t>(n * sampler.parameters()));
  std::vector<double> etas(static_cast<std::size_t>(n * 3));
  sampler.sample(0, 0, n, rows.data(), etas.data());
  for (std::int64_t i = 0; i < n; ++i) {
    const double wt = 50.0 + static_cast<double>(i % 40);
    const double expected = 3.0 * std::pow(wt / 70.0, 0.75) * std::exp(etas[i * 3 + 1]);
    EXPECT_NEAR(rows[static_cast<std::size_t>(i * sampler.parameters() + s.column("cl"))], expected,
                1e-14 * expected);
  }
}

TEST(Population, DrawsDependOnlyOnSeedReplicateAndSubject) {
  constexpr std::int64_t n = 5000;
  const PopulationSampler sampler(correlated_spec(n, 2024));
  const int P = sampler.parameters();
  std::vector<double> whole(static_cast<std::size_t>(n * P)), parts(whole.size());
  std::vector<double> whole_eta(static_cast<std::size_t>(n * 3)), parts_eta(whole_eta.size());
  sampler.sample(1, 0, n, whole.data(), whole_eta.data(), 2);
  // Any split into calls, any thread count, any count per call.
  const std::int64_t cuts[] = {0, 1, 1000, 1037, 2048, 4999, n};
  for (std::size_t k = 0; k + 1 < std::size(cuts); ++k)
    sampler.sample(1, cuts[k], cuts[k + 1] - cuts[k], parts.data() + cuts[k] * P,
                   parts_eta.data() + cuts[k] * 3, static_cast<int>(k % 3));
  EXPECT_EQ(0, std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(double)));
  EXPECT_EQ(0, std::memcmp(whole_eta.data(), parts_eta.data(), whole_eta.size() * sizeof(double)));
  // One subject alone.
  std::vector<double> one(static_cast<std::size_t>(P));
  sampler.sample(1, 4321, 1, one.data(), nullptr, 1);
  EXPECT_EQ(0, std::memcmp(one.data(), whole.data() + 4321 * P, P * sizeof(double)));

  // Other replicates and other seeds give other draws (no equal eta in the first subjects).
  std::vector<double> rep0(static_cast<std::size_t>(100 * 3)), seed2(rep0.size());
  std::vector<double> rows(static_cast<std::size_t>(100 * P));
  sampler.sample(0, 0, 100, rows.data(), rep0.data());
  const PopulationSampler other(correlated_spec(n, 2025));
  other.sample(1, 0, 100, rows.data(), seed2.data());
  int same_rep = 0, same_seed = 0;
  for (std::size_t i = 0; i < rep0.size(); ++i) {
    same_rep += rep0[i] == whole_eta[i];
    same_seed += seed2[i] == whole_eta[i];
  }
  EXPECT_EQ(same_rep, 0);
  EXPECT_EQ(same_seed, 0);
  // Neighbouring subjects are not shifted copies of each other.
  EXPECT_NE(whole_eta[0], whole_eta[3]);
}

// correlated_spec with the second eta's variance 0 between two correlated ones (covariance c).
PopulationSpec zero_middle_spec(std::int64_t n, std::uint64_t seed, double c) {
  PopulationSpec s = correlated_spec(n, seed);
  s.omega = Eigen::MatrixXd::Zero(3, 3);
  s.omega(0, 0) = 0.09;
  s.omega(2, 2) = 0.04;
  s.omega(0, 2) = s.omega(2, 0) = c;
  return s;
}

// The rows and etas sample() draws for every subject of `spec` in `replicate`.
struct Drawn {
  std::vector<double> rows, etas;
};
Drawn draw_all(const PopulationSampler& sampler, std::int64_t replicate, int threads = 0) {
  const std::int64_t n = sampler.spec().count;
  Drawn d{std::vector<double>(static_cast<std::size_t>(n * sampler.parameters())),
          std::vector<double>(static_cast<std::size_t>(n * sampler.etas()))};
  sampler.sample(replicate, 0, n, d.rows.data(), d.etas.data(), threads);
  return d;
}

TEST(Population, ZeroVarianceGivesTheTypicalValue) {
  constexpr std::int64_t n = 300;
  const PopulationSpec s = zero_middle_spec(n, 5, 0.01);
  const PopulationSampler sampler(s);
  const auto [rows, etas] = draw_all(sampler, 0);
  int varied = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(etas[static_cast<std::size_t>(i * 3 + 1)], 0.0);
    EXPECT_EQ(rows[static_cast<std::size_t>(i * sampler.parameters() + s.column("cl"))], 3.0);
    varied += etas[static_cast<std::size_t>(i * 3)] != 0.0;
  }
  EXPECT_EQ(varied, n);
  // The factor of the non-zero block is the 2 x 2 Cholesky factor, computed by hand.
  const Eigen::MatrixXd& l = sampler.cholesky();
  EXPECT_DOUBLE_EQ(l(0, 0), 0.3);
  EXPECT_DOUBLE_EQ(l(2, 0), 0.01 / 0.3);
  EXPECT_DOUBLE_EQ(l(2, 2), std::sqrt(0.04 - (0.01 / 0.3) * (0.01 / 0.3)));
  EXPECT_EQ(l(1, 1), 0.0);
  EXPECT_EQ(l(1, 0), 0.0);
}

// One subject's etas (subject_etas, as a design run draws them inside its own loop) are the
// bits sample() gives that subject, and with a zero variance between two correlated etas they
// keep Omega's covariance (sample covariances within 5 standard errors, n = 20000) and a zero eta.
TEST(Population, SubjectEtasAreSamplesBitsWithOmegasCovariance) {
  constexpr std::int64_t n = 20000;
  const PopulationSpec s = zero_middle_spec(n, 9, 0.024);
  const PopulationSampler sampler(s);
  const std::vector<double> etas = draw_all(sampler, 2, 2).etas;
  double sum[3] = {0, 0, 0}, sq[3][3] = {{0}};
  for (std::int64_t i = 0; i < n; ++i) {
    double one[3];
    sampler.subject_etas(2, i, one);
    ASSERT_EQ(std::memcmp(one, etas.data() + i * 3, sizeof one), 0) << "subject " << i;
    ASSERT_EQ(one[1], 0.0);
    for (int a = 0; a < 3; ++a) {
      sum[a] += one[a];
      for (int b = 0; b < 3; ++b) sq[a][b] += one[a] * one[b];
    }
  }
  for (const auto& [a, b] : {std::pair{0, 0}, std::pair{2, 2}, std::pair{0, 2}}) {
    const double cov = sq[a][b] / n - (sum[a] / n) * (sum[b] / n);
    const double se = std::sqrt((s.omega(a, a) * s.omega(b, b) + s.omega(a, b) * s.omega(a, b)) /
                                static_cast<double>(n));
    EXPECT_NEAR(cov, s.omega(a, b), 5 * se) << "cov " << a << "," << b;
  }
}

TEST(Population, OmegaFromStandardDeviationsAndCorrelations) {
  Eigen::MatrixXd r = Eigen::MatrixXd::Identity(3, 3);
  r(0, 1) = r(1, 0) = 0.5;
  r(1, 2) = r(2, 1) = -0.25;
  const Eigen::MatrixXd om = omega_from_sd({0.3, 0.2, 0.1}, r);
  EXPECT_DOUBLE_EQ(om(0, 0), 0.09);
  EXPECT_DOUBLE_EQ(om(1, 1), 0.04);
  EXPECT_DOUBLE_EQ(om(0, 1), 0.5 * 0.3 * 0.2);
  EXPECT_DOUBLE_EQ(om(2, 1), -0.25 * 0.2 * 0.1);
  EXPECT_EQ(om(0, 2), 0.0);
  const Eigen::MatrixXd ov = omega_from_variances({0.09, 0.04, 0.01}, r);
  EXPECT_NEAR(ov(0, 1), 0.5 * 0.3 * 0.2, 1e-17);
  EXPECT_NEAR(ov(1, 2), -0.25 * 0.2 * 0.1, 1e-17);
  EXPECT_DOUBLE_EQ(ov(2, 2), 0.01);

  Eigen::MatrixXd bad = r;
  bad(0, 0) = 0.9;
  EXPECT_THROW(omega_from_sd({0.3, 0.2, 0.1}, bad), DomainError);
  bad = r;
  bad(0, 2) = 1.5;
  bad(2, 0) = 1.5;
  EXPECT_THROW(omega_from_sd({0.3, 0.2, 0.1}, bad), DomainError);
  bad = r;
  bad(0, 1) = 0.4;  // asymmetric
  EXPECT_THROW(omega_from_sd({0.3, 0.2, 0.1}, bad), DomainError);
  EXPECT_THROW(omega_from_sd({0.3, 0.2}, r), InvalidArgument);
  EXPECT_THROW(omega_from_sd({0.3, -0.2, 0.1}, r), DomainError);
  EXPECT_THROW(omega_from_variances({0.09, NAN, 0.01}, r), DomainError);
}

TEST(Population, OmegaCholeskyNamesTheFirstRowThatFails) {
  Eigen::MatrixXd ok(2, 2);
  ok << 1.0, 0.5, 0.5, 1.0;
  Eigen::MatrixXd l;
  EXPECT_EQ(omega_cholesky(ok, &l), -1);
  EXPECT_LT((l * l.transpose() - ok).norm(), 1e-14);
  EXPECT_EQ(omega_cholesky(Eigen::MatrixXd(0, 0)), -1);
  Eigen::MatrixXd dependent(3, 3);  // the third row repeats the second
  dependent << 1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0;
  EXPECT_EQ(omega_cholesky(dependent), 2);
  Eigen::MatrixXd nearly(2, 2);  // pivot 2e-13, not clearly positive against the variance 1
  nearly << 1.0, 1.0 - 1e-13, 1.0 - 1e-13, 1.0;
  EXPECT_EQ(omega_cholesky(nearly), 1);
}

TEST(Population, BadSpecsAreRejectedWithTheirReason) {
  auto build = [](const PopulationSpec& s) { return PopulationSampler(s); };
  {
    PopulationSpec s = correlated_spec(10, 0);
    s.omega(0, 1) = s.omega(1, 0) = 0.3;  // correlation 4: not positive definite
    const std::string m = message_of<DomainError>([&] { build(s); });
    EXPECT_NE(m.find("not positive definite"), std::string::npos) << m;
    EXPECT_NE(m.find("ka, cl"), std::string::npos) << m;
  }
  {
    PopulationSpec s = correlated_spec(10, 0);
    s.omega(0, 1) = 0.01;  // asymmetric
    const std::string m = message_of<DomainError>([&] { build(s); });
    EXPECT_NE(m.find("symmetric"), std::string::npos) << m;
  }
  {
    PopulationSpec s = correlated_spec(10, 0);
    s.omega(1, 1) = -0.1;
    const std::string m = message_of<DomainError>([&] { build(s); });
    EXPECT_NE(m.find("omega(cl, cl) is -0.1"), std::string::npos) << m;
  }
  {
    PopulationSpec s = correlated_spec(10, 0);
    s.omega(1, 1) = 0.0;  // a zero variance with covariances
    const std::string m = message_of<DomainError>([&] { build(s); });
    EXPECT_NE(m.find("variance of cl is 0"), std::string::npos) << m;
  }
  {
    PopulationSpec s = correlated_spec(10, 0);
    s.omega.resize(2, 2);
    s.omega.setIdentity();
    EXPECT_NE(message_of<InvalidArgument>([&] { build(s); }).find("omega size is 2 x 2"),
              std::string::npos);
  }
  {
    PopulationSpec s = correlated_spec(10, 0);
    s.iiv[2] = s.iiv[0];
    EXPECT_NE(message_of<InvalidArgument>([&] { build(s); }).find("already listed"),
              std::string::npos);
  }
  {
    PopulationSpec s = correlated_spec(10, 0);
    s.iiv[1] = s.column("ke");  // typical ke not given (NaN)
    EXPECT_NE(message_of<DomainError>([&] { build(s); }).find("typical value of ke"),
              std::string::npos);
  }
  {
    PopulationSpec s = correlated_spec(10, 0);
    s.iiv[1] = 99;
    EXPECT_THROW(build(s), InvalidArgument);
  }
  {
    PopulationSpec s = correlated_spec(10, 0);
    s.typical.pop_back();
    EXPECT_THROW(build(s), InvalidArgument);
  }
  {
    PopulationSpec s = correlated_spec(0, 0);
    EXPECT_NE(message_of<InvalidArgument>([&] { build(s); }).find("count is 0"), std::string::npos);
  }
  {
    PopulationSpec s = correlated_spec(3, 0);
    s.covariate_names = {"wt"};
    s.covariates = {70, 0.0, 80};
    s.effects = {{s.column("cl"), 0, CovariateModel::Power, 0.75, 70.0}};
    const std::string m = message_of<DomainError>([&] { build(s); });
    EXPECT_NE(m.find("covariate wt of subject 2 is 0"), std::string::npos) << m;
    s.effects[0].model = CovariateModel::Exponential;  // zero is fine for an exponential effect
    EXPECT_NO_THROW(build(s));
    s.effects[0].model = CovariateModel::Power;
    s.covariates[1] = 60;
    s.effects[0].reference = -1;
    EXPECT_NE(message_of<DomainError>([&] { build(s); }).find("reference is -1"),
              std::string::npos);
    s.effects[0].reference = 70;
    s.covariates.pop_back();
    EXPECT_THROW(build(s), InvalidArgument);
    s.covariates.push_back(NAN);
    EXPECT_THROW(build(s), DomainError);
    s.covariates.back() = 80;
    s.effects[0].covariate = 1;
    EXPECT_THROW(build(s), InvalidArgument);
    s.effects[0].covariate = 0;
    s.effects[0].theta = INFINITY;
    EXPECT_THROW(build(s), DomainError);
  }
  EXPECT_THROW(PopulationSpec(ModelKind::TwoCompartment, 1).set_typical("nope", 1.0),
               InvalidArgument);
  EXPECT_THROW(PopulationSampler(PopulationSpec{}), InvalidArgument);

  const PopulationSampler ok(correlated_spec(10, 0));
  std::vector<double> rows(static_cast<std::size_t>(20 * ok.parameters()));
  EXPECT_NE(message_of<InvalidArgument>([&] {
              ok.sample(0, 5, 6, rows.data());
            }).find("first_subject + count is 11, but must be <= 10"),
            std::string::npos);
  EXPECT_THROW(ok.sample(-1, 0, 1, rows.data()), InvalidArgument);
  EXPECT_THROW(ok.sample(0, 0, 1, nullptr), InvalidArgument);
  EXPECT_THROW(ok.sample(0, 0, 1, rows.data(), nullptr, -2), InvalidArgument);
  EXPECT_NO_THROW(ok.sample(0, 10, 0, nullptr));
}

}  // namespace
}  // namespace pkscan
