// FailingCollective: fails exactly the Nth call, informs the peers, and
// stays failed.
#include "worker/collective/failing_collective.h"

#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/collective/rank_threads.h"
#include "worker/collective/in_process.h"

namespace tagi {
namespace {

using testing::Timed;

constexpr absl::Duration kLong = absl::Seconds(30);

TEST(FailingCollective, FailsExactlyTheNthCallThenStaysAborted) {
  InProcessGroup group(2);
  FailingCollective failing(group.Member(0), /*fail_on_call=*/3);
  auto peer = group.Member(1);
  EXPECT_EQ(failing.rank(), 0);
  EXPECT_EQ(failing.world(), 2);

  std::vector<absl::Status> peer_status;
  absl::Duration peer_third_call;
  std::thread t([&] {
    std::vector<float> v(2, 1.0f);
    peer_status.push_back(peer->AllReduceSum(v, kLong));
    peer_status.push_back(peer->Barrier(kLong));
    peer_third_call = Timed([&] { peer_status.push_back(peer->AllReduceSum(v, kLong)); });
  });
  std::vector<float> v(2, 1.0f);
  EXPECT_TRUE(failing.AllReduceSum(v, kLong).ok());
  EXPECT_EQ(v, (std::vector<float>{2.0f, 2.0f}));
  EXPECT_TRUE(failing.Barrier(kLong).ok());
  const absl::Status third = failing.AllReduceSum(v, kLong);
  EXPECT_TRUE(absl::IsUnavailable(third)) << third;
  EXPECT_TRUE(absl::IsAborted(failing.AllReduceSum(v, kLong)));
  EXPECT_TRUE(absl::IsAborted(failing.Broadcast(v, 0, kLong)));
  EXPECT_EQ(failing.calls(), 5);
  t.join();

  ASSERT_EQ(peer_status.size(), 3u);
  EXPECT_TRUE(peer_status[0].ok()) << peer_status[0];
  EXPECT_TRUE(peer_status[1].ok()) << peer_status[1];
  // The peer learns of the failure at once, not at its 30 s timeout.
  EXPECT_TRUE(absl::IsAborted(peer_status[2])) << peer_status[2];
  EXPECT_LT(peer_third_call, absl::Seconds(5));
}

TEST(FailingCollective, ZeroNeverInjects) {
  InProcessGroup group(1);
  FailingCollective never(group.Member(0), 0);
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(never.Barrier(kLong).ok());
  EXPECT_EQ(never.calls(), 10);
}

TEST(FailingCollective, AbortIsSticky) {
  InProcessGroup group(1);
  FailingCollective wrapped(group.Member(0), 100);
  wrapped.Abort();
  EXPECT_TRUE(absl::IsAborted(wrapped.Barrier(kLong)));
}

}  // namespace
}  // namespace tagi
