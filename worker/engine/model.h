// Model: a sequential TAGI network on the CPU.
//
// Owns the layers, the parameter arena and the delta arena, the hidden
// states of every layer boundary (sized for max_batch) and the output
// head. The arenas are laid out as [means of all parameters][variances of
// all parameters] (N floats each half, N = architecture.num_parameters()),
// with every LINEAR layer's weights then biases at the same offset in both
// halves; the delta arena mirrors it. So one data-parallel step all-reduces
// `deltas()` in a single call, and the capped step is a pass over aligned
// slices.
//
// A training step is TrainStepLocal (forward, output update, backward:
// fills deltas()), then optionally an all-reduce of deltas() by the caller,
// then ApplyStep. No method allocates after Create() unless a batch larger
// than max_batch is asked for (then Reserve() grows the buffers first).
// Not thread-safe: one thread drives a model.
#ifndef TAGI_WORKER_ENGINE_MODEL_H_
#define TAGI_WORKER_ENGINE_MODEL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/hsm_tree.h"
#include "common/rng.h"
#include "worker/engine/architecture.h"
#include "worker/engine/gaussian.h"
#include "worker/engine/layer.h"
#include "worker/engine/linear.h"

namespace tagi::engine {

// Cap factors of the capped step, by the batch size that produced the
// deltas (TAGI.md section 7; the reference's heuristics, kept as named
// constants so a job could change them).
struct CapPolicy {
  float single_sample = 0.1f;  // B = 1
  float small_batch = 2.0f;    // 2 <= B < large_batch_from
  float large_batch = 3.0f;    // B >= large_batch_from
  size_t large_batch_from = 256;
};
float CapFactor(size_t batch, const CapPolicy& policy = {});

// Variances that a step drives to <= 0 are reset to this.
inline constexpr float kVarianceFloor = 1e-5f;

struct InitOptions {
  InitMethod method = InitMethod::kHe;
  float gain_w = 1.0f;
  float gain_b = 1.0f;
};

class Model {
 public:
  // REQUIRES: ValidateArchitecture(arch) is OK (checked: an invalid one is
  // an InvalidArgument error).
  static absl::StatusOr<std::unique_ptr<Model>> Create(const Architecture& arch,
                                                       size_t max_batch);

  const Architecture& architecture() const { return arch_; }
  size_t input_width() const { return states_.front().width; }
  size_t output_width() const { return states_.back().width; }
  size_t num_parameters() const { return num_params_; }
  size_t max_batch() const { return max_batch_; }
  // Grows the per-batch buffers (allocates; not for the step loop).
  void Reserve(size_t max_batch);

  // Draws every parameter from a generator seeded with `seed`, layer by
  // layer: the same seed gives the same model everywhere.
  void Initialize(uint64_t seed, const InitOptions& options);

  // The arenas: [mu of N parameters][var of N parameters].
  std::span<float> parameters() { return params_; }
  std::span<const float> parameters() const { return params_; }
  std::span<float> deltas() { return {deltas_.data(), 2 * num_params_}; }
  std::span<const float> deltas() const { return {deltas_.data(), 2 * num_params_}; }
  // deltas() followed by kControlWords floats that the data-parallel step
  // reduces together with the deltas (e.g. a stop vote), so that one
  // all-reduce per step carries both.
  static constexpr size_t kControlWords = 1;
  std::span<float> reduce_buffer() { return deltas_; }
  // Call after writing parameters() directly (loading a file, a broadcast).
  void ParametersChanged();
  // Fingerprint64 of the parameter arena: equal for bit-identical models.
  uint64_t ParameterFingerprint() const;

  // Forward pass of `batch` samples x [batch][input_width] (input variance
  // zero). The outputs are output() until the next call.
  void Forward(const float* x, size_t batch);
  ConstGaussianView output() const;

  // Forward, output update and backward: fills deltas() with the parameter
  // deltas summed over the batch. Classification takes labels, regression
  // takes targets [batch][output_width] (NaN masks an output).
  void TrainStepLocal(const float* x, const int32_t* labels, const float* targets,
                      size_t batch, float sigma_v);
  // The capped update with the variance floor; cap_factor from CapFactor()
  // of the batch that produced deltas() (the global batch in sum mode).
  void ApplyStep(float cap_factor);

  // Classification: class probabilities [batch][K] of the last Forward.
  void ClassProbabilities(size_t batch, float* probs) const;
  const HsmTree* hsm_tree() const { return tree_ ? &*tree_ : nullptr; }

 private:
  explicit Model(const Architecture& arch) : arch_(arch) {}
  void Build();
  void Backward(size_t batch);

  Architecture arch_;
  size_t num_params_ = 0;
  size_t max_batch_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<Linear*> linears_;      // non-owning, in order
  std::vector<HiddenState> states_;   // layers_.size() + 1 boundaries
  std::vector<float> params_;
  std::vector<float> deltas_;
  GaussianTensor delta_a_;            // ping-pong innovation buffers
  GaussianTensor delta_b_;
  std::optional<HsmTree> tree_;
  // Node probabilities for ClassProbabilities (no allocation per call).
  // mutable: scratch only, ClassProbabilities is logically const.
  mutable std::vector<float> node_scratch_;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_MODEL_H_
