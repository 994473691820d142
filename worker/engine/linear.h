// Linear: the fully connected TAGI layer (docs/maths.md sections 3, 6, 7).
//
// Blocks: weights mu_w, var_w [out][in] row-major, then biases [out].
// Derived (refreshed whenever the parameters change): mu_w^2 then
// mu_w^2 + var_w. Scratch: the squared input means of the batch. Every
// product is one cblas_sgemm call, except the weight deltas of a layer of
// kDeltaBlockSplitWeights weights or more: blocks of rows of about
// kDeltaBlockWeights weights, from the last, each handed to
// LayerIo::deltas_final when it is done (so the all-reduce of a large layer
// starts before its backward ends).
#ifndef TAGI_WORKER_ENGINE_LINEAR_H_
#define TAGI_WORKER_ENGINE_LINEAR_H_

#include "worker/engine/layer.h"

namespace tagi::engine {

inline constexpr size_t kDeltaBlockSplitWeights = size_t{1} << 20;
inline constexpr size_t kDeltaBlockWeights = size_t{1} << 19;
// Rows of the weight deltas computed (and handed out) at a time.
size_t RowsPerDeltaBlock(size_t out, size_t in);

class Linear final : public Layer {
 public:
  Linear(size_t in, size_t out) : in_(in), out_(out) {}

  void Forward(const LayerIo& io, Mode mode) override;
  void Backward(const LayerIo& io) override;
  void Refresh(const LayerIo& io) override;
  // Fused with the refresh of the derived buffers.
  void ApplyStep(const LayerIo& io, float inv_cap, float variance_floor) override;

 private:
  size_t weights() const { return in_ * out_; }
  size_t in_;
  size_t out_;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_LINEAR_H_
