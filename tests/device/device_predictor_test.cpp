// The Predictor on the device (Predictor::set_device(Device::Cuda): the event walk; the Gpu/
// cases, skipped without the device) against the CPU Predictor on random datasets of every
// record kind for models of 1 to 6 compartments, against closed forms of steady states and of a
// lagged bolus's gradient, and what it leaves to the host. The models and the tolerances:
// support/agreement.hpp.
#include "support/agreement.hpp"

namespace pkscan {
namespace {

// ---- The Predictor on the device (Predictor::set_device(Device::Cuda): the event walk). ----

using DevicePredictor = OnDevice<EventModel>;

// The largest finite magnitude of v.
double peak_of(const std::vector<double>& v) {
  double peak = 0.0;
  for (double x : v)
    if (std::isfinite(x)) peak = std::max(peak, std::fabs(x));
  return peak;
}

// The device's sensitivities against the CPU's: relative kDeviceGradient, with a floor of
// kDeviceGradient times the largest magnitude of the row (rows of `width` values), or of
// `scale` (1e-6 of the whole matrix's: a row that is all rounding noise of a derivative that is
// nearly 0). NaN where the CPU has NaN.
constexpr double kDeviceGradient = 1e-9;
void expect_rows_close(const std::vector<double>& cpu, const std::vector<double>& dev,
                       std::size_t width, const std::string& what, double scale) {
  ASSERT_EQ(cpu.size(), dev.size());
  double worst = 0.0;
  for (std::size_t r0 = 0; r0 < cpu.size(); r0 += width) {
    double peak = scale;
    for (std::size_t i = r0; i < r0 + width; ++i)
      if (std::isfinite(cpu[i])) peak = std::max(peak, std::fabs(cpu[i]));
    for (std::size_t i = r0; i < r0 + width; ++i) {
      if (std::isnan(cpu[i])) {
        EXPECT_TRUE(std::isnan(dev[i])) << what << " value " << i;
        continue;
      }
      const double err = std::fabs(dev[i] - cpu[i]);
      const double bound = kDeviceGradient * (std::fabs(cpu[i]) + peak);
      worst = std::max(worst, err / (std::fabs(cpu[i]) + peak + 1e-300));
      EXPECT_LE(err, bound) << what << " value " << i << ": " << cpu[i] << " " << dev[i];
    }
  }
  if (std::getenv("PKSCAN_PRINT_WORST")) std::printf("%s: worst %.3g\n", what.c_str(), worst);
}

// Every observation record of `d` gets a DV (so that it enters the likelihood).
void give_dv(Dataset& d, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0.1, 5.0);
  for (DatasetSubject& sub : d.subjects)
    for (DatasetRecord& r : sub.records)
      if (r.evid == 0) {
        r.dv = u(rng);
        r.mdv = false;
      }
}

// The device Predictor's predict_all and log_likelihood_all (without and with gradients)
// against the CPU Predictor's: the CPU's bits on the host system (the walk is the CPU solver's
// arithmetic, kernels/event_step.hpp and kernels/steady_state.hpp on both sides); on CUDA
// kDeviceEvents relative with a floor of 1e-3 of it times the subject's peak prediction. Returns
// how many subjects the device left to the host (unknown from outside: counted by comparing
// nothing; the caller checks the predictions only).
void expect_device_predictor_like_cpu(const Dataset& d, const std::shared_ptr<const ModelInfo>& m,
                                      const std::vector<double>& params, const std::string& what,
                                      std::int64_t min_gradient_subjects) {
  Predictor cpu(d, m);
  Predictor dev(d, m);
  dev.set_device(Device::Cuda);
  ASSERT_EQ(dev.device(), Device::Cuda);
  const std::size_t obs = static_cast<std::size_t>(cpu.observations());
  std::vector<double> pc(obs), pd(obs, -7.0);
  cpu.predict_all(params.data(), pc.data());
  dev.predict_all(params.data(), pd.data());
  const Predictor::DeviceCall call = dev.last_device_call();
  EXPECT_EQ(call.device_subjects + call.host_subjects, dev.subjects()) << what;
  // Most subjects are walked on the device (rows with close eigenvalues are rare here).
  EXPECT_GE(call.device_subjects, dev.subjects() * 3 / 5) << what;
  if (kDeviceEvents == 0.0) {
    EXPECT_EQ(std::memcmp(pd.data(), pc.data(), obs * sizeof(double)), 0) << what;
  } else {
    for (std::int64_t s = 0; s < cpu.subjects(); ++s) {
      const std::size_t o0 = static_cast<std::size_t>(cpu.observation_offset(s));
      const std::size_t o1 = o0 + static_cast<std::size_t>(cpu.observations(s));
      double peak = 0.0;
      for (std::size_t o = o0; o < o1; ++o) peak = std::max(peak, std::fabs(pc[o]));
      for (std::size_t o = o0; o < o1; ++o)
        PKSCAN_EXPECT_CLOSE(pc[o], pd[o], kDeviceEvents, kDeviceEvents * 1e-3 * peak,
                            what << " prediction " << o);
    }
  }
  const std::size_t n = static_cast<std::size_t>(cpu.subjects());
  const std::size_t np = static_cast<std::size_t>(cpu.parameters());
  for (ErrorModelKind kind : {ErrorModelKind::Additive, ErrorModelKind::Combined}) {
    ErrorModel error;
    error.kind = kind;
    const double sigma[2] = {0.3, 0.2};
    std::vector<double> lc(n), ld(n), sgc(2), sgd(2);
    const double tc =
        cpu.log_likelihood_all(params.data(), error, sigma, lc.data(), nullptr, sgc.data());
    const double td =
        dev.log_likelihood_all(params.data(), error, sigma, ld.data(), nullptr, sgd.data());
    // The observations are in the likelihood.
    EXPECT_GT(std::count_if(lc.begin(), lc.end(), [](double v) { return v < 0.0; }), 0) << what;
    if (kDeviceEvents == 0.0) {
      EXPECT_TRUE(same_bits(td, tc)) << what << ": " << td << " " << tc;
      EXPECT_EQ(std::memcmp(ld.data(), lc.data(), n * sizeof(double)), 0) << what;
      EXPECT_EQ(std::memcmp(sgd.data(), sgc.data(), 2 * sizeof(double)), 0) << what;
    } else if (!std::isnan(tc)) {
      PKSCAN_EXPECT_CLOSE(tc, td, 1e-8, 0.0, what << " log-likelihood");
    }
    // With gradients: the device's sensitivities (the solver's, in plain loops instead of
    // Eigen's products): the log-likelihood's bits (it depends on the predictions only), its
    // gradient within kDeviceGradient of the CPU's, relative to the subject's largest component.
    std::vector<double> gc(n * np), gd(n * np);
    const double tgc =
        cpu.log_likelihood_all(params.data(), error, sigma, nullptr, gc.data(), nullptr);
    const double tgd =
        dev.log_likelihood_all(params.data(), error, sigma, nullptr, gd.data(), nullptr);
    if (kDeviceEvents == 0.0) {
      EXPECT_TRUE(same_bits(tgd, tgc)) << what;
    }
    expect_rows_close(gc, gd, np, what + " log-likelihood gradient", 1e-6 * peak_of(gc));
  }
  // predict_gradient_all: the predictions as predict_all's, the Jacobian close to the CPU's.
  std::vector<double> jc(obs * np), jd(obs * np), qc(obs), qd(obs);
  cpu.predict_gradient_all(params.data(), qc.data(), jc.data());
  dev.predict_gradient_all(params.data(), qd.data(), jd.data());
  const Predictor::DeviceCall gcall = dev.last_device_call();
  if (std::getenv("PKSCAN_PRINT_WORST"))
    std::printf("%s: sensitivities of %lld of %lld subjects on the device\n", what.c_str(),
                static_cast<long long>(gcall.device_subjects),
                static_cast<long long>(dev.subjects()));
  EXPECT_GE(gcall.device_subjects, min_gradient_subjects) << what;
  if (kDeviceEvents == 0.0) {
    EXPECT_EQ(std::memcmp(qd.data(), pc.data(), obs * sizeof(double)), 0) << what;
  }
  for (std::int64_t s = 0; s < cpu.subjects(); ++s) {
    const std::size_t o0 = static_cast<std::size_t>(cpu.observation_offset(s)) * np;
    const std::size_t o1 = o0 + static_cast<std::size_t>(cpu.observations(s)) * np;
    const std::vector<double> c(jc.begin() + static_cast<std::ptrdiff_t>(o0),
                                jc.begin() + static_cast<std::ptrdiff_t>(o1));
    const std::vector<double> d(jd.begin() + static_cast<std::ptrdiff_t>(o0),
                                jd.begin() + static_cast<std::ptrdiff_t>(o1));
    expect_rows_close(c, d, o1 - o0, what + " Jacobian of subject " + std::to_string(s),
                      1e-6 * peak_of(jc));
  }
}

std::vector<double> rows_of(const ParameterBatch& b) {
  std::vector<double> rows;
  for (std::int64_t s = 0; s < b.subjects(); ++s)
    rows.insert(rows.end(), b.row(s), b.row(s) + b.parameters());
  return rows;
}

// Random datasets with every record kind (as GiveTheCpusRowsOnRandomDatasets) and the rich
// dataset, through the Predictor on the device: the CPU Predictor's predictions and
// log-likelihoods, for models of 1 to 6 compartments.
TEST_P(DevicePredictor, GivesTheCpusPredictionsAndLikelihoodsOnRandomDatasets) {
  const EventModel& em = GetParam();
  const int n = static_cast<int>(em.model->compartments.size());
  const bool has_ka = parameter_index(*em.model, "ka") >= 0;
  std::mt19937_64 rng(seed() + 100 + static_cast<std::uint32_t>(n));
  for (int round = 0; round < 2; ++round) {
    Dataset d = parse_for(*em.model, random_csv(rng, n, round == 0 ? 300 : 20, has_ka));
    give_dv(d, rng);
    ParameterBatch b(em.model, static_cast<std::int64_t>(d.subjects.size()));
    for (std::int64_t s = 0; s < b.subjects(); ++s) set_row(b, s, random_event_row(em, rng));
    expect_device_predictor_like_cpu(d, em.model, rows_of(b),
                                     em.name + " random round " + std::to_string(round),
                                     b.subjects() * 9 / 10);
  }
  if (!em.declared) {
    Dataset d = parse_for(*em.model, rich_csv(n));
    give_dv(d, rng);
    ParameterBatch b(em.model, static_cast<std::int64_t>(d.subjects.size()));
    const std::vector<double> row = typical_row(*em.model, em.clearances);
    for (std::int64_t s = 0; s < b.subjects(); ++s) set_row(b, s, row);
    expect_device_predictor_like_cpu(d, em.model, rows_of(b), em.name + " rich dataset",
                                     b.subjects());
  }
}

// One compartment against closed forms (independent of the solver): an IV bolus at steady state
// (SS=1) with ADDL doses, an infusion at steady state with a lag, and a constant infusion at
// steady state (SS=1, II 0: the equilibrium rate / CL).
TEST_P(DevicePredictor, GivesClosedFormsOfOneCompartmentSteadyStates) {
  const EventModel& em = GetParam();
  if (em.name != "linear1") GTEST_SKIP() << "one model is enough";
  const std::shared_ptr<const ModelInfo>& m = em.model;
  const std::string csv =
      "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,DV\n"
      "1,0,100,.,1,1,12,2,1,.\n1,3,.,.,0,1,.,.,.,1\n1,30,.,.,0,1,.,.,.,1\n"
      "2,0,60,20,1,1,24,.,1,.\n2,0.5,.,.,0,1,.,.,.,1\n2,2,.,.,0,1,.,.,.,1\n2,8,.,.,0,1,.,.,.,1\n"
      "3,0,0,5,1,1,0,.,1,.\n3,0,.,.,0,1,.,.,.,1\n3,4,.,.,0,1,.,.,.,1\n";
  const Dataset d = parse_for(*m, csv);
  ParameterBatch b(m, 3);
  const double ke = 0.15, v = 20.0, lag = 1.0;
  b.set_all("ke", ke);
  b.set_all(m->parameters[static_cast<std::size_t>(m->volume_parameter[0])].name, v);
  b.set("lag_central", 1, lag);
  Predictor dev(d, m);
  dev.set_device(Device::Cuda);
  std::vector<double> pred(static_cast<std::size_t>(dev.observations()));
  dev.predict_all(rows_of(b).data(), pred.data());
  auto e = [&](double t) { return std::exp(-ke * t); };
  // Subject 1: steady state of 100 every 12 h, then doses at 12 and 24 (ADDL 2).
  const double acc = 1.0 / (1.0 - e(12.0));
  EXPECT_NEAR(pred[0], 100.0 / v * e(3.0) * acc, 1e-12 * pred[0]);
  EXPECT_NEAR(pred[1], 100.0 / v * e(6.0) * acc, 1e-12 * pred[1]);  // 30 = 24 + 6
  // Its gradient: C = D/V e^(-ke t) / (1 - e^(-ke ii)), dC/dke = -C (t + ii e^(-ke ii) acc),
  // dC/dV = -C / V (the steady state's closed-form derivative on the device).
  const std::size_t np = static_cast<std::size_t>(dev.parameters());
  std::vector<double> pg(pred.size()), jac(pred.size() * np);
  dev.predict_gradient_all(rows_of(b).data(), pg.data(), jac.data());
  const std::size_t c_ke = static_cast<std::size_t>(parameter_index(*m, "ke"));
  const std::size_t c_v = static_cast<std::size_t>(m->volume_parameter[0]);
  for (std::size_t i = 0; i < 2; ++i) {
    const double t = i == 0 ? 3.0 : 6.0;
    EXPECT_NEAR(jac[i * np + c_ke], -pred[i] * (t + 12.0 * e(12.0) * acc), 1e-11 * pred[i] * t);
    EXPECT_NEAR(jac[i * np + c_v], -pred[i] / v, 1e-12 * pred[i] / v);
  }
  // Subject 2: 60 at 20 per h (3 h) every 24 h at steady state, each arriving 1 h late.
  // Within an interval starting at the arrival: rising for 3 h, then decaying.
  const double r = 20.0, dur = 3.0, k = ke;
  const double c_end = r / (k * v) * (1.0 - e(dur)) / (1.0 - e(24.0));  // at the end of one
  auto ss2 = [&](double since_arrival) {
    if (since_arrival < dur)
      return c_end * e(24.0 - dur) * e(since_arrival) + r / (k * v) * (1.0 - e(since_arrival));
    return c_end * e(since_arrival - dur);
  };
  EXPECT_NEAR(pred[2], ss2(24.0 - lag + 0.5), 1e-12 * pred[2]);  // 0.5 h before this arrival
  EXPECT_NEAR(pred[3], ss2(2.0 - lag), 1e-12 * pred[3]);
  EXPECT_NEAR(pred[4], ss2(8.0 - lag), 1e-12 * pred[4]);
  // Subject 3: a constant infusion of 5 per h at equilibrium: 5 / (ke V), then it stops at 0.
  EXPECT_NEAR(pred[5], 5.0 / (ke * v), 1e-12 * pred[5]);
  EXPECT_NEAR(pred[6], 5.0 / (ke * v) * e(4.0), 1e-12 * pred[6]);
}

// The device's sensitivities against the closed form of a lagged IV bolus (one compartment):
// C = F D / V exp(-ke (t - lag)), dC/dke = -(t - lag) C, dC/dV = -C / V, dC/dlag = ke C,
// dC/dF = C / F; and a log-likelihood gradient that follows from it.
TEST_P(DevicePredictor, GivesTheClosedFormGradientOfALaggedBolus) {
  const EventModel& em = GetParam();
  if (em.name != "linear1") GTEST_SKIP() << "one model is enough";
  const std::shared_ptr<const ModelInfo>& m = em.model;
  const Dataset d = parse_for(*m,
                              "ID,TIME,AMT,EVID,CMT,DV\n1,0,100,1,1,.\n1,5,.,0,1,2\n"
                              "1,10,.,0,1,1\n");
  const int c_ke = parameter_index(*m, "ke"), c_v = m->volume_parameter[0];
  const int c_f = m->f_parameter[0], c_lag = m->lag_parameter[0];
  ParameterBatch b(m, 1);
  const double ke = 0.2, v = 12.0, f = 0.8, lag = 1.5;
  b.set("ke", 0, ke);
  b.set(m->parameters[static_cast<std::size_t>(c_v)].name, 0, v);
  b.set(m->parameters[static_cast<std::size_t>(c_f)].name, 0, f);
  b.set(m->parameters[static_cast<std::size_t>(c_lag)].name, 0, lag);
  Predictor dev(d, m);
  dev.set_device(Device::Cuda);
  const std::size_t np = static_cast<std::size_t>(dev.parameters());
  std::vector<double> pred(2), jac(2 * np);
  dev.predict_gradient_all(rows_of(b).data(), pred.data(), jac.data());
  EXPECT_EQ(dev.last_device_call().device_subjects, 1);
  const double t[2] = {5.0, 10.0};
  for (std::size_t i = 0; i < 2; ++i) {
    const double c = f * 100.0 / v * std::exp(-ke * (t[i] - lag));
    const double* jr = jac.data() + i * np;
    EXPECT_NEAR(pred[i], c, 1e-13 * c);
    EXPECT_NEAR(jr[c_ke], -(t[i] - lag) * c, 1e-12 * c * t[i]) << i;
    EXPECT_NEAR(jr[c_v], -c / v, 1e-12 * c / v) << i;
    EXPECT_NEAR(jr[c_lag], ke * c, 1e-12 * c) << i;
    EXPECT_NEAR(jr[c_f], c / f, 1e-12 * c / f) << i;
  }
  // Additive error (sigma 0.5): d ll / d p = sum (DV - C) / sigma^2 dC/dp.
  const ErrorModel error{ErrorModelKind::Additive};
  const double sigma = 0.5, dv[2] = {2.0, 1.0};
  std::vector<double> g(np);
  dev.log_likelihood_all(rows_of(b).data(), error, &sigma, nullptr, g.data(), nullptr);
  for (int col : {c_ke, c_v, c_lag, c_f}) {
    double want = 0.0;
    for (std::size_t i = 0; i < 2; ++i)
      want += (dv[i] - pred[i]) / (sigma * sigma) * jac[i * np + static_cast<std::size_t>(col)];
    EXPECT_NEAR(g[static_cast<std::size_t>(col)], want, 1e-12 * std::fabs(want) + 1e-15) << col;
  }
}

// What the walk leaves to the host's solver (equal eigenvalues: no fast eigendecomposition; more
// infusions running at once than its lists hold), a steady state that does not exist (NaN),
// subjects without observations, the CPU's message for an invalid value, and switching back to
// the CPU.
TEST_P(DevicePredictor, LeavesWhatItCannotWalkToTheHostAndReportsTheCpusErrors) {
  const EventModel& em = GetParam();
  if (em.name != "two_compartment_micro") GTEST_SKIP() << "one model is enough";
  const std::shared_ptr<const ModelInfo>& m = em.model;
  std::string csv =
      "ID,TIME,AMT,RATE,EVID,CMT,II,ADDL,SS,DV\n"
      "1,0,100,.,1,1,.,.,.,.\n1,1,.,.,0,2,.,.,.,1\n1,9,.,.,0,2,.,.,.,2\n"
      "2,0,100,.,1,1,12,.,1,.\n2,1,.,.,0,2,.,.,.,1\n"
      "3,0,70,.,1,1,.,.,.,.\n"
      "4,0,10,0.1,1,2,1,60,.,.\n4,50,.,.,0,2,.,.,.,1\n4,61,.,.,0,2,.,.,.,1\n"
      "5,0,80,.,1,2,.,.,.,.\n5,3,.,.,0,2,.,.,.,1\n";
  const Dataset d = parse_for(*m, csv);
  ParameterBatch b(m, 5);
  b.set_all("ka", 1.1);
  b.set_all("ke", 0.2);
  b.set_all("v_central", 10.0);
  b.set("ka", 0, 0.2);  // = ke: equal eigenvalues
  b.set("ke", 1, 0.0);  // no elimination: the SS=1 steady state does not exist
  std::vector<double> rows = rows_of(b);
  expect_device_predictor_like_cpu(d, m, rows, "fallbacks", 3);
  Predictor dev(d, m);
  dev.set_device(Device::Cuda);
  std::vector<double> pred(static_cast<std::size_t>(dev.observations()));
  dev.predict_all(rows.data(), pred.data());
  EXPECT_EQ(dev.last_device_call().host_subjects, 2);  // subjects 1 and 4
  EXPECT_EQ(dev.last_device_call().device_subjects, 3);
  EXPECT_TRUE(std::isnan(pred[2]));  // subject 2
  EXPECT_GT(pred[4], 0.0);           // subject 4 at 61 h: 50 infusions of 100 h running
  // An invalid value: the CPU's DomainError.
  rows[2 * rows.size() / 5 + static_cast<std::size_t>(parameter_index(*m, "ke"))] = -1.0;
  std::string cpu_message, device_message;
  try {
    Predictor(d, m).predict_all(rows.data(), pred.data());
  } catch (const DomainError& e) {
    cpu_message = e.what();
  }
  try {
    dev.predict_all(rows.data(), pred.data());
  } catch (const DomainError& e) {
    device_message = e.what();
  }
  EXPECT_NE(cpu_message.find("ke"), std::string::npos) << cpu_message;
  EXPECT_EQ(device_message, cpu_message);
  dev.set_device(Device::Auto);
  EXPECT_EQ(dev.device(), Device::Cpu);
  dev.set_device(Device::Cuda);
  EXPECT_EQ(dev.device(), Device::Cuda);
  dev.set_device(Device::Cpu);
  EXPECT_EQ(dev.device(), Device::Cpu);
}

INSTANTIATE_TEST_SUITE_P(Gpu, DevicePredictor, ::testing::ValuesIn(event_models()), ParamName());

}  // namespace
}  // namespace pkscan
