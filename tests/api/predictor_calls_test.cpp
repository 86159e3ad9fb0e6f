// Predictor: the all-subjects calls against the per-subject ones, no allocation on the repeated
// path, and bad input.
#include <sstream>

#include "support/predictor_support.hpp"

// Counting allocations: the Predictor's repeated path must not allocate. On glibc, malloc (under
// operator new, std::vector and Eigen's heap matrices) is wrapped to count the calls made while
// g_count_mallocs is set; otherwise it only forwards to glibc.
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
extern "C" void* __libc_malloc(std::size_t size);
namespace {
volatile bool g_count_mallocs = false;
volatile long g_mallocs = 0;
}  // namespace
extern "C" void* malloc(std::size_t size) {
  if (g_count_mallocs) g_mallocs = g_mallocs + 1;
  return __libc_malloc(size);
}
#define PKSCAN_TEST_COUNTS_MALLOC 1
#endif

namespace pkscan {
namespace {

// ---- All subjects at once. ----

TEST(PredictorAll, EqualsThePerSubjectCallsOnOneAndTwoThreads) {
  for (const Case& c : all_cases()) {
    const Predictor pr(
        parse_for(*c.model, rich_csv(static_cast<int>(c.model->compartments.size()))), c.model);
    const std::size_t np = static_cast<std::size_t>(pr.parameters());
    const std::size_t n = static_cast<std::size_t>(pr.subjects());
    std::vector<double> params;
    for (std::size_t s = 0; s < n; ++s) {  // a different row per subject
      std::vector<double> row = typical_row(*c.model, c.clearances);
      row[static_cast<std::size_t>(parameter_index(*c.model, "ka"))] *= 1.0 + 0.05 * double(s);
      params.insert(params.end(), row.begin(), row.end());
    }
    auto ws = pr.make_workspace();
    std::vector<double> one(static_cast<std::size_t>(pr.observations()));
    std::vector<double> one_jac(one.size() * np), one_g(one.size());
    for (std::size_t s = 0; s < n; ++s) {
      const std::size_t off =
          static_cast<std::size_t>(pr.observation_offset(static_cast<std::int64_t>(s)));
      pr.predict(static_cast<std::int64_t>(s), params.data() + s * np, one.data() + off, *ws);
      pr.predict_gradient(static_cast<std::int64_t>(s), params.data() + s * np, one_g.data() + off,
                          one_jac.data() + off * np, *ws);
    }
    const ErrorModel e{ErrorModelKind::Combined, false};
    const double sigma[2] = {0.3, 0.1};
    double sum = 0.0;
    std::vector<double> per(n), grad(n * np), sgrad_sum(2, 0.0);
    for (std::size_t s = 0; s < n; ++s) {
      double sg[2];
      per[s] = pr.log_likelihood(static_cast<std::int64_t>(s), params.data() + s * np, e, sigma,
                                 grad.data() + s * np, sg, *ws);
      sum += per[s];
      sgrad_sum[0] += sg[0];
      sgrad_sum[1] += sg[1];
    }
    for (int threads : {1, 2}) {
      std::vector<double> all(one.size());
      pr.predict_all(params.data(), all.data(), threads);
      for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], one[i]) << c.name << threads;
      std::vector<double> all_g(one.size()), all_jac(one_jac.size());
      pr.predict_gradient_all(params.data(), all_g.data(), all_jac.data(), threads);
      for (std::size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all_g[i], one[i]) << c.name;
      for (std::size_t i = 0; i < all_jac.size(); ++i) ASSERT_EQ(all_jac[i], one_jac[i]) << c.name;
      std::vector<double> per_all(n), grad_all(n * np), sgrad_all(2);
      const double total = pr.log_likelihood_all(params.data(), e, sigma, per_all.data(),
                                                 grad_all.data(), sgrad_all.data(), threads);
      EXPECT_EQ(total, sum) << c.name << " threads " << threads;
      for (std::size_t s = 0; s < n; ++s) EXPECT_EQ(per_all[s], per[s]) << c.name;
      for (std::size_t i = 0; i < grad.size(); ++i) ASSERT_EQ(grad_all[i], grad[i]) << c.name;
      EXPECT_EQ(sgrad_all[0], sgrad_sum[0]) << c.name;
      EXPECT_EQ(sgrad_all[1], sgrad_sum[1]) << c.name;
      EXPECT_EQ(pr.log_likelihood_all(params.data(), e, sigma, nullptr, nullptr, nullptr, threads),
                sum);
    }
  }
}

