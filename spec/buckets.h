// Buckets: how one data-parallel step's all-reduce is cut into pieces that
// go on the wire while the backward pass is still running.
//
// The backward runs the plan's steps in reverse, so the deltas of the last
// layers are final first. The parameter arena holds every layer's blocks
// packed in layer order ([mu of N][var of N], plan.h), so "final" is always
// a suffix [ready_from, N) of each half: after each step of the backward
// (ReadyFromAfterStep), and within a large layer that hands its deltas out
// in pieces (worker/engine/linear.h). A bucket is a range [begin, end) of
// parameter indices, reduced as its mu part and its var part once
// ready_from <= begin; buckets are numbered in launch order (the highest
// offsets first).
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

// Bytes of deltas (mu and var, fp32) one parameter puts on the wire.
inline constexpr size_t kDeltaBytesPerParameter = 2 * sizeof(float);

// Cuts [0, num_parameters) into buckets of bucket_bytes of deltas from the
// top; the last bucket (the first layers) holds the rest, up to twice the
// size (no runt bucket at the end). One bucket when bucket_bytes covers
// the whole arena; none without parameters. REQUIRES: bucket_bytes > 0.
std::vector<Bucket> PlanBuckets(size_t num_parameters, size_t bucket_bytes);

// How many buckets (a prefix of the launch order) lie wholly in
// [ready_from, N).
size_t BucketsReady(const std::vector<Bucket>& buckets, size_t ready_from);

// Per plan step s: the lowest parameter index from which every delta is
// final once the backward has run step s (0 after step 0).
std::vector<size_t> ReadyFromAfterStep(const Plan& plan);

}  // namespace tagi::spec

#endif  // TAGI_SPEC_BUCKETS_H_
