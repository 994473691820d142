// RefusalLog: one line per client host and kind of refusal per interval,
// with the count of the silent ones (fake clock, no sleeps).
#include "common/refusal_log.h"

#include "common/peer.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ClientOfPeer, DropsThePortOfGrpcPeers) {
  EXPECT_EQ(ClientOfPeer("ipv4:10.0.0.5:51234"), "ipv4:10.0.0.5");
  EXPECT_EQ(ClientOfPeer("ipv6:[::1]:5000"), "ipv6:[::1]");
  EXPECT_EQ(ClientOfPeer("ipv6:[fe80::1%eth0]:7"), "ipv6:[fe80::1%eth0]");
  EXPECT_EQ(ClientOfPeer("unix:/run/tagi.sock"), "unix:/run/tagi.sock");
  EXPECT_EQ(ClientOfPeer("::1"), "::1");  // REST's remote address, no port
  EXPECT_EQ(ClientOfPeer("10.0.0.5"), "10.0.0.5");
  EXPECT_EQ(ClientOfPeer(""), "");
  EXPECT_EQ(ClientOfPeer("ipv4:"), "ipv4:");
}

TEST(RefusalLog, LogsTheFirstRefusalThenCountsTheRestOfTheInterval) {
  FakeClock clock(absl::FromUnixSeconds(1'700'000'000));
  RefusalLog log(clock, absl::Minutes(1));
  auto first = log.Note("ipv4:10.0.0.5:1000", "Cluster.Register: invalid join token");
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(*first, "refused Cluster.Register: invalid join token from ipv4:10.0.0.5:1000");
  // A worker retrying over new connections (new ports) for 59 s: silent.
  for (int i = 0; i < 59; ++i) {
    clock.Advance(absl::Seconds(1));
    EXPECT_FALSE(log.Note(absl::StrCat("ipv4:10.0.0.5:", 1001 + i),
                          "Cluster.Register: invalid join token")
                     .has_value());
  }
  clock.Advance(absl::Seconds(1));
  auto next = log.Note("ipv4:10.0.0.5:2000", "Cluster.Register: invalid join token");
  ASSERT_TRUE(next.has_value());
  EXPECT_THAT(*next, HasSubstr("from ipv4:10.0.0.5:2000 (and 59 more from ipv4:10.0.0.5 not "
                               "logged since"));
  // Nothing was held back since that line: the next one after the interval
  // carries no count.
  clock.Advance(absl::Minutes(2));
  auto quiet = log.Note("ipv4:10.0.0.5:3000", "Cluster.Register: invalid join token");
  ASSERT_TRUE(quiet.has_value());
  EXPECT_THAT(*quiet, Not(HasSubstr("more")));
}

TEST(RefusalLog, OtherHostsAndOtherKindsAreLoggedOnTheirOwn) {
  FakeClock clock(absl::FromUnixSeconds(1'700'000'000));
  RefusalLog log(clock);
  EXPECT_TRUE(log.Note("ipv4:10.0.0.5:1", "Jobs.Submit: invalid API token").has_value());
  EXPECT_TRUE(log.Note("ipv4:10.0.0.6:1", "Jobs.Submit: invalid API token").has_value());
  EXPECT_TRUE(log.Note("ipv4:10.0.0.5:2", "Jobs.Submit: no authorization metadata").has_value());
  EXPECT_FALSE(log.Note("ipv4:10.0.0.5:3", "Jobs.Submit: invalid API token").has_value());
}

TEST(RefusalLog, RemembersABoundedNumberOfPairs) {
  FakeClock clock(absl::FromUnixSeconds(1'700'000'000));
  RefusalLog log(clock, absl::Minutes(1), /*max_pairs=*/3);
  for (int host = 0; host < 3; ++host) {
    EXPECT_TRUE(log.Note(absl::StrCat("ipv4:10.0.0.", host, ":1"), "x").has_value());
    clock.Advance(absl::Seconds(1));
  }
  // A fourth host makes the pair logged longest ago (10.0.0.0) forgotten:
  // its next refusal is logged again, the others stay silent.
  EXPECT_TRUE(log.Note("ipv4:10.0.0.3:1", "x").has_value());
  EXPECT_FALSE(log.Note("ipv4:10.0.0.2:1", "x").has_value());
  EXPECT_TRUE(log.Note("ipv4:10.0.0.0:1", "x").has_value());
}

}  // namespace
}  // namespace tagi
