// When tagictl watch reconnects (ctl/watch_policy.h): times are values.
#include "ctl/watch_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

using ::testing::HasSubstr;

const absl::Time kStart = absl::FromUnixSeconds(1'700'000'000);
const absl::Time kDeadline = kStart + absl::Hours(1);
const absl::Duration kReconnectFor = absl::Seconds(60);

TEST(DecideWatchRetry, RetriesAnUnavailableCoordinatorWithGrowingBoundedDelays) {
  absl::Duration previous;
  for (int attempt = 0; attempt < 12; ++attempt) {
    const WatchRetry r = DecideWatchRetry(absl::UnavailableError("connection refused"), kStart,
                                          kStart + absl::Seconds(1), kDeadline, kReconnectFor,
                                          attempt, 7);
    ASSERT_TRUE(r.retry) << attempt;
    EXPECT_GT(r.delay, absl::ZeroDuration());
    EXPECT_LE(r.delay, absl::Seconds(3)) << "2 s cap plus jitter";
    if (attempt == 0) EXPECT_LE(r.delay, absl::Milliseconds(150));
    previous = r.delay;
  }
  EXPECT_GE(previous, absl::Seconds(1)) << "late attempts wait about the cap";
}

TEST(DecideWatchRetry, AStreamThatEndedBeforeTheJobIsRetried) {
  EXPECT_TRUE(DecideWatchRetry(absl::OkStatus(), kStart, kStart, kDeadline, kReconnectFor, 0, 1)
                  .retry);
}

TEST(DecideWatchRetry, OtherErrorsEndTheWatchAtOnceWithTheirMessage) {
  for (const absl::Status& st :
       {absl::NotFoundError("no job \"job-9\""), absl::UnauthenticatedError("bad token"),
        absl::InvalidArgumentError("bad id"), absl::PermissionDeniedError("no")}) {
    const WatchRetry r = DecideWatchRetry(st, kStart, kStart, kDeadline, kReconnectFor, 0, 1);
    EXPECT_FALSE(r.retry) << st;
    EXPECT_EQ(r.why, st.message());
  }
}

TEST(DecideWatchRetry, GivesUpWhenTheOutageOutlastsReconnectFor) {
  const absl::Status down = absl::UnavailableError("down");
  EXPECT_TRUE(DecideWatchRetry(down, kStart, kStart + absl::Seconds(59), kDeadline, kReconnectFor,
                               5, 1)
                  .retry);
  const WatchRetry r =
      DecideWatchRetry(down, kStart, kStart + absl::Seconds(60), kDeadline, kReconnectFor, 6, 1);
  EXPECT_FALSE(r.retry);
  EXPECT_THAT(r.why, HasSubstr("did not come back within 1m"));
  EXPECT_THAT(r.why, HasSubstr("--reconnect-for"));
}

TEST(DecideWatchRetry, NeverWaitsPastTheWatchDeadlineOrTheReconnectWindow) {
  const absl::Status down = absl::UnavailableError("down");
  WatchRetry r = DecideWatchRetry(down, kStart, kDeadline - absl::Milliseconds(5), kDeadline,
                                  absl::Hours(2), 10, 1);
  ASSERT_TRUE(r.retry);
  EXPECT_LE(r.delay, absl::Milliseconds(5));
  r = DecideWatchRetry(down, kStart, kStart + absl::Seconds(60) - absl::Milliseconds(3), kDeadline,
                       kReconnectFor, 10, 1);
  ASSERT_TRUE(r.retry);
  EXPECT_LE(r.delay, absl::Milliseconds(3));
  r = DecideWatchRetry(down, kStart, kDeadline, kDeadline, absl::Hours(2), 0, 1);
  EXPECT_FALSE(r.retry);
  EXPECT_EQ(r.why, "the watch timeout passed");
}

}  // namespace
}  // namespace tagi
