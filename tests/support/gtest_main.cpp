// The main of pkscan's Google Test programs: Google Test's own, with the exit status of a shard
// whose cases all skipped (support/shard_status.hpp).
#include <gtest/gtest.h>

#include "support/shard_status.hpp"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return pkscan::test::shard_status(RUN_ALL_TESTS());
}
