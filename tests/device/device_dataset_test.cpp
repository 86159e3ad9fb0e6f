// simulate_dataset with device 'cuda' (the event walk; the Gpu/ cases, skipped without the
// device): the agreement scenarios as datasets against the exact grid and the CPU, and random
// datasets of every record kind on models of 1 to 6 compartments against the CPU's rows, its
// fallbacks, statuses and errors. The scenarios, the models and the tolerances:
// support/agreement.hpp.
#include "support/agreement.hpp"

namespace pkscan {
namespace {

// ---- Datasets on the device (simulate_dataset with device 'cuda') --------------------------

// simulate_dataset on device 'cuda' against device 'cpu': the same index columns and statuses;
// amounts, concentrations and predictions within kDeviceEvents (the same bits when it is 0).
void expect_device_rows_like_cpu(const Dataset& d, const ParameterBatch& b,
                                 const std::string& what) {
  SimulateOptions o;
  o.method = Method::Batched;
  const DatasetResult cpu = simulate_dataset(d, b, o);
  o.device = Device::Cuda;
  const DatasetResult dev = simulate_dataset(d, b, o);
  EXPECT_EQ(dev.summary.device, Device::Cuda) << what;
  ASSERT_EQ(dev.rows(), cpu.rows()) << what;
  EXPECT_EQ(dev.subject, cpu.subject) << what;
  EXPECT_EQ(dev.record, cpu.record) << what;
  EXPECT_EQ(dev.compartment, cpu.compartment) << what;
  EXPECT_EQ(std::memcmp(dev.time.data(), cpu.time.data(), cpu.time.size() * sizeof(double)), 0)
      << what;
  EXPECT_EQ(dev.status, cpu.status) << what;
  EXPECT_EQ(dev.summary.non_finite_subjects, cpu.summary.non_finite_subjects) << what;
  const int n = cpu.compartments;
  if (kDeviceEvents == 0.0) {
    for (std::vector<double> DatasetResult::*v :
         {&DatasetResult::amounts, &DatasetResult::concentrations, &DatasetResult::prediction})
      EXPECT_EQ(std::memcmp((dev.*v).data(), (cpu.*v).data(), (cpu.*v).size() * sizeof(double)), 0)
          << what;
    return;
  }
  // Floors relative to the subject's peak amount, concentration and prediction.
  std::vector<double> peak(3 * d.subjects.size(), 0.0);
  const auto at = [&](std::int64_t r, int what_peak) -> double& {
    return peak[3 * static_cast<std::size_t>(cpu.subject[static_cast<std::size_t>(r)]) +
                static_cast<std::size_t>(what_peak)];
  };
  for (std::int64_t r = 0; r < cpu.rows(); ++r) {
    for (int c = 0; c < n; ++c) {
      const std::size_t i = static_cast<std::size_t>(r * n + c);
      at(r, 0) = std::max(at(r, 0), std::fabs(cpu.amounts[i]));
      at(r, 1) = std::max(at(r, 1), std::fabs(cpu.concentrations[i]));
    }
    at(r, 2) = std::max(at(r, 2), std::fabs(cpu.prediction[static_cast<std::size_t>(r)]));
  }
  for (std::int64_t r = 0; r < cpu.rows(); ++r) {
    for (int c = 0; c < n; ++c) {
      const std::size_t i = static_cast<std::size_t>(r * n + c);
      PKSCAN_EXPECT_CLOSE(cpu.amounts[i], dev.amounts[i], kDeviceEvents,
                          kDeviceEvents * 1e-3 * at(r, 0),
                          what << " amount, row " << r << " compartment " << c);
      PKSCAN_EXPECT_CLOSE(cpu.concentrations[i], dev.concentrations[i], kDeviceEvents,
                          kDeviceEvents * 1e-3 * at(r, 1),
                          what << " concentration, row " << r << " compartment " << c);
    }
    const std::size_t ur = static_cast<std::size_t>(r);
    PKSCAN_EXPECT_CLOSE(cpu.prediction[ur], dev.prediction[ur], kDeviceEvents,
                        kDeviceEvents * 1e-3 * at(r, 2), what << " prediction, row " << r);
  }
}

using DeviceDatasets = OnDevice<Scenario>;

// The agreement scenarios as datasets: the device's rows against the exact grid reference (an
// independent solution: the grid's matrix exponential) and against the CPU's rows.
TEST_P(DeviceDatasets, MatchTheExactGridAndTheCpu) {
  const Scenario& sc = GetParam();
  if (sc.disc != Discretization::Exact) GTEST_SKIP() << "the event engine is exact";
  const ScenarioDataset sd = scenario_dataset(sc);
  SimulateOptions o;
  o.device = Device::Cuda;
  const DatasetResult dev = simulate_dataset(sd.data, sd.p.parameters, o);
  ASSERT_EQ(dev.rows(), sd.ref.subjects() * sd.ref.times());
  expect_events_match_grid(sd.ref, dev);
  expect_device_rows_like_cpu(sd.data, sd.p.parameters, sc.name);
}

using DeviceEventModels = OnDevice<EventModel>;

// Random datasets with every record kind (boluses, infusions, ADDL, SS=1 and 2, EVID 2, 3 and
// 4, per-record KA), 300 subjects in several chunks, and the rich dataset (lags, F, steady-state
// infusions longer than II, constant infusions): the CPU's rows.
TEST_P(DeviceEventModels, GiveTheCpusRowsOnRandomDatasets) {
  const EventModel& em = GetParam();
  const int n = static_cast<int>(em.model->compartments.size());
  const bool has_ka = parameter_index(*em.model, "ka") >= 0;
  std::mt19937_64 rng(seed() + static_cast<std::uint32_t>(n));
  for (int round = 0; round < 2; ++round) {
    const Dataset d = parse_for(*em.model, random_csv(rng, n, round == 0 ? 300 : 20, has_ka));
    ParameterBatch b(em.model, static_cast<std::int64_t>(d.subjects.size()));
    for (std::int64_t s = 0; s < b.subjects(); ++s) set_row(b, s, random_event_row(em, rng));
    expect_device_rows_like_cpu(d, b, em.name + " random round " + std::to_string(round));
    SimulateOptions o;
    o.device = Device::Cuda;
    EXPECT_LE(simulate_dataset(d, b, o).summary.device_host_subjects, b.subjects() / 10)
        << "most subjects on the device";
  }
  if (!em.declared) {
    const Dataset d = parse_for(*em.model, rich_csv(n));
    ParameterBatch b(em.model, static_cast<std::int64_t>(d.subjects.size()));
    const std::vector<double> row = typical_row(*em.model, em.clearances);
    for (std::int64_t s = 0; s < b.subjects(); ++s) set_row(b, s, row);
    expect_device_rows_like_cpu(d, b, em.name + " rich dataset");
  }
}

// Records of subject `id` whose events are far from the order the records make them in: a bolus
// with 200 additional doses every hour, then 100 observations (each placed before most of the
// doses: about 15,000 moves of the insertion sort for 301 events).
std::string long_addl_csv(int id) {
  std::string csv = std::to_string(id) + ",0,10,.,1,2,1,.,.,.,200\n";
  for (int k = 0; k < 100; ++k)
    csv += std::to_string(id) + "," + std::to_string(k) + ".5,.,.,0,2,.,.,.,.,.\n";
  return csv;
}

// Close and equal eigenvalues (rows without a fast eigendecomposition) and more infusions at
// once than the walk holds (both left to the host's solver, counted), events far from their
// records' order (sorted on the device), volumes from the dataset
// that change between a subject's records, a subject without observations, a steady state that
// does not exist (NonFinite), methods power and auto (the same kernel), an invalid dataset cell
// (the CPU's message) and method scan (CPU only).
TEST_P(DeviceEventModels, GiveTheCpusFallbacksVolumesStatusesAndErrors) {
  const EventModel& em = GetParam();
  if (em.name != "two_compartment_micro") GTEST_SKIP() << "one model is enough";
  const ModelInfo& m = *em.model;
  const std::string csv =
      "ID,TIME,AMT,RATE,EVID,CMT,II,SS,KA,v_central,ADDL\n"
      "1,0,100,.,1,1,.,.,.,.,.\n1,1,.,.,0,2,.,.,.,.,.\n1,5,.,.,0,2,.,.,.,5,.\n"
      "1,9,.,.,0,2,.,.,0.2,30,.\n1,12,.,.,0,2,.,.,.,.,.\n"
      "2,0,100,.,1,1,12,1,.,.,.\n2,1,.,.,0,2,.,.,.,.,.\n"
      "3,0,50,10,1,2,.,.,.,.,.\n3,2,.,.,0,2,.,.,0.2000001,.,.\n3,7,.,.,0,2,.,.,.,12,.\n"
      "4,0,70,.,1,1,.,.,.,.,.\n"
      "5,0,80,.,1,2,.,.,.,.,.\n5,3,.,.,0,2,.,.,.,40,.\n5,6,.,.,0,2,.,.,.,8,.\n"
      "5,7,.,.,0,1,.,.,.,.,.\n"
      "6,0,10,0.1,1,2,1,.,.,.,60\n6,50,.,.,0,2,.,.,.,.,.\n6,61,.,.,0,2,.,.,.,.,.\n" +
      long_addl_csv(7);
  const Dataset d = parse_for(m, csv);
  ParameterBatch b(em.model, 7);
  b.set_all("ka", 0.2);  // = ke: equal eigenvalues
  b.set_all("ke", 0.2);
  b.set_all("v_central", 10.0);
  b.set("ke", 1, 0.0);  // no elimination: the SS=1 steady state does not exist
  b.set("ka", 4, 0.7);
  b.set("ka", 5, 0.7);
  b.set("ka", 6, 0.7);
  expect_device_rows_like_cpu(d, b, "fallbacks and volumes");
  SimulateOptions o;
  o.device = Device::Cuda;
  const DatasetResult batched = simulate_dataset(d, b, o);
  // On the host's solver: IDs 1, 3 and 4 (equal eigenvalues) and 6 (at 61 h, 61 infusions of
  // 100 h running: more than the walk's lists hold). ID 7's events, far from the order its
  // records make them in, are sorted on the device (the walk's heapsort).
  EXPECT_EQ(batched.summary.device_host_subjects, 4);
  EXPECT_EQ(batched.status[1], SubjectStatus::NonFinite);  // on the device
  EXPECT_EQ(batched.status[3], SubjectStatus::Ok);
  EXPECT_GT(batched.prediction.back(), 0.0);
  // Subject 5's central concentrations use the volume of each record: 40, then 8.
  EXPECT_EQ(batched.concentrations[2 * 7 + 1], batched.amounts[2 * 7 + 1] / 40.0);
  EXPECT_EQ(batched.concentrations[2 * 8 + 1], batched.amounts[2 * 8 + 1] / 8.0);
  EXPECT_GT(batched.amounts[2 * 8 + 1], 0.0);
  for (Method method : {Method::Power, Method::Auto}) {
    o.method = method;
    const DatasetResult other = simulate_dataset(d, b, o);
    EXPECT_EQ(std::memcmp(other.amounts.data(), batched.amounts.data(),
                          batched.amounts.size() * sizeof(double)),
              0)
        << to_string(method);
  }
  o.method = Method::Batched;
  b.set("ke", 2, -1.0);
  std::string cpu_message, device_message;
  try {
    simulate_dataset(d, b);
  } catch (const DomainError& e) {
    cpu_message = e.what();
  }
  try {
    simulate_dataset(d, b, o);
  } catch (const DomainError& e) {
    device_message = e.what();
  }
  EXPECT_FALSE(cpu_message.empty());
  EXPECT_EQ(device_message, cpu_message);
  o.method = Method::Scan;
  EXPECT_THROW(simulate_dataset(d, b, o), BackendUnavailable);
}

INSTANTIATE_TEST_SUITE_P(Gpu, DeviceDatasets, ::testing::ValuesIn(scenarios()), ParamName());
INSTANTIATE_TEST_SUITE_P(Gpu, DeviceEventModels, ::testing::ValuesIn(event_models()), ParamName());

}  // namespace
}  // namespace pkscan
