#include "worker/data/sampler.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace tagi::data {
namespace {

std::vector<uint32_t> BatchOf(const DistributedSampler& s, uint64_t epoch,
                              size_t step) {
  std::vector<uint32_t> out(s.batch());
  s.Batch(epoch, step, out);
  return out;
}

// Every index any rank of a (world, batch) job sees in one epoch, in
// order of (step, rank, position).
std::vector<uint32_t> WholeEpoch(size_t n, uint64_t seed, int world,
                                 size_t batch, uint64_t epoch) {
  std::vector<uint32_t> all;
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(n, seed, world, r, batch);
  for (size_t step = 0; step < ranks[0].steps_per_epoch(); ++step) {
    for (const DistributedSampler& s : ranks) {
      const std::vector<uint32_t> b = BatchOf(s, epoch, step);
      all.insert(all.end(), b.begin(), b.end());
    }
  }
  return all;
}

TEST(EpochPermutation, IsAPermutation) {
  std::vector<uint32_t> p = EpochPermutation(1000, 5, 3);
  std::sort(p.begin(), p.end());
  for (uint32_t i = 0; i < 1000; ++i) ASSERT_EQ(p[i], i);
}

TEST(DistributedSampler, StepsPerEpochIsCeilAndEqualOnAllRanks) {
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(DistributedSampler(100, 1, 3, r, 8).steps_per_epoch(), 5u);
    EXPECT_EQ(DistributedSampler(96, 1, 3, r, 8).steps_per_epoch(), 4u);
    EXPECT_EQ(DistributedSampler(1, 1, 3, r, 8).steps_per_epoch(), 1u);
  }
}

TEST(DistributedSampler, RanksAreDisjointAndCoverEverythingWhenDivisible) {
  const std::vector<uint32_t> all = WholeEpoch(96, 9, 3, 8, 0);
  ASSERT_EQ(all.size(), 96u);
  const std::set<uint32_t> unique(all.begin(), all.end());
  EXPECT_EQ(unique.size(), 96u);  // disjoint
  EXPECT_EQ(*unique.begin(), 0u);
  EXPECT_EQ(*unique.rbegin(), 95u);
}

TEST(DistributedSampler, PaddingCoversAllWithFewerThanGlobalBatchDuplicates) {
  const size_t n = 100, world = 3, batch = 8;
  const std::vector<uint32_t> all = WholeEpoch(n, 9, world, batch, 2);
  EXPECT_EQ(all.size(), 5 * world * batch);
  std::map<uint32_t, int> counts;
  for (uint32_t i : all) ++counts[i];
  EXPECT_EQ(counts.size(), n);  // covering
  size_t duplicates = 0;
  for (const auto& [index, count] : counts) {
    ASSERT_LE(count, 2);
    duplicates += count - 1;
  }
  EXPECT_EQ(duplicates, 5 * world * batch - n);
  EXPECT_LT(duplicates, world * batch);
}

TEST(DistributedSampler, TwoRanksOfEightEqualOneRankOfSixteen) {
  const size_t n = 77;
  const DistributedSampler r0(n, 123, 2, 0, 8), r1(n, 123, 2, 1, 8);
  const DistributedSampler single(n, 123, 1, 0, 16);
  ASSERT_EQ(r0.steps_per_epoch(), single.steps_per_epoch());
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    for (size_t step = 0; step < single.steps_per_epoch(); ++step) {
      std::vector<uint32_t> joined = BatchOf(r0, epoch, step);
      const std::vector<uint32_t> second = BatchOf(r1, epoch, step);
      joined.insert(joined.end(), second.begin(), second.end());
      EXPECT_EQ(joined, BatchOf(single, epoch, step))
          << "epoch " << epoch << " step " << step;
    }
  }
}

TEST(DistributedSampler, IsDeterministicAcrossInstances) {
  const DistributedSampler a(50, 77, 2, 1, 4), b(50, 77, 2, 1, 4);
  for (size_t step = 0; step < a.steps_per_epoch(); ++step) {
    EXPECT_EQ(BatchOf(a, 4, step), BatchOf(b, 4, step));
  }
}

