#include "common/backoff.h"

#include "gtest/gtest.h"

namespace tagi {
namespace {

TEST(BackoffDelay, DoublesFromAHundredMillisecondsUpToTheCapWithHalfJitter) {
  const absl::Duration cap = absl::Seconds(5);
  for (uint64_t seed = 0; seed < 200; ++seed) {
    const absl::Duration first = BackoffDelay(0, cap, seed);
    EXPECT_GE(first, absl::Milliseconds(50));
    EXPECT_LT(first, absl::Milliseconds(150));
    const absl::Duration third = BackoffDelay(2, cap, seed);
    EXPECT_GE(third, absl::Milliseconds(200));
    EXPECT_LT(third, absl::Milliseconds(600));
    const absl::Duration late = BackoffDelay(50, cap, seed);  // capped, no overflow
    EXPECT_GE(late, cap / 2);
    EXPECT_LT(late, cap * 1.5);
  }
  EXPECT_EQ(BackoffDelay(3, cap, 7), BackoffDelay(3, cap, 7));
  EXPECT_NE(BackoffDelay(3, cap, 7), BackoffDelay(3, cap, 8));
}

}  // namespace
}  // namespace tagi
