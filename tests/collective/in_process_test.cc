// InProcessGroup against the contract of collective.h and in_process.h:
// deterministic sums, broadcast, barrier, timeouts, Abort and sticky errors.
#include "worker/collective/in_process.h"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/collective/rank_threads.h"

namespace tagi {
namespace {

using testing::RunRanks;
using testing::Timed;

constexpr absl::Duration kLong = absl::Seconds(30);

std::vector<std::unique_ptr<Collective>> Members(InProcessGroup& group) {
  std::vector<std::unique_ptr<Collective>> members;
  for (int r = 0; r < group.world(); ++r) members.push_back(group.Member(r));
  return members;
}

TEST(InProcessGroup, SumsInRankOrderIdenticallyOnEveryRank) {
  InProcessGroup group(3);
  auto members = Members(group);
  // Element 0 depends on the order: (1e8 + 1) + -1e8 is 0 in float, while
  // (1e8 + -1e8) + 1 would be 1.
  const float big = 1e8f;
  std::vector<std::vector<float>> data = {{big, 1, 2}, {1, 10, 20}, {-big, 100, 200}};
  std::vector<absl::Status> status(3);
  RunRanks(3, [&](int r) { status[r] = members[r]->AllReduceSum(data[r], kLong); });
  const float expected0 = (big + 1.0f) + -big;
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_EQ(data[r][0], expected0) << "rank " << r;
    EXPECT_EQ(data[r][1], 111.0f);
    EXPECT_EQ(data[r][2], 222.0f);
  }
  EXPECT_EQ(expected0, 0.0f);
}

TEST(InProcessGroup, ManyCallsBackToBackKeepTheirRounds) {
  constexpr int kWorld = 4;
  constexpr int kCalls = 200;
  InProcessGroup group(kWorld);
  auto members = Members(group);
  std::vector<int> failures(kWorld, 0);
  RunRanks(kWorld, [&](int r) {
    std::vector<float> v(5);
    for (int call = 0; call < kCalls; ++call) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(call * 100 + r + i);
      if (!members[r]->AllReduceSum(v, kLong).ok()) ++failures[r];
      // sum over r of (call*100 + r + i) = 4*(call*100 + i) + 6
      if (v[1] != static_cast<float>(kWorld * (call * 100 + 1) + 6)) ++failures[r];
    }
  });
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(failures[r], 0) << "rank " << r;
}

TEST(InProcessGroup, BroadcastCopiesRootToEveryRank) {
  InProcessGroup group(3);
  auto members = Members(group);
  std::vector<std::vector<float>> data = {{0, 0}, {7, 8}, {1, 1}};
  std::vector<absl::Status> status(3);
  RunRanks(3, [&](int r) { status[r] = members[r]->Broadcast(data[r], 1, kLong); });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(status[r].ok()) << status[r];
    EXPECT_EQ(data[r], (std::vector<float>{7, 8})) << "rank " << r;
  }
}

TEST(InProcessGroup, BarrierWaitsForEveryRank) {
  InProcessGroup group(2);
  auto members = Members(group);
  std::atomic<bool> returned{false};
  absl::Status first;
  std::thread t([&] {
    first = members[0]->Barrier(kLong);
    returned = true;
  });
  ASSERT_TRUE(group.AwaitArrivals(1, kLong));
  EXPECT_FALSE(returned.load()) << "rank 0 left the barrier before rank 1 arrived";
  EXPECT_TRUE(members[1]->Barrier(kLong).ok());
  t.join();
  EXPECT_TRUE(first.ok()) << first;
}

TEST(InProcessGroup, ZeroLengthCallsSucceed) {
  InProcessGroup group(2);
  auto members = Members(group);
  std::vector<absl::Status> status(2);
  RunRanks(2, [&](int r) { status[r] = members[r]->AllReduceSum({}, kLong); });
  EXPECT_TRUE(status[0].ok()) << status[0];
  EXPECT_TRUE(status[1].ok()) << status[1];
}

