// PublishAndReadRankZero and StoreBarrier over an InMemoryStore with ranks
// as threads: the results, the deadlines, and the key reads they cost
// (O(world), where every rank reading every key cost world^2).
#include "common/group_sync.h"

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

// Counts the keys read (each key of a Get or a Wait), then forwards.
class CountingStore final : public Store {
 public:
  absl::Status Set(const std::string& key, const std::string& value) override {
    return base_.Set(key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    ++reads;
    return base_.Get(key, timeout);
  }
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override {
    reads += static_cast<int>(keys.size());
    return base_.Wait(keys, timeout);
  }
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    return base_.Add(key, delta);
  }
  std::atomic<int> reads{0};

 private:
  InMemoryStore base_;
};

template <typename Fn>
void RunRanks(int world, Fn fn) {
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back([&, r] { fn(r); });
  for (std::thread& t : ranks) t.join();
}

TEST(GroupSync, EveryRankReadsRankZerosValueWithOneReadEach) {
  CountingStore store;
  constexpr int kWorld = 64;
  std::vector<std::string> seen(kWorld);
  RunRanks(kWorld, [&](int r) {
    auto v = PublishAndReadRankZero(store, "replica", r, r == 0 ? "aa" : absl::StrCat("v", r),
                                    absl::Seconds(10));
    ASSERT_TRUE(v.ok()) << v.status();
    seen[static_cast<size_t>(r)] = *v;
  });
  for (const std::string& v : seen) EXPECT_EQ(v, "aa");
  EXPECT_EQ(store.reads.load(), kWorld - 1);
}

TEST(GroupSync, MissingRankZeroIsDeadlineExceeded) {
  CountingStore store;
  auto v = PublishAndReadRankZero(store, "replica", 3, "x", absl::Milliseconds(50));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded) << v.status();
}

TEST(GroupSync, BarrierReleasesOnlyWhenEveryRankArrivedWithLinearReads) {
  CountingStore store;
  constexpr int kWorld = 48;
  std::atomic<int> arrived{0};
  std::atomic<int> early{0};
  RunRanks(kWorld, [&](int r) {
    // The last rank comes late: nobody may leave before it arrived.
    if (r == kWorld - 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ++arrived;
    ASSERT_TRUE(StoreBarrier(store, "done", r, kWorld, absl::Seconds(10)).ok());
    if (arrived.load() < kWorld) ++early;
  });
  EXPECT_EQ(early.load(), 0);
  // Rank 0 reads world - 1 keys, every other rank one.
  EXPECT_EQ(store.reads.load(), 2 * (kWorld - 1));
}

TEST(GroupSync, BarrierWithAMissingRankEndsAtItsDeadline) {
  CountingStore store;
  constexpr int kWorld = 3;
  std::vector<absl::Status> results(kWorld - 1);
  RunRanks(kWorld - 1, [&](int r) {
    results[static_cast<size_t>(r)] = StoreBarrier(store, "done", r, kWorld, absl::Milliseconds(100));
  });
  for (const absl::Status& st : results) {
    EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  }
}

TEST(GroupSync, WorldOfOneNeedsNoPeers) {
  CountingStore store;
  EXPECT_TRUE(StoreBarrier(store, "done", 0, 1, absl::Milliseconds(10)).ok());
  EXPECT_EQ(*PublishAndReadRankZero(store, "replica", 0, "me", absl::Milliseconds(10)), "me");
}

}  // namespace
}  // namespace tagi
