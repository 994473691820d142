// The planner: parameter offsets (packed, depth first), the batch arena's
// alignment, boundaries and steps of nested blocks, and the partial
// innovation slots of forks.
#include "spec/plan.h"

#include <set>

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

TEST(Plan, BatchAndDerivedOffsetsAreAlignedAndDisjoint) {
  const Architecture a =
      Regression({5, 1, 1}, {Lin(5, 7), Act(), Res({Lin(7, 3), Act(), Lin(3, 7)}), Lin(7, 1)});
  for (const size_t align : {1u, 16u, 64u}) {
    const Plan p = MustPlan(a, 3, align);
    std::vector<std::pair<size_t, size_t>> ranges;  // [begin, end) in the batch arena
    auto add = [&](size_t at, size_t n) {
      EXPECT_EQ(at % align, 0u);
      ranges.push_back({at, at + n});
    };
    for (const BoundaryPlan& b : p.boundaries) {
      const size_t n = 3 * b.size;
      add(b.units.mu, n);
      add(b.units.var, n);
      if (b.has_jcb) add(b.jcb, n);
      if (b.is_input) continue;
      add(b.delta.mu, n);
      add(b.delta.var, n);
      for (const Slot& s : b.partials) {
        add(s.mu, n);
        add(s.var, n);
      }
    }
    for (const PlannedLayer& l : p.layers) {
      add(l.scratch, 3 * l.scratch_per_sample);
      EXPECT_EQ(l.derived % align, 0u);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) {
      EXPECT_LE(ranges[i - 1].second, ranges[i].first) << "overlap at align " << align;
    }
    EXPECT_LE(ranges.back().second, p.batch_floats);
  }
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
