// The bucket planner: buckets partition the parameter arena at layer
// boundaries, in launch order, of at least the asked size, and no bucket is
// reported final before the backward of every layer it covers has run.
#include "spec/buckets.h"

#include "gtest/gtest.h"
#include "tests/spec/spec_builders.h"

namespace tagi::spec {
namespace {

using namespace tagi::spec::testing;  // NOLINT: builders

Plan MustPlan(const Architecture& a) {
  auto plan = MakePlan(a, {1, 1});
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

// The step that runs planned layer l.
size_t StepOf(const Plan& plan, size_t l) {
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    if (plan.steps[s].op == Step::Op::kLayer && static_cast<size_t>(plan.steps[s].layer) == l) {
      return s;
    }
  }
  ADD_FAILURE() << "no step runs layer " << l;
  return 0;
}

// The invariants every plan must keep, for any network and size.
void ExpectSound(const Plan& plan, const BucketPlan& b, size_t bytes) {
  ASSERT_FALSE(b.buckets.empty());
  EXPECT_EQ(b.buckets.front().end, plan.num_parameters);
  EXPECT_EQ(b.buckets.back().begin, 0u);
  for (size_t k = 0; k < b.buckets.size(); ++k) {
    const Bucket& bucket = b.buckets[k];
    EXPECT_LT(bucket.begin, bucket.end) << k;
    if (k + 1 < b.buckets.size()) {
      EXPECT_EQ(b.buckets[k + 1].end, bucket.begin) << "a gap or an overlap after bucket " << k;
      EXPECT_GE((bucket.end - bucket.begin) * kDeltaBytesPerParameter, bytes) << k;
    }
  }
  // Cuts fall on layer boundaries: no layer straddles two buckets.
  for (const PlannedLayer& layer : plan.layers) {
    if (layer.num_blocks == 0) continue;
    const size_t lo = plan.blocks[layer.first_block].offset;
    const PlannedBlock& last = plan.blocks[layer.first_block + layer.num_blocks - 1];
    const size_t hi = last.offset + last.spec.count;
    for (const Bucket& bucket : b.buckets) {
      EXPECT_FALSE(bucket.begin > lo && bucket.begin < hi) << layer.path << " is cut";
    }
  }
  // Safety: a bucket counted final after step s covers only layers whose
  // steps are >= s (their backward has run); and every bucket is final at
  // the end.
  ASSERT_EQ(b.ready_after_step.size(), plan.steps.size());
  EXPECT_EQ(b.ready_after_step[0], b.buckets.size());
  for (size_t s = plan.steps.size(); s-- > 0;) {
    if (s + 1 < plan.steps.size()) {
      EXPECT_GE(b.ready_after_step[s], b.ready_after_step[s + 1]);
    }
    for (size_t k = 0; k < b.ready_after_step[s]; ++k) {
      for (size_t l = 0; l < plan.layers.size(); ++l) {
        const PlannedLayer& layer = plan.layers[l];
        if (layer.num_blocks == 0) continue;
        const size_t lo = plan.blocks[layer.first_block].offset;
        if (lo >= b.buckets[k].begin && lo < b.buckets[k].end) {
          EXPECT_GE(StepOf(plan, l), s) << "bucket " << k << " holds " << layer.path
                                        << " before its backward ran (step " << s << ")";
        }
      }
    }
  }
}

TEST(Buckets, ChainCutsAtEveryLayerWhenTheSizeIsSmall) {
  // Lin(3,4): parameters [0, 16); Lin(4,2): [16, 26).
  const Plan p = MustPlan(Regression({3, 1, 1}, {Lin(3, 4), Act(), Lin(4, 2)}));
  const BucketPlan b = PlanBuckets(p, 1);
  EXPECT_EQ(b.buckets, (std::vector<Bucket>{{16, 26}, {0, 16}}));
  EXPECT_EQ(b.ready_after_step, (std::vector<size_t>{2, 1, 1}));
  ExpectSound(p, b, 1);
}

TEST(Buckets, OneBucketWhenTheSizeCoversTheArena) {
  const Plan p = MustPlan(Regression({3, 1, 1}, {Lin(3, 4), Act(), Lin(4, 2)}));
  for (size_t bytes : {26 * kDeltaBytesPerParameter, size_t{1} << 30}) {
    const BucketPlan b = PlanBuckets(p, bytes);
    EXPECT_EQ(b.buckets, (std::vector<Bucket>{{0, 26}}));
    EXPECT_EQ(b.ready_after_step, (std::vector<size_t>{1, 0, 0}));
  }
}

TEST(Buckets, SmallLayersJoinUntilTheSizeIsReached) {
  // Four Lin(4,4) of 20 parameters: a size of 30 parameters' deltas puts
  // two layers in each bucket.
  const Plan p = MustPlan(
      Regression({4, 1, 1}, {Lin(4, 4), Act(), Lin(4, 4), Act(), Lin(4, 4), Act(), Lin(4, 4)}));
  const size_t bytes = 30 * kDeltaBytesPerParameter;
  const BucketPlan b = PlanBuckets(p, bytes);
  EXPECT_EQ(b.buckets, (std::vector<Bucket>{{40, 80}, {0, 40}}));
  ExpectSound(p, b, bytes);
  // The first bucket goes after the backward of the third linear layer
  // (step 4), while two layers still wait.
  EXPECT_EQ(b.ready_after_step[4], 1u);
  EXPECT_EQ(b.ready_after_step[5], 0u);
}

TEST(Buckets, ResidualBlocksAreFinalOnlyWhenBothBranchesRan) {
  const Plan p = MustPlan(Regression(
      {4, 1, 1}, {Lin(4, 4), Act(),
                  Res({Lin(4, 4), Act(), Lin(4, 4)}, {Lin(4, 4)}), Act(), Lin(4, 2)}));
  for (size_t bytes : {size_t{1}, size_t{100}, size_t{200}, size_t{1000}}) {
    SCOPED_TRACE(bytes);
    ExpectSound(p, PlanBuckets(p, bytes), bytes);
  }
}

TEST(Buckets, ImageNetworksWithParameterlessLayers) {
  const Plan p = MustPlan(Regression(
      {1, 8, 8},
      {Conv(1, 4, 3, 1, 1), BN(), Act(), Max(2, 2),
       Res({Conv(4, 4, 3, 1, 1, false), BN(), Act(), Conv(4, 4, 3, 1, 1, false), BN()}), Act(),
       Avg(2, 2), Lin(16, 3)}));
  for (size_t bytes = 1; bytes < 4 * p.num_parameters * kDeltaBytesPerParameter; bytes *= 3) {
    SCOPED_TRACE(bytes);
    ExpectSound(p, PlanBuckets(p, bytes), bytes);
  }
}

TEST(Buckets, ReadyFromFallsToZeroThroughTheBackward) {
  const Plan p = MustPlan(Regression({3, 1, 1}, {Lin(3, 4), Act(), Lin(4, 2)}));
  EXPECT_EQ(ReadyFromAfterStep(p), (std::vector<size_t>{0, 16, 16}));
}

}  // namespace
}  // namespace tagi::spec
