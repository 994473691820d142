#include "spec/hsm_tree.h"

#include "absl/base/internal/raw_logging.h"

namespace tagi {
namespace {

int Levels(int num_classes) {
  int levels = 0;
  while ((1 << levels) < num_classes) ++levels;
  return levels;
}

// Number of distinct l-bit prefixes among the codes of 0 .. K-1: the labels
// are contiguous, so the prefixes are 0 .. (K-1) >> (L-l).
int NodesAtLevel(int num_classes, int levels, int level) {
  return ((num_classes - 1) >> (levels - level)) + 1;
}

}  // namespace

int HsmTree::OutputWidth(int num_classes) {
  const int levels = Levels(num_classes);
  int width = 0;
  for (int l = 0; l < levels; ++l) width += NodesAtLevel(num_classes, levels, l);
  return width;
}

HsmTree::HsmTree(int num_classes)
    : num_classes_(num_classes),
      levels_(Levels(num_classes)),
      output_width_(OutputWidth(num_classes)) {
  ABSL_RAW_CHECK(num_classes >= 2 && num_classes <= kMaxClasses,
                 "HsmTree needs 2..65536 classes");
  nodes_.resize(static_cast<size_t>(num_classes_) * levels_);
  targets_.resize(nodes_.size());
  for (int r = 0; r < num_classes_; ++r) {
    int offset = 0;  // nodes in the levels above
    for (int l = 0; l < levels_; ++l) {
      const int prefix = r >> (levels_ - l);
      const int bit = (r >> (levels_ - 1 - l)) & 1;
      nodes_[Index(r, l)] = offset + prefix;
      targets_[Index(r, l)] = bit == 0 ? 1.0f : -1.0f;
      offset += NodesAtLevel(num_classes_, levels_, l);
    }
  }
}

}  // namespace tagi
