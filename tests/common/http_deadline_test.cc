// EffectiveRequestDeadline: the request deadline tightens as the HTTP
// server's connection table fills (common/http_server.h).
#include "common/http_server.h"

#include "gtest/gtest.h"

namespace tagi {
namespace {

TEST(EffectiveRequestDeadline, FullUpToHalfThenShrinksToHalfASecondWhenFull) {
  const absl::Duration base = absl::Seconds(10);
  EXPECT_EQ(EffectiveRequestDeadline(base, 0, 1024), base);
  EXPECT_EQ(EffectiveRequestDeadline(base, 512, 1024), base);
  EXPECT_EQ(EffectiveRequestDeadline(base, 768, 1024), absl::Milliseconds(5250));
  EXPECT_EQ(EffectiveRequestDeadline(base, 1024, 1024), kCrowdedRequestDeadline);
  EXPECT_EQ(EffectiveRequestDeadline(base, 5000, 1024), kCrowdedRequestDeadline);
  // A deadline already below the crowded one is never lengthened.
  EXPECT_EQ(EffectiveRequestDeadline(absl::Milliseconds(200), 1024, 1024),
            absl::Milliseconds(200));
}

}  // namespace
}  // namespace tagi
