// HsmTree: the label encoding of hierarchical-softmax classification.
//
// K classes are decided by L = ceil(log2 K) binary decisions on a tree
// (docs/maths.md section 5.1). Level l holds one node per distinct l-bit
// prefix of the labels' L-bit codes, in increasing prefix order, and nodes
// are numbered level by level from 1; the network's output width is the
// number of nodes (11 for K = 10). Label r observes, at each level, the node
// of its prefix with target +1 if its next bit is 0 and -1 if it is 1.
//
// Pure data, built once; immutable and thread-safe afterwards. Part of the
// model spec (tagi_spec): the head's shape rules need the output width, and
// job validation and the engines, which all link the spec, use the tree.
#ifndef TAGI_SPEC_HSM_TREE_H_
#define TAGI_SPEC_HSM_TREE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tagi {

class HsmTree {
 public:
  // REQUIRES: 2 <= num_classes <= kMaxClasses.
  explicit HsmTree(int num_classes);

  static constexpr int kMaxClasses = 1 << 16;

  int num_classes() const { return num_classes_; }
  int levels() const { return levels_; }
  int output_width() const { return output_width_; }

  // For label r, level l: 0-based output index of its node, and its target.
  int node(int label, int level) const { return nodes_[Index(label, level)]; }
  float target(int label, int level) const { return targets_[Index(label, level)]; }

  // Output width for K classes without building the tree.
  static int OutputWidth(int num_classes);

 private:
  size_t Index(int label, int level) const {
    return static_cast<size_t>(label) * levels_ + level;
  }
  int num_classes_;
  int levels_;
  int output_width_;
  std::vector<int32_t> nodes_;   // [K][L], 0-based output indices
  std::vector<float> targets_;   // [K][L], +1 or -1
};

}  // namespace tagi

#endif  // TAGI_SPEC_HSM_TREE_H_
