// Engine: one TAGI network on one compute device, as the Trainer and the
// worker drive it. Implementations: CpuEngine (the CPU Model, the numerical
// spec) and cuda::CudaEngine (worker/engine/cuda/cuda_engine.h).
//
// Calls are per step or coarser (a virtual call and a Status per step, none
// inside a kernel), so the CPU path keeps its speed. Every buffer that
// crosses this interface is host memory, except the span BeginReduce
// returns when the caller asked for device memory.
//
// The parameters read and written here are the model arena of model.h:
// [mu of N parameters][var of N parameters], the same on every device, so a
// model file or a snapshot moves freely between CPU and GPU.
//
// A data-parallel step is:
//   TrainStep(...)                      forward, output update, backward
//   span = BeginReduce(device, control)  packed deltas + state + control word
//   collective.AllReduceSum(span)        (by the caller)
//   control = EndReduce(scale, 1/world)  back into the deltas and state, scaled
//   ApplyStep(cap_factor)
// A single process skips the middle three calls.
//
// Errors: device failures (out of memory, a failed launch) come back as a
// Status from the call that saw them; host-only implementations never fail
// except on a span of the wrong size (InvalidArgument).
// Not thread-safe: one thread drives an engine.
#ifndef TAGI_WORKER_ENGINE_ENGINE_H_
#define TAGI_WORKER_ENGINE_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/architecture.h"
#include "worker/engine/gaussian.h"
#include "worker/engine/model.h"

namespace tagi::engine {

// OK when every value is finite; DataLoss naming the first that is not
// (CheckReduced's message).
absl::Status CheckFiniteReduced(std::span<const float> values);

class Engine {
 public:
  virtual ~Engine() = default;

  virtual const Architecture& architecture() const = 0;
  // "cpu" or "cuda:N".
  virtual std::string device() const = 0;
  size_t num_parameters() const { return architecture().num_parameters(); }
  size_t output_width() const { return architecture().output_width(); }
  size_t num_state() const { return architecture().num_state(); }

  // Sizes the per-batch buffers for batches up to max_batch (allocates; not
  // for the step loop). Larger batches reserve on their own.
  virtual absl::Status Reserve(size_t max_batch) = 0;
  // Draws every parameter from `seed` exactly as Model::Initialize does, so
  // every device starts from the same bits.
  virtual absl::Status Initialize(uint64_t seed, const InitOptions& options) = 0;

  // Copies of the parameter arena. REQUIRES: size 2 * num_parameters().
  virtual absl::Status ReadParameters(std::span<float> out) = 0;
  virtual absl::Status WriteParameters(std::span<const float> in) = 0;
  // Copies of the state. REQUIRES: size num_state().
  virtual absl::Status ReadState(std::span<float> out) = 0;
  virtual absl::Status WriteState(std::span<const float> in) = 0;
  // The delta arena of the last TrainStep (after EndReduce: the reduced
  // one). REQUIRES: size 2 * num_parameters().
  virtual absl::Status ReadDeltas(std::span<float> out) = 0;
  // Fingerprint64 of the parameter arena: equal for bit-identical models,
  // whatever the device.
  virtual absl::StatusOr<uint64_t> ParameterFingerprint() = 0;

  // Forward pass (evaluation mode) of `batch` samples x [batch][input_width]
  // (input variance zero); Output and ClassProbabilities then describe it.
  virtual absl::Status Forward(const float* x, size_t batch) = 0;
  // The output units of the last Forward or TrainStep, [batch][output_width],
  // in host memory valid until the next call on the engine.
  virtual absl::StatusOr<ConstGaussianView> Output(size_t batch) = 0;
  // Classification: class probabilities [batch][K] of the last forward pass.
  virtual absl::Status ClassProbabilities(size_t batch, float* probs) = 0;

  // Forward, output update and backward: fills the delta arena with the
  // parameter deltas summed over the batch. Classification takes labels,
  // regression targets [batch][output_width] (NaN masks an output).
  virtual absl::Status TrainStep(const float* x, const int32_t* labels, const float* targets,
                                 size_t batch, float sigma_v) = 0;

  // The buffer to all-reduce: the 2N deltas, a copy of the state (S
  // floats) and Model::kControlWords floats, the first of which is set to
  // `control`. In device memory when
  // `device_memory` is true and the engine has one (the caller's collective
  // must then take device pointers), else in host memory. Valid until
  // EndReduce.
  virtual absl::StatusOr<std::span<float>> BeginReduce(bool device_memory, float control) = 0;
  // Takes the reduced buffer back as the deltas, multiplied by `scale`
  // (1 / world in average mode), and the state, multiplied by
  // `state_scale` (1 / world: every replica keeps the average), and
  // returns the reduced control word.
  virtual absl::StatusOr<float> EndReduce(float scale, float state_scale) = 0;
  // Between the collective and EndReduce: OK when every value of the reduced
  // buffer (deltas, state, control word) is finite, DataLoss otherwise (a
  // rank sent NaN or Inf, or the sum overflowed). A step that fails it must
  // not be taken back or applied.
  virtual absl::Status CheckReduced() = 0;

  // Overlap of the backward with the all-reduce: an engine that can hand
  // out its deltas as soon as they are final calls
  // `ready(ready_from, device_event)` during TrainStep's backward, meaning
  // every delta (mu and var) from parameter index ready_from to the end is
  // final (non-increasing; 0 by the end; spec/buckets.h), and returns the
  // buffer BeginReduce(device_memory, ...) will return, fixed for the
  // engine's life. A host engine's deltas are final when it calls, and
  // device_event is null. A GPU engine (device_memory true) calls as it
  // queues the work: device_event is an event (cudaEvent_t) recorded on its
  // stream after that work, and the deltas are final once the device
  // reaches it (Collective::AllReduceSumAfter waits for it on the device);
  // the event stays valid until the next TrainStep. The caller may
  // all-reduce the final parts of its deltas on another thread meanwhile;
  // the state and control word only after BeginReduce staged them.
  // Unimplemented for engines that cannot (the caller then reduces after
  // TrainStep; a GPU engine cannot for a host collective); an empty
  // `ready` turns it off.
  using BackwardObserver = std::function<void(size_t ready_from, void* device_event)>;
  struct ReduceBuffer {
    std::span<float> values;  // [mu half][var half][state][control words]
    size_t var_offset = 0;    // where the var half begins: N, or N padded on a GPU
  };
  virtual absl::StatusOr<ReduceBuffer> SetBackwardObserver(BackwardObserver ready,
                                                           bool device_memory);

  // The capped update with the variance floor (docs/maths.md section 7).
  virtual absl::Status ApplyStep(float cap_factor) = 0;

  // Synchronised batch norm (Model::SetBatchSync): training steps take
  // batch statistics over every replica through `sum`; a failed sum fails
  // the TrainStep that made it.
  virtual absl::Status SetBatchSync(std::function<absl::Status(std::span<float>)> sum,
                                    size_t world) = 0;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_ENGINE_H_
