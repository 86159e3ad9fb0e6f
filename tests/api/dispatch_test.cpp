// Dispatch: what auto picks, that the summary names the path that ran, and that an absent
// device is reported as BackendUnavailable.
#include <gtest/gtest.h>

#include <cmath>
#include <pkscan/pkscan.hpp>

#include "grid/backend.hpp"

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
  // A partial lane group from 4 subjects on (docs/performance.md, "How auto chooses").
  EXPECT_EQ(resolve_path(problem(4, 100, false), cpu_auto(2)).method, Method::Batched);
  EXPECT_EQ(resolve_path(problem(4, 100000, false), cpu_auto(2)).method, Method::Batched);
  EXPECT_EQ(resolve_path(problem(3, 100, false), cpu_auto(2)).method, Method::Scan);
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

namespace pkscan {
namespace {

// Outputs above 64 MiB take the batched path's streaming writes: each lane's values shifted
// onto 64-byte line boundaries (a carry between groups of rows) and stored non-temporally, the
// subject's first and last partial lines with ordinary stores. Checked value by value, bit for
// bit, against the reference scan (the batched path promises its bits):
// - two, three and four compartments (2, 3 and 4 lines per group of rows), both precisions (W =
//   8 and 16 lanes);
// - dense output (3001 rows: every shift onto a line, a partial last group; one lane group at a
//   time) and sparse output (both lane groups together; 1024 rows: the lane kernel's last call
//   full; 1021 rows: a partial last group, whose rows write part of the last complete group);
// - last blocks of 1 subject (a group of a few, written lane by lane), W + 1 (a full group and a
//   group of a few) and W + 5 (a full group and a part of one);
// - on every instruction set the machine has (AVX-512, AVX2 and baseline x86-64 on an AVX-512
//   machine), each with its own stores and shifts.
TEST(BatchedStreaming, LargeOutputsMatchTheReferenceBitForBit) {
  const int sets = detail::cap_batched_isa(0);
  struct Uncap {
    ~Uncap() { detail::cap_batched_isa(0); }
  } uncap;
  struct Case {
    ModelKind model;
    std::int64_t compartments;
    std::vector<std::string> names;
    std::vector<double> values;
  };
  const std::vector<Case> cases = {
      {ModelKind::TwoCompartment, 2, {"v_central"}, {10.0}},
      {ModelKind::ThreeCompartment,
       3,
       {"k12", "k21", "v_central", "v_peripheral"},
       {0.2, 0.07, 10.0, 40.0}},
      {ModelKind::FourCompartment,
       4,
       {"cl", "q", "q2", "v_central", "v_peripheral1", "v_peripheral2"},
       {2.0, 1.0, 0.5, 10.0, 30.0, 50.0}}};
  for (const Case& c : cases)
    for (Precision prec : {Precision::Float64, Precision::Float32})
      for (std::int64_t rows : {3001, 1024, 1021}) {
        const bool dense = rows == 3001;
        const std::int64_t lanes = prec == Precision::Float64 ? 8 : 16;
        for (std::int64_t last_block : {std::int64_t{1}, lanes + 1, lanes + 5}) {
          SCOPED_TRACE(testing::Message()
                       << "model " << static_cast<int>(c.model) << " float"
                       << (prec == Precision::Float64 ? 64 : 32) << (dense ? " dense" : " sparse")
                       << " " << rows << " rows"
                       << ", last block " << last_block);
          Problem p;
          p.grid = {0.5, 3000};
          if (!dense) {
            p.output.all = false;
            for (std::int64_t t = 1; t < 2 * rows; t += 2) p.output.steps.push_back(t);
          }
          // Enough subjects for 64 MiB of output in whole blocks (two lane groups), then a last
          // block of last_block.
          const std::int64_t per = rows * c.compartments * (prec == Precision::Float64 ? 8 : 4);
          const std::int64_t n = ((64 << 20) / per / (2 * lanes) + 1) * 2 * lanes + last_block;
          p.parameters = ParameterBatch(c.model, n);
          for (std::int64_t s = 0; s < n; ++s) {
            const double f = 0.7 + 0.6 * static_cast<double>(s % 97) / 97.0;
            p.parameters.set("ka", s, 0.6 * f);
            if (c.model != ModelKind::FourCompartment) p.parameters.set("ke", s, 0.1 * f);
            for (std::size_t i = 0; i < c.names.size(); ++i)
              p.parameters.set(c.names[i], s, c.values[i] * (i == 0 ? f : 1.0));
          }
          DoseEvent oral;
          oral.amount = 100;
          oral.every = 12;
          oral.repeat = 100;
          DoseEvent inf;
          inf.compartment = 1;
          inf.time = 7.5;
          inf.amount = 50;
          inf.rate = 13;
          p.doses = {oral, inf};
          SimulateOptions ref_o, bat_o;
          ref_o.method = Method::Scan;
          bat_o.method = Method::Batched;
          ref_o.device = bat_o.device = Device::Cpu;
          ref_o.precision = bat_o.precision = prec;
          ref_o.concentrations = bat_o.concentrations = false;
          bat_o.threads = 2;
          ASSERT_GT(result_bytes(p, bat_o), 64u << 20);
          const SimulationResult ref = simulate(p, ref_o);
          for (int set = 1; set <= sets; ++set) {
            SCOPED_TRACE(testing::Message() << "instruction set " << set << " of " << sets);
            detail::cap_batched_isa(set);
            const SimulationResult got = simulate(p, bat_o);
            ASSERT_EQ(got.times(), rows);
            std::int64_t bad = 0;
            for (std::int64_t s = 0; s < n; ++s)
              for (std::int64_t i = 0; i < rows; ++i)
                for (int k = 0; k < ref.compartments(); ++k) {
                  const double a = ref.amount(s, i, k), b = got.amount(s, i, k);
                  if (!(a == b) && ++bad <= 5)
                    ADD_FAILURE() << "subject " << s << " time " << i << " cmt " << k << ": " << a
                                  << " vs " << b;
                }
            EXPECT_EQ(bad, 0);
          }
        }
      }
}

}  // namespace
}  // namespace pkscan
