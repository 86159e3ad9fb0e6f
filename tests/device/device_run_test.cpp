// Device runs on a time grid (the Gpu/ cases: device 'cuda', skipped without one; on Thrust's
// OpenMP host system in pkscan_device_host_tests): what a run reports about its time, the
// schedule and buffers it keeps between calls, what auto chooses, and the device summary against
// summarising the CPU path, in chunks, in population runs and with little device memory. The
// scenarios and the tolerances: support/agreement.hpp.
#include <pkscan/population_run.hpp>

#include "api/plan.hpp"
#include "device/copy_timing.hpp"
#include "support/agreement.hpp"

namespace pkscan {
namespace {

// ---- What a device run reports about its time -----------------------------------------------

using DeviceTiming = OnPath;  // skipped when the path is not available

// A device run's summary splits its time into kernels and transfers, timed by the device; a CPU
// run's has none. The copy ceilings of `pkscan-bench --device cuda` are measured on the same
// device.
TEST_P(DeviceTiming, SplitsKernelAndTransferSeconds) {
  const Path& path = GetParam();
  const auto& all = scenarios();
  const auto sc = std::find_if(all.begin(), all.end(), [](const Scenario& s) {
    return s.name == "ManySubjects_Short_Mixed_Exact_Dense";
  });
  ASSERT_NE(sc, all.end());
  const Problem p = build(*sc);
  const SimulationResult dev = simulate(p, opts(path.method, path.device, Precision::Float64));
  const RunSummary& rs = dev.summary();
  EXPECT_EQ(rs.device, Device::Cuda);
  EXPECT_GT(rs.device_kernel_seconds, 0.0);
  EXPECT_GT(rs.device_transfer_seconds, 0.0);
  // Both are parts of the call: here one chunk on CUDA, and on the host system (small chunks)
  // nothing overlaps. (In general one chunk's kernel overlaps another's copies.)
  EXPECT_LE(rs.device_kernel_seconds, rs.scan_seconds);
  EXPECT_LE(rs.device_transfer_seconds, rs.scan_seconds);
  const SimulationResult cpu = simulate(p, opts(path.method, Device::Cpu, Precision::Float64));
  EXPECT_EQ(cpu.summary().device_kernel_seconds, 0.0);
  EXPECT_EQ(cpu.summary().device_transfer_seconds, 0.0);

  const detail::DeviceCopySeconds c = detail::measure_device_copies(std::size_t{1} << 20, 3);
  EXPECT_GT(c.device_to_device, 0.0);
  EXPECT_GT(c.device_to_host, 0.0);
  EXPECT_LT(c.device_to_device, 1.0);  // 1 MiB
  EXPECT_LT(c.device_to_host, 1.0);
}

// One Engine called again and again, as fitting code calls it: the device keeps the schedule it
// was given last and the buffers of the largest call, and reuses them only when they still
// fit. Regimens of the same shape (the same packed size) but other doses, then more subjects,
// then fewer: every call gives the CPU path's bits.
TEST_P(DeviceTiming, ReusesItsScheduleAndBuffersOnlyWhileTheyFit) {
  const Path& path = GetParam();
  const auto& all = scenarios();
  auto named = [&](const char* name) {
    const auto sc =
        std::find_if(all.begin(), all.end(), [&](const Scenario& s) { return s.name == name; });
    return sc == all.end() ? Problem{} : build(*sc);
  };
  const Problem a = named("ManySubjects_Short_Mixed_Exact_Sparse");
  const Problem b = [&] {  // the same shape, other amounts
    Problem q = a;
    for (DoseEvent& d : q.doses)
      if (d.rate == 0.0) d.amount *= 1.5;  // boluses only: infusions keep their durations
    return q;
  }();
  const Problem few = named("FewSubjects_Short_Mixed_Exact_Sparse");
  ASSERT_GT(a.parameters.subjects(), few.parameters.subjects());
  Engine dev;
  SimulationResult r;
  for (const Problem* p : {&a, &b, &a, &few, &a, &few}) {
    dev.simulate_into(*p, opts(path.method, path.device, Precision::Float64), r);
    const SimulationResult cpu = simulate(*p, opts(path.method, Device::Cpu, Precision::Float64));
    ASSERT_EQ(r.amounts_f64().size(), cpu.amounts_f64().size());
    EXPECT_EQ(std::memcmp(r.amounts_f64().data(), cpu.amounts_f64().data(),
                          cpu.amounts_f64().size() * sizeof(double)),
              0)
        << "call with " << p->parameters.subjects() << " subjects";
  }
}

// Device auto takes the GPU (here: whatever system device 'cuda' runs on) for much work whose
// output stays small, and the CPU for trajectories that would cross the bus, and for little work
// (docs/performance.md, "How auto chooses").
TEST_P(DeviceTiming, AutoTakesTheDeviceForMuchWorkWithSmallOutput) {
  const Path& path = GetParam();
  auto device_for = [&](std::int64_t subjects, std::int64_t steps, std::int64_t outputs) {
    Problem p;
    p.grid = {0.5, steps};
    p.parameters = ParameterBatch(ModelKind::ThreeCompartment, subjects);
    std::vector<std::int64_t> at;
    for (std::int64_t i = 1; i <= outputs; ++i) at.push_back(i * steps / outputs);
    if (outputs > 0) p.output = OutputTimes::at_steps(at);  // otherwise every step (dense)
    SimulateOptions o;
    o.method = path.method;
    o.device = Device::Auto;
    return resolve_path(p, o).device;
  };
  EXPECT_EQ(device_for(1'000'000, 1000, 1), Device::Cuda);   // final state
  EXPECT_EQ(device_for(1'000'000, 1000, 50), Device::Cuda);  // 50 times of 1000 steps
  EXPECT_EQ(device_for(1'000'000, 1000, 0), Device::Cpu);    // dense
  EXPECT_EQ(device_for(1'000'000, 1000, 100), Device::Cpu);  // 1 step in 10 reported
  EXPECT_EQ(device_for(100'000, 100, 1), Device::Cuda);      // 1e7 subject-steps
  EXPECT_EQ(device_for(100'000, 99, 1), Device::Cpu);        // less work
  EXPECT_EQ(device_for(50'000, 1000, 1), Device::Cpu);       // too few subjects to fill it
  EXPECT_EQ(device_for(1, 10'000'000, 1000), Device::Cpu);   // one subject: one device thread
  // A summaries-only call (Engine::summarize_into): only the summary crosses the bus, so the
  // device takes a call that fills it with 1e9 subject-steps whatever the output times.
  auto summary_device_for = [&](std::int64_t subjects, std::int64_t steps, Device device) {
    Problem p;
    p.grid = {0.5, steps};
    p.parameters = ParameterBatch(ModelKind::ThreeCompartment, 1);  // rows not read
    SimulateOptions o;
    o.method = path.method;
    o.device = device;
    return detail::summary_path(p, o, subjects).device;
  };
  EXPECT_EQ(summary_device_for(1'000'000, 1000, Device::Auto), Device::Cuda);  // dense
  EXPECT_EQ(summary_device_for(100'000, 10'000, Device::Auto), Device::Cuda);
  EXPECT_EQ(summary_device_for(1'000'000, 999, Device::Auto), Device::Cpu);   // less work
  EXPECT_EQ(summary_device_for(50'000, 100'000, Device::Auto), Device::Cpu);  // few subjects
  EXPECT_EQ(summary_device_for(1'000'000, 1000, Device::Cpu), Device::Cpu);   // as asked
}

// ---- The device summary -----------------------------------------------------------------------

// Engine::summarize_into on the device summarises the trajectories where they are (device
// memory) and gives the bits of the same trajectories simulated on the CPU and summarised by
// TimeSummary::add: means, percentiles, metrics, statuses, counts, in both precisions. (Dense
// power runs the batched kernel on the device, whose bits are the scan's.)
using DeviceSummary = OnPathAndScenario;

TEST_P(DeviceSummary, GivesTheBitsOfSummarisingTheCpuPath) {
  const Path& path = std::get<0>(GetParam());
  const Scenario& sc = std::get<1>(GetParam());
  const Problem p = build(sc);
  Engine engine;
  const Method cpu_method = path.method == Method::Power && !sc.sparse ? Method::Scan : path.method;
  for (Precision precision : {Precision::Float64, Precision::Float32}) {
    SCOPED_TRACE(precision == Precision::Float64 ? "float64" : "float32");
    const SimulationResult ref = engine.simulate(p, opts(cpu_method, Device::Cpu, precision));
    if (ref.times() * ref.compartments() > 2000)
      GTEST_SKIP() << "the device sketch of " << ref.times() * ref.compartments()
                   << " rows (16 KiB each) does not fit the test vehicle's 64 MiB";
    TimeSummaryOptions to;
    to.exact_values = 0;  // the sketch from the start, as the summarising paths need
    to.percentiles = {0, 5, 50, 95, 100};
    const int mc = std::min(1, ref.compartments() - 1);
    const double last = last_dose_time(p.doses);
    const std::size_t nm = static_cast<std::size_t>(ref.subjects() * kMetricCount);
    const Summarised want = summarise(ref, to, mc, last);

    TimeSummary got_sum(ref.output_times(), ref.compartments(), to);
    std::vector<double> got_metrics(nm);
    SimulationResult r;
    ASSERT_TRUE(engine.summarize_into(p, opts(path.method, path.device, precision), got_sum, mc,
                                      last, got_metrics.data(), r))
        << "the device summarised";
    EXPECT_EQ(r.summary().device, Device::Cuda);
    EXPECT_GT(r.summary().device_kernel_seconds, 0.0);
    expect_same_summary(got_sum.finish(), got_metrics, want);
    EXPECT_EQ(r.status(), ref.status());
  }
}

// Many subjects in several calls on one summary, each call in several chunks of whole blocks of
// 1024 subjects (the test vehicle's small chunks), with a call of the CPU's fused path between
// them (its sketches and the device's are merged by finish()); values that span more than the
// sketch's 2-binade window, so the window moves up between and within chunks; subjects left out
// (a volume of 1e-320 makes every concentration infinite, or 0 * inf NaN) in some blocks. The
// result is the bits of one TimeSummary::add of the CPU's trajectories.
TEST_P(DeviceTiming, SummarisesManyBlocksInChunksAndCallsLikeTheCpu) {
  const Path& path = GetParam();
  const std::int64_t calls[] = {2048 + 1024, 1024, 2500};  // device, CPU fused, device
  std::int64_t n = 0;
  for (std::int64_t c : calls) n += c;
  Problem all;
  all.grid = {0.5, 40};
  all.parameters = ParameterBatch(ModelKind::ThreeCompartment, n);
  std::mt19937 rng(seed());
  std::lognormal_distribution<double> bsv(0.0, 1.0);
  for (std::int64_t s = 0; s < n; ++s) {
    const double f = bsv(rng);
    all.parameters.set("ka", s, 0.8 * f);
    all.parameters.set("ke", s, 0.15 * f);
    all.parameters.set("k12", s, 0.3);
    all.parameters.set("k21", s, 0.1);
    all.parameters.set("v_central", s, s % 997 == 3 ? 1e-320 : 20.0 * f);
    all.parameters.set("v_peripheral", s, 60.0 * f);
  }
  DoseEvent oral;
  oral.amount = 100.0;
  oral.every = 6.0;
  oral.repeat = 2;
  all.doses = {oral};
  auto part = [&](std::int64_t first, std::int64_t count) {
    Problem q = all;
    q.parameters = ParameterBatch(ModelKind::ThreeCompartment, count);
    const std::int64_t cols = all.parameters.parameters();
    std::copy(all.parameters.row(first), all.parameters.row(first) + count * cols,
              q.parameters.mutable_values());
    return q;
  };
  for (Precision precision : {Precision::Float64, Precision::Float32}) {
    SCOPED_TRACE(precision == Precision::Float64 ? "float64" : "float32");
    Engine engine;
    const SimulationResult ref = engine.simulate(all, opts(Method::Scan, Device::Cpu, precision));
    TimeSummaryOptions to;
    to.exact_values = 0;
    to.window_binades = 2;
    const double last = last_dose_time(all.doses);
    const std::size_t nm = static_cast<std::size_t>(n * kMetricCount);
    const Summarised want = summarise(ref, to, 1, last);
    ASSERT_GT(want.table.excluded, 0);

    TimeSummary got_sum(ref.output_times(), ref.compartments(), to);
    std::vector<double> got_metrics(nm);
    std::int64_t first = 0;
    for (int k = 0; k < 3; ++k) {
      SimulationResult r;
      const SimulateOptions o =
          opts(Method::Batched, k == 1 ? Device::Cpu : path.device, precision);
      ASSERT_TRUE(engine.summarize_into(part(first, calls[k]), o, got_sum, 1, last,
                                        got_metrics.data() + first * kMetricCount, r))
          << "call " << k;
      EXPECT_EQ(r.summary().device, o.device);
      for (std::int64_t s = 0; s < calls[k]; ++s)
        EXPECT_EQ(r.status()[static_cast<std::size_t>(s)],
                  ref.status()[static_cast<std::size_t>(first + s)]);
      first += calls[k];
    }
    expect_same_summary(got_sum.finish(), got_metrics, want);
  }
}

// The population driver (`pkscan run` with `trajectories: false`) summarising on the device: a
// sweep of typical subjects given an IV bolus into the central compartment of two_compartment,
// in chunks of 1024 rows. C = D/V exp(-CL/V t), and the log-down trapezoid AUC over [0, T] is
// exact for one exponential: D/CL (1 - exp(-CL/V T)). The summary and the metrics are also the
// bits of the same run on the CPU (its fused path).
class KeepingSink final : public ResultSink {
 public:
  void write(const Chunk& c) override {
    for (std::int64_t s = 0; s < c.result->subjects(); ++s)
      for (int k = 0; k < kMetricCount; ++k) metrics.push_back(c.metrics[s * kMetricCount + k]);
    devices.push_back(c.result->summary().device);
  }
  void write_summary(const TimeSummaryTable& t) override {
    if (tables.empty()) summary = t;
    tables.push_back(t);
  }
  void commit() override { committed = true; }
  std::vector<double> metrics;
  std::vector<Device> devices;
  TimeSummaryTable summary;              // the first group's (the run's without groups)
  std::vector<TimeSummaryTable> tables;  // every group's
  bool committed = false;
};

TEST_P(DeviceTiming, APopulationRunSummarisedOnTheDeviceGivesClosedFormAucAndTheCpusBits) {
  const Path& path = GetParam();
  PopulationRun run;
  run.problem.grid = {0.5, 48};
  DoseEvent d;
  d.compartment = 1;
  d.amount = 100.0;
  run.problem.doses = {d};
  PopulationSpec pop(ModelKind::TwoCompartment, 1500, 9);  // no variability: typical subjects
  pop.set_typical("cl", 5.0);
  pop.set_typical("v_central", 20.0);
  pop.set_typical("ka", 1.0);
  run.population = pop;
  run.sweep.columns = {pop.column("cl")};
  run.sweep.values = {{2.0, 8.0}};
  run.summaries = true;
  run.trajectories = false;
  run.options.method = path.method;
  PopulationRunOptions options;
  options.chunk_rows = 1024;
  KeepingSink dev, cpu;
  run.options.device = path.device;
  run_population(run, dev, options);
  run.options.device = Device::Cpu;
  run.options.method = Method::Batched;
  run_population(run, cpu, options);
  ASSERT_TRUE(dev.committed);
  // One summary per cl (the default groups): calls of 1024 and 476 rows per group.
  ASSERT_EQ(dev.devices.size(), 4u);
  for (Device used : dev.devices) EXPECT_EQ(used, Device::Cuda);
  ASSERT_EQ(dev.metrics.size(), std::size_t{3000} * kMetricCount);
  for (std::size_t r = 0; r < 3000; ++r) {
    const double cl = r < 1500 ? 2.0 : 8.0;
    EXPECT_NEAR(dev.metrics[r * kMetricCount + 2], 100.0 / cl * (1.0 - std::exp(-cl / 20.0 * 24.0)),
                1e-9 * 100.0 / cl)
        << "row " << r;
  }
  EXPECT_TRUE(same_bits(dev.metrics, cpu.metrics));
  ASSERT_EQ(dev.tables.size(), 2u);
  ASSERT_EQ(cpu.tables.size(), 2u);
  for (std::size_t g = 0; g < 2; ++g) {
    EXPECT_EQ(dev.tables[g].count, 1500);
    EXPECT_EQ(dev.tables[g].group, std::vector<double>{g == 0 ? 2.0 : 8.0});
    EXPECT_TRUE(same_bits(dev.tables[g].mean, cpu.tables[g].mean));
    EXPECT_TRUE(same_bits(dev.tables[g].quantiles, cpu.tables[g].quantiles));
  }
}

// Device auto summarises a summaries-only population run on the device when its calls fill the
// device with 1e9 subject-steps, in one call with the engine's chunks, with the bits of
// summarising the CPU path; a run with fewer subjects stays on the CPU. (Sparse output on the
// power path keeps 1e5 subjects x 1e4 steps short on the host system.)
TEST_P(DeviceTiming, AutoSummarisesAPopulationThatFillsTheDeviceThere) {
  const Path& path = GetParam();
  if (path.method != Method::Power) GTEST_SKIP() << "the power path keeps the run short";
  PopulationRun run;
  run.problem.grid = {0.5, 10'000};
  run.problem.output = OutputTimes::at_steps({1000, 2000, 3000, 4000, 5000, 10'000});
  DoseEvent d;
  d.compartment = 1;
  d.amount = 100.0;
  run.problem.doses = {d};
  auto population = [](std::int64_t count) {
    PopulationSpec pop(ModelKind::TwoCompartment, count, 5);
    pop.set_typical("cl", 5.0);
    pop.set_typical("v_central", 20.0);
    pop.set_typical("ka", 1.0);
    pop.iiv = {pop.column("cl"), pop.column("v_central")};
    pop.omega = Eigen::Vector2d(0.09, 0.04).asDiagonal();
    return pop;
  };
  run.population = population(100'000);
  run.summaries = true;
  run.trajectories = false;
  run.options.method = Method::Auto;
  run.options.device = Device::Auto;
  KeepingSink dev, cpu, few;
  run_population(run, dev);
  run.options.method = Method::Power;
  run.options.device = Device::Cpu;
  run_population(run, cpu);
  ASSERT_TRUE(dev.committed);
  ASSERT_EQ(dev.devices, std::vector<Device>{Device::Cuda});
  ASSERT_EQ(dev.summary.count, 100'000);
  EXPECT_TRUE(same_bits(dev.metrics, cpu.metrics));
  EXPECT_TRUE(same_bits(dev.summary.mean, cpu.summary.mean));
  EXPECT_TRUE(same_bits(dev.summary.quantiles, cpu.summary.quantiles));

  run.population = population(50'000);
  run.options.method = Method::Auto;
  run.options.device = Device::Auto;
  run_population(run, few);
  ASSERT_FALSE(few.devices.empty());
  for (Device used : few.devices) EXPECT_EQ(used, Device::Cpu);
}

#if defined(PKSCAN_DEVICE_HOST_SYSTEM)
}  // namespace
}  // namespace pkscan
extern std::size_t pkscan_device_host_memory;  // device_host_main.cpp
namespace pkscan {
namespace {

// The device summary when device memory is short (the host system with a few MiB of "device
// memory"): the sketch and two slots of one block of 1024 subjects fit, two blocks do not, so
// 5000 subjects run in chunks of whole blocks and give the CPU's bits; with less memory than
// the sketch and a block per slot, the call fails with a message that says so, and the
// summary is left as it was (a later call with enough memory gives the same bits).
// With the default chunk size a summaries-only population run on the device makes one call for
// up to 2^20 subjects (each call copies the sketch both ways): here one call, where 64 MiB of
// trajectories (1601 times) would make three; the CPU's bits. (The host system with 512 MiB of
// "device memory": the sketch of 3202 rows and a block of subjects per slot need more than 64.)
TEST_P(DeviceTiming, ASummariesOnlyPopulationRunCallsTheDeviceOnceWithTheDefaultChunks) {
  const Path& path = GetParam();
  struct Restore {
    std::size_t was = pkscan_device_host_memory;
    ~Restore() { pkscan_device_host_memory = was; }
  } restore;
  pkscan_device_host_memory = std::size_t{512} << 20;
  PopulationRun run;
  run.problem.grid = {0.015, 1600};
  DoseEvent d;
  d.compartment = 1;
  d.amount = 100.0;
  run.problem.doses = {d};
  PopulationSpec pop(ModelKind::TwoCompartment, 3000, 9);
  pop.set_typical("cl", 5.0);
  pop.set_typical("v_central", 20.0);
  pop.set_typical("ka", 1.0);
  pop.iiv = {pop.column("cl")};
  pop.omega = Eigen::MatrixXd::Constant(1, 1, 0.09);  // log-normal, sd 0.3
  run.population = pop;
  run.summaries = true;
  run.trajectories = false;
  KeepingSink dev, cpu;
  run_population(run, cpu, PopulationRunOptions{});
  run.options.device = path.device;
  run.options.method = path.method;
  run_population(run, dev, PopulationRunOptions{});
  ASSERT_TRUE(dev.committed);
  EXPECT_EQ(dev.devices.size(), 1u);
  for (Device used : dev.devices) EXPECT_EQ(used, Device::Cuda);
  EXPECT_EQ(dev.summary.count, 3000);
  EXPECT_TRUE(same_bits(dev.metrics, cpu.metrics));
  EXPECT_TRUE(same_bits(dev.summary.mean, cpu.summary.mean));
  EXPECT_TRUE(same_bits(dev.summary.quantiles, cpu.summary.quantiles));
}

TEST_P(DeviceTiming, SummarisesInWholeBlocksWhenMemoryIsShort) {
  const Path& path = GetParam();
  struct Restore {
    std::size_t was = pkscan_device_host_memory;
    ~Restore() { pkscan_device_host_memory = was; }
  } restore;
  Problem p;
  p.grid = {0.5, 40};
  const std::int64_t n = 5000;
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, n);
  std::mt19937 rng(seed());
  std::lognormal_distribution<double> bsv(0.0, 0.5);
  for (std::int64_t s = 0; s < n; ++s) {
    const double f = bsv(rng);
    p.parameters.set("ka", s, 0.8 * f);
    p.parameters.set("ke", s, 0.15 * f);
    p.parameters.set("k12", s, 0.3);
    p.parameters.set("k21", s, 0.1);
    p.parameters.set("v_central", s, 20.0 * f);
    p.parameters.set("v_peripheral", s, 60.0);
  }
  DoseEvent oral;
  oral.amount = 100.0;
  p.doses = {oral};
  const SimulationResult ref = simulate(p, opts(Method::Scan, Device::Cpu, Precision::Float64));
  TimeSummaryOptions to;
  to.exact_values = 0;
  const double last = last_dose_time(p.doses);
  const std::size_t nm = static_cast<std::size_t>(n * kMetricCount);
  const Summarised want = summarise(ref, to, 1, last);

  // 123 rows: a sketch of 2.0 MB; about 1.2 kB a subject in a slot.
  TimeSummary got_sum(ref.output_times(), ref.compartments(), to);
  std::vector<double> got_metrics(nm);
  SimulationResult r;
  pkscan_device_host_memory = std::size_t{1} << 20;  // less than the sketch
  {
    Engine small;
    try {
      small.summarize_into(p, opts(path.method, path.device, Precision::Float64), got_sum, 1, last,
                           got_metrics.data(), r);
      ADD_FAILURE() << "the call ran with 1 MiB";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("the summary's sketch and one block of subjects"),
                std::string::npos)
          << e.what();
    }
    EXPECT_EQ(got_sum.subjects(), 0);
  }
  pkscan_device_host_memory = std::size_t{7} << 20;  // a block per slot, not two
  Engine engine;
  ASSERT_TRUE(engine.summarize_into(p, opts(path.method, path.device, Precision::Float64), got_sum,
                                    1, last, got_metrics.data(), r));
  EXPECT_EQ(r.summary().device, Device::Cuda);
  expect_same_summary(got_sum.finish(), got_metrics, want);
}
#endif

INSTANTIATE_TEST_SUITE_P(Gpu, DeviceTiming, ::testing::ValuesIn(gpu_paths()), ParamName());
INSTANTIATE_TEST_SUITE_P(Gpu, DeviceSummary,
                         ::testing::Combine(::testing::ValuesIn(gpu_paths()),
                                            ::testing::ValuesIn(scenarios())),
                         ParamName());

}  // namespace
}  // namespace pkscan
