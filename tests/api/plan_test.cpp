// The rows per call of a streamed run (engine/api/plan.hpp): whole blocks of 1024 subjects,
// the largest number of blocks whose results fit in 64 MiB, more for summaries-only runs on the
// batched CPU path, and never more blocks than the run has rows.
#include "api/plan.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <pkscan/config/load.hpp>
#include <pkscan/engine.hpp>

namespace pkscan {
namespace {

constexpr std::int64_t kBlock = 1024;
constexpr std::uint64_t k64MiB = 64ull << 20;

// A run file's problem with `steps` output times (every step written).
Problem problem_of(int steps) {
  const config::RunSpec spec = config::parse_run_config(
      "model: three_compartment\n"
      "time: {dt: 1, steps: " +
          std::to_string(steps) +
          "}\n"
          "subjects:\n"
          "  parameters: {ka: 1.0, cl: 5.0, v_central: 20, q: 8, v_peripheral: 70}\n"
          "doses:\n"
          "  - {compartment: depot, time: 0, amount: 100}\n",
      "plan.yaml");
  return spec.problem;
}

Problem with_rows(Problem p, std::int64_t rows) {
  p.parameters = ParameterBatch(p.parameters.info_ptr(), rows);
  return p;
}

SimulateOptions streamed(Method m, int threads) {
  SimulateOptions o;
  o.method = m;
  o.device = Device::Cpu;
  o.threads = threads;
  o.concentrations = false;
  return o;
}

TEST(PlanChunkRows, TheMostWholeBlocksWhoseResultsFitIn64MiB) {
  for (int steps : {24, 1000, 20000}) {
    const Problem p = problem_of(steps);
    const SimulateOptions o = streamed(Method::Batched, 2);
    const std::int64_t rows = 10'000'000;
    const std::int64_t chunk = detail::plan_chunk_rows(p, o, rows, 0, false);
    EXPECT_EQ(chunk % kBlock, 0) << steps;
    EXPECT_GE(chunk, kBlock) << steps;
    if (chunk > kBlock) {
      EXPECT_LE(result_bytes(with_rows(p, chunk), o), k64MiB) << steps;
    }
    EXPECT_GT(result_bytes(with_rows(p, chunk + kBlock), o), k64MiB) << steps;
  }
}

TEST(PlanChunkRows, NeverMoreBlocksThanTheRunHasRows) {
  const Problem p = problem_of(24);
  const SimulateOptions o = streamed(Method::Batched, 2);
  EXPECT_EQ(detail::plan_chunk_rows(p, o, 1, 0, false), kBlock);
  EXPECT_EQ(detail::plan_chunk_rows(p, o, 3000, 0, false), 3 * kBlock);
  EXPECT_EQ(detail::plan_chunk_rows(p, o, 3000, 5000, false), 3 * kBlock);
}

TEST(PlanChunkRows, ARequestedSizeIsRoundedDownToWholeBlocks) {
  const Problem p = problem_of(24);
  const SimulateOptions o = streamed(Method::Batched, 2);
  EXPECT_EQ(detail::plan_chunk_rows(p, o, 100'000, 100, false), kBlock);
  EXPECT_EQ(detail::plan_chunk_rows(p, o, 100'000, 1500, false), kBlock);
  EXPECT_EQ(detail::plan_chunk_rows(p, o, 100'000, 5000, false), 4 * kBlock);
}

TEST(PlanChunkRows, SummariesOnlyOnTheBatchedCpuPathGiveEveryThreadFourBlocks) {
  // 20000 steps: 64 MiB of results is under one block, so the threads' blocks decide.
  const Problem p = problem_of(20000);
  for (int threads : {1, 2, 3}) {
    const SimulateOptions o = streamed(Method::Batched, threads);
    EXPECT_EQ(detail::plan_chunk_rows(p, o, 1'000'000, 0, false), kBlock) << threads;
    EXPECT_EQ(detail::plan_chunk_rows(p, o, 1'000'000, 0, true), 4 * threads * kBlock) << threads;
  }
  // The scan keeps the trajectories even for summaries: no more rows than their 64 MiB.
  EXPECT_EQ(detail::plan_chunk_rows(p, streamed(Method::Scan, 2), 1'000'000, 0, true), kBlock);
}

}  // namespace
}  // namespace pkscan
