// Predictor: the all-subjects calls against the per-subject ones, no allocation on the repeated
// path, and bad input.
#include "predictor_support.hpp"

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
  // Sigma must be finite and > 0; the log scale takes the additive model only.
  const double zero = 0.0, neg[2] = {0.1, -0.1}, ok[2] = {0.1, 0.1};
  EXPECT_THROW(pr.log_likelihood(0, row.data(), {ErrorModelKind::Additive, false}, &zero, nullptr,
                                 nullptr, *ws),
               DomainError);
  EXPECT_THROW(pr.log_likelihood(0, row.data(), {ErrorModelKind::Combined, false}, neg, nullptr,
                                 nullptr, *ws),
               DomainError);
  EXPECT_THROW(
      pr.log_likelihood_all(std::vector<double>(64 * 20, 1.0).data(),
                            {ErrorModelKind::Additive, false}, &zero, nullptr, nullptr, nullptr),
      DomainError);
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

}  // namespace
}  // namespace pkscan
