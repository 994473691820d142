// CudaEngine: the TAGI engine on one GPU (docs/maths.md; the CPU Model in
// worker/engine/model.h is its numerical spec).
//
// Like the CPU Model it executes a plan (spec/plan.h, built with 64-float
// alignment): the steps in order forward (a layer step runs one CudaLayer,
// layers.h, created per planned layer; an add step merges a residual
// block), in reverse backward (the partial innovations of a fork summed
// first). Every LINEAR product is one cuBLAS SGEMM in plain fp32, every
// convolution one cuDNN call (cudnn_conv.h), every elementwise stage one
// fused kernel (kernels.h, image_kernels.h; an activation that only a norm
// reads runs inside the norm's kernels, spec/plan.h), all queued on the
// engine's own stream; nothing inside a step goes through host memory
// except the batch itself (in) and a copy of the output units (out, for the
// accuracy probe), both through pinned buffers.
//
// Device memory: one model arena holds the parameters, the deltas, the
// state, the plan's derived buffers (e.g. mu_w^2, mu_w^2 + var_w of every
// LINEAR layer, nested ones included) and the hierarchical-softmax tables;
// one batch arena holds the plan's batch arena (units, jcb, innovations and
// partials of every boundary, per-layer scratch) plus labels and targets,
// sized by Reserve (which re-plans). The parameters and deltas keep the
// host layout of model.h ([mu of N][var of N], the plan's block offsets
// within each half), except that the var half starts at N rounded up to 64
// floats so that every product sees 256-byte-aligned operands; the padding
// is zero and stays zero. Read/WriteParameters and the host-staged reduce
// convert to and from the packed host layout, so files, snapshots and CPU
// ranks see exactly the CPU arena. The device reduce buffer is
// [mu N_pad][var N_pad][state S][control] (the state: the batch norms'
// running statistics, averaged across ranks as the CPU engine does).
//
// Deferred factors: the backward pass leaves the weights' deltas (the
// blocks a layer defers, layers.h) without their var_w (var_w^2) factor and
// EndReduce does not scale; the capped step applies both on the way (one
// pass over the weights instead of three). The device reduce buffer
// therefore holds unscaled weight deltas (every NCCL rank is a GPU engine
// with the same var_w); the host-staged reduce and ReadDeltas give the CPU
// engine's deltas. ReadDeltas is meaningful between TrainStep and
// ApplyStep.
//
// Requires the build's CUDA support (worker/engine/engine_factory.h is the
// entry point that works in every build). Not thread-safe: one thread
// drives an engine; every call makes the engine's device current first.
#ifndef TAGI_WORKER_ENGINE_CUDA_CUDA_ENGINE_H_
#define TAGI_WORKER_ENGINE_CUDA_CUDA_ENGINE_H_

#include <memory>
#include <span>

#include "worker/engine/engine.h"

namespace tagi::engine::cuda {

struct CudaEngineState;  // CUDA handles and buffers, defined in cuda_engine.cc

struct CudaEngineOptions {
  // Run each elementwise activation that only a norm reads inside that
  // norm's kernels (spec::PlanOptions::fuse_activations): the same bits,
  // fewer passes over memory. Off only to compare the two.
  bool fuse_activations = true;
};

class CudaEngine final : public Engine {
 public:
  // InvalidArgument for an invalid architecture; FailedPrecondition when
  // the device does not exist or the driver cannot run it (its message is
  // the runtime's); ResourceExhausted when the model does not fit.
  static absl::StatusOr<std::unique_ptr<CudaEngine>> Create(
      const Architecture& arch, size_t max_batch, int device,
      const CudaEngineOptions& options = {});
  ~CudaEngine() override;
  CudaEngine(const CudaEngine&) = delete;
  CudaEngine& operator=(const CudaEngine&) = delete;

  int ordinal() const;

  const Architecture& architecture() const override;
  std::string device() const override;
  absl::Status Reserve(size_t max_batch) override;
  absl::Status Initialize(uint64_t seed, const InitOptions& options) override;
  absl::Status ReadParameters(std::span<float> out) override;
  absl::Status WriteParameters(std::span<const float> in) override;
  absl::Status ReadState(std::span<float> out) override;
  absl::Status WriteState(std::span<const float> in) override;
  absl::Status ReadDeltas(std::span<float> out) override;
  absl::StatusOr<uint64_t> ParameterFingerprint() override;
  absl::Status Forward(const float* x, size_t batch) override;
  absl::StatusOr<ConstGaussianView> Output(size_t batch) override;
  absl::Status ClassProbabilities(size_t batch, float* probs) override;
  absl::Status TrainStep(const float* x, const int32_t* labels, const float* targets, size_t batch,
                         float sigma_v) override;
  absl::StatusOr<std::span<float>> BeginReduce(bool device_memory, float control) override;
  // Device memory only: the buckets go by NCCL, its stream waiting for each
  // bucket's event (Engine::SetBackwardObserver).
  absl::StatusOr<ReduceBuffer> SetBackwardObserver(BackwardObserver ready,
                                                   bool device_memory) override;
  absl::StatusOr<float> EndReduce(float scale, float state_scale) override;
  absl::Status CheckReduced() override;
  // Synchronised batch norm: each BatchNorm's sums go through pinned host
  // memory to `sum` (two per layer and training step).
  absl::Status SetBatchSync(std::function<absl::Status(std::span<float>)> sum,
                            size_t world) override;
  absl::Status ApplyStep(float cap_factor) override;

  // For tests: the innovations of the output units written by the last
  // TrainStep's output update, [batch][output_width] each.
  absl::Status ReadOutputInnovations(size_t batch, std::span<float> delta_mu,
                                     std::span<float> delta_var);

 private:
  explicit CudaEngine(std::unique_ptr<CudaEngineState> state);
  absl::Status Upload(const float* x, const int32_t* labels, const float* targets, size_t batch);
  absl::Status RunForward(size_t batch, Mode mode);
  absl::Status RunBackward(size_t batch);
  absl::Status OutputUpdate(size_t batch, float sigma_v);
  absl::Status WaitForOutput();

  std::unique_ptr<CudaEngineState> s_;
};

}  // namespace tagi::engine::cuda

#endif  // TAGI_WORKER_ENGINE_CUDA_CUDA_ENGINE_H_
