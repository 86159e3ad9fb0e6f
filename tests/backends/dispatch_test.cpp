// Dispatch: what auto picks, that the summary names the path that ran, and that an absent
// device is reported as BackendUnavailable.
#include <gtest/gtest.h>

#include <pkscan/pkscan.hpp>

namespace pkscan {
namespace {

Problem problem(std::int64_t subjects, std::int64_t steps, bool sparse) {
  Problem p;
  p.grid = {1.0, steps};
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, subjects);
  p.parameters.set_all("ka", 0.5);
  p.parameters.set_all("k12", 0.1);
  p.parameters.set_all("k21", 0.05);
  p.parameters.set_all("ke", 0.1);
  p.parameters.set_all("v_central", 10);
  p.parameters.set_all("v_peripheral", 30);
  DoseEvent d;
  d.amount = 100;
  p.doses = {d};
  if (sparse) p.output = OutputTimes::at_steps({steps / 2, steps});
  return p;
}

SimulateOptions cpu_auto(int threads) {
  SimulateOptions o;
  o.device = Device::Cpu;
  o.threads = threads;
  return o;
}

TEST(Dispatch, AutoPicksByShape) {
  EXPECT_EQ(resolve_path(problem(1, 100, false), cpu_auto(2)).method, Method::Scan);
  EXPECT_EQ(resolve_path(problem(1000, 100, false), cpu_auto(2)).method, Method::Batched);
  EXPECT_EQ(resolve_path(problem(1, 1000000, true), cpu_auto(2)).method, Method::Power);
  EXPECT_EQ(resolve_path(problem(1000, 1000, true), cpu_auto(2)).method, Method::Power);
  EXPECT_EQ(resolve_path(problem(2, 100000, false), cpu_auto(2)).method, Method::Power);
  EXPECT_EQ(resolve_path(problem(2, 100000, false), cpu_auto(1)).method, Method::Scan);
  // Explicit choices are kept.
  SimulateOptions o = cpu_auto(2);
  o.method = Method::Scan;
  EXPECT_EQ(resolve_path(problem(1000, 100, false), o).method, Method::Scan);
}

TEST(Dispatch, AutoDeviceIsCpuWithoutACudaDevice) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  SimulateOptions o;
  const Path p = resolve_path(problem(100000, 1000, false), o);
  EXPECT_EQ(p.device, Device::Cpu);
  EXPECT_EQ(p.method, Method::Batched);
}

TEST(Dispatch, SummaryNamesThePathThatRan) {
  for (Method m : {Method::Scan, Method::Batched, Method::Power}) {
    SimulateOptions o = cpu_auto(2);
    o.method = m;
    const SimulationResult r = simulate(problem(20, 50, false), o);
    EXPECT_EQ(r.summary().method, m);
    EXPECT_EQ(r.summary().device, Device::Cpu);
  }
  const SimulationResult r = simulate(problem(20, 50, false), cpu_auto(2));
  EXPECT_EQ(r.summary().method, Method::Batched);
}

TEST(Dispatch, MissingCudaDeviceIsBackendUnavailable) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  for (Method m : {Method::Auto, Method::Batched, Method::Power}) {
    SimulateOptions o;
    o.method = m;
    o.device = Device::Cuda;
    try {
      simulate(problem(4, 10, false), o);
      ADD_FAILURE() << "no exception for " << to_string(m);
    } catch (const BackendUnavailable& e) {
      EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
    }
  }
  SimulateOptions scan_on_cuda;
  scan_on_cuda.method = Method::Scan;
  scan_on_cuda.device = Device::Cuda;
  EXPECT_THROW(simulate(problem(4, 10, false), scan_on_cuda), BackendUnavailable);
}

TEST(Dispatch, ThreadCountDoesNotChangeResults) {
  for (Method m : {Method::Batched, Method::Power}) {
    Problem p = problem(37, 40000, false);
    SimulateOptions one = cpu_auto(1), two = cpu_auto(2);
    one.method = two.method = m;
    const SimulationResult a = simulate(p, one), b = simulate(p, two);
    ASSERT_EQ(a.amounts_f64().size(), b.amounts_f64().size());
    for (std::size_t i = 0; i < a.amounts_f64().size(); ++i)
      ASSERT_EQ(a.amounts_f64()[i], b.amounts_f64()[i]) << to_string(m) << " index " << i;
  }
}

}  // namespace
}  // namespace pkscan
