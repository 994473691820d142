#include "common/clock.h"

#include <atomic>
#include <thread>

#include "absl/synchronization/mutex.h"
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

TEST(FakeClock, WallTimeMovesWithIt) {
  FakeClock clock(absl::UnixEpoch(), absl::FromUnixSeconds(1'700'000'000));
  EXPECT_EQ(clock.WallNow(), absl::FromUnixSeconds(1'700'000'000));
  clock.Advance(absl::Seconds(5));
  EXPECT_EQ(clock.WallNow(), absl::FromUnixSeconds(1'700'000'005));
}

TEST(FakeClock, SleepForReturnsOnlyOnceAdvancedFarEnough) {
  FakeClock clock;
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    clock.SleepFor(absl::Seconds(10));
    woke = true;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  clock.Advance(absl::Seconds(9));
  absl::SleepFor(absl::Milliseconds(50));  // real time changes nothing
  EXPECT_FALSE(woke.load());
  clock.Advance(absl::Seconds(1));
  sleeper.join();
  EXPECT_TRUE(woke.load());
  EXPECT_EQ(clock.waiters(), 0);
}

TEST(FakeClock, AwaitEndsAtItsFakeDeadlineNotBefore) {
  FakeClock clock;
  absl::Mutex mu;
  bool flag = false;
  std::atomic<int> result{-1};
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithTimeout(mu, absl::Condition(&flag), absl::Seconds(30)) ? 1 : 0;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(result.load(), -1);  // 50 ms of real time are not 30 s of the clock's
  clock.Advance(absl::Seconds(30));
  waiter.join();
  EXPECT_EQ(result.load(), 0);  // the deadline, without the condition
}

TEST(FakeClock, AwaitEndsWhenTheConditionHolds) {
  FakeClock clock;
  absl::Mutex mu;
  bool flag = false;
  std::atomic<int> result{-1};
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(mu, absl::Condition(&flag), absl::InfiniteFuture()) ? 1 : 0;
  });
  ASSERT_TRUE(clock.AwaitWaiters(1));
  {
    absl::MutexLock lock(&mu);
    flag = true;
  }
  waiter.join();
  EXPECT_EQ(result.load(), 1);
}

TEST(FakeClock, AwaitWithAPastDeadlineChecksOnce) {
  FakeClock clock;
  absl::Mutex mu;
  bool flag = true;
  absl::MutexLock lock(&mu);
  EXPECT_TRUE(clock.AwaitWithTimeout(mu, absl::Condition(&flag), absl::ZeroDuration()));
  flag = false;
  EXPECT_FALSE(clock.AwaitWithTimeout(mu, absl::Condition(&flag), absl::ZeroDuration()));
  EXPECT_FALSE(clock.AwaitWithTimeout(mu, absl::Condition(&flag), -absl::Seconds(1)));
}

TEST(FakeClock, AwaitWaitersTimesOutWhenNobodyWaits) {
  FakeClock clock;
  EXPECT_FALSE(clock.AwaitWaiters(1, absl::Milliseconds(10)));
}

TEST(RealClock, AwaitHonoursTheDeadlineAndTheCondition) {
  RealClock clock;
  absl::Mutex mu;
  bool flag = false;
  absl::MutexLock lock(&mu);
  const absl::Time start = clock.Now();
  EXPECT_FALSE(clock.AwaitWithTimeout(mu, absl::Condition(&flag), absl::Milliseconds(20)));
  EXPECT_GE(clock.Now() - start, absl::Milliseconds(20));
  flag = true;
  EXPECT_TRUE(clock.AwaitWithDeadline(mu, absl::Condition(&flag), absl::InfiniteFuture()));
}

}  // namespace
}  // namespace tagi