// ---- No allocation on the repeated path. ----

TEST(PredictorWorkspace, RepeatedEvaluationsDoNotAllocate) {
#ifndef PKSCAN_TEST_COUNTS_MALLOC
  GTEST_SKIP() << "allocations are counted only with glibc";
#else
  // The rich dataset (every event kind, steady states with running infusions) on the fast
  // path, and a model with complex eigenvalues on the fallback path.
  const auto cyc =
      make_linear_model({"depot", "central", "peripheral"}, {{"depot", "central", "k1"},
                                                             {"central", "peripheral", "k2"},
                                                             {"peripheral", "depot", "k3"},
                                                             {"central", "", "ke"}});
  struct Run {
    std::shared_ptr<const ModelInfo> model;
    std::vector<double> row;
  };
  const std::vector<Run> runs = {{builtin(ModelKind::ThreeCompartment),
                                  typical_row(model_info(ModelKind::ThreeCompartment), true)},
                                 {cyc, row_of(*cyc, {{"k1", 1.0},
                                                     {"k2", 1.0},
                                                     {"k3", 1.0},
                                                     {"ke", 0.1},
                                                     {"v_central", 4},
                                                     {"f_central", 0.8},
                                                     {"lag_depot", 0.2}})}};
  for (const Run& run : runs) {
    // (KA is a covariate column for the cycle model, which has no parameter of that name.)
    const Predictor pr(parse_for(*run.model, rich_csv(3)), run.model);
    // The counter works: making a workspace allocates.
    g_mallocs = 0;
    g_count_mallocs = true;
    auto ws = pr.make_workspace();
    g_count_mallocs = false;
    ASSERT_GT(g_mallocs, 0) << "malloc calls are not being counted";
    const std::size_t np = static_cast<std::size_t>(pr.parameters());
    std::vector<double> out(64), jac(64 * np), grad(np);
    const ErrorModel e{ErrorModelKind::Combined, false};
    const double sigma[2] = {0.3, 0.1};
    double sg[2];
    for (int pass = 0; pass < 2; ++pass) {
      g_mallocs = 0;
      g_count_mallocs = pass == 1;  // the first pass warms the workspace up
      for (std::int64_t s = 0; s < pr.subjects(); ++s) {
        pr.predict(s, run.row.data(), out.data(), *ws);
        pr.predict_gradient(s, run.row.data(), out.data(), jac.data(), *ws);
        pr.log_likelihood(s, run.row.data(), e, sigma, grad.data(), sg, *ws);
      }
      g_count_mallocs = false;
    }
    EXPECT_EQ(g_mallocs, 0) << run.model->name;
  }
#endif
}

// ---- Bad input. ----

