// The exit status of a test program run as one of ctest's shards (tests/CMakeLists.txt,
// pkscan_add_gtest_shards): RUN_ALL_TESTS()'s, except that a shard in which no case passed or
// failed (every selected case skipped itself, as the Gpu/ cases do on a machine without a GPU, or
// the shard selected none) exits with kShardSkipped, which ctest reports as skipped
// (SKIP_RETURN_CODE) rather than passed.
#pragma once

#include <gtest/gtest.h>

namespace pkscan::test {

inline constexpr int kShardSkipped = 77;

inline int shard_status(int run_all_tests_status) {
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  if (run_all_tests_status == 0 && u.successful_test_count() == 0 && u.failed_test_count() == 0)
    return kShardSkipped;
  return run_all_tests_status;
}

}  // namespace pkscan::test
