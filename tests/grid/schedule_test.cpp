// The schedule compiler: grid snapping, breakpoints, infusion coverage.
#include "grid/schedule.hpp"

#include <gtest/gtest.h>

namespace pkscan::detail {
namespace {

TEST(GridIndex, AcceptsRoundingAndRejectsOffGridTimes) {
  EXPECT_EQ(grid_index(0.3, 0.1), 3);  // 0.3 / 0.1 = 2.9999999999999996
  EXPECT_EQ(grid_index(0.0, 0.25), 0);
  EXPECT_EQ(grid_index(12.0, 0.25), 48);
  EXPECT_EQ(grid_index(0.3, 0.25), -1);
  EXPECT_EQ(grid_index(1e6 * 0.1, 0.1), 1000000);
  EXPECT_EQ(grid_index(-1.0, 0.1), -1);
}

TEST(CompileSchedule, BolusAtZeroIsInitialStateAndRepeatsBecomeBreakpoints) {
  DoseEvent d;
  d.compartment = 0;
  d.amount = 100;
  d.every = 1.0;
  d.repeat = 2;  // t = 0, 1, 2
  const Schedule s = compile_schedule({d}, TimeGrid{0.5, 10}, 3);
  EXPECT_EQ(s.initial[0], 100.0);
  ASSERT_EQ(s.breakpoints(), 3);  // step 1 (always), 2 and 4
  EXPECT_EQ(s.bp_step[0], 1);
  EXPECT_EQ(s.bp_step[1], 2);
  EXPECT_EQ(s.bp_step[2], 4);
  EXPECT_EQ(s.bp_bolus[1 * 3 + 0], 100.0);
  EXPECT_EQ(s.bp_bolus[2 * 3 + 0], 100.0);
  EXPECT_EQ(s.bp_last(2), 10);
}

TEST(CompileSchedule, InfusionEndingInsideAStepHasAPartialStep) {
  DoseEvent d;
  d.compartment = 1;
  d.time = 1.0;
  d.amount = 13.0;
  d.rate = 10.0;  // 1.3 h from t = 1: steps 3..4 full (dt 0.5), step 5 covers 0.3
  const Schedule s = compile_schedule({d}, TimeGrid{0.5, 10}, 3);
  ASSERT_EQ(s.breakpoints(), 4);  // step 1 (always), 3 (start), 5 (partial), 6 (after)
  EXPECT_EQ(s.bp_step[1], 3);
  EXPECT_EQ(s.bp_rate[1 * 3 + 1], 10.0);
  EXPECT_EQ(s.bp_step[2], 5);
  EXPECT_EQ(s.bp_rate[2 * 3 + 1], 0.0);
  ASSERT_EQ(s.partials.size(), 1u);
  EXPECT_NEAR(s.partial_lengths[0], 0.3, 1e-12);
  EXPECT_EQ(s.bp_partial_begin[2], 0);
  EXPECT_EQ(s.bp_partial_begin[3], 1);
  EXPECT_EQ(s.bp_step[3], 6);
  EXPECT_EQ(s.bp_rate[3 * 3 + 1], 0.0);
}

TEST(CompileSchedule, OverlappingInfusionsSumAndEndExactlyAtZeroRate) {
  DoseEvent a;
  a.compartment = 1;
  a.amount = 3.0;
  a.rate = 0.1;  // 30 h
  DoseEvent b = a;
  b.time = 2.0;
  b.rate = 0.7;
  b.amount = 0.7 * 4;  // 4 h
  const Schedule s = compile_schedule({a, b}, TimeGrid{1.0, 40}, 3);
  // steps 1-2: 0.1; 3-6: 0.8; 7-30: 0.1; 31-: 0
  ASSERT_EQ(s.breakpoints(), 4);
  EXPECT_DOUBLE_EQ(s.bp_rate[1 * 3 + 1], 0.1 + 0.7);
  EXPECT_EQ(s.bp_rate[2 * 3 + 1], 0.1);
  EXPECT_EQ(s.bp_rate[3 * 3 + 1], 0.0);
  EXPECT_EQ(s.bp_step[3], 31);
}

}  // namespace
}  // namespace pkscan::detail
