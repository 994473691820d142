#include "common/clock.h"

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

TEST(FakeClock, StartsAtTheGivenTimeAndStandsStill) {
  const absl::Time start = absl::FromUnixSeconds(1000);
  FakeClock clock(start);
  EXPECT_EQ(clock.Now(), start);
  EXPECT_EQ(clock.Now(), start);
  EXPECT_EQ(FakeClock().Now(), absl::UnixEpoch());
}

TEST(FakeClock, MovesOnlyByAdvance) {
  FakeClock clock;
  clock.Advance(absl::Seconds(3));
  clock.Advance(absl::Milliseconds(250));
  EXPECT_EQ(clock.Now() - absl::UnixEpoch(), absl::Milliseconds(3250));
}

TEST(RealClock, NeverGoesBackwards) {
  RealClock clock;
  absl::Time last = clock.Now();
  for (int i = 0; i < 10000; ++i) {
    const absl::Time now = clock.Now();
    ASSERT_GE(now, last);
    last = now;
  }
}

TEST(Clock, RealAndFakeShareTheInterface) {
  FakeClock fake;
  RealClock real;
  Clock* clocks[] = {&fake, &real};
  for (Clock* c : clocks) EXPECT_NE(c->Now(), absl::InfinitePast());
}

}  // namespace
}  // namespace tagi
