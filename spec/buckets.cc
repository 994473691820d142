#include "spec/buckets.h"

#include <algorithm>

namespace tagi::spec {
namespace {

struct Range {
  size_t begin = 0;
  size_t end = 0;
};

// The parameter range of each planned layer (empty for layers without
// parameters).
std::vector<Range> LayerRanges(const Plan& plan) {
  std::vector<Range> ranges(plan.layers.size());
  for (size_t l = 0; l < plan.layers.size(); ++l) {
    const PlannedLayer& layer = plan.layers[l];
    if (layer.num_blocks == 0) continue;
    const PlannedBlock& first = plan.blocks[layer.first_block];
    const PlannedBlock& last = plan.blocks[layer.first_block + layer.num_blocks - 1];
    ranges[l] = {first.offset, last.offset + last.spec.count};
  }
  return ranges;
}

}  // namespace

std::vector<size_t> ReadyFromAfterStep(const Plan& plan) {
  const std::vector<Range> ranges = LayerRanges(plan);
  std::vector<bool> done(ranges.size(), false);
  std::vector<size_t> ready(plan.steps.size(), 0);
  for (size_t s = plan.steps.size(); s-- > 0;) {
    const Step& step = plan.steps[s];
    if (step.op == Step::Op::kLayer) done[static_cast<size_t>(step.layer)] = true;
    // Everything above the highest range still pending is final: the
    // ranges are disjoint, so what lies above it belongs to finished layers.
    size_t from = 0;
    for (size_t l = 0; l < ranges.size(); ++l) {
      if (!done[l] && ranges[l].end > ranges[l].begin) from = std::max(from, ranges[l].end);
    }
    ready[s] = from;
  }
  return ready;
}

BucketPlan PlanBuckets(const Plan& plan, size_t bucket_bytes) {
  std::vector<Range> ranges = LayerRanges(plan);
  std::erase_if(ranges, [](const Range& r) { return r.end == r.begin; });
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin > b.begin; });
  BucketPlan out;
  size_t end = plan.num_parameters;
  for (size_t i = 0; i < ranges.size(); ++i) {
    const size_t begin = ranges[i].begin;
    const bool last = i + 1 == ranges.size();
    if (last) {
      out.buckets.push_back({0, end});
    } else if ((end - begin) * kDeltaBytesPerParameter >= bucket_bytes) {
      out.buckets.push_back({begin, end});
      end = begin;
    }
  }
  const std::vector<size_t> ready = ReadyFromAfterStep(plan);
  out.ready_after_step.resize(plan.steps.size());
  for (size_t s = 0; s < plan.steps.size(); ++s) {
    size_t n = 0;
    while (n < out.buckets.size() && out.buckets[n].begin >= ready[s]) ++n;
    out.ready_after_step[s] = n;
  }
  return out;
}

}  // namespace tagi::spec