TEST(InProcessGroup, RankThatNeverArrivesGivesDeadlineExceededToTheOthers) {
  InProcessGroup group(3);
  auto members = Members(group);
  const absl::Duration timeout = absl::Milliseconds(200);
  std::vector<absl::Status> status(2);
  std::vector<absl::Duration> took(2);
  RunRanks(2, [&](int r) {
    std::vector<float> v(4, 1.0f);
    took[r] = Timed([&] { status[r] = members[r]->AllReduceSum(v, timeout); });
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(status[r])) << status[r];
    EXPECT_LT(took[r], absl::Seconds(5));
  }
  EXPECT_GE(std::max(took[0], took[1]), timeout);
  // Sticky, for every member, including the one that never came.
  std::vector<float> v(4);
  EXPECT_TRUE(absl::IsAborted(members[0]->AllReduceSum(v, kLong)));
  EXPECT_TRUE(absl::IsAborted(members[2]->AllReduceSum(v, kLong)));
  EXPECT_TRUE(absl::IsAborted(members[1]->Barrier(kLong)));
}

TEST(InProcessGroup, AbortFromAnotherThreadUnblocksTheWaitingRank) {
  InProcessGroup group(2);
  auto members = Members(group);
  absl::Status status;
  absl::Duration took;
  std::thread t([&] {
    std::vector<float> v(3, 1.0f);
    took = Timed([&] { status = members[0]->AllReduceSum(v, kLong); });
  });
  ASSERT_TRUE(group.AwaitArrivals(1, kLong));
  members[0]->Abort();  // the blocked rank's own member, from this thread
  t.join();
  EXPECT_TRUE(absl::IsAborted(status)) << status;
  EXPECT_LT(took, absl::Seconds(5));
  EXPECT_TRUE(absl::IsAborted(members[1]->Barrier(kLong)));
}

TEST(InProcessGroup, DestroyedMemberAbortsItsPeers) {
  InProcessGroup group(2);
  auto members = Members(group);
  absl::Status status;
  std::thread t([&] { status = members[0]->Barrier(kLong); });
  ASSERT_TRUE(group.AwaitArrivals(1, kLong));
  members[1].reset();
  t.join();
  EXPECT_TRUE(absl::IsAborted(status)) << status;
}

TEST(InProcessGroup, ErrorsAreStickyOnEveryCallKind) {
  InProcessGroup group(2);
  auto members = Members(group);
  members[1]->Abort();
  std::vector<float> v(2);
  for (int r = 0; r < 2; ++r) {
    const absl::Duration took = Timed([&] {
      EXPECT_TRUE(absl::IsAborted(members[r]->AllReduceSum(v, kLong)));
      EXPECT_TRUE(absl::IsAborted(members[r]->Broadcast(v, 0, kLong)));
      EXPECT_TRUE(absl::IsAborted(members[r]->Barrier(kLong)));
    });
    EXPECT_LT(took, absl::Seconds(1));
  }
}

TEST(InProcessGroup, MismatchedCallsFailBothRanks) {
  InProcessGroup group(2);
  auto members = Members(group);
  std::vector<absl::Status> status(2);
  RunRanks(2, [&](int r) {
    std::vector<float> v(static_cast<size_t>(3 + r));
    status[r] = members[r]->AllReduceSum(v, kLong);
  });
  // Whichever rank arrives second sees the mismatch; the other is aborted.
  const bool first_invalid = absl::IsInvalidArgument(status[0]);
  EXPECT_TRUE(first_invalid ? absl::IsAborted(status[1]) : absl::IsInvalidArgument(status[1]))
      << status[0] << " / " << status[1];
}

TEST(InProcessGroup, BroadcastWithBadRootIsInvalidArgument) {
  InProcessGroup group(1);
  auto member = group.Member(0);
  std::vector<float> v(2);
  EXPECT_TRUE(absl::IsInvalidArgument(member->Broadcast(v, 1, kLong)));
  EXPECT_TRUE(absl::IsAborted(member->Barrier(kLong)));
}

TEST(InProcessGroup, SingleRankIsTheIdentity) {
  InProcessGroup group(1);
  auto member = group.Member(0);
  std::vector<float> v = {1.5f, -2.0f};
  ASSERT_TRUE(member->AllReduceSum(v, kLong).ok());
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(member->rank(), 0);
  EXPECT_EQ(member->world(), 1);
}

}  // namespace
}  // namespace tagi
