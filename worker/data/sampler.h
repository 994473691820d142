// DistributedSampler: which samples each rank trains on, at every step.
//
// The contract (docs/maths.md section 8; other modules rely on it exactly):
//  - Epoch e uses one permutation P of [0, N), identical on every rank:
//    EpochPermutation(N, seed, e), i.e. Fisher-Yates driven by
//    tagi::Rng(DeriveSeed(seed, e)): for i = N-1 down to 1, swap P[i] with
//    P[rng.Below(i + 1)], starting from the identity.
//  - The padded sequence Q has length steps_per_epoch() * world * batch and
//    Q[i] = P[i mod N] (wrap-around padding, as PyTorch's
//    DistributedSampler does), so every batch is full and every rank runs
//    the same number of steps.
//  - The global batch of step s is Q[s*world*batch, (s+1)*world*batch), and
//    rank r takes the slice [r*batch, (r+1)*batch) of it.
// Hence the ranks of a (world W, batch B) sampler together see, at each
// step, exactly the batch of a (world 1, batch W*B) sampler with the same
// seed, and within an epoch the ranks are disjoint except for the padding
// (fewer than W*B duplicated samples, only when N % (W*B) != 0).
//
// Elastic jobs (a world that changes between generations, mid-epoch too):
// the position in an epoch is an offset into Q, in samples, and a step at
// offset o takes the global batch Q[o, o + world*batch), rank r the slice
// [o + r*batch, o + (r+1)*batch); the next step is at o + world*batch and
// the epoch ends once the offset reaches N. From offset 0 under one world
// these are exactly the steps above (step s is at offset s*world*batch).
// A generation that resumes at offset o under another world goes on with
// the same permutation from o: what every step trains on is a pure
// function of the sequence of (offset, world) the epoch went through.
//
// Batch(epoch, step) depends only on its arguments and the constructor's
// (resumable from a SamplerCursor). The permutation of the last epoch asked
// is cached, so Batch() costs O(N) on the first call of an epoch and
// O(batch) afterwards.
//
// Thread-compatible but NOT thread-safe: Batch() is const yet updates the
// cache, so one instance must not be used from two threads at once.
#ifndef TAGI_WORKER_DATA_SAMPLER_H_
#define TAGI_WORKER_DATA_SAMPLER_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace tagi::data {

// Where training stands at a step boundary, as a snapshot records it: the
// epoch, the steps done in it, the offset of its next step in the epoch's
// sample sequence (see "Elastic jobs"), and the steps done in the whole
// job. Under one world offset = step * world * batch and global_step =
// epoch * steps_per_epoch + step; an elastic job's epochs may have run
// under several worlds.
struct SamplerCursor {
  uint64_t epoch = 0;
  uint64_t step = 0;
  uint64_t offset = 0;
  uint64_t global_step = 0;
};

// The permutation of [0, num_samples) used in `epoch` (see above).
// REQUIRES: num_samples <= 2^32.
std::vector<uint32_t> EpochPermutation(size_t num_samples, uint64_t seed,
                                       uint64_t epoch);

class DistributedSampler {
 public:
  // REQUIRES: num_samples > 0, num_samples <= 2^32, world >= 1,
  //           0 <= rank < world, batch >= 1.
  DistributedSampler(size_t num_samples, uint64_t seed, int world, int rank,
                     size_t batch);

  // ceil(num_samples / (world * batch)); the same on every rank.
  size_t steps_per_epoch() const { return steps_per_epoch_; }
  size_t num_samples() const { return num_samples_; }
  size_t batch() const { return batch_; }
  int world() const { return world_; }
  int rank() const { return rank_; }

  // Writes the sample indices of this rank at (epoch, step) into `out`.
  // REQUIRES: step < steps_per_epoch(), out.size() == batch().
  void Batch(uint64_t epoch, size_t step, std::span<uint32_t> out) const;

  // The same for the step at `offset` (see "Elastic jobs" above).
  // REQUIRES: offset < num_samples(), out.size() == batch().
  void BatchAt(uint64_t epoch, size_t offset, std::span<uint32_t> out) const;

  // Samples one step advances the offset by: world * batch.
  size_t global_batch() const { return static_cast<size_t>(world_) * batch_; }
  // Steps left in an epoch at `offset`: ceil((N - offset) / global_batch),
  // 0 at or past N.
  size_t StepsFrom(size_t offset) const;

 private:
  const std::vector<uint32_t>& PermutationFor(uint64_t epoch) const;

  const size_t num_samples_;
  const uint64_t seed_;
  const int world_;
  const int rank_;
  const size_t batch_;
  const size_t steps_per_epoch_;

  // Cache of the last epoch's permutation (see the thread-safety note).
  mutable std::optional<uint64_t> cached_epoch_;
  mutable std::vector<uint32_t> cached_permutation_;
};

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_SAMPLER_H_
