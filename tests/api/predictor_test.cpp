// Predictor: predictions against simulate_dataset(), exact gradients against central finite
// differences of predict(), the log-likelihood against a direct computation in the test. The
// all-subjects calls, the allocation-free path and bad input: predictor_calls_test.cpp.
#include "support/predictor_support.hpp"

namespace pkscan {
namespace {

// ---- Predictions equal simulate_dataset(), bit for bit. ----

void expect_same_as_simulate(const Dataset& d, const std::shared_ptr<const ModelInfo>& m,
                             const ParameterBatch& b, const std::string& what) {
  const DatasetResult ref = simulate_dataset(d, b);
  const Predictor pr(d, m);
  ASSERT_EQ(pr.observations(), ref.rows()) << what;
  auto ws = pr.make_workspace();
  std::vector<double> all(static_cast<std::size_t>(pr.observations()));
  for (std::int64_t s = 0; s < pr.subjects(); ++s)
    pr.predict(s, b.row(s), all.data() + pr.observation_offset(s), *ws);
  // One event solver serves both (engine/events/solver.hpp): the same bits, not just close.
  for (std::size_t i = 0; i < all.size(); ++i)
    ASSERT_EQ(std::memcmp(&ref.prediction[i], &all[i], sizeof(double)), 0)
        << what << " row " << i << ": " << ref.prediction[i] << " vs " << all[i];
}

TEST(PredictorPredictions, EqualSimulateDatasetOnTheExamples) {
  const ModelInfo& m3 = model_info(ModelKind::ThreeCompartment);
  {
    // config/examples/datasets/population.yaml
    const Dataset d = read_dataset(
        std::string(PKSCAN_SOURCE_DIR) + "/config/examples/datasets/population.csv", m3);
    ParameterBatch b(ModelKind::ThreeCompartment, 3);
    b.set_all("ka", 0.9);
    b.set_all("k12", 0.4);
    b.set_all("k21", 0.11);
    b.set_all("v_central", 20);
    b.set_all("v_peripheral", 70);
    b.set("ke", 0, 0.2);
    b.set("ke", 1, 0.15);
    b.set("ke", 2, 0.25);
    expect_same_as_simulate(d, builtin(ModelKind::ThreeCompartment), b, "population.csv");
  }
  {
    // config/examples/datasets/torsten_2_ss.yaml
    const Dataset d = read_dataset(
        std::string(PKSCAN_SOURCE_DIR) + "/config/examples/datasets/torsten_2_ss.csv", m3);
    ParameterBatch b(ModelKind::ThreeCompartment, 1);
    b.set_all("cl", 5);
    b.set_all("q", 8);
    b.set_all("v_central", 20);
    b.set_all("v_peripheral", 70);
    b.set_all("ka", 1.2);
    expect_same_as_simulate(d, builtin(ModelKind::ThreeCompartment), b, "torsten_2_ss.csv");
  }
  {
    const Dataset d =
        read_dataset(std::string(PKSCAN_SOURCE_DIR) + "/tests/data/datasets/two_subjects.csv", m3);
    ParameterBatch b(ModelKind::ThreeCompartment, 2);
    b.set_all("cl", 5);
    b.set_all("q", 8);
    b.set_all("v_central", 20);
    b.set_all("v_peripheral", 70);
    expect_same_as_simulate(d, builtin(ModelKind::ThreeCompartment), b, "two_subjects.csv");
  }
  for (const Case& c : all_cases()) {
    const Dataset d = parse_for(*c.model, rich_csv(static_cast<int>(c.model->compartments.size())));
    ParameterBatch b(c.model, static_cast<std::int64_t>(d.subjects.size()));
    const std::vector<double> row = typical_row(*c.model, c.clearances);
    for (int col = 0; col < b.parameters(); ++col) {
      const std::string& name = c.model->parameters[static_cast<std::size_t>(col)].name;
      for (std::int64_t s = 0; s < b.subjects(); ++s)
        b.set(name, s, row[static_cast<std::size_t>(col)]);
    }
    expect_same_as_simulate(d, c.model, b, "rich dataset, " + c.name);
  }
}

TEST(PredictorPredictions, EqualSimulateDatasetOnRandomDatasets) {
  std::mt19937_64 rng(20240611);
  for (int round = 0; round < 3; ++round)
    for (const Case& c : all_cases()) {
      const int n = static_cast<int>(c.model->compartments.size());
      const Dataset d = parse_for(*c.model, random_csv(rng, n, 25));
      ParameterBatch b(c.model, static_cast<std::int64_t>(d.subjects.size()));
      std::uniform_real_distribution<double> u(0.5, 1.5);
      const std::vector<double> row = typical_row(*c.model, c.clearances);
      for (std::int64_t s = 0; s < b.subjects(); ++s)
        for (int col = 0; col < b.parameters(); ++col) {
          const double v = row[static_cast<std::size_t>(col)];
          const ParameterInfo& info = c.model->parameters[static_cast<std::size_t>(col)];
          // Random values; some lags 0 and some F 1, as in real data.
          double x = std::isnan(v) ? v : v * u(rng);
          if (info.role == ParameterRole::Lag && u(rng) < 0.8) x = 0.0;
          if (info.role == ParameterRole::Bioavailability && u(rng) < 0.8) x = 1.0;
          b.set(info.name, s, x);
        }
      expect_same_as_simulate(d, c.model, b,
                              "random round " + std::to_string(round) + ", " + c.name);
    }
}

// ---- Gradients. ----

TEST(PredictorGradient, MatchesFiniteDifferencesForEveryParameterOfEveryModel) {
  int checked = 0;
  for (const Case& c : all_cases()) {
    const Predictor pr(
        parse_for(*c.model, rich_csv(static_cast<int>(c.model->compartments.size()))), c.model);
    check_gradients(pr, typical_row(*c.model, c.clearances), c.name, &checked);
  }
  std::printf("gradient entries checked against finite differences: %d\n", checked);
  EXPECT_GT(checked, 2000);
}

// Steady states of lagged SS records (lag_depot 0.37, lag_central 0.25), with observations
// between the record and the arrival of its dose: the state there is the steady state advanced
// by II - lag, which moves with the lag, F and the rates. Bolus (SS=1, and SS=2 on top of an
// earlier dose), infusions shorter and longer than II (implied infusions still running at the
// record), an infusion ending between the last implied arrival and the record (II 3, D 3.2 * F),
// a lag of II or more (II 0.3 < 0.37: no advance) and a record with a KA cell.
std::string ss_lag_csv() {
  std::string csv = "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,DV,KA\n";
  csv +=
      "1,4,100,.,1,1,12,1,1,.,.\n1,4.1,.,.,0,2,.,.,.,3.1,.\n1,4.3,.,.,0,1,.,.,.,2.2,.\n"
      "1,6.6,.,.,0,2,.,.,.,4.1,.\n1,15.5,.,.,0,2,.,.,.,2.9,.\n";
  csv +=
      "2,0,50,.,1,2,.,.,.,.,.\n2,2,100,.,1,1,8,.,2,.,.\n2,2.2,.,.,0,2,.,.,.,3.3,.\n"
      "2,5.9,.,.,0,2,.,.,.,3.9,.\n";
  csv +=
      "3,3,90,45,1,2,6,2,1,.,.\n3,3.1,.,.,0,2,.,.,.,4.4,.\n3,4.4,.,.,0,2,.,.,.,5.1,.\n"
      "3,9.7,.,.,0,2,.,.,.,4.6,.\n";
  csv += "4,5,300,10,1,2,9,1,1,.,.\n4,5.1,.,.,0,2,.,.,.,12.1,.\n4,11.3,.,.,0,2,.,.,.,13.3,.\n";
  csv += "5,1,40,10,1,2,3,.,1,.,.\n5,1.2,.,.,0,2,.,.,.,2.5,.\n5,3.3,.,.,0,2,.,.,.,2.1,.\n";
  csv += "6,2,20,.,1,1,0.3,.,1,.,.\n6,2.2,.,.,0,2,.,.,.,6.1,.\n6,2.9,.,.,0,2,.,.,.,5.5,.\n";
  csv += "7,1,100,.,1,1,12,.,1,.,0.8\n7,1.2,.,.,0,2,.,.,.,1.9,.\n7,3,.,.,0,2,.,.,.,3.1,.\n";
  return csv;
}

TEST(PredictorGradient, LaggedSteadyStatesMatchFiniteDifferences) {
  int checked = 0;
  for (const Case& c : all_cases()) {
    const Predictor pr(parse_for(*c.model, ss_lag_csv()), c.model);
    check_gradients(pr, typical_row(*c.model, c.clearances), c.name, &checked);
  }
  std::printf("steady-state gradient entries checked: %d\n", checked);
  EXPECT_GT(checked, 1000);
}

TEST(PredictorGradient, OverriddenColumnsHaveNoDerivativeWhereTheyGovern) {
  // KE from the dataset on every record: d/d ke is 0 everywhere; KA on the middle record only.
  const ModelInfo& m = model_info(ModelKind::TwoCompartment);
  const Dataset d = parse_for(m,
                              "ID,TIME,AMT,EVID,CMT,KE,KA\n1,0,100,1,1,0.3,.\n1,2,.,0,2,0.3,0.8\n"
                              "1,5,.,0,2,0.3,.\n");
  const Predictor pr(d, ModelKind::TwoCompartment);
  const std::vector<double> row = row_of(m, {{"ka", 1.1}, {"ke", 0.2}, {"v_central", 10}});
  int checked = 0;
  check_gradients(pr, row, "overrides", &checked);
  auto ws = pr.make_workspace();
  std::vector<double> pred(2), jac(2 * static_cast<std::size_t>(pr.parameters()));
  pr.predict_gradient(0, row.data(), pred.data(), jac.data(), *ws);
  const int ke = parameter_index(m, "ke"), ka = parameter_index(m, "ka");
  EXPECT_EQ(jac[static_cast<std::size_t>(ke)], 0.0);
  EXPECT_EQ(jac[static_cast<std::size_t>(pr.parameters() + ke)], 0.0);
  // ka governs only (2, 5]: no effect at t = 2, an effect at t = 5.
  EXPECT_EQ(jac[static_cast<std::size_t>(ka)], 0.0);
  EXPECT_NE(jac[static_cast<std::size_t>(pr.parameters() + ka)], 0.0);
  // The closed form at t = 2 (ka 0.8, ke 0.3, F 1): Bateman, no dependence on the row's ka.
  const double want = 100.0 * 0.8 / (0.8 - 0.3) * (std::exp(-0.3 * 2) - std::exp(-0.8 * 2)) / 10;
  EXPECT_NEAR(pred[0], want, 1e-12 * want);
}

TEST(PredictorGradient, MatchesFiniteDifferencesWithCloseAndEqualEigenvalues) {
  // ka close to and equal to ke (two_compartment: eigenvalues -ka and -ke), and a linear model
  // with two identical independent compartments (a repeated eigenvalue, V = I); short and long
  // intervals, an infusion running over both.
  const ModelInfo& m = model_info(ModelKind::TwoCompartment);
  const Predictor pr(parse_for(m,
                               "ID,TIME,AMT,RATE,EVID,CMT\n1,0,100,.,1,1\n1,0.001,.,.,0,2\n"
                               "1,0.01,.,.,0,2\n1,1,50,20,1,1\n1,1.3,.,.,0,2\n1,3,.,.,0,2\n"
                               "1,40,.,.,0,2\n"),
                     ModelKind::TwoCompartment);
  int checked = 0;
  for (double ka : {0.3, 0.3 + 1e-9, 0.3 + 1e-5, 0.3 + 1e-3, 0.31, 0.5})
    check_gradients(pr, row_of(m, {{"ka", ka}, {"ke", 0.3}, {"v_central", 5}, {"f_depot", 0.9}}),
                    "ka " + std::to_string(ka), &checked);
  const auto twin = make_linear_model({"a", "b"}, {{"a", "", "k"}, {"b", "", "k"}}, "a");
  const Predictor lin(parse_for(*twin,
                                "ID,TIME,AMT,RATE,EVID,CMT\n1,0,100,.,1,1\n1,0.5,60,30,1,2\n"
                                "1,1,.,.,0,1\n1,1.5,.,.,0,2\n1,4,.,.,0,2\n"),
                      twin);
  check_gradients(lin, row_of(*twin, {{"k", 0.4}, {"v_b", 3}}), "twin", &checked);
  EXPECT_GT(checked, 100);
}

TEST(PredictorGradient, MatchesFiniteDifferencesOnTheFallbackPath) {
  // A cycle depot -> central -> peripheral -> depot has complex eigenvalues: no real
  // eigendecomposition, so K, G and their derivatives come from block exponentials.
  const auto cyc =
      make_linear_model({"depot", "central", "peripheral"}, {{"depot", "central", "k1"},
                                                             {"central", "peripheral", "k2"},
                                                             {"peripheral", "depot", "k3"},
                                                             {"central", "", "ke"}});
  const Predictor pr(parse_for(*cyc,
                               "ID,TIME,AMT,RATE,EVID,CMT,II,SS\n1,0,100,.,1,1,12,1\n"
                               "1,1,.,.,0,2,.,.\n1,2,40,10,1,2,.,.\n1,3.3,.,.,0,2,.,.\n"
                               "1,7.1,.,.,0,3,.,.\n1,12,.,.,0,2,.,.\n"),
                     cyc);
  int checked = 0;
  check_gradients(pr,
                  row_of(*cyc, {{"k1", 1.0},
                                {"k2", 1.0},
                                {"k3", 1.0},
                                {"ke", 0.1},
                                {"v_central", 4},
                                {"f_depot", 0.8},
                                {"lag_depot", 0.2},
                                {"f_central", 0.7},
                                {"lag_central", 0.3}}),
                  "cycle", &checked);
  EXPECT_GT(checked, 50);
}

// ---- Log-likelihood. ----

constexpr double kLog2Pi = 1.8378770664093454836;

// The log-likelihood of subject s computed here from predict() and the dataset's DV.
double direct_log_likelihood(const Predictor& pr, std::int64_t s, const std::vector<double>& row,
                             const ErrorModel& e, const double* sigma) {
  auto ws = pr.make_workspace();
  std::vector<double> pred(static_cast<std::size_t>(pr.observations(s)));
  pr.predict(s, row.data(), pred.data(), *ws);
  double ll = 0.0;
  std::size_t obs = 0;
  for (const DatasetRecord& r : pr.dataset().subjects[static_cast<std::size_t>(s)].records) {
    if (r.evid != 0) continue;
    const double f = pred[obs++];
    if (r.mdv || std::isnan(r.dv)) continue;
    double sd = 0.0;
    double y = r.dv, mu = f, jacobian = 0.0;
    if (e.log_scale) {
      y = std::log(r.dv);
      mu = std::log(f);
      jacobian = -std::log(r.dv);
      sd = sigma[0];
    } else if (e.kind == ErrorModelKind::Additive) {
      sd = sigma[0];
    } else if (e.kind == ErrorModelKind::Proportional) {
      sd = sigma[0] * f;
    } else {
      sd = std::sqrt(sigma[0] * sigma[0] + sigma[1] * sigma[1] * f * f);
    }
    ll += -0.5 * kLog2Pi - std::log(sd) - 0.5 * (y - mu) * (y - mu) / (sd * sd) + jacobian;
  }
  return ll;
}

TEST(PredictorLogLikelihood, MatchesTheDirectComputationAndFiniteDifferences) {
  const ModelInfo& m = model_info(ModelKind::ThreeCompartment);
  const Predictor pr(parse_for(m, rich_csv(3)), ModelKind::ThreeCompartment);
  const std::vector<double> row = typical_row(m, true);
  const int np = pr.parameters();
  struct Err {
    ErrorModel e;
    std::vector<double> sigma;
  };
  const std::vector<Err> errors = {{{ErrorModelKind::Additive, false}, {0.7}},
                                   {{ErrorModelKind::Proportional, false}, {0.2}},
                                   {{ErrorModelKind::Combined, false}, {0.3, 0.15}},
                                   {{ErrorModelKind::Additive, true}, {0.25}}};
  auto ws = pr.make_workspace();
  int checked = 0;
  for (const Err& err : errors) {
    const std::string what = err.e.parameter_names()[0] + (err.e.log_scale ? " log" : "") +
                             " kind " + std::to_string(static_cast<int>(err.e.kind));
    // Subject 2's observation after the reset predicts 0: no DV there, so the log scale works.
    for (std::int64_t s = 0; s < pr.subjects(); ++s) {
      std::vector<double> grad(static_cast<std::size_t>(np)), sgrad(err.sigma.size());
      const double ll =
          pr.log_likelihood(s, row.data(), err.e, err.sigma.data(), grad.data(), sgrad.data(), *ws);
      const double want = direct_log_likelihood(pr, s, row, err.e, err.sigma.data());
      PKSCAN_EXPECT_CLOSE(want, ll, 1e-12, 1e-12, what << " subject " << s + 1);
      // Without gradients: the same value.
      EXPECT_EQ(ll,
                pr.log_likelihood(s, row.data(), err.e, err.sigma.data(), nullptr, nullptr, *ws));
      for (int c = 0; c < np; ++c) {
        const double v = row[static_cast<std::size_t>(c)];
        if (std::isnan(v)) {
          EXPECT_EQ(grad[static_cast<std::size_t>(c)], 0.0);
          continue;
        }
        const double h = 1e-5 * std::max(std::fabs(v), 0.05);
        std::vector<double> r = row;
        r[static_cast<std::size_t>(c)] = v + h;
        const double up = direct_log_likelihood(pr, s, r, err.e, err.sigma.data());
        r[static_cast<std::size_t>(c)] = v - h;
        const double down = direct_log_likelihood(pr, s, r, err.e, err.sigma.data());
        PKSCAN_EXPECT_CLOSE((up - down) / (2 * h), grad[static_cast<std::size_t>(c)], 1e-6,
                            1e-7 * (1.0 + std::fabs(ll)) / std::max(std::fabs(v), 0.05),
                            what << " subject " << s + 1 << " d ll / d "
                                 << m.parameters[static_cast<std::size_t>(c)].name);
        ++checked;
      }
      for (std::size_t j = 0; j < err.sigma.size(); ++j) {
        const double h = 1e-6 * err.sigma[j];
        std::vector<double> sg = err.sigma;
        sg[j] = err.sigma[j] + h;
        const double up = direct_log_likelihood(pr, s, row, err.e, sg.data());
        sg[j] = err.sigma[j] - h;
        const double down = direct_log_likelihood(pr, s, row, err.e, sg.data());
        PKSCAN_EXPECT_CLOSE((up - down) / (2 * h), sgrad[j], 1e-6, 1e-9,
                            what << " subject " << s + 1 << " d ll / d sigma " << j);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 300);
}

}  // namespace
}  // namespace pkscan
