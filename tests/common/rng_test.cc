#include "common/rng.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace tagi {
namespace {

std::vector<uint64_t> Draw(Rng& rng, int n) {
  std::vector<uint64_t> out;
  for (int i = 0; i < n; ++i) out.push_back(rng.NextU64());
  return out;
}

TEST(Rng, SameSeedGivesTheSameSequence) {
  Rng a(42);
  Rng b(42);
  EXPECT_EQ(Draw(a, 1000), Draw(b, 1000));
}

TEST(Rng, DifferentSeedsGiveDifferentSequences) {
  Rng a(1);
  Rng b(2);
  const std::vector<uint64_t> da = Draw(a, 100);
  const std::vector<uint64_t> db = Draw(b, 100);
  int equal = 0;
  for (size_t i = 0; i < da.size(); ++i) equal += da[i] == db[i];
  EXPECT_EQ(equal, 0);
}

TEST(Rng, SeedZeroIsNotDegenerate) {
  Rng rng(0);
  const std::vector<uint64_t> d = Draw(rng, 100);
  EXPECT_EQ(std::set<uint64_t>(d.begin(), d.end()).size(), d.size());
}

TEST(Rng, ReseedingRestartsTheSequence) {
  Rng a(7);
  const std::vector<uint64_t> first = Draw(a, 10);
  a.Seed(7);
  EXPECT_EQ(Draw(a, 10), first);
}

TEST(Rng, SetStateResumesExactly) {
  Rng a(123);
  Draw(a, 17);
  (void)a.Normal();
  const Rng::State saved = a.state();
  const std::vector<uint64_t> expected = Draw(a, 100);
  const double expected_normal = a.Normal();

  Rng b(999);  // a different stream, then restored
  b.set_state(saved);
  EXPECT_EQ(Draw(b, 100), expected);
  EXPECT_EQ(b.Normal(), expected_normal);
  EXPECT_EQ(b.state(), a.state());
}

TEST(Rng, UniformStaysInTheHalfOpenUnitInterval) {
  Rng rng(5);
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = rng.Uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.01);
}

TEST(Rng, BelowStaysInRange) {
  Rng rng(11);
  for (uint64_t n : {1ull, 2ull, 3ull, 10ull, 1000ull, (1ull << 63) + 1, ~0ull}) {
    for (int i = 0; i < 2000; ++i) ASSERT_LT(rng.Below(n), n) << "n=" << n;
  }
  for (int i = 0; i < 100; ++i) EXPECT_EQ(rng.Below(1), 0u);
}

TEST(Rng, BelowIsRoughlyUniform) {
  Rng rng(2024);
  constexpr uint64_t kBuckets = 7;
  constexpr int kDraws = 70000;
  std::vector<int> counts(kBuckets, 0);
  for (int i = 0; i < kDraws; ++i) ++counts[rng.Below(kBuckets)];
  // Expected 10000 per bucket, standard deviation ~93: allow 5%.
  for (uint64_t b = 0; b < kBuckets; ++b) {
    EXPECT_NEAR(counts[b], kDraws / kBuckets, 500) << "bucket " << b;
  }
}

TEST(Rng, BelowOfAHugeBoundHasNoModuloBias) {
  // For n = 1.5 * 2^63, NextU64() % n would land in the upper half of
  // [0, n) only 37.5% of the time; an unbiased draw does so 50% of the time.
  Rng rng(3);
  const uint64_t n = (1ull << 63) + (1ull << 62);
  int upper = 0;
  const int draws = 10000;
  for (int i = 0; i < draws; ++i) upper += rng.Below(n) >= n / 2;
  EXPECT_NEAR(upper, draws / 2, 300);
}

TEST(Rng, NormalHasZeroMeanAndUnitVariance) {
  Rng rng(77);
  const int n = 100000;
  double sum = 0;
  double sum_sq = 0;
  for (int i = 0; i < n; ++i) {
    const double z = rng.Normal();
    ASSERT_TRUE(std::isfinite(z));
    sum += z;
    sum_sq += z * z;
  }
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(var, 1.0, 0.03);
}

TEST(Rng, NormalHasGaussianTails) {
  Rng rng(78);
  const int n = 100000;
  int beyond_two = 0;
  for (int i = 0; i < n; ++i) beyond_two += std::abs(rng.Normal()) > 2.0;
  // P(|Z| > 2) = 0.0455.
  EXPECT_NEAR(static_cast<double>(beyond_two) / n, 0.0455, 0.004);
}

TEST(DeriveSeed, StreamsDiffer) {
  std::set<uint64_t> seeds;
  for (uint64_t stream = 0; stream < 1000; ++stream) seeds.insert(DeriveSeed(1, stream));
  EXPECT_EQ(seeds.size(), 1000u);
  EXPECT_NE(DeriveSeed(1, 0), DeriveSeed(2, 0));
  EXPECT_NE(DeriveSeed(1, 2), DeriveSeed(2, 1));  // not symmetric
  static_assert(DeriveSeed(5, 6) == DeriveSeed(5, 6), "usable at compile time");
}

TEST(DeriveSeed, DerivedStreamsProduceDifferentSequences) {
  Rng epoch0(DeriveSeed(9, 0));
  Rng epoch1(DeriveSeed(9, 1));
  EXPECT_NE(Draw(epoch0, 20), Draw(epoch1, 20));
}

TEST(Mix64, SpreadsNeighbouringInputs) {
  // Consecutive inputs differ in about half of their output bits.
  int total_bits = 0;
  for (uint64_t x = 0; x < 1000; ++x) total_bits += std::popcount(Mix64(x) ^ Mix64(x + 1));
  EXPECT_NEAR(total_bits / 1000.0, 32.0, 2.0);
}

}  // namespace
}  // namespace tagi
