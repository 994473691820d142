// The Gloo backend with its ranks as threads of this process, on
// 127.0.0.1, rendezvousing through one InMemoryStore scoped per test.
#include "worker/collective/gloo/gloo_collective.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "tests/collective/rank_threads.h"

namespace tagi {
namespace {

using testing::RunRanks;
using testing::Timed;

constexpr absl::Duration kLong = absl::Seconds(20);
// A failure that is not a timeout must be reported well before kLong.
constexpr absl::Duration kPrompt = absl::Seconds(10);

class GlooTest : public ::testing::Test {
 protected:
  GlooTest()
      : store_(std::string("test/") +
                   ::testing::UnitTest::GetInstance()->current_test_info()->name() + "/",
               base_) {}

  // Connects `world` ranks (each on its own thread); fails the test unless
  // all of them connect.
  std::vector<std::unique_ptr<Collective>> Connect(int world) {
    std::vector<absl::StatusOr<std::unique_ptr<Collective>>> made(static_cast<size_t>(world));
    GlooOptions options;
    options.connect_timeout = absl::Seconds(10);
    RunRanks(world, [&](int r) { made[r] = CreateGlooCollective(store_, r, world, options); });
    std::vector<std::unique_ptr<Collective>> members;
    for (int r = 0; r < world; ++r) {
      EXPECT_TRUE(made[r].ok()) << made[r].status();
      if (made[r].ok()) members.push_back(std::move(*made[r]));
    }
    return members;
  }

  InMemoryStore base_;
  PrefixStore store_;
};

// Integer-valued inputs: every summation order gives exact results.
float Input(int rank, size_t i) { return static_cast<float>(i % 97) + 1000.0f * rank; }

void ExpectAllReduceSums(std::vector<std::unique_ptr<Collective>>& members, size_t n) {
  const int world = static_cast<int>(members.size());
  std::vector<std::vector<float>> data(members.size(), std::vector<float>(n));
  std::vector<absl::Status> status(members.size());
  RunRanks(world, [&](int r) {
    for (size_t i = 0; i < n; ++i) data[r][i] = Input(r, i);
    status[r] = members[r]->AllReduceSum(data[r], kLong);
  });
  for (int r = 0; r < world; ++r) {
    ASSERT_TRUE(status[r].ok()) << "n=" << n << ": " << status[r];
    size_t wrong = 0;
    for (size_t i = 0; i < n; ++i) {
      float want = 0.0f;
      for (int q = 0; q < world; ++q) want += Input(q, i);
      if (data[r][i] != want) ++wrong;
    }
    EXPECT_EQ(wrong, 0u) << "rank " << r << " of " << world << ", n=" << n;
    EXPECT_EQ(data[r], data[0]) << "ranks disagree, n=" << n;
  }
}

TEST_F(GlooTest, AllReduceSumsTwoAndThreeRanksSmallOddAndLargeBuffers) {
  for (int world : {2, 3}) {
    PrefixStore scope(absl::StrCat("world", world, "/"), store_);
    std::vector<absl::StatusOr<std::unique_ptr<Collective>>> made(static_cast<size_t>(world));
    RunRanks(world, [&](int r) { made[r] = CreateGlooCollective(scope, r, world, {}); });
    std::vector<std::unique_ptr<Collective>> members;
    for (auto& m : made) {
      ASSERT_TRUE(m.ok()) << m.status();
      members.push_back(std::move(*m));
    }
    EXPECT_EQ(members[world - 1]->rank(), world - 1);
    EXPECT_EQ(members[0]->world(), world);
    for (size_t n :
         {size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{1001}, size_t{1} << 20 /* 4 MiB */}) {
      ExpectAllReduceSums(members, n);
    }
  }
}

TEST_F(GlooTest, BroadcastCopiesRootToEveryRank) {
  auto members = Connect(3);
  ASSERT_EQ(members.size(), 3u);
  for (size_t n : {size_t{5}, size_t{1} << 20}) {
    std::vector<std::vector<float>> data(3, std::vector<float>(n));
    std::vector<absl::Status> status(3);
    RunRanks(3, [&](int r) {
      for (size_t i = 0; i < n; ++i) data[r][i] = Input(r, i);
      status[r] = members[r]->Broadcast(data[r], /*root=*/1, kLong);
    });
    for (int r = 0; r < 3; ++r) {
      ASSERT_TRUE(status[r].ok()) << status[r];
      EXPECT_EQ(data[r][n - 1], Input(1, n - 1)) << "rank " << r;
      EXPECT_EQ(data[r], data[1]);
    }
  }
}

TEST_F(GlooTest, BarrierAndEmptyBuffersComplete) {
  auto members = Connect(3);
  ASSERT_EQ(members.size(), 3u);
  std::vector<absl::Status> status(9);
  RunRanks(3, [&](int r) {
    status[3 * r] = members[r]->Barrier(kLong);
    status[3 * r + 1] = members[r]->AllReduceSum({}, kLong);
    status[3 * r + 2] = members[r]->Broadcast({}, 0, kLong);
  });
  for (const auto& st : status) EXPECT_TRUE(st.ok()) << st;
  ExpectAllReduceSums(members, 3);  // still in step after the empty calls
}

TEST_F(GlooTest, PeerThatNeverCallsGivesDeadlineExceededThenStickyAborted) {
  auto members = Connect(2);
  ASSERT_EQ(members.size(), 2u);
  std::vector<float> v(16, 1.0f);
  absl::Status st;
  const absl::Duration took =
      Timed([&] { st = members[0]->AllReduceSum(v, absl::Milliseconds(300)); });
  EXPECT_TRUE(absl::IsDeadlineExceeded(st)) << st;
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, kPrompt);
  EXPECT_TRUE(absl::IsAborted(members[0]->AllReduceSum(v, kLong)));
  EXPECT_TRUE(absl::IsAborted(members[0]->Barrier(kLong)));
  // The rank that timed out closed its connections: the late peer fails
  // at once instead of waiting for its own timeout.
  absl::Status late;
  EXPECT_LT(Timed([&] { late = members[1]->AllReduceSum(v, kLong); }), kPrompt);
  EXPECT_FALSE(late.ok());
}

TEST_F(GlooTest, DestroyedPeerFailsTheSurvivorBeforeItsTimeout) {
  auto members = Connect(2);
  ASSERT_EQ(members.size(), 2u);
  ExpectAllReduceSums(members, 100);
  absl::Status st;
  absl::Duration took;
  std::thread survivor([&] {
    std::vector<float> v(1000, 1.0f);
    took = Timed([&] { st = members[0]->AllReduceSum(v, kLong); });
  });
  members[1].reset();  // mid-way: before or while rank 0 waits
  survivor.join();
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(absl::IsAborted(st) || absl::IsUnavailable(st)) << st;
  EXPECT_LT(took, kPrompt);
}

TEST_F(GlooTest, AbortFromAnotherThreadEndsTheCallAndReachesThePeer) {
  auto members = Connect(2);
  ASSERT_EQ(members.size(), 2u);
  absl::Notification calling;
  absl::Status st;
  absl::Duration took;
  std::thread blocked([&] {
    std::vector<float> v(1000, 1.0f);
    calling.Notify();
    took = Timed([&] { st = members[0]->AllReduceSum(v, kLong); });
  });
  calling.WaitForNotification();
  members[0]->Abort();
  blocked.join();
  EXPECT_TRUE(absl::IsAborted(st)) << st;
  EXPECT_LT(took, kPrompt);
  EXPECT_TRUE(absl::IsAborted(members[0]->Barrier(kLong)));
  absl::Status peer;
  EXPECT_LT(Timed([&] { peer = members[1]->Barrier(kLong); }), kPrompt);
  EXPECT_FALSE(peer.ok());
}

TEST_F(GlooTest, AbortOfAnIdleRankUnblocksThePeersWaitingForIt) {
  auto members = Connect(3);
  ASSERT_EQ(members.size(), 3u);
  std::vector<absl::Status> status(2);
  std::vector<absl::Duration> took(2);
  absl::Notification started;
  std::thread waiting([&] {
    started.Notify();
    RunRanks(2, [&](int r) {
      std::vector<float> v(64, 1.0f);
      took[r] = Timed([&] { status[r] = members[r]->AllReduceSum(v, kLong); });
    });
  });
  started.WaitForNotification();
  members[2]->Abort();
  waiting.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(absl::IsAborted(status[r])) << "rank " << r << ": " << status[r];
    EXPECT_LT(took[r], kPrompt);
  }
}

