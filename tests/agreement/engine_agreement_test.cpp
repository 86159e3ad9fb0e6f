// The paths that are not grid backends on the agreement scenarios (support/agreement.hpp): the
// event engine (each scenario as a NONMEM dataset: simulate_dataset with every CPU method) and
// the Predictor against the exact grid, and the fused summary against summarising the
// reference.
#include "support/agreement.hpp"

namespace pkscan {
namespace {

// The paths that are not grid backends, once per scenario.
class EngineAgreement : public ::testing::TestWithParam<Scenario> {};

TEST_P(EngineAgreement, DatasetsAndThePredictorMatchTheExactGrid) {
  const Scenario& sc = GetParam();
  if (sc.disc != Discretization::Exact) GTEST_SKIP() << "the event engine is exact";
  const ScenarioDataset sd = scenario_dataset(sc);
  const Problem& p = sd.p;
  const SimulationResult& ref = sd.ref;
  const Dataset& data = sd.data;
  SimulateOptions o;
  o.method = Method::Scan;
  const DatasetResult events = simulate_dataset(data, p.parameters, o);
  ASSERT_EQ(events.rows(), ref.subjects() * ref.times());
  const double worst = expect_events_match_grid(ref, events);
  std::ostringstream w;
  w << std::scientific << worst;
  RecordProperty("worst_relative_difference", w.str());
  // Every CPU method of the event engine gives the same bits.
  for (Method m : {Method::Batched, Method::Power}) {
    o.method = m;
    const DatasetResult other = simulate_dataset(data, p.parameters, o);
    EXPECT_EQ(std::memcmp(other.amounts.data(), events.amounts.data(),
                          events.amounts.size() * sizeof(double)),
              0)
        << to_string(m);
  }
  // The Predictor: simulate_dataset's predictions, bit for bit.
  const Predictor predictor(data, p.parameters.info_ptr());
  const std::unique_ptr<Predictor::Workspace> ws = predictor.make_workspace();
  for (std::int64_t s = 0; s < ref.subjects(); ++s) {
    std::vector<double> pred(static_cast<std::size_t>(predictor.observations(s)));
    predictor.predict(s, p.parameters.row(s), pred.data(), *ws);
    EXPECT_EQ(std::memcmp(pred.data(), events.prediction.data() + predictor.observation_offset(s),
                          pred.size() * sizeof(double)),
              0)
        << "subject " << s;
  }
}

// ---- The fused summary on the same scenarios ----------------------------------------------

TEST_P(EngineAgreement, FusedSummaryEqualsSummarisingTheReference) {
  const Scenario& sc = GetParam();
  const Problem p = build(sc);
  SimulateOptions o = opts(Method::Scan, Device::Cpu, Precision::Float64);
  Engine engine;
  const SimulationResult shape = engine.simulate(p, o);
  TimeSummaryOptions to;
  to.exact_values = 0;  // the sketch from the start, as the fused path needs
  to.percentiles = {0, 5, 50, 95, 100};
  const int mc = std::min(1, shape.compartments() - 1);
  const double last = last_dose_time(p.doses);
  const std::size_t nm = static_cast<std::size_t>(shape.subjects() * kMetricCount);
  const Summarised want = summarise(shape, to, mc, last);

  o.method = Method::Batched;
  TimeSummary got_sum(shape.output_times(), shape.compartments(), to);
  std::vector<double> got_metrics(nm);
  SimulationResult r;
  ASSERT_TRUE(engine.summarize_into(p, o, got_sum, mc, last, got_metrics.data(), r))
      << "the fused path ran";
  expect_same_summary(got_sum.finish(), got_metrics, want);
  EXPECT_EQ(r.status(), shape.status());
  // The parts' times (RunSummary::fused_*): each measured, together within the call's threads'
  // time; a later plain simulation clears them.
  const RunSummary& rs = r.summary();
  EXPECT_GT(rs.fused_recurrence_seconds, 0.0);
  EXPECT_GT(rs.fused_sums_seconds, 0.0);
  EXPECT_GT(rs.fused_metrics_seconds, 0.0);
  EXPECT_LE(rs.fused_recurrence_seconds + rs.fused_sums_seconds + rs.fused_metrics_seconds,
            rs.threads * rs.scan_seconds * 1.02 + 1e-6);
  engine.simulate_into(p, o, r);
  EXPECT_EQ(r.summary().fused_recurrence_seconds, 0.0);
  EXPECT_EQ(r.summary().fused_sums_seconds + r.summary().fused_metrics_seconds, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Cpu, EngineAgreement, ::testing::ValuesIn(scenarios()), ParamName());

}  // namespace
}  // namespace pkscan
