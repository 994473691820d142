// Buckets: how one data-parallel step's all-reduce is cut into pieces that
// go on the wire while the backward pass is still running.
//
// The backward runs the plan's steps in reverse, so the deltas of the last
// layers are final first. The parameter arena holds every layer's blocks
// packed in layer order ([mu of N][var of N], plan.h), so "final" is always
// a suffix [ready_from, N) of each half. A bucket is a range [begin, end)
// of parameter indices, cut at layer boundaries, reduced as its mu part and
// its var part; buckets are numbered in launch order (the highest offsets
// first). A bucket can go once the backward step after which it is final
// has run.
//
// Pure functions of the plan and the size: every rank cuts the same
// buckets, so the sums are the same on every replica and run to run.
#ifndef TAGI_SPEC_BUCKETS_H_
#define TAGI_SPEC_BUCKETS_H_

#include <cstddef>
#include <vector>

#include "spec/plan.h"

namespace tagi::spec {

struct Bucket {
  size_t begin = 0;  // parameter index, in each half of the arena
  size_t end = 0;
  bool operator==(const Bucket&) const = default;
};

struct BucketPlan {
  std::vector<Bucket> buckets;  // launch order: descending offsets
  // Per plan step s: how many buckets (a prefix of `buckets`) are final
  // once the backward of step s has run. Non-decreasing in backward order
  // (s from the last step to 0); every bucket is final after step 0.
  std::vector<size_t> ready_after_step;
};

// Bytes of deltas (mu and var, fp32) that `params` parameters put on the
// wire.
inline constexpr size_t kDeltaBytesPerParameter = 2 * sizeof(float);

// Cuts the parameter arena into buckets of at least `bucket_bytes` bytes of
// deltas each (the last one, holding the first layers, may be smaller),
// at layer boundaries. A layer larger than the size is a bucket of its
// own. One bucket when bucket_bytes covers the whole arena; none for a
// network without parameters. REQUIRES: bucket_bytes > 0.
BucketPlan PlanBuckets(const Plan& plan, size_t bucket_bytes);

// Per plan step s: the lowest parameter index from which every delta is
// final once the backward has run step s (N before any step, 0 after step
// 0). Exposed for tests.
std::vector<size_t> ReadyFromAfterStep(const Plan& plan);

}  // namespace tagi::spec

#endif  // TAGI_SPEC_BUCKETS_H_
