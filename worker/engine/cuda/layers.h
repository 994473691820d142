// CudaLayer: one layer kind on the GPU, as the CudaEngine (the executor of a
// plan, spec/plan.h) drives it. The same shape as the CPU Layer
// (worker/engine/layer.h), which is its numerical spec.
//
// A layer owns no buffers: every call gets a CudaLayerIo of device pointers
// into the engine's arenas, laid out by the plan (its input and output
// units, the innovations of its output and where those of its input go, its
// parameter, delta and state blocks, its derived buffers and its scratch),
// and a CudaContext (the engine's stream and cuBLAS handle). Every call only
// queues work on that stream (kernels.h, cuBLAS products): it never
// allocates, never synchronises, and returns the error of a launch or a
// product that could not be queued.
//
// Deferred factors: a kind may leave a delta block without its variance
// factor (the means lacking var, the variances var^2, of the same parameter
// block; DefersVarianceFactor says which blocks), so that the capped step
// applies it on the way instead of a separate pass. PendingFactors tells
// ApplyStep what the delta arena still lacks (cuda_engine.h explains when).
//
// One class per kind in layers.cc and image_layers.cc, each file
// registering its kinds' factories with the CUDA engine's registry
// (CudaLayers, layer_registry.h). Internal to worker/engine/cuda. Not
// thread-safe.
#ifndef TAGI_WORKER_ENGINE_CUDA_LAYERS_H_
#define TAGI_WORKER_ENGINE_CUDA_LAYERS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "spec/plan.h"
#include "worker/engine/cuda/device_memory.h"
#include "worker/engine/gaussian.h"
#include "worker/engine/layer.h"
#include "worker/engine/layer_registry.h"

namespace tagi::engine::cuda {

class CudnnHandle;  // cudnn_conv.h

struct CudaContext {
  cudaStream_t stream = nullptr;
  const CublasHandle* blas = nullptr;  // its work goes to `stream`
  const CudnnHandle* dnn = nullptr;    // likewise; only when a layer needs cuDNN
  // The engine's workspace (io.workspace), shared by every layer: valid
  // during one call; at least what the layers' Prepare asked for.
  size_t workspace_bytes = 0;
};

// The CPU layers' io (layer.h), every pointer in device memory.
using CudaLayerIo = LayerIo;

// What the delta arena still lacks when ApplyStep runs.
struct PendingFactors {
  bool variance = false;  // the deferred blocks lack their variance factor
  float scale = 1.0f;     // every delta lacks this factor (a reduction's average)
};

// An elementwise activation that a layer runs inside its own passes
// (spec::Step::absorbed): its kind (elementwise::ActivationKind), its
// slope and its own io (its input units, its jcb, where the innovations of
// its input go; its output is the absorbing layer's input).
struct AbsorbedIo {
  int kind = -1;
  float slope = 0.0f;
  CudaLayerIo io;
};

class CudaLayer {
 public:
  virtual ~CudaLayer() = default;
  virtual absl::Status Forward(const CudaContext& ctx, const CudaLayerIo& io, Mode mode) = 0;
  // Fills the parameter deltas (summed over the batch; deferred blocks
  // without their variance factor) and, when delta_in is set, the
  // innovations of the input units.
  virtual absl::Status Backward(const CudaContext& ctx, const CudaLayerIo& io) = 0;
  // Forward and Backward with the activation before it absorbed: the
  // engine runs no step for that activation, and this layer computes its
  // units and jcb and writes the innovations of its input. Only kinds whose
  // rules absorb activations (spec::KindRules::absorbs_activation) are
  // asked; the others answer Internal.
  virtual absl::Status ForwardAbsorbing(const CudaContext& ctx, const CudaLayerIo& io,
                                        const AbsorbedIo& act, Mode mode);
  virtual absl::Status BackwardAbsorbing(const CudaContext& ctx, const CudaLayerIo& io,
                                         const AbsorbedIo& act);
  // Recomputes the derived buffers after the parameters changed.
  virtual absl::Status Refresh(const CudaContext& /*ctx*/, const CudaLayerIo& /*io*/) {
    return absl::OkStatus();
  }
  // Whether Backward leaves parameter block `block` without its variance
  // factor.
  virtual bool DefersVarianceFactor(size_t /*block*/) const { return false; }
  // The bytes of workspace the layer needs for batches up to `max_batch`
  // (called when the engine plans for a new largest batch, before any
  // step; a layer may set up what it needs for that batch here).
  virtual absl::StatusOr<size_t> Prepare(const CudaContext& /*ctx*/, size_t /*max_batch*/) {
    return size_t{0};
  }
  // Whether the layer calls cuDNN (the engine then creates a handle).
  virtual bool NeedsCudnn() const { return false; }
  // The capped update with the variance floor (docs/maths.md section 7) over every
  // parameter block, applying `pending` to the deltas on the way, then
  // Refresh. Kinds may fuse the two.
  virtual absl::Status ApplyStep(const CudaContext& ctx, const CudaLayerIo& io, float inv_cap,
                                 float variance_floor, const PendingFactors& pending);
};

// The capped step of a layer whose blocks are weights (`weights` of them,
// deferred: their pending var_w factor, the reduction's scale and the
// refresh of the derived mu_w^2 and mu_w^2 + var_w fused in one pass) and,
// when `biases` is not 0, biases (the scale only): LINEAR and CONV2D.
absl::Status WeightsAndBiasesStep(const CudaContext& ctx, const CudaLayerIo& io, size_t weights,
                                  size_t biases, float inv_cap, float variance_floor,
                                  const PendingFactors& pending);

using CudaLayerRegistry = LayerRegistry<CudaLayer>;
// layers.cc: LINEAR, the hidden activations, REMAX, CLOSED_FORM_SOFTMAX, EVEN_EXP.
void RegisterCudaLayers(CudaLayerRegistry& r);
// image_layers.cc: CONV2D (Unimplemented, with the reason, in a build
// without cuDNN), AVG_POOL2D, MAX_POOL2D, BATCH_NORM, LAYER_NORM.
void RegisterCudaImageLayers(CudaLayerRegistry& r);
// Every CUDA layer kind, registered once; immutable.
const CudaLayerRegistry& CudaLayers();

}  // namespace tagi::engine::cuda

#endif  // TAGI_WORKER_ENGINE_CUDA_LAYERS_H_
