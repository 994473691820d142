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

}  // namespace
}  // namespace tagi::coordinator
