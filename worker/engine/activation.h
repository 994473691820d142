// Activation: an elementwise layer that maps Gaussian pre-activations z to
// Gaussian activations a and records jcb = cov(a, z) / var(z) for backward
// (shared/TAGI.md section 3). Backward scales the innovations of a by jcb
// (means) and jcb^2 (variances) to give those of z.
#ifndef TAGI_WORKER_ENGINE_ACTIVATION_H_
#define TAGI_WORKER_ENGINE_ACTIVATION_H_

#include "worker/engine/elementwise.h"
#include "worker/engine/layer.h"

namespace tagi::engine {

// Moments of one unit through an activation.
using ActivationMoments = elementwise::Moments;

// The per-unit maths, exposed for tests. REQUIRES: var_z >= 0.
ActivationMoments Activate(LayerKind kind, float slope, float mu_z, float var_z);

class Activation final : public Layer {
 public:
  // REQUIRES: kind is not kLinear. slope is used by kLeakyRelu only.
  Activation(LayerKind kind, float slope) : kind_(kind), slope_(slope) {}

  LayerKind kind() const override { return kind_; }
  size_t OutputWidth(size_t input_width) const override { return input_width; }
  bool ProducesJcb() const override { return true; }

  void Forward(const HiddenState& in, HiddenState& out, size_t batch) override;
  void Backward(const HiddenState& in, const HiddenState& out,
                ConstGaussianView delta_out, GaussianView delta_in, size_t batch,
                bool need_input_delta) override;

 private:
  LayerKind kind_;
  float slope_;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_ACTIVATION_H_
