// Every grid path (method, device) on the agreement scenarios (support/agreement.hpp, with the
// tolerance table) against the reference scan of the same precision, plus float32 against
// float64; the batched path on every subject count of a partial lane group; the subjects whose
// amounts overflow. The paths that are not grid backends on the same scenarios:
// engine_agreement_test.cpp; the device-only cases: tests/device.
#include "support/agreement.hpp"

namespace pkscan {
namespace {

using BackendAgreement = OnPathAndScenario;

TEST_P(BackendAgreement, MatchesReferenceFloat64) {
  const auto& [path, sc] = GetParam();
  SCOPED_TRACE("seed " + std::to_string(seed()));
  const Problem p = build(sc);
  const SimulationResult ref = simulate(p, opts(Method::Scan, Device::Cpu, Precision::Float64));
  const SimulationResult got = simulate(p, opts(path.method, path.device, Precision::Float64));
  EXPECT_EQ(got.summary().method, path.method);
  EXPECT_EQ(got.summary().device, path.device);
  ASSERT_EQ(got.times(), ref.times());
  for (std::int64_t s = 0; s < ref.subjects(); ++s) {
    double peak = 0.0;
    for (std::int64_t i = 0; i < ref.times(); ++i)
      for (int c = 0; c < ref.compartments(); ++c) peak = std::max(peak, ref.amount(s, i, c));
    int failures = 0;
    for (std::int64_t i = 0; i < ref.times() && failures < 5; ++i)
      for (int c = 0; c < ref.compartments(); ++c) {
        const auto ok = test::close_to(ref.amount(s, i, c), got.amount(s, i, c), path.rtol,
                                       path.rtol * 1e-3 * peak);
        if (!ok) ++failures;
        EXPECT_TRUE(ok) << "subject " << s << " time index " << i << " compartment " << c;
      }
    EXPECT_EQ(got.status()[static_cast<std::size_t>(s)], ref.status()[static_cast<std::size_t>(s)]);
  }
}

// The device code on the host system runs kernels/grid.hpp with the host's arithmetic, as the CPU
// paths do: the same bits, in both precisions. (Dense power runs the batched kernel on a device,
// so its twin there is the reference scan, checked above with tolerance 0.)
TEST_P(BackendAgreement, SameBitsAsTheCpuPath) {
  const auto& [path, sc] = GetParam();
  if (!path.bits_as_cpu) GTEST_SKIP() << "no bit-identity claim for this path";
  if (path.method == Method::Power && !sc.sparse) GTEST_SKIP() << "dense power: see above";
  const Problem p = build(sc);
  for (Precision prec : {Precision::Float64, Precision::Float32}) {
    const SimulationResult cpu = simulate(p, opts(path.method, Device::Cpu, prec));
    const SimulationResult dev = simulate(p, opts(path.method, path.device, prec));
    if (prec == Precision::Float64) {
      ASSERT_EQ(cpu.amounts_f64().size(), dev.amounts_f64().size());
      EXPECT_EQ(std::memcmp(cpu.amounts_f64().data(), dev.amounts_f64().data(),
                            cpu.amounts_f64().size() * sizeof(double)),
                0);
    } else {
      ASSERT_EQ(cpu.amounts_f32().size(), dev.amounts_f32().size());
      EXPECT_EQ(std::memcmp(cpu.amounts_f32().data(), dev.amounts_f32().data(),
                            cpu.amounts_f32().size() * sizeof(float)),
                0);
    }
    EXPECT_EQ(dev.status(), cpu.status());
  }
}

TEST_P(BackendAgreement, Float32WithinOneInTenToTheFiveOfFloat64) {
  const auto& [path, sc] = GetParam();
  const Problem p = build(sc);
  const SimulationResult ref = simulate(p, opts(Method::Scan, Device::Cpu, Precision::Float64));
  const SimulationResult got = simulate(p, opts(path.method, path.device, Precision::Float32));
  ASSERT_FALSE(got.amounts_f32().empty());
  for (std::int64_t s = 0; s < ref.subjects(); ++s) {
    double peak = 0.0;
    for (std::int64_t i = 0; i < ref.times(); ++i)
      for (int c = 0; c < ref.compartments(); ++c) peak = std::max(peak, ref.amount(s, i, c));
    double worst = 0.0;
    for (std::int64_t i = 0; i < ref.times(); ++i)
      for (int c = 0; c < ref.compartments(); ++c)
        worst = std::max(worst, std::fabs(ref.amount(s, i, c) - got.amount(s, i, c)));
    EXPECT_LE(worst, 1e-5 * peak) << "subject " << s;
  }
}

// ---- Few subjects: partial lane groups -----------------------------------------------------

// The batched path runs 3 subjects and up in lane groups of 8 (float64) or 16 (float32), two
// groups to a block, and one or two subjects with the per-subject loop: every count from 1 to
// 35 (a partial group alone, one full group and a partial one, whole and partial blocks) gives
// the scan's bits, in both precisions, dense and sparse, for every built-in model size.
TEST(FewSubjects, BatchedGivesTheScansBitsForEveryCount) {
  for (ModelKind m :
       {ModelKind::TwoCompartment, ModelKind::ThreeCompartment, ModelKind::FourCompartment})
    for (bool sparse : {false, true})
      for (std::int64_t n = 1; n <= 35; ++n) {
        const Problem p = build({"few", n, 0.25, 90, Discretization::Exact, 3, sparse, m});
        for (Precision prec : {Precision::Float64, Precision::Float32}) {
          SCOPED_TRACE(std::to_string(n) + " subjects, model " +
                       std::to_string(static_cast<int>(m)) + (sparse ? " sparse " : " dense ") +
                       (prec == Precision::Float64 ? "float64" : "float32"));
          const SimulationResult ref = simulate(p, opts(Method::Scan, Device::Cpu, prec));
          const SimulationResult got = simulate(p, opts(Method::Batched, Device::Cpu, prec));
          ASSERT_EQ(got.summary().method, Method::Batched);
          ASSERT_EQ(got.times(), ref.times());
          int differ = 0;
          for (std::int64_t s = 0; s < n; ++s)
            for (std::int64_t i = 0; i < ref.times(); ++i)
              for (int c = 0; c < ref.compartments(); ++c) {
                const double a = ref.amount(s, i, c), b = got.amount(s, i, c);
                differ += std::memcmp(&a, &b, sizeof a) != 0;
              }
          EXPECT_EQ(differ, 0);
          EXPECT_EQ(got.status(), ref.status());
        }
      }
}

// ---- Subjects whose amounts overflow ---------------------------------------------------------

using OverflowStatus = OnPath;

// Bolus doses of A into the depot and into the central compartment, with little leaving the
// central one: where ka = 20 the depot empties into it within the first step and the central
// amount, about 1.96 A, passes the largest finite value when A is just over half of it (1e308 in
// float64, 2e38 in float32); where ka = 0 every amount stays at most A. 37 subjects fill two
// 16-lane blocks and part of a third (float32: one 32-lane block and part of another), with the
// overflowing ones in every block and at every lane position. A subject is NonFinite exactly
// when its amounts leave the range, and its first output (the doses) is exact either way.
TEST_P(OverflowStatus, MarksExactlyTheSubjectsWhoseAmountsLeaveTheRange) {
  const Path& path = GetParam();
  Problem p;
  p.discretization = Discretization::Exact;
  p.grid = {1.0, 50};
  const std::int64_t n = 37;
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, n);
  auto transfers = [](std::int64_t s) { return s % 7 == 2 || s % 5 == 4; };
  for (std::int64_t s = 0; s < n; ++s) {
    p.parameters.set("ka", s, transfers(s) ? 20.0 : 0.0);
    p.parameters.set("ke", s, 0.01);
    p.parameters.set("k12", s, 0.01);
    p.parameters.set("k21", s, 0.01);
    p.parameters.set("v_central", s, 20.0);
    p.parameters.set("v_peripheral", s, 60.0);
  }
  struct Case {
    double amount;
    Precision precision;
    bool overflows;  // whether the subjects with ka = 20 leave the range
  };
  for (const Case& c :
       {Case{1e308, Precision::Float64, true}, Case{2e38, Precision::Float64, false},
        Case{2e38, Precision::Float32, true}}) {
    SCOPED_TRACE(std::to_string(c.amount) +
                 (c.precision == Precision::Float64 ? " float64" : " float32"));
    DoseEvent depot, central;
    depot.amount = c.amount;
    central.compartment = 1;
    central.amount = c.amount;
    p.doses = {depot, central};
    const SimulationResult r = simulate(p, opts(path.method, path.device, c.precision));
    const double rounded = c.precision == Precision::Float64
                               ? c.amount
                               : static_cast<double>(static_cast<float>(c.amount));
    for (std::int64_t s = 0; s < n; ++s) {
      const bool out = c.overflows && transfers(s);
      EXPECT_EQ(r.status()[static_cast<std::size_t>(s)],
                out ? SubjectStatus::NonFinite : SubjectStatus::Ok)
          << "subject " << s;
      EXPECT_EQ(r.amount(s, 0, 0), rounded) << "subject " << s;
      EXPECT_EQ(r.amount(s, 0, 1), rounded) << "subject " << s;
      EXPECT_EQ(std::isfinite(r.amount(s, 1, 1)), !out) << "subject " << s;
      EXPECT_EQ(std::isfinite(r.amount(s, 50, 0)), !out) << "subject " << s;
    }
  }
}

// CPU and CUDA paths are separate instantiations so ctest can label the CUDA ones `gpu`.
INSTANTIATE_TEST_SUITE_P(Cpu, BackendAgreement,
                         ::testing::Combine(::testing::ValuesIn(cpu_paths()),
                                            ::testing::ValuesIn(scenarios())),
                         ParamName());
INSTANTIATE_TEST_SUITE_P(Cpu, OverflowStatus, ::testing::ValuesIn(cpu_paths()), ParamName());
INSTANTIATE_TEST_SUITE_P(Gpu, OverflowStatus, ::testing::ValuesIn(gpu_paths()), ParamName());
INSTANTIATE_TEST_SUITE_P(Gpu, BackendAgreement,
                         ::testing::Combine(::testing::ValuesIn(gpu_paths()),
                                            ::testing::ValuesIn(scenarios())),
                         ParamName());

}  // namespace
}  // namespace pkscan