TEST(DistributedSampler, EpochsAndSeedsGiveDifferentOrders) {
  EXPECT_NE(WholeEpoch(64, 1, 2, 4, 0), WholeEpoch(64, 1, 2, 4, 1));
  EXPECT_NE(WholeEpoch(64, 1, 2, 4, 0), WholeEpoch(64, 2, 2, 4, 0));
}

TEST(DistributedSampler, BatchDependsOnlyOnItsArguments) {
  const DistributedSampler sequential(40, 5, 2, 1, 3);
  std::vector<std::vector<uint32_t>> seen;
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    for (size_t step = 0; step < sequential.steps_per_epoch(); ++step) {
      seen.push_back(BatchOf(sequential, epoch, step));
    }
  }
  // A fresh instance resumed at (2, 4), and one that jumps between epochs.
  const size_t steps = sequential.steps_per_epoch();
  const DistributedSampler resumed(40, 5, 2, 1, 3);
  EXPECT_EQ(BatchOf(resumed, 2, 4), seen[2 * steps + 4]);
  EXPECT_EQ(BatchOf(resumed, 0, 1), seen[1]);
  EXPECT_EQ(BatchOf(resumed, 2, 5), seen[2 * steps + 5]);
}

TEST(DistributedSampler, MoreRanksThanSamplesStillFillsEveryBatch) {
  const std::vector<uint32_t> all = WholeEpoch(3, 8, 4, 2, 0);
  EXPECT_EQ(all.size(), 8u);
  EXPECT_EQ(std::set<uint32_t>(all.begin(), all.end()).size(), 3u);
}


TEST(DistributedSampler, OffsetStepsAreTheStepsOfOneWorld) {
  for (int r = 0; r < 3; ++r) {
    const DistributedSampler s(100, 4, 3, r, 8);
    EXPECT_EQ(s.global_batch(), 24u);
    EXPECT_EQ(s.StepsFrom(0), s.steps_per_epoch());
    EXPECT_EQ(s.StepsFrom(24), s.steps_per_epoch() - 1);
    EXPECT_EQ(s.StepsFrom(99), 1u);
    EXPECT_EQ(s.StepsFrom(100), 0u);
    for (size_t step = 0; step < s.steps_per_epoch(); ++step) {
      std::vector<uint32_t> at(8);
      s.BatchAt(2, step * 24, at);
      EXPECT_EQ(at, BatchOf(s, 2, step)) << step;
    }
  }
}

// An epoch that runs two steps under world 3, then goes on under world 2
// from where it was: the samples it trains on are the epoch's sequence,
// cut into the new world's global batches from that offset, and together
// they cover every sample once the epoch ends (padding wraps as usual).
TEST(DistributedSampler, AnEpochGoesOnUnderAnotherWorldFromItsOffset) {
  const size_t n = 100, batch = 8;
  const uint64_t seed = 11, epoch = 1;
  const std::vector<uint32_t> p = EpochPermutation(n, seed, epoch);
  std::vector<uint32_t> seen;
  size_t offset = 0;
  for (int step = 0; step < 2; ++step, offset += 3 * batch) {
    for (int r = 0; r < 3; ++r) {
      std::vector<uint32_t> b(batch);
      DistributedSampler(n, seed, 3, r, batch).BatchAt(epoch, offset, b);
      seen.insert(seen.end(), b.begin(), b.end());
    }
  }
  const DistributedSampler two(n, seed, 2, 0, batch);
  EXPECT_EQ(two.StepsFrom(offset), 4u);  // (100 - 48) / 16, rounded up
  for (; offset < n; offset += 2 * batch) {
    for (int r = 0; r < 2; ++r) {
      std::vector<uint32_t> b(batch);
      DistributedSampler(n, seed, 2, r, batch).BatchAt(epoch, offset, b);
      seen.insert(seen.end(), b.begin(), b.end());
    }
  }
  ASSERT_EQ(seen.size(), 112u);  // 48 + 4 * 16
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], p[i % n]) << i;
}

}  // namespace
}  // namespace tagi::data
