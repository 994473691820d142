#include "spec/hsm_tree.h"

#include <set>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tagi {
namespace {

// One label's code: (0-based node, target) per level.
std::vector<std::pair<int, float>> CodeOf(const HsmTree& tree, int label) {
  std::vector<std::pair<int, float>> code;
  for (int l = 0; l < tree.levels(); ++l) {
    code.emplace_back(tree.node(label, l), tree.target(label, l));
  }
  return code;
}

TEST(HsmTree, TenClassesUseElevenOutputsOnFourLevels) {
  const HsmTree tree(10);
  EXPECT_EQ(tree.num_classes(), 10);
  EXPECT_EQ(tree.levels(), 4);
  EXPECT_EQ(tree.output_width(), 11);
  EXPECT_EQ(HsmTree::OutputWidth(10), 11);
}

// docs/maths.md section 5.1: label 0 -> (+1,+1,+1,+1) at 1-based nodes
// (1,2,4,7).
TEST(HsmTree, LabelZeroOfTenMatchesTheReferenceTable) {
  const HsmTree tree(10);
  const std::vector<std::pair<int, float>> expected = {
      {0, +1.0f}, {1, +1.0f}, {3, +1.0f}, {6, +1.0f}};
  EXPECT_EQ(CodeOf(tree, 0), expected);
}

// docs/maths.md section 5.1: label 9 -> (-1,+1,+1,-1) at 1-based nodes
// (1,3,6,11).
TEST(HsmTree, LabelNineOfTenMatchesTheReferenceTable) {
  const HsmTree tree(10);
  const std::vector<std::pair<int, float>> expected = {
      {0, -1.0f}, {2, +1.0f}, {5, +1.0f}, {10, -1.0f}};
  EXPECT_EQ(CodeOf(tree, 9), expected);
}

TEST(HsmTree, TwoClassesUseOneOutputOnOneLevel) {
  const HsmTree tree(2);
  EXPECT_EQ(tree.levels(), 1);
  EXPECT_EQ(tree.output_width(), 1);
  EXPECT_EQ(tree.node(0, 0), 0);
  EXPECT_EQ(tree.node(1, 0), 0);
  EXPECT_EQ(tree.target(0, 0), +1.0f);
  EXPECT_EQ(tree.target(1, 0), -1.0f);
}

TEST(HsmTree, ThreeClassesUseThreeOutputs) {
  const HsmTree tree(3);
  EXPECT_EQ(tree.levels(), 2);
  EXPECT_EQ(tree.output_width(), 3);
  // Label 2 = 0b10: root says "1", then the second level-2 node says "0".
  EXPECT_EQ(CodeOf(tree, 2), (std::vector<std::pair<int, float>>{{0, -1.0f}, {2, +1.0f}}));
}

TEST(HsmTree, SixteenClassesFillACompleteTreeOfFifteenOutputs) {
  const HsmTree tree(16);
  EXPECT_EQ(tree.levels(), 4);
  EXPECT_EQ(tree.output_width(), 15);
  // The last label walks the right edge: nodes 1, 3, 7, 15 (1-based).
  EXPECT_EQ(CodeOf(tree, 15),
            (std::vector<std::pair<int, float>>{{0, -1.0f}, {2, -1.0f}, {6, -1.0f}, {14, -1.0f}}));
}

TEST(HsmTree, TargetsSpellTheLabelInBinaryMostSignificantBitFirst) {
  for (int k : {2, 5, 10, 37, 100}) {
    const HsmTree tree(k);
    for (int r = 0; r < k; ++r) {
      int decoded = 0;
      for (int l = 0; l < tree.levels(); ++l) {
        decoded = 2 * decoded + (tree.target(r, l) < 0 ? 1 : 0);
      }
      EXPECT_EQ(decoded, r) << "K=" << k;
    }
  }
}

TEST(HsmTree, EveryLabelHasADistinctCodeWithNodesInsideTheOutput) {
  for (int k : {2, 3, 4, 5, 7, 8, 9, 10, 16, 17, 31, 100, 257, 1000}) {
    const HsmTree tree(k);
    std::set<std::vector<std::pair<int, float>>> codes;
    std::set<int> used_nodes;
    for (int r = 0; r < k; ++r) {
      for (int l = 0; l < tree.levels(); ++l) {
        const int n = tree.node(r, l);
        EXPECT_GE(n, 0) << "K=" << k << " label " << r << " level " << l;
        EXPECT_LT(n, tree.output_width()) << "K=" << k << " label " << r << " level " << l;
        const float t = tree.target(r, l);
        EXPECT_TRUE(t == 1.0f || t == -1.0f) << t;
        used_nodes.insert(n);
      }
      codes.insert(CodeOf(tree, r));
    }
    EXPECT_EQ(codes.size(), static_cast<size_t>(k)) << "K=" << k;
    // No output is wasted: every node is visited by some label.
    EXPECT_EQ(used_nodes.size(), static_cast<size_t>(tree.output_width())) << "K=" << k;
  }
}

TEST(HsmTree, LabelsSharingAPrefixShareTheNodeOfThatPrefix) {
  const HsmTree tree(10);
  // 4 = 0100 and 5 = 0101 differ only in the last bit.
  for (int l = 0; l < tree.levels(); ++l) EXPECT_EQ(tree.node(4, l), tree.node(5, l));
  EXPECT_NE(tree.target(4, 3), tree.target(5, 3));
  // 0 and 8 differ at the root, so they never share a node below it.
  for (int l = 1; l < tree.levels(); ++l) EXPECT_NE(tree.node(0, l), tree.node(8, l));
}

TEST(HsmTree, OutputWidthWithoutBuildingMatchesTheBuiltTree) {
  for (int k = 2; k <= 300; ++k) {
    EXPECT_EQ(HsmTree::OutputWidth(k), HsmTree(k).output_width()) << "K=" << k;
  }
  EXPECT_EQ(HsmTree::OutputWidth(HsmTree::kMaxClasses),
            HsmTree(HsmTree::kMaxClasses).output_width());
  // A power of two gives a complete tree of K - 1 nodes.
  EXPECT_EQ(HsmTree::OutputWidth(HsmTree::kMaxClasses), HsmTree::kMaxClasses - 1);
}

}  // namespace
}  // namespace tagi
