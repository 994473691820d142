// The output activations of the heads on the CPU (docs/heads.md; the maths
// is heads.h, shared with the CUDA kernels): REMAX and CLOSED_FORM_SOFTMAX
// over each sample's units, EVEN_EXP over [mean, log-noise] pairs. Each
// writes (mu, var, jcb) like an elementwise activation, and Backward scales
// the innovations by jcb and jcb^2 (activation.h's JcbBackward).
#ifndef TAGI_WORKER_ENGINE_HEAD_LAYERS_H_
#define TAGI_WORKER_ENGINE_HEAD_LAYERS_H_

#include "worker/engine/architecture.h"
#include "worker/engine/layer.h"

namespace tagi::engine {

// REMAX or CLOSED_FORM_SOFTMAX: one sample's `width` units at a time.
class SoftmaxActivation final : public Layer {
 public:
  // REQUIRES: kind is REMAX or CLOSED_FORM_SOFTMAX.
  SoftmaxActivation(LayerKind kind, size_t width) : kind_(kind), width_(width) {}

  void Forward(const LayerIo& io, Mode mode) override;
  void Backward(const LayerIo& io) override;

 private:
  LayerKind kind_;
  size_t width_;
};

class EvenExpActivation final : public Layer {
 public:
  explicit EvenExpActivation(size_t width) : width_(width) {}

  void Forward(const LayerIo& io, Mode mode) override;
  void Backward(const LayerIo& io) override;

 private:
  size_t width_;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_HEAD_LAYERS_H_
