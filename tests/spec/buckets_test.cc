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

TEST(Buckets, FixedSizesFromTheTopAndTheRestBelow) {
  const size_t per = 128;  // 1 KiB of deltas
  EXPECT_EQ(PlanBuckets(1000, per * kDeltaBytesPerParameter),
            (std::vector<Bucket>{{872, 1000}, {744, 872}, {616, 744}, {488, 616}, {360, 488},
                                 {232, 360}, {0, 232}}));
  // No runt: the rest joins the last bucket (up to twice the size).
  EXPECT_EQ(PlanBuckets(256, per * kDeltaBytesPerParameter),
            (std::vector<Bucket>{{128, 256}, {0, 128}}));
  EXPECT_EQ(PlanBuckets(255, per * kDeltaBytesPerParameter), (std::vector<Bucket>{{0, 255}}));
  EXPECT_EQ(PlanBuckets(26, 1 << 30), (std::vector<Bucket>{{0, 26}}));
  EXPECT_TRUE(PlanBuckets(0, 1024).empty());
  // A size below one parameter's deltas still makes progress.
  EXPECT_EQ(PlanBuckets(3, 1), (std::vector<Bucket>{{2, 3}, {1, 2}, {0, 1}}));
}

TEST(Buckets, PartitionTheArenaForAnySize) {
  for (size_t n : {1, 2, 7, 1000, 12345}) {
    for (size_t bytes : {1, 8, 100, 4096, 1 << 20}) {
      const auto b = PlanBuckets(n, bytes);
      ASSERT_FALSE(b.empty());
      EXPECT_EQ(b.front().end, n);
      EXPECT_EQ(b.back().begin, 0u);
      for (size_t k = 0; k + 1 < b.size(); ++k) {
        EXPECT_EQ(b[k + 1].end, b[k].begin);
        EXPECT_LT(b[k].begin, b[k].end);
      }
    }
  }
}

TEST(Buckets, ReadyCountsOnlyBucketsWhollyAboveTheWatermark) {
  const std::vector<Bucket> b = {{20, 30}, {10, 20}, {0, 10}};
  EXPECT_EQ(BucketsReady(b, 30), 0u);
  EXPECT_EQ(BucketsReady(b, 21), 0u);
  EXPECT_EQ(BucketsReady(b, 20), 1u);
  EXPECT_EQ(BucketsReady(b, 5), 2u);
  EXPECT_EQ(BucketsReady(b, 0), 3u);
}

// The watermark after each backward step: everything above the highest
// layer still to run.
TEST(Buckets, ReadyFromFallsToZeroThroughTheBackward) {
  const Plan p = MustPlan(Regression({3, 1, 1}, {Lin(3, 4), Act(), Lin(4, 2)}));
  EXPECT_EQ(ReadyFromAfterStep(p), (std::vector<size_t>{0, 16, 16}));
}

// A residual block's layers are final only when both branches ran; the
// watermark never passes a layer whose step has not run, and never rises.
TEST(Buckets, ReadyFromIsSoundThroughResidualAndImageNetworks) {
  for (const Architecture& a :
       {Regression({4, 1, 1}, {Lin(4, 4), Act(), Res({Lin(4, 4), Act(), Lin(4, 4)}, {Lin(4, 4)}),
                               Act(), Lin(4, 2)}),
        Regression({1, 8, 8},
                   {Conv(1, 4, 3, 1, 1), BN(), Act(), Max(2, 2),
                    Res({Conv(4, 4, 3, 1, 1, false), BN(), Act(), Conv(4, 4, 3, 1, 1, false),
                         BN()}),
                    Act(), Avg(2, 2), Lin(16, 3)})}) {
    const Plan p = MustPlan(a);
    const std::vector<size_t> ready = ReadyFromAfterStep(p);
    ASSERT_EQ(ready.size(), p.steps.size());
    EXPECT_EQ(ready[0], 0u);
    for (size_t s = 0; s + 1 < ready.size(); ++s) EXPECT_LE(ready[s], ready[s + 1]);
    for (size_t s = 0; s < p.steps.size(); ++s) {
      for (size_t l = 0; l < p.layers.size(); ++l) {
        const PlannedLayer& layer = p.layers[l];
        if (layer.num_blocks == 0) continue;
        const size_t lo = p.blocks[layer.first_block].offset;
        if (lo >= ready[s]) {
          EXPECT_GE(StepOf(p, l), s) << layer.path << " counted final before its backward ran";
        }
      }
    }
  }
}

}  // namespace
}  // namespace tagi::spec