TEST(PredictorErrors, BadInputThrowsAndNeverCrashes) {
  const ModelInfo& m = model_info(ModelKind::ThreeCompartment);
  const Predictor pr(parse_for(m, rich_csv(3)), ModelKind::ThreeCompartment);
  auto ws = pr.make_workspace();
  std::vector<double> row = typical_row(m, true);
  std::vector<double> out(64), jac(64 * 20);
  EXPECT_THROW(pr.predict(-1, row.data(), out.data(), *ws), InvalidArgument);
  EXPECT_THROW(pr.predict(pr.subjects(), row.data(), out.data(), *ws), InvalidArgument);
  EXPECT_THROW(pr.predict(0, nullptr, out.data(), *ws), InvalidArgument);
  // A workspace of another predictor.
  const Predictor other(parse_for(m, rich_csv(3)), ModelKind::ThreeCompartment);
  auto ws_other = other.make_workspace();
  EXPECT_THROW(pr.predict(0, row.data(), out.data(), *ws_other), InvalidArgument);
  // Invalid values: a negative clearance, both ke and cl, a missing volume, a NaN lag.
  const int cl = parameter_index(m, "cl"), ke = parameter_index(m, "ke");
  for (auto [col, v] :
       std::vector<std::pair<int, double>>{{cl, -1.0},
                                           {ke, 0.2},
                                           {parameter_index(m, "v_central"), kNaN},
                                           {parameter_index(m, "lag_depot"), kNaN},
                                           {parameter_index(m, "v_peripheral"), 0.0}}) {
    std::vector<double> bad = row;
    bad[static_cast<std::size_t>(col)] = v;
    EXPECT_THROW(pr.predict(0, bad.data(), out.data(), *ws), DomainError) << col;
    EXPECT_THROW(pr.predict_gradient(0, bad.data(), out.data(), jac.data(), *ws), DomainError);
    std::vector<double> all(static_cast<std::size_t>(pr.subjects() * pr.parameters()));
    for (std::int64_t s = 0; s < pr.subjects(); ++s)
      std::copy(bad.begin(), bad.end(), all.begin() + s * pr.parameters());
    std::vector<double> preds(static_cast<std::size_t>(pr.observations()));
    EXPECT_THROW(pr.predict_all(all.data(), preds.data(), 2), DomainError);
    std::vector<double> jacs(preds.size() * static_cast<std::size_t>(pr.parameters()));
    EXPECT_THROW(pr.predict_gradient_all(all.data(), preds.data(), jacs.data(), 2), DomainError);
    EXPECT_THROW(pr.predict_gradient_all(all.data(), preds.data(), nullptr, 2), InvalidArgument);
  }
  try {
    std::vector<double> bad = row;
    bad[static_cast<std::size_t>(cl)] = -1.0;
    pr.predict(1, bad.data(), out.data(), *ws);
    ADD_FAILURE() << "no exception";
  } catch (const DomainError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("test.csv:"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ID \"2\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("cl is -1"), std::string::npos) << msg;
  }
  // The workspace still works after an exception.
  EXPECT_NO_THROW(pr.predict(0, row.data(), out.data(), *ws));
  // The log scale takes the additive model only (a sigma out of the domain is not an error:
  // PredictorDomain below).
  const double ok[2] = {0.1, 0.1};
  EXPECT_THROW(pr.log_likelihood(0, row.data(), {ErrorModelKind::Proportional, true}, ok, nullptr,
                                 nullptr, *ws),
               InvalidArgument);
  EXPECT_THROW(pr.log_likelihood(0, row.data(), {ErrorModelKind::Additive, false}, nullptr, nullptr,
                                 nullptr, *ws),
               InvalidArgument);
  // A DV <= 0 on the log scale.
  const Predictor zero_dv(parse_for(m, "ID,TIME,AMT,EVID,CMT,DV\n1,0,100,1,1,.\n1,1,.,0,2,0\n"),
                          ModelKind::ThreeCompartment);
  auto wz = zero_dv.make_workspace();
  EXPECT_THROW(zero_dv.log_likelihood(0, row.data(), {ErrorModelKind::Additive, true}, ok, nullptr,
                                      nullptr, *wz),
               DomainError);
  // ... whatever the parameters: the dataset is checked first.
  const double zero = 0.0;
  EXPECT_THROW(zero_dv.log_likelihood(0, row.data(), {ErrorModelKind::Additive, true}, &zero,
                                      nullptr, nullptr, *wz),
               DomainError);
  std::vector<double> bad_row = row;
  bad_row[static_cast<std::size_t>(cl)] = -1.0;
  EXPECT_THROW(zero_dv.log_likelihood_all(bad_row.data(), {ErrorModelKind::Additive, true}, ok,
                                          nullptr, nullptr, nullptr),
               DomainError);
  // Datasets that do not fit the model: CMT 3 in a two-compartment model, a KE column with
  // model `linear` that has no ke, the `linear` kind without its description.
  const Dataset three = parse_for(m, "ID,TIME,AMT,EVID,CMT\n1,0,100,1,3\n1,1,.,0,2\n");
  EXPECT_THROW(Predictor(three, ModelKind::TwoCompartment), InvalidArgument);
  const Dataset with_k12 =
      parse_for(m, "ID,TIME,AMT,EVID,CMT,K12\n1,0,100,1,1,0.3\n1,1,.,0,2,0.3\n");
  EXPECT_THROW(Predictor(with_k12, ModelKind::TwoCompartment), InvalidArgument);
  EXPECT_THROW(Predictor(three, ModelKind::Linear), InvalidArgument);
  EXPECT_THROW(Predictor(three, std::shared_ptr<const ModelInfo>()), InvalidArgument);
}

// ---- The likelihood's domain. ----

// One compartment, IV bolus: amount = AMT exp(-ke t), prediction = amount / v_central. Two
// subjects (the second dosed 50), DV at t = 1 and 4.
std::shared_ptr<const ModelInfo> one_compartment() {
  return make_linear_model({"central"}, {{"central", "", "ke"}});
}
const char* const kBolusCsv =
    "ID,TIME,AMT,CMT,EVID,DV\n1,0,100,1,1,.\n1,1,.,1,0,5\n1,4,.,1,0,2\n"
    "2,0,50,1,1,.\n2,1,.,1,0,3\n2,4,.,1,0,1\n";

// The log-likelihood of one subject in closed form, in long double (x86-64: 64-bit mantissa,
// exponent range to 1e4932, so sigma^2 and the residual's square never overflow): the naive
// density, independent of the Predictor's overflow-free form.
long double bolus_loglik(double amt, const double* dv, double ke, double v, ErrorModelKind kind,
                         const double* sigma) {
  long double ll = 0;
  const double times[2] = {1.0, 4.0};
  for (int i = 0; i < 2; ++i) {
    const long double f = static_cast<long double>(amt) *
                          std::exp(-static_cast<long double>(ke) * times[i]) /
                          static_cast<long double>(v);
    const long double sa = sigma[0], sp = sigma[kind == ErrorModelKind::Combined ? 1 : 0];
    const long double var = kind == ErrorModelKind::Additive       ? sa * sa
                            : kind == ErrorModelKind::Proportional ? sp * sp * f * f
                                                                   : sa * sa + sp * sp * f * f;
    const long double r = static_cast<long double>(dv[i]) - f;
    ll += -0.5L * std::log(2.0L * 3.14159265358979323846264338327950288L) - 0.5L * std::log(var) -
          0.5L * r * r / var;
  }
  return ll;
}

TEST(PredictorDomain, ExtremeValidSigmaAndPredictionsGiveTheFiniteDensity) {
  const auto m = one_compartment();
  const Predictor pr(parse_for(*m, kBolusCsv), m);
  auto ws = pr.make_workspace();
  const int ke = parameter_index(*m, "ke"), v = parameter_index(*m, "v_central");
  const double dv[2][2] = {{5, 2}, {3, 1}}, amt[2] = {100, 50};
  int finite = 0;
  for (ErrorModelKind kind :
       {ErrorModelKind::Additive, ErrorModelKind::Proportional, ErrorModelKind::Combined})
    for (double s0 : {1e-300, 1e-5, 1.0, 1e154, 1e200, 1e308})
      for (double vol : {10.0, 1e-198, 1e300}) {
        std::vector<double> row = row_of(*m, {{"ke", 0.3}, {"v_central", vol}});
        const double sigma[2] = {s0, kind == ErrorModelKind::Combined ? 0.5 * s0 : s0};
        const ErrorModel e{kind, false};
        std::vector<double> grad(static_cast<std::size_t>(pr.parameters()));
        for (std::int64_t s = 0; s < 2; ++s) {
          const long double want = bolus_loglik(amt[s], dv[s], row[static_cast<std::size_t>(ke)],
                                                row[static_cast<std::size_t>(v)], kind, sigma);
          double sgrad[2] = {0.0, 0.0};
          const double got = pr.log_likelihood(s, row.data(), e, sigma, grad.data(), sgrad, *ws);
          std::ostringstream what;
          what << to_string(kind) << " sigma " << s0 << " v " << vol << " subject " << s;
          if (want < -static_cast<long double>(std::numeric_limits<double>::max())) {
            EXPECT_EQ(got, -std::numeric_limits<double>::infinity()) << what.str();
            continue;
          }
          PKSCAN_EXPECT_CLOSE(static_cast<double>(want), got, 1e-12, 0.0, what.str());
          for (double g : grad) EXPECT_TRUE(std::isfinite(g)) << what.str();
          EXPECT_TRUE(std::isfinite(sgrad[0]) && std::isfinite(sgrad[1])) << what.str();
          ++finite;
        }
      }
  EXPECT_GE(finite, 80);
}

TEST(PredictorDomain, OutOfTheDomainIsMinusInfinityWithZeroGradientsOnEveryCall) {
  const auto m = one_compartment();
  const Predictor pr(parse_for(*m, kBolusCsv), m);
  auto ws = pr.make_workspace();
  const std::size_t np = static_cast<std::size_t>(pr.parameters());
  const std::size_t ke = static_cast<std::size_t>(parameter_index(*m, "ke"));
  const std::size_t v = static_cast<std::size_t>(parameter_index(*m, "v_central"));
  const std::vector<double> good = row_of(*m, {{"ke", 0.3}, {"v_central", 10.0}});
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const ErrorModel additive{ErrorModelKind::Additive, false};
  const double sigma_ok = 0.5;
  struct Bad {
    std::size_t col;
    double value;
  };
  std::vector<std::vector<double>> rows;
  for (Bad b : {Bad{ke, -1.0}, Bad{ke, kNaN}, Bad{ke, kInf}, Bad{v, 0.0}, Bad{v, -1.0},
                Bad{v, kNaN}, Bad{v, kInf}}) {
    rows.push_back(good);
    rows.back()[b.col] = b.value;
  }
  std::vector<double> grad(np, 7.0), all_grad(2 * np, 7.0);
  double sgrad = 7.0, per[2];
  for (const std::vector<double>& bad : rows) {
    for (double* g : {grad.data(), static_cast<double*>(nullptr)}) {
      EXPECT_EQ(pr.log_likelihood(0, bad.data(), additive, &sigma_ok, g, g ? &sgrad : nullptr, *ws),
                -kInf);
    }
    for (double g : grad) EXPECT_EQ(g, 0.0);
    EXPECT_EQ(sgrad, 0.0);
    // All subjects: subject 1 out of the domain rejects the set; subject 0 keeps its value.
    std::vector<double> params = good;
    params.insert(params.end(), bad.begin(), bad.end());
    for (int threads : {1, 2}) {
      sgrad = 7.0;
      EXPECT_EQ(pr.log_likelihood_all(params.data(), additive, &sigma_ok, per, all_grad.data(),
                                      &sgrad, threads),
                -kInf);
      EXPECT_TRUE(std::isfinite(per[0]));
      EXPECT_EQ(per[1], -kInf);
      for (double g : all_grad) EXPECT_EQ(g, 0.0);
      EXPECT_EQ(sgrad, 0.0);
      EXPECT_EQ(pr.log_likelihood_all(params.data(), additive, &sigma_ok, nullptr, nullptr, nullptr,
                                      threads),
                -kInf);
    }
  }
  // Sigma out of the domain: 0, negative, NaN, infinite (sigma_prop of a combined model too).
  std::vector<double> both = good;
  both.insert(both.end(), good.begin(), good.end());
  for (double s : {0.0, -0.5, kNaN, kInf, -kInf}) {
    for (const ErrorModel& e : {additive, ErrorModel{ErrorModelKind::Proportional, false},
                                ErrorModel{ErrorModelKind::Additive, true}}) {
      sgrad = 7.0;
      EXPECT_EQ(pr.log_likelihood(0, good.data(), e, &s, grad.data(), &sgrad, *ws), -kInf);
      EXPECT_EQ(sgrad, 0.0);
      EXPECT_EQ(pr.log_likelihood_all(both.data(), e, &s, per, nullptr, nullptr), -kInf);
      EXPECT_EQ(per[0], -kInf);
    }
    const double combined[2] = {0.5, s};
    double sg2[2] = {7.0, 7.0};
    EXPECT_EQ(pr.log_likelihood(1, good.data(), {ErrorModelKind::Combined, false}, combined,
                                grad.data(), sg2, *ws),
              -kInf);
    EXPECT_EQ(sg2[0], 0.0);
    EXPECT_EQ(sg2[1], 0.0);
  }
  // No density: a proportional model where a prediction is 0 (ke so large that exp(-ke t)
  // underflows), the log scale likewise.
  std::vector<double> gone = good;
  gone[ke] = 1e300;
  for (const ErrorModel& e : {ErrorModel{ErrorModelKind::Proportional, false},
                              ErrorModel{ErrorModelKind::Additive, true}}) {
    EXPECT_EQ(pr.log_likelihood(0, gone.data(), e, &sigma_ok, grad.data(), &sgrad, *ws), -kInf);
    for (double g : grad) EXPECT_EQ(g, 0.0);
  }
  // ... while the additive model has a density there: DV around 0.
  EXPECT_TRUE(std::isfinite(
      pr.log_likelihood(0, gone.data(), additive, &sigma_ok, grad.data(), &sgrad, *ws)));
}

TEST(PredictorDomain, NonFinitePredictionsAreMinusInfinity) {
  // A steady state that does not exist (no elimination: ke = 0 is a valid rate) gives NaN
  // predictions; a dose of 1e300 into a volume of 1e-300 overflows. Both: -infinity, zero
  // gradients, no exception, on every call.
  const auto m = one_compartment();
  const Predictor ss(parse_for(*m,
                               "ID,TIME,AMT,CMT,EVID,SS,II,DV\n1,0,100,1,1,1,12,.\n"
                               "1,1,.,1,0,.,.,5\n"),
                     m);
  const Predictor big(parse_for(*m, "ID,TIME,AMT,CMT,EVID,DV\n1,0,1e300,1,1,.\n1,1,.,1,0,5\n"), m);
  const std::vector<double> no_elimination = row_of(*m, {{"ke", 0.0}, {"v_central", 10.0}});
  const std::vector<double> tiny_volume = row_of(*m, {{"ke", 0.1}, {"v_central", 1e-300}});
  constexpr double kInf = std::numeric_limits<double>::infinity();
  for (const auto& [pr, row] : {std::pair{&ss, &no_elimination}, std::pair{&big, &tiny_volume}}) {
    auto ws = pr->make_workspace();
    std::vector<double> pred(1);
    pr->predict(0, row->data(), pred.data(), *ws);
    EXPECT_FALSE(std::isfinite(pred[0]));
    std::vector<double> grad(static_cast<std::size_t>(pr->parameters()), 7.0);
    for (ErrorModelKind kind :
         {ErrorModelKind::Additive, ErrorModelKind::Proportional, ErrorModelKind::Combined}) {
      const double sigma[2] = {0.5, 0.5};
      double sgrad[2] = {7.0, 7.0};
      EXPECT_EQ(pr->log_likelihood(0, row->data(), {kind, false}, sigma, grad.data(), sgrad, *ws),
                -kInf);
      for (double g : grad) EXPECT_EQ(g, 0.0);
      EXPECT_EQ(sgrad[0], 0.0);
      double per = 0.0;
      EXPECT_EQ(pr->log_likelihood_all(row->data(), {kind, false}, sigma, &per, grad.data(), sgrad),
                -kInf);
      EXPECT_EQ(per, -kInf);
    }
  }
}

}  // namespace
}  // namespace pkscan
