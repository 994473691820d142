// Activation: an elementwise layer that maps Gaussian pre-activations z to
// Gaussian activations a and records jcb = cov(a, z) / var(z) at its output
// (docs/maths.md section 3). Backward scales the innovations of a by jcb
// (means) and jcb^2 (variances) to give those of z.
#ifndef TAGI_WORKER_ENGINE_ACTIVATION_H_
#define TAGI_WORKER_ENGINE_ACTIVATION_H_

#include "worker/engine/architecture.h"
#include "worker/engine/elementwise.h"
#include "worker/engine/layer.h"

namespace tagi::engine {

// Moments of one unit through an activation.
using ActivationMoments = elementwise::Moments;

// The per-unit maths, exposed for tests. REQUIRES: var_z >= 0.
ActivationMoments Activate(LayerKind kind, float slope, float mu_z, float var_z);

// Backward of any layer that writes a jcb: the innovations of its n output
// units times jcb (means) and jcb^2 (variances) into delta_in, when set.
void JcbBackward(const LayerIo& io, size_t n);

class Activation final : public Layer {
 public:
  // REQUIRES: kind is an activation. slope is used by LEAKY_RELU only.
  Activation(LayerKind kind, float slope, size_t width)
      : kind_(kind), slope_(slope), width_(width) {}

  void Forward(const LayerIo& io, Mode mode) override;
  void Backward(const LayerIo& io) override;

 private:
  LayerKind kind_;
  float slope_;
  size_t width_;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_ACTIVATION_H_
