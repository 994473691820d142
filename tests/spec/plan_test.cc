// The planner: parameter offsets (packed, depth first), the batch arena's
// alignment, boundaries and steps of nested blocks, and the partial
// innovation slots of forks.
#include "spec/plan.h"

#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/spec/spec_builders.h"

namespace tagi::spec {
namespace {

using namespace tagi::spec::testing;  // NOLINT: builders

Plan MustPlan(const Architecture& a, size_t max_batch, size_t align) {
  auto plan = MakePlan(a, {max_batch, align});
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

TEST(Plan, ChainPacksParametersInLayerOrder) {
  const Plan p = MustPlan(Regression({3, 1, 1}, {Lin(3, 4), Act(), Lin(4, 2)}), 5, 16);
  ASSERT_EQ(p.blocks.size(), 4u);
  EXPECT_EQ(p.blocks[0].offset, 0u);   // weights 4x3
  EXPECT_EQ(p.blocks[1].offset, 12u);  // biases 4
  EXPECT_EQ(p.blocks[2].offset, 16u);  // weights 2x4
  EXPECT_EQ(p.blocks[3].offset, 24u);
  EXPECT_EQ(p.num_parameters, 26u);
  ASSERT_EQ(p.steps.size(), 3u);
  ASSERT_EQ(p.boundaries.size(), 4u);
  EXPECT_TRUE(p.input().is_input);
  EXPECT_FALSE(p.boundaries[1].has_jcb);
  EXPECT_TRUE(p.boundaries[2].has_jcb);
  EXPECT_EQ(p.output().size, 2u);
  EXPECT_EQ(p.layers[0].scratch_per_sample, 3u);
  EXPECT_EQ(p.layers[0].derived_count, 24u);
}

TEST(Plan, BatchOffsetsAreAlignedAndNoLiveBuffersOverlap) {
  const Architecture a =
      Regression({5, 1, 1}, {Lin(5, 7), Act(), Res({Lin(7, 3), Act(), Lin(3, 7)}), Lin(7, 1)});
  for (const size_t align : {1u, 16u, 64u}) {
    const Plan p = MustPlan(a, 3, align);
    for (const BoundaryPlan& b : p.boundaries) {
      for (const size_t at : {b.units.mu, b.units.var}) EXPECT_EQ(at % align, 0u);
      if (b.has_jcb) EXPECT_EQ(b.jcb % align, 0u);
      if (b.is_input) continue;
      EXPECT_EQ(b.delta.mu % align, 0u);
      EXPECT_EQ(b.delta.var % align, 0u);
      for (const Slot& s : b.partials) EXPECT_EQ(s.mu % align, 0u);
    }
    for (const PlannedLayer& l : p.layers) {
      EXPECT_EQ(l.scratch % align, 0u);
      EXPECT_EQ(l.derived % align, 0u);
    }
    EXPECT_TRUE(CheckPlanMemory(p).ok()) << CheckPlanMemory(p) << " at align " << align;
    EXPECT_LT(p.delta_floats, p.delta_floats_unshared);
  }
}

// A chain needs the innovations of three boundaries at most at once: the
// output's (kept through the backward) and the two of the step running.
TEST(Plan, AChainKeepsThreeBoundariesOfInnovations) {
  std::vector<LayerSpec> layers;
  for (int i = 0; i < 12; ++i) {
    layers.push_back(Lin(8, 8));
    layers.push_back(Act());
  }
  const Plan p = MustPlan(Regression({8, 1, 1}, layers), 4, 16);
  const size_t slot = 2 * 32;  // mu and var of 4 x 8, aligned
  EXPECT_EQ(p.delta_floats, 3 * slot);
  EXPECT_EQ(p.delta_floats_unshared, 24 * slot);
  EXPECT_TRUE(CheckPlanMemory(p).ok()) << CheckPlanMemory(p);
}

// Units that no backward reads (a Linear's output, read only by its
// activation; an activation's output read only by a residual add) live
// only in the forward, in the shared region, and so do the variances of
// every boundary but the input and the output; the rest keep their places.
// In the chain above, at most two transient boundaries are live at once.
TEST(Plan, UnitsThatNoBackwardReadsLiveOnlyInTheForward) {
  std::vector<LayerSpec> layers;
  for (int i = 0; i < 12; ++i) {
    layers.push_back(Lin(8, 8));
    layers.push_back(Act());
  }
  const Plan chain = MustPlan(Regression({8, 1, 1}, layers), 4, 16);
  for (size_t i = 0; i < chain.boundaries.size(); ++i) {
    const bool linear_output = i % 2 == 1;  // boundary 0 is the input
    const bool output = i + 1 == chain.boundaries.size();
    EXPECT_EQ(chain.boundaries[i].units_transient, linear_output && !output) << i;
    // No backward reads a variance: only the input's and the output's stay.
    EXPECT_EQ(chain.boundaries[i].var_transient, i != 0 && !output) << i;
  }
  const size_t slot = 2 * 32;
  // The 12 Linear outputs whole, the variances of the 11 activation
  // outputs that are not the network's output.
  EXPECT_EQ(chain.transient_unit_floats, 12 * slot + 11 * slot / 2);
  EXPECT_EQ(chain.delta_floats, 3 * slot);  // innovations need more than 1 unit at a time
  // A block's input feeds a Linear (whose backward reads it) and the add:
  // kept. The main branch's activation output feeds only the add: transient.
  const Plan block =
      MustPlan(Regression({8, 1, 1}, {Lin(8, 8), Res({Lin(8, 8), Act()}), Lin(8, 2)}), 4, 16);
  ASSERT_EQ(block.steps.size(), 5u);  // Lin, Lin, Act, add, Lin
  auto units_of_step = [&](size_t s) {
    return block.boundaries[static_cast<size_t>(block.steps[s].out)].units_transient;
  };
  EXPECT_FALSE(units_of_step(0)) << "read by the block's Linear";
  EXPECT_TRUE(units_of_step(1)) << "read only by the activation";
  EXPECT_TRUE(units_of_step(2)) << "read only by the add";
  EXPECT_FALSE(units_of_step(3)) << "read by the last Linear";
  EXPECT_FALSE(block.output().units_transient);
  EXPECT_FALSE(block.input().units_transient);
  EXPECT_TRUE(CheckPlanMemory(chain).ok()) << CheckPlanMemory(chain);
  EXPECT_TRUE(CheckPlanMemory(block).ok()) << CheckPlanMemory(block);
}

TEST(Plan, CheckPlanMemoryNamesTheFirstOverlapOfLiveBuffers) {
  Plan p = MustPlan(Regression({4, 1, 1}, {Lin(4, 4), Act(), Lin(4, 4), Act(), Lin(4, 2)}), 2,
                    16);
  ASSERT_TRUE(CheckPlanMemory(p).ok());
  Plan units = p;
  // Innovations over units that a backward reads (the activation's output,
  // which the next Linear's backward reads).
  ASSERT_FALSE(units.boundaries[2].units_transient);
  units.boundaries[3].delta.var = units.boundaries[2].units.mu;
  EXPECT_THAT(std::string(CheckPlanMemory(units).message()),
              ::testing::MatchesRegex(".*boundary 2 units.mu \\[[0-9]+, [0-9]+\\) overlaps "
                                      "boundary 3 innovation slot 0 .* while both are live.*"));
  // Two transient units live at once (a Linear's output, read by the
  // activation while it writes its own): the forward sees both.
  Plan transient = p;
  ASSERT_TRUE(transient.boundaries[1].units_transient);
  ASSERT_TRUE(transient.boundaries[3].units_transient);
  transient.boundaries[3].units = transient.boundaries[1].units;
  ASSERT_TRUE(CheckPlanMemory(transient).ok()) << "1 dies at step 1, 3 is born at step 2";
  transient.boundaries[1].units.var = transient.boundaries[2].units.var;
  EXPECT_THAT(std::string(CheckPlanMemory(transient).message()),
              ::testing::HasSubstr("boundary 1 units.var (transient)"));
  Plan live = p;
  // Boundary 3's innovations live while step 2 runs, as boundary 2's do.
  live.boundaries[3].delta = live.boundaries[2].delta;
  EXPECT_THAT(std::string(CheckPlanMemory(live).message()),
              ::testing::HasSubstr("while both are live"));
  Plan past = p;
  past.batch_floats = past.boundaries[1].units.var;
  EXPECT_THAT(std::string(CheckPlanMemory(past).message()),
              ::testing::HasSubstr("past the arena"));
}

// Random networks (chains, residual blocks with and without projections,
// nested up to three deep), every batch and alignment: live buffers never
// overlap, and sharing never takes more than one place per slot.
std::vector<LayerSpec> RandomLayers(std::mt19937& rng, uint32_t width, int depth) {
  std::vector<LayerSpec> layers;
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < n; ++i) {
    switch (rng() % (depth < 3 ? 4 : 2)) {
      case 0:
        layers.push_back(Lin(width, width));
        break;
      case 1:
        layers.push_back(Act());
        if (rng() % 2 == 0) layers.push_back(width > 1 && rng() % 2 == 0 ? LN() : BN());
        break;
      case 2:
        layers.push_back(Res(RandomLayers(rng, width, depth + 1)));
        break;
      default:
        layers.push_back(
            Res(RandomLayers(rng, width, depth + 1), RandomLayers(rng, width, depth + 1)));
        break;
    }
  }
  return layers;
}

TEST(Plan, RandomNetworksNeverOverlapLiveBuffers) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const uint32_t width = 1 + static_cast<uint32_t>(rng() % 9);
    std::vector<LayerSpec> layers = RandomLayers(rng, width, 0);
    layers.push_back(Lin(width, 2));
    const Architecture a = Regression({width, 1, 1}, layers);
    for (const size_t batch : {1u, 5u}) {
      for (const auto [align, fuse] : {std::pair{1u, false}, std::pair{16u, false},
                                       std::pair{1u, true}, std::pair{16u, true}}) {
        auto p = MakePlan(a, {batch, align, fuse});
        ASSERT_TRUE(p.ok()) << p.status();
        const absl::Status st = CheckPlanMemory(*p);
        ASSERT_TRUE(st.ok()) << st << " in trial " << trial;
        EXPECT_LE(p->delta_floats, p->delta_floats_unshared);
      }
    }
  }
}

