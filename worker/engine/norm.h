// BatchNorm and LayerNorm (docs/maths.md section 12) on the CPU.
//
// Both standardise their input with statistics that pool the spread of the
// means and the inputs' own variances, divided by n - 1, then apply the
// TAGI product with the scale gamma and add the shift beta (per channel of
// a feature map, per feature of a flat input). The statistics are
// constants in backward.
//
// BatchNorm: statistics per channel over the batch (and the map's
// positions) in training, kept in its derived buffer for backward; the
// running statistics (state: mean, variance, first-batch flag) move
// towards them by `momentum` (the weight of the old value; the first
// training batch replaces them), and evaluation normalises with them.
// LayerNorm: statistics per sample (in its scratch), the same in training
// and evaluation. No allocation.
#ifndef TAGI_WORKER_ENGINE_NORM_H_
#define TAGI_WORKER_ENGINE_NORM_H_

#include "spec/plan.h"
#include "worker/engine/layer.h"

namespace tagi::engine {

class BatchNorm final : public Layer {
 public:
  explicit BatchNorm(const spec::PlannedLayer& planned);
  void Forward(const LayerIo& io, Mode mode) override;
  void Backward(const LayerIo& io) override;

 private:
  // Per channel (mean, variance) of this batch; with io.sync, of every
  // replica's batch (synchronised batch norm).
  void BatchStatistics(const LayerIo& io, float* mean, float* var) const;
  void SyncedStatistics(const LayerIo& io, float* mean, float* var) const;

  size_t channels_;
  size_t positions_;  // h * w (1 for a flat input)
  float eps_;
  float momentum_;
  bool bias_;
};

class LayerNorm final : public Layer {
 public:
  explicit LayerNorm(const spec::PlannedLayer& planned);
  void Forward(const LayerIo& io, Mode mode) override;
  void Backward(const LayerIo& io) override;

 private:
  size_t channels_;
  size_t positions_;
  float eps_;
  bool bias_;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_NORM_H_
