#include "worker/data/sampler.h"

#include <numeric>
#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "common/rng.h"

namespace tagi::data {
namespace {

constexpr uint64_t kMaxSamples = uint64_t{1} << 32;

size_t CheckedSteps(size_t num_samples, int world, int rank, size_t batch) {
  ABSL_RAW_CHECK(num_samples > 0,
                 "DistributedSampler: num_samples must be > 0");
  ABSL_RAW_CHECK(num_samples <= kMaxSamples,
                 "DistributedSampler: num_samples must be <= 2^32");
  ABSL_RAW_CHECK(world >= 1, "DistributedSampler: world must be >= 1");
  ABSL_RAW_CHECK(rank >= 0 && rank < world,
                 "DistributedSampler: rank must be in [0, world)");
  ABSL_RAW_CHECK(batch >= 1, "DistributedSampler: batch must be >= 1");
  const size_t global_batch = static_cast<size_t>(world) * batch;
  return (num_samples + global_batch - 1) / global_batch;
}

}  // namespace

std::vector<uint32_t> EpochPermutation(size_t num_samples, uint64_t seed,
                                       uint64_t epoch) {
  ABSL_RAW_CHECK(num_samples <= kMaxSamples,
                 "EpochPermutation: num_samples must be <= 2^32");
  std::vector<uint32_t> p(num_samples);
  std::iota(p.begin(), p.end(), uint32_t{0});
  Rng rng(DeriveSeed(seed, epoch));
  for (size_t i = num_samples; i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.Below(i));
    std::swap(p[i - 1], p[j]);
  }
  return p;
}

DistributedSampler::DistributedSampler(size_t num_samples, uint64_t seed,
                                       int world, int rank, size_t batch)
    : num_samples_(num_samples),
      seed_(seed),
      world_(world),
      rank_(rank),
      batch_(batch),
      steps_per_epoch_(CheckedSteps(num_samples, world, rank, batch)) {}

const std::vector<uint32_t>& DistributedSampler::PermutationFor(
    uint64_t epoch) const {
  if (cached_epoch_ != epoch) {
    cached_permutation_ = EpochPermutation(num_samples_, seed_, epoch);
    cached_epoch_ = epoch;
  }
  return cached_permutation_;
}

void DistributedSampler::Batch(uint64_t epoch, size_t step,
                               std::span<uint32_t> out) const {
  ABSL_RAW_CHECK(step < steps_per_epoch_,
                 "DistributedSampler::Batch: step out of range");
  BatchAt(epoch, step * global_batch(), out);
}

void DistributedSampler::BatchAt(uint64_t epoch, size_t offset,
                                 std::span<uint32_t> out) const {
  ABSL_RAW_CHECK(offset < num_samples_,
                 "DistributedSampler::BatchAt: offset out of range");
  ABSL_RAW_CHECK(out.size() == batch_,
                 "DistributedSampler::Batch: out.size() must equal batch");
  const std::vector<uint32_t>& p = PermutationFor(epoch);
  const size_t start = offset + static_cast<size_t>(rank_) * batch_;
  for (size_t j = 0; j < batch_; ++j) {
    out[j] = p[(start + j) % num_samples_];
  }
}

size_t DistributedSampler::StepsFrom(size_t offset) const {
  if (offset >= num_samples_) return 0;
  const size_t g = global_batch();
  return (num_samples_ - offset + g - 1) / g;
}

}  // namespace tagi::data