// Fusion: an elementwise activation that only the next step, a norm,
// reads is absorbed; its input then lives through the norm's step.
TEST(Plan, FusionAbsorbsAnActivationOnlyANormReads) {
  const Architecture a = Regression(
      {2, 4, 4}, {Conv(2, 3, 3, 1, 1), Act(tagi::v1::Layer::MIXTURE_RELU), BN(),
                  Res({Conv(3, 3, 3, 1, 1), Act(), LN()}), Act(), Avg(2, 2), Act(), BN(),
                  Act(tagi::v1::Layer::SIGMOID)});
  // Steps: 0 conv, 1 mrelu, 2 BN, 3 conv, 4 relu, 5 LN, 6 add, 7 relu, 8 pool, 9 relu, 10 BN,
  // 11 sigmoid (the output: nothing reads it).
  const Plan plain = MustPlan(a, 3, 64);
  auto fused = MakePlan(a, {3, 64, /*fuse_activations=*/true});
  ASSERT_TRUE(fused.ok()) << fused.status();
  std::vector<int> absorbed;
  for (size_t t = 0; t < fused->steps.size(); ++t) {
    EXPECT_FALSE(plain.steps[t].absorbed) << t;
    if (fused->steps[t].absorbed) absorbed.push_back(static_cast<int>(t));
  }
  EXPECT_THAT(absorbed, ::testing::ElementsAre(1, 4, 9));  // 7 feeds a pool, 11 nothing
  for (const int t : absorbed) {
    const int in = fused->steps[static_cast<size_t>(t)].in;
    EXPECT_EQ(plain.boundaries[static_cast<size_t>(in)].last_consumer, t);
    EXPECT_EQ(fused->boundaries[static_cast<size_t>(in)].last_consumer, t + 1);
  }
  for (const Plan* p : {&plain, static_cast<const Plan*>(&*fused)}) {
    EXPECT_TRUE(CheckPlanMemory(*p).ok()) << CheckPlanMemory(*p);
  }
  // Parameters, state and derived buffers do not depend on fusion.
  EXPECT_EQ(fused->num_parameters, plain.num_parameters);
  EXPECT_EQ(fused->num_state, plain.num_state);
  EXPECT_EQ(fused->derived_floats, plain.derived_floats);
}

