// Layer: one stage of a sequential TAGI network on the CPU.
//
// Forward maps the Gaussian units of its input boundary to those of its
// output boundary. Backward receives the normalised innovations (delta_mu,
// delta_var; shared/TAGI.md section 2) of its output units and writes those
// of its input units; a LINEAR layer also fills its parameter deltas then.
// Layers hold no buffers that grow: everything is sized by Reserve().
// Not thread-safe; a model and its layers are used by one thread.
#ifndef TAGI_WORKER_ENGINE_LAYER_H_
#define TAGI_WORKER_ENGINE_LAYER_H_

#include <cstddef>

#include "worker/engine/architecture.h"
#include "worker/engine/gaussian.h"

namespace tagi::engine {

class Layer {
 public:
  virtual ~Layer() = default;
  virtual LayerKind kind() const = 0;
  // Width of the output boundary given the input width.
  virtual size_t OutputWidth(size_t input_width) const = 0;
  // Whether Forward writes a jcb into the output boundary.
  virtual bool ProducesJcb() const = 0;
  virtual void Reserve(size_t /*max_batch*/) {}

  virtual void Forward(const HiddenState& in, HiddenState& out, size_t batch) = 0;
  // need_input_delta is false for the first layer (no innovations are
  // propagated to the data).
  virtual void Backward(const HiddenState& in, const HiddenState& out,
                        ConstGaussianView delta_out, GaussianView delta_in,
                        size_t batch, bool need_input_delta) = 0;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_LAYER_H_
