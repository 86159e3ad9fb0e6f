// The reference scan against closed forms, a hand-written euler recurrence, mass balance and
// float32-vs-float64 agreement.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <pkscan/pkscan.hpp>
#include <random>

#include "grid/reference.hpp"
#include "grid/schedule.hpp"
#include "support/analytic.hpp"
#include "support/expect_close.hpp"

namespace pkscan {
namespace {

std::uint32_t test_seed() {
  const char* s = std::getenv("PKSCAN_TEST_SEED");
  return s ? static_cast<std::uint32_t>(std::strtoul(s, nullptr, 10)) : 20261122u;
}

Problem make_problem(double ka, double k12, double k21, double ke, double dt, std::int64_t steps,
                     std::vector<DoseEvent> doses, Discretization disc = Discretization::Exact) {
  Problem p;
  p.discretization = disc;
  p.grid = {dt, steps};
  p.parameters = ParameterBatch(ModelKind::ThreeCompartment, 1);
  p.parameters.set_all("ka", ka);
  p.parameters.set_all("k12", k12);
  p.parameters.set_all("k21", k21);
  p.parameters.set_all("ke", ke);
  p.parameters.set_all("v_central", 10.0);
  p.parameters.set_all("v_peripheral", 30.0);
  p.doses = std::move(doses);
  return p;
}

SimulateOptions scan_options(Precision prec = Precision::Float64) {
  SimulateOptions o;
  o.method = Method::Scan;
  o.device = Device::Cpu;
  o.precision = prec;
  return o;
}

DoseEvent bolus(int cmt, double t, double amt) {
  DoseEvent d;
  d.compartment = cmt;
  d.time = t;
  d.amount = amt;
  return d;
}

DoseEvent infusion_rate(int cmt, double t, double amt, double rate) {
  DoseEvent d = bolus(cmt, t, amt);
  d.rate = rate;
  return d;
}

constexpr int kDepot = 0, kCentral = 1, kPeripheral = 2;

TEST(ReferenceScan, OneCompartmentBolusMatchesClosedForm) {
  const double ke = 0.173;
  const Problem p = make_problem(1.0, 0.0, 0.0, ke, 0.5, 200, {bolus(kCentral, 0.0, 250.0)});
  const SimulationResult r = simulate(p, scan_options());
  for (std::int64_t i = 0; i < r.times(); ++i) {
    const double t = r.output_times()[static_cast<std::size_t>(i)];
    PKSCAN_EXPECT_CLOSE(test::one_cpt_bolus(250.0, ke, t), r.amount(0, i, kCentral), 1e-12,
                        1e-13 * 250.0, "t=" << t);
    // concentrations are amount / volume
    PKSCAN_EXPECT_CLOSE(r.amount(0, i, kCentral) / 10.0, r.concentration(0, i, kCentral), 1e-15,
                        0.0, "t=" << t);
  }
}

TEST(ReferenceScan, BatemanAbsorptionMatchesClosedForm) {
  const double ka = 1.3, ke = 0.21;
  const Problem p = make_problem(ka, 0.0, 0.0, ke, 0.1, 480, {bolus(kDepot, 0.0, 100.0)});
  const SimulationResult r = simulate(p, scan_options());
  for (std::int64_t i = 0; i < r.times(); ++i) {
    const double t = r.output_times()[static_cast<std::size_t>(i)];
    PKSCAN_EXPECT_CLOSE(100.0 * std::exp(-ka * t), r.amount(0, i, kDepot), 1e-12, 1e-13 * 100,
                        "depot t=" << t);
    PKSCAN_EXPECT_CLOSE(test::bateman(100.0, ka, ke, t), r.amount(0, i, kCentral), 1e-12,
                        1e-13 * 100, "central t=" << t);
  }
}

TEST(ReferenceScan, TwoCompartmentBolusMatchesBiexponential) {
  const double k12 = 0.4, k21 = 0.11, ke = 0.25;
  const Problem p = make_problem(1.0, k12, k21, ke, 0.25, 400, {bolus(kCentral, 0.0, 1000.0)});
  const SimulationResult r = simulate(p, scan_options());
  for (std::int64_t i = 0; i < r.times(); ++i) {
    const double t = r.output_times()[static_cast<std::size_t>(i)];
    const test::TwoCpt e = test::two_cpt_bolus(1000.0, k12, k21, ke, t);
    PKSCAN_EXPECT_CLOSE(e.central, r.amount(0, i, kCentral), 1e-11, 1e-12 * 1000, "t=" << t);
    PKSCAN_EXPECT_CLOSE(e.peripheral, r.amount(0, i, kPeripheral), 1e-11, 1e-12 * 1000, "t=" << t);
  }
}

// Infusions ending on the grid, inside a step (partial last step) and shorter than one step.
TEST(ReferenceScan, InfusionsMatchClosedFormIncludingPartialSteps) {
  const double ke = 0.3, dt = 0.25;
  for (double duration : {2.0, 1.3, 0.1, 0.25 * 7 + 0.01}) {
    const double rate = 40.0;
    const Problem p = make_problem(1.0, 0.0, 0.0, ke, dt, 60,
                                   {infusion_rate(kCentral, 0.0, rate * duration, rate)});
    const SimulationResult r = simulate(p, scan_options());
    for (std::int64_t i = 0; i < r.times(); ++i) {
      const double t = r.output_times()[static_cast<std::size_t>(i)];
      PKSCAN_EXPECT_CLOSE(test::one_cpt_infusion(rate, duration, ke, t), r.amount(0, i, kCentral),
                          1e-12, 1e-13 * rate, "duration=" << duration << " t=" << t);
    }
  }
}

TEST(ReferenceScan, InfusionGivenByDurationEqualsInfusionGivenByRate) {
  DoseEvent by_rate = infusion_rate(kCentral, 1.0, 90.0, 60.0);
  DoseEvent by_duration = bolus(kCentral, 1.0, 90.0);
  by_duration.duration = 1.5;
  const SimulationResult a =
      simulate(make_problem(1, 0.2, 0.1, 0.3, 0.5, 20, {by_rate}), scan_options());
  const SimulationResult b =
      simulate(make_problem(1, 0.2, 0.1, 0.3, 0.5, 20, {by_duration}), scan_options());
  for (std::int64_t i = 0; i < a.times(); ++i)
    for (int c = 0; c < 3; ++c)
      PKSCAN_EXPECT_CLOSE(a.amount(0, i, c), b.amount(0, i, c), 1e-14, 1e-14, i);
  // An infusion starting at t adds nothing at t itself (NONMEM).
  EXPECT_EQ(a.amount(0, 2, kCentral), 0.0);
  EXPECT_GT(a.amount(0, 3, kCentral), 0.0);
}

TEST(ReferenceScan, RepeatedDosesAreSuperposedBateman) {
  const double ka = 0.9, ke = 0.15;
  DoseEvent d = bolus(kDepot, 2.0, 50.0);
  d.every = 6.0;
  d.repeat = 4;  // t = 2, 8, 14, 20, 26
  const Problem p = make_problem(ka, 0.0, 0.0, ke, 0.5, 80, {d});
  const SimulationResult r = simulate(p, scan_options());
  for (std::int64_t i = 0; i < r.times(); ++i) {
    const double t = r.output_times()[static_cast<std::size_t>(i)];
    double expected = 0.0;
    for (int k = 0; k <= 4; ++k) {
      const double td = 2.0 + 6.0 * k;
      if (t >= td - 1e-12) expected += test::bateman(50.0, ka, ke, t - td);
    }
    PKSCAN_EXPECT_CLOSE(expected, r.amount(0, i, kCentral), 1e-12, 1e-13 * 50, "t=" << t);
  }
  // The state at a dose time is post-dose (NONMEM).
  EXPECT_NEAR(r.amount(0, 4, kDepot), 50.0, 1e-12);
}

TEST(ReferenceScan, DosesAfterTheLastGridTimeAreIgnoredAndInfusionsCut) {
  const Problem p =
      make_problem(0.5, 0.1, 0.1, 0.2, 1.0, 4,
                   {bolus(kDepot, 10.0, 100.0), infusion_rate(kCentral, 3.0, 100.0, 10.0)});
  const SimulationResult r = simulate(p, scan_options());
  for (int c = 0; c < 3; ++c) EXPECT_EQ(r.amount(0, 3, c), 0.0);
  // One step of a 10-per-hour infusion entered by t = 4; nothing of the bolus at t = 10.
  EXPECT_NEAR(r.amount(0, 4, kCentral) + r.amount(0, 4, kPeripheral), 10.0, 1.0);
  EXPECT_EQ(r.amount(0, 4, kDepot), 0.0);
}

TEST(ReferenceScan, NoDosesGiveZeros) {
  const SimulationResult r = simulate(make_problem(1, 1, 1, 1, 0.1, 10, {}), scan_options());
  for (std::int64_t i = 0; i < r.times(); ++i)
    for (int c = 0; c < 3; ++c) EXPECT_EQ(r.amount(0, i, c), 0.0);
}

// Euler: x_i = (I + A dt) x_{i-1} + inputs, written out by hand with the 3x3 product expanded.
TEST(ReferenceScan, EulerMatchesHandWrittenRecurrence) {
  const double ka = 0.8, k12 = 0.3, k21 = 0.12, ke = 0.2, dt = 0.1;
  const std::int64_t steps = 500;
  DoseEvent rep = bolus(kDepot, 0.0, 100.0);
  rep.every = 12.0;
  rep.repeat = 3;
  DoseEvent inf = infusion_rate(kCentral, 2.0, 55.0, 20.0);  // 2.75 h: ends inside a step
  const Problem p = make_problem(ka, k12, k21, ke, dt, steps, {rep, inf}, Discretization::Euler);
  const SimulationResult r = simulate(p, scan_options());

  double x0 = 100.0, x1 = 0.0, x2 = 0.0;
  for (std::int64_t i = 1; i <= steps; ++i) {
    const double t_end = static_cast<double>(i) * dt;
    const double t_begin = t_end - dt;
    const double y0 = (1 - ka * dt) * x0;
    const double y1 = ka * dt * x0 + (1 - (k12 + ke) * dt) * x1 + k21 * dt * x2;
    const double y2 = k12 * dt * x1 + (1 - k21 * dt) * x2;
    x0 = y0, x1 = y1, x2 = y2;
    // infusion from 2.0 to 4.75: rate * covered part of the step, added at the end of the step
    const double covered = std::max(0.0, std::min(t_end, 4.75) - std::max(t_begin, 2.0));
    x1 += 20.0 * covered;
    const long k = std::lround(t_end / 12.0);
    if (std::fabs(t_end - 12.0 * k) < 1e-9 && k >= 1 && k <= 3) x0 += 100.0;
    for (int c = 0; c < 3; ++c) {
      const double e = c == 0 ? x0 : c == 1 ? x1 : x2;
      PKSCAN_EXPECT_CLOSE(e, r.amount(0, i, c), 1e-13, 1e-13, "step " << i << " cmt " << c);
    }
  }
}

// Mass balance: with a sink compartment that collects what central eliminates, every amount
// is accounted for: depot + central + peripheral + eliminated = dosed so far.
TEST(ReferenceScan, MassBalanceForRandomParametersAndRegimens) {
  std::mt19937 rng(test_seed());
  SCOPED_TRACE("seed " + std::to_string(test_seed()));
  std::uniform_real_distribution<double> rate(0.01, 2.0), amount(1.0, 500.0);
  std::uniform_int_distribution<int> cmt(0, 2), when(0, 40), reps(0, 5), gap(1, 12);
  for (int trial = 0; trial < 40; ++trial) {
    const double ka = rate(rng), k12 = rate(rng), k21 = rate(rng), ke = rate(rng);
    const double dt = 0.25;
    const Discretization disc = trial % 4 == 3 ? Discretization::Euler : Discretization::Exact;
    const double scale = disc == Discretization::Euler ? 0.5 : 1.0;  // keep 1 - k dt >= 0
    std::vector<DoseEvent> doses;
    for (int k = 0; k < 4; ++k) {
      DoseEvent d = bolus(cmt(rng), dt * when(rng), amount(rng));
      if (k % 2 == 1) d.rate = amount(rng) / 7.3;
      d.repeat = reps(rng);
      if (d.repeat > 0) d.every = dt * gap(rng);
      doses.push_back(d);
    }
    Problem p =
        make_problem(ka * scale, k12 * scale, k21 * scale, ke * scale, dt, 120, doses, disc);

    detail::Mat<3> a3;
    rate_matrix(p.parameters.info(), p.parameters.row(0), a3.data());
    detail::Mat<4> a = detail::Mat<4>::Zero();
    a.topLeftCorner<3, 3>() = a3;
    a(3, 1) = p.parameters.get(
        0, parameter_index(p.parameters.info(), "ke"));  // the sink receives ke * central
    const detail::Schedule s = detail::compile_schedule(p.doses, p.grid, 4);
    const std::vector<std::int64_t> out = detail::output_steps(p.output, p.grid);
    std::vector<double> x(out.size() * 4);
    const SubjectStatus st =
        detail::reference_scan_matrix<4, double>(a, p.grid.dt, p.discretization, s, out, x.data());
    ASSERT_EQ(st, SubjectStatus::Ok);
    const SimulationResult r = simulate(p, scan_options());
    for (std::size_t i = 0; i < out.size(); ++i) {
      const double t = p.grid.time(out[i]);
      double dosed = 0.0;
      for (const DoseEvent& d : doses) {
        for (int k = 0; k <= d.repeat; ++k) {
          const double td = d.time + k * d.every;
          if (td > t + 1e-9) continue;
          dosed += d.rate > 0 ? std::min(d.amount, d.rate * (t - td)) : d.amount;
        }
      }
      const double total = x[i * 4] + x[i * 4 + 1] + x[i * 4 + 2] + x[i * 4 + 3];
      PKSCAN_EXPECT_CLOSE(dosed, total, 1e-12, 1e-10, "trial " << trial << " t=" << t);
      for (int c = 0; c < 3; ++c)
        PKSCAN_EXPECT_CLOSE(x[i * 4 + static_cast<std::size_t>(c)],
                            r.amount(0, static_cast<std::int64_t>(i), c), 1e-11, 1e-11,
                            "trial " << trial << " t=" << t << " cmt " << c);
    }
  }
}

TEST(ReferenceScan, Float32WithinOneInTenToTheFiveOfFloat64) {
  std::mt19937 rng(test_seed() + 1);
  std::uniform_real_distribution<double> rate(0.01, 1.0);
  for (Discretization disc : {Discretization::Exact, Discretization::Euler}) {
    DoseEvent rep = bolus(kDepot, 0.0, 100.0);
    rep.every = 24.0;
    rep.repeat = 40;
    DoseEvent inf = infusion_rate(kCentral, 5.0, 300.0, 70.0);
    Problem p = make_problem(0.5, 0.1, 0.05, 0.1, 1.0, 1000, {rep, inf}, disc);
    p.parameters = ParameterBatch(ModelKind::ThreeCompartment, 8);
    for (std::int64_t s = 0; s < 8; ++s) {
      p.parameters.set("ka", s, rate(rng));
      p.parameters.set("k12", s, rate(rng) * 0.5);
      p.parameters.set("k21", s, rate(rng) * 0.5);
      p.parameters.set("ke", s, rate(rng) * 0.5);
      p.parameters.set("v_central", s, 10.0);
      p.parameters.set("v_peripheral", s, 30.0);
    }
    const SimulationResult r64 = simulate(p, scan_options(Precision::Float64));
    const SimulationResult r32 = simulate(p, scan_options(Precision::Float32));
    ASSERT_TRUE(r32.amounts_f64().empty());
    ASSERT_FALSE(r32.amounts_f32().empty());
    double worst = 0.0;
    for (std::int64_t s = 0; s < 8; ++s) {
      double peak = 0.0;
      for (std::int64_t i = 0; i < r64.times(); ++i)
        for (int c = 0; c < 3; ++c) peak = std::max(peak, std::fabs(r64.amount(s, i, c)));
      for (std::int64_t i = 0; i < r64.times(); ++i)
        for (int c = 0; c < 3; ++c)
          worst = std::max(worst, std::fabs(r64.amount(s, i, c) - r32.amount(s, i, c)) / peak);
    }
    RecordProperty(disc == Discretization::Exact ? "worst_f32_exact" : "worst_f32_euler",
                   std::to_string(worst));
    EXPECT_LE(worst, 1e-5);
  }
}

TEST(ReferenceScan, SparseOutputEqualsTheDenseRowsBitForBit) {
  DoseEvent rep = bolus(kDepot, 0.0, 100.0);
  rep.every = 6.0;
  rep.repeat = 10;
  Problem dense = make_problem(0.7, 0.2, 0.1, 0.15, 0.5, 200, {rep});
  Problem sparse = dense;
  sparse.output = OutputTimes::at_steps({0, 7, 8, 150, 200});
  const SimulationResult a = simulate(dense, scan_options());
  const SimulationResult b = simulate(sparse, scan_options());
  ASSERT_EQ(b.times(), 5);
  for (std::int64_t i = 0; i < b.times(); ++i)
    for (int c = 0; c < 3; ++c)
      EXPECT_EQ(b.amount(0, i, c), a.amount(0, b.output_steps()[static_cast<std::size_t>(i)], c));
  EXPECT_DOUBLE_EQ(b.output_times()[3], 75.0);
}

}  // namespace
}  // namespace pkscan