// The checker does not trust the planner's lives: an absorbed activation
// whose input dies at its own step (the planner's plain lives) is caught
// once the norm's reads overlap what the next step writes there.
TEST(Plan, CheckPlanMemoryCatchesAnAbsorptionThePlannerDidNotExtend) {
  const Architecture a =
      Regression({2, 4, 4}, {Conv(2, 2, 1), Act(), Avg(1, 1), Act(), BN(), Avg(1, 1)});
  auto plain = MakePlan(a, {1, 1});
  ASSERT_TRUE(plain.ok());
  ASSERT_TRUE(CheckPlanMemory(*plain).ok());
  Plan forged = *plain;
  forged.steps[3].absorbed = true;  // without the planner's longer lives
  EXPECT_FALSE(CheckPlanMemory(forged).ok())
      << "the pool's transient output is reused by the BN's output at step 4";
  Plan wrong = *plain;
  wrong.steps[1].absorbed = true;  // the next step is a pool, not a reader of its own
  wrong.steps[2].in = 0;
  EXPECT_THAT(std::string(CheckPlanMemory(wrong).message()),
              ::testing::HasSubstr("step 1 is absorbed"));
}

TEST(Plan, IdentityBlockForksItsInputWithOnePartialSlot) {
  const Plan p = MustPlan(Regression({4, 1, 1}, {Lin(4, 4), Res({Lin(4, 4), Act()})}), 2, 16);
  // Steps: L0 (in 0 -> 1), L1 (1 -> 2), RELU (2 -> 3), ADD (3, 1 -> 4).
  ASSERT_EQ(p.steps.size(), 4u);
  const Step& add = p.steps[3];
  EXPECT_EQ(add.op, Step::Op::kAdd);
  EXPECT_EQ(add.in, 3);
  EXPECT_EQ(add.in2, 1);
  EXPECT_EQ(add.out, 4);
  // Boundary 1 is read by L1 (first: its own delta) and by the ADD (a partial).
  const BoundaryPlan& fork = p.boundaries[1];
  ASSERT_EQ(fork.partials.size(), 1u);
  EXPECT_EQ(p.steps[1].in_delta, fork.delta);
  EXPECT_EQ(add.in2_delta, fork.partials[0]);
  EXPECT_EQ(add.in_delta, p.boundaries[3].delta);
  EXPECT_EQ(p.output().producer, 3);
}

