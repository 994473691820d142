// AvgPool2d and MaxPool2d (docs/maths.md section 11) on the CPU.
//
// Windows may overlap (stride < kernel), skip cells (stride > kernel) and
// reach into padding, whose cells add nothing (the average still divides
// by kernel^2, as the reference does). MaxPool passes on the moments of the
// first cell of each window with the largest mean, and remembers it (in its
// scratch) to route the innovations back. No parameters.
#ifndef TAGI_WORKER_ENGINE_POOL_H_
#define TAGI_WORKER_ENGINE_POOL_H_

#include "worker/engine/conv2d.h"
#include "worker/engine/layer.h"

namespace tagi::engine {

class AvgPool2d final : public Layer {
 public:
  explicit AvgPool2d(const spec::PlannedLayer& planned) : g_(WindowGeometry::Of(planned)) {}
  void Forward(const LayerIo& io, Mode mode) override;
  void Backward(const LayerIo& io) override;

 private:
  WindowGeometry g_;
};

class MaxPool2d final : public Layer {
 public:
  explicit MaxPool2d(const spec::PlannedLayer& planned) : g_(WindowGeometry::Of(planned)) {}
  void Forward(const LayerIo& io, Mode mode) override;
  void Backward(const LayerIo& io) override;

 private:
  WindowGeometry g_;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_POOL_H_