TEST_F(GlooTest, RendezvousWithAMissingRankFailsWithinConnectTimeout) {
  GlooOptions options;
  options.connect_timeout = absl::Milliseconds(500);
  std::vector<absl::Status> status(2);
  std::vector<absl::Duration> took(2);
  RunRanks(2, [&](int r) {  // rank 2 of 3 never comes
    took[r] = Timed([&] { status[r] = CreateGlooCollective(store_, r, 3, options).status(); });
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(status[r])) << status[r];
    EXPECT_GE(took[r], absl::Milliseconds(450));
    EXPECT_LT(took[r], absl::Seconds(5));
  }
}

TEST_F(GlooTest, BadArgumentsAreInvalidArgument) {
  EXPECT_TRUE(absl::IsInvalidArgument(CreateGlooCollective(store_, 2, 2, {}).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(CreateGlooCollective(store_, 0, 0, {}).status()));
  GlooOptions no_host;
  no_host.hostname = "";
  EXPECT_TRUE(absl::IsInvalidArgument(CreateGlooCollective(store_, 0, 1, no_host).status()));
  GlooOptions no_time;
  no_time.connect_timeout = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(CreateGlooCollective(store_, 0, 1, no_time).status()));
}

TEST_F(GlooTest, SingleRankAndBadBroadcastRoot) {
  auto members = Connect(1);
  ASSERT_EQ(members.size(), 1u);
  std::vector<float> v = {3.0f, 4.0f};
  ASSERT_TRUE(members[0]->AllReduceSum(v, kLong).ok());
  EXPECT_EQ(v, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_TRUE(members[0]->Barrier(kLong).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(members[0]->Broadcast(v, 1, kLong)));
  EXPECT_TRUE(absl::IsAborted(members[0]->AllReduceSum(v, kLong)));
}

}  // namespace
}  // namespace tagi