TEST(Plan, NestedBlocksNumberLayersDepthFirstWithPaths) {
  const Plan p = MustPlan(
      Regression({4, 1, 1}, {Res({Res({Lin(4, 4)}, {Lin(4, 4)}), Lin(4, 4)}), Lin(4, 2)}), 1, 16);
  ASSERT_EQ(p.layers.size(), 4u);
  EXPECT_EQ(p.layers[0].path, "layers[0].residual.main[0].residual.main[0]");
  EXPECT_EQ(p.layers[1].path, "layers[0].residual.main[0].residual.shortcut[0]");
  EXPECT_EQ(p.layers[2].path, "layers[0].residual.main[1]");
  EXPECT_EQ(p.layers[3].path, "layers[1]");
  // Parameters depth first: each layer's blocks follow the previous ones.
  size_t offset = 0;
  for (const PlannedBlock& b : p.blocks) {
    EXPECT_EQ(b.offset, offset);
    offset += b.spec.count;
  }
  EXPECT_EQ(offset, p.num_parameters);
  // The data (boundary 0) is read by the inner main, the inner shortcut
  // and the outer identity: three consumers, two partials, none written
  // (the data needs no innovations).
  EXPECT_EQ(p.boundaries[0].partials.size(), 0u);
  std::set<int> readers;
  for (const Step& s : p.steps) {
    if (s.in == 0) readers.insert(static_cast<int>(&s - p.steps.data()));
    if (s.in2 == 0) readers.insert(static_cast<int>(&s - p.steps.data()));
  }
  EXPECT_EQ(readers.size(), 3u);
}

TEST(Plan, RefusesAnInvalidNetworkOrBatch) {
  EXPECT_FALSE(MakePlan(Regression({4, 1, 1}, {Lin(3, 2)}), {}).ok());
  EXPECT_FALSE(MakePlan(Regression({4, 1, 1}, {Lin(4, 2)}), {0, 16}).ok());
}

}  // namespace
}  // namespace tagi::spec
