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

std::vector<Bucket> PlanBuckets(size_t num_parameters, size_t bucket_bytes) {
  std::vector<Bucket> out;
  const size_t per = std::max<size_t>(1, bucket_bytes / kDeltaBytesPerParameter);
  size_t end = num_parameters;
  while (end > 0) {
    const size_t begin = end >= 2 * per ? end - per : 0;
    out.push_back({begin, end});
    end = begin;
  }
  return out;
}

size_t BucketsReady(const std::vector<Bucket>& buckets, size_t ready_from) {
  size_t n = 0;
  while (n < buckets.size() && buckets[n].begin >= ready_from) ++n;
  return n;
}

}  // namespace tagi::spec
