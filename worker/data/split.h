// Subsets of a Dataset: the held-out split and the evenly spaced limit.
//
// HoldOut draws a permutation from the seed alone (common/rng.h), so every
// worker that loaded the same samples makes the same split; both parts keep
// the original order. Pure functions; thread-safe.
#ifndef TAGI_WORKER_DATA_SPLIT_H_
#define TAGI_WORKER_DATA_SPLIT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace tagi::data {

// The samples at `indices` (each < num_samples), in that order, with every
// other field of `d` (shape, classes, names) kept.
Dataset Select(const Dataset& d, const std::vector<size_t>& indices);

// round(fraction * N) samples (at least 1, at most N - 1) as the test set,
// the rest as the training set. InvalidArgument when fraction is not in
// (0, 1) or N < 2.
absl::StatusOr<TrainTest> HoldOut(const Dataset& all, double fraction, uint64_t seed);

// At most `limit` samples (0: all), evenly spaced over the set so that a
// set stored class by class keeps every class.
Dataset TakeEvenly(Dataset d, size_t limit);

// A hash of the set's samples, shape and class names: equal sets have
// equal fingerprints (common/checksum.h's Fingerprint64).
uint64_t DatasetFingerprint(const Dataset& d);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_SPLIT_H_
