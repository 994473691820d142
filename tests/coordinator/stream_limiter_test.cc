#include "coordinator/stream_limiter.h"

#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tagi::coordinator {
namespace {

using ::testing::HasSubstr;

TEST(ClientOfPeer, DropsThePortOnly) {
  EXPECT_EQ(ClientOfPeer("ipv4:10.0.0.5:4711"), "ipv4:10.0.0.5");
  EXPECT_EQ(ClientOfPeer("ipv6:[::1]:80"), "ipv6:[::1]");
  EXPECT_EQ(ClientOfPeer("ipv6:[fe80::1]"), "ipv6:[fe80::1]");
  EXPECT_EQ(ClientOfPeer("unix:/run/tagi.sock"), "unix:/run/tagi.sock");
  EXPECT_EQ(ClientOfPeer("ipv4:10.0.0.5:"), "ipv4:10.0.0.5:");
  EXPECT_EQ(ClientOfPeer(""), "");
}

TEST(StreamLimiter, RefusesTheClientAtItsLimitAndFreesSlotsWithTheirLeases) {
  StreamLimiter limiter(2);
  std::vector<StreamLimiter::Lease> held;
  for (int port : {1000, 1001}) {
    auto lease = limiter.Acquire("ipv4:10.0.0.5:" + std::to_string(port));
    ASSERT_TRUE(lease.ok()) << lease.status();
    held.push_back(std::move(*lease));
  }
  auto third = limiter.Acquire("ipv4:10.0.0.5:1002");  // the same host, another connection
  ASSERT_TRUE(absl::IsResourceExhausted(third.status()));
  EXPECT_THAT(third.status().message(), HasSubstr("ipv4:10.0.0.5 already holds 2 streams"));
  EXPECT_TRUE(limiter.Acquire("ipv4:10.0.0.6:1000").ok());  // another host is not affected
  held.pop_back();
  EXPECT_EQ(limiter.open("ipv4:10.0.0.5:9"), 1);
  EXPECT_TRUE(limiter.Acquire("ipv4:10.0.0.5:1003").ok());  // (released at once again)
  held.clear();
  EXPECT_EQ(limiter.open("ipv4:10.0.0.5:9"), 0);
}

TEST(StreamLimiter, KeysByWorkerIdAndCapsAllKeysTogether) {
  StreamLimiter limiter(StreamLimits{.per_key = 2, .total = 3, .noun = "worker",
                                     .flags = "--max-streams-per-worker, --max-worker-streams"});
  std::vector<StreamLimiter::Lease> held;
  for (const char* id : {"w-1", "w-1", "w-2"}) {
    auto lease = limiter.AcquireKey(id);
    ASSERT_TRUE(lease.ok()) << lease.status();
    held.push_back(std::move(*lease));
  }
  EXPECT_EQ(limiter.total(), 3);
  auto over_total = limiter.AcquireKey("w-3");
  ASSERT_TRUE(absl::IsResourceExhausted(over_total.status()));
  EXPECT_THAT(over_total.status().message(), HasSubstr("already serves 3 streams"));
  held.pop_back();  // w-2's
  auto over_key = limiter.AcquireKey("w-1");
  ASSERT_TRUE(absl::IsResourceExhausted(over_key.status()));
  EXPECT_THAT(over_key.status().message(),
              HasSubstr("worker w-1 already holds 2 streams, the limit (--max-streams-per-worker"));
  EXPECT_TRUE(limiter.AcquireKey("w-3").ok());
}

}  // namespace
}  // namespace tagi::coordinator
