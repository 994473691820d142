// Model: a TAGI network on the CPU, the executor of a plan (spec/plan.h).
//
// Owns the arenas the plan lays out: parameters [mu of N][var of N] (every
// layer's blocks, nested ones included, at the plan's offsets), deltas
// mirroring them followed by room for the state and kControlWords, state (S floats), derived
// buffers and the batch arena (units, jcb and innovations of every
// boundary, per-layer scratch), the shared workspace, and one Layer object per planned layer.
// So one data-parallel step all-reduces `deltas()` in a single call, and
// the capped step is a pass over aligned slices.
//
// A training step is TrainStepLocal (forward in training mode, output
// update, backward: fills deltas()), then optionally an all-reduce of
// deltas() by the caller, then ApplyStep. Forward alone runs in evaluation
// mode. No method allocates after Create() unless a batch larger than
// max_batch is asked for (then Reserve() re-plans the batch arena first).
// Not thread-safe: one thread drives a model.
#ifndef TAGI_WORKER_ENGINE_MODEL_H_
#define TAGI_WORKER_ENGINE_MODEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "spec/hsm_tree.h"
#include "spec/plan.h"
#include "worker/engine/architecture.h"
#include "worker/engine/gaussian.h"
#include "worker/engine/initialize.h"
#include "worker/engine/layer.h"

namespace tagi::engine {

// Cap factors of the capped step, by the batch size that produced the
// deltas (docs/maths.md section 7; the reference's heuristics, kept as named
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

// The CPU layer of a planned layer, from the CPU engine's registry
// (cpu_layers.h); Unimplemented for a kind it has no layer for.
absl::StatusOr<std::unique_ptr<Layer>> MakeLayer(const spec::PlannedLayer& planned);

class Model {
 public:
  // InvalidArgument for an invalid architecture (ValidateArchitecture's message).
  static absl::StatusOr<std::unique_ptr<Model>> Create(const Architecture& arch,
                                                       size_t max_batch);

  const Architecture& architecture() const { return plan_.arch; }
  const spec::Plan& plan() const { return plan_; }
  size_t input_width() const { return plan_.input().size; }
  size_t output_width() const { return plan_.output().size; }
  size_t num_parameters() const { return plan_.num_parameters; }
  size_t num_state() const { return plan_.num_state; }
  size_t max_batch() const { return plan_.max_batch; }
  // Grows the batch arena (allocates; not for the step loop).
  void Reserve(size_t max_batch);

  // Draws every parameter from a generator seeded with `seed` (block by
  // block in plan order: the same seed gives the same model everywhere)
  // and resets the state to its initial values.
  void Initialize(uint64_t seed, const InitOptions& options);

  // The arenas: [mu of N parameters][var of N parameters], and the state.
  std::span<float> parameters() { return params_; }
  std::span<const float> parameters() const { return params_; }
  std::span<float> deltas() { return {deltas_.data(), 2 * num_parameters()}; }
  std::span<const float> deltas() const { return {deltas_.data(), 2 * num_parameters()}; }
  std::span<float> state() { return state_; }
  std::span<const float> state() const { return state_; }
  // What one data-parallel step all-reduces, in one call: deltas(), then a
  // copy of the state (StageState; the running statistics, which every
  // replica must keep identical), then kControlWords floats (e.g. a stop
  // vote).
  static constexpr size_t kControlWords = 1;
  std::span<float> reduce_buffer() { return deltas_; }
  // Copies the state into reduce_buffer().
  void StageState();
  // Takes the reduced state back, multiplied by `scale` (1 / world: the
  // replicas' average).
  void TakeReducedState(float scale);
  // Call after writing parameters() directly (loading a file, a broadcast).
  void ParametersChanged();
  // Fingerprint64 of the parameter arena, combined with that of the state
  // when there is any: equal for bit-identical models.
  uint64_t ParameterFingerprint() const;

  // Forward pass of `batch` samples x [batch][input_width] (input variance
  // zero). The outputs are output() until the next call.
  void Forward(const float* x, size_t batch, Mode mode = Mode::kEval);
  ConstGaussianView output() const;

  // Forward (training mode), output update and backward: fills deltas()
  // with the parameter deltas summed over the batch. Classification takes
  // labels, regression takes targets [batch][output_width] (NaN masks an
  // output).
  void TrainStepLocal(const float* x, const int32_t* labels, const float* targets,
                      size_t batch, float sigma_v);
  // The capped update with the variance floor; cap_factor from CapFactor()
  // of the batch that produced deltas() (the global batch in sum mode).
  void ApplyStep(float cap_factor);

  // Synchronised batch norm: training forwards compute batch statistics
  // over every replica's batch through `sum` (an all-reduce over `world`
  // replicas of equal batches). A failed sum abandons the synchronisation
  // for the rest of the step; TakeSyncStatus returns (and clears) it.
  void SetBatchSync(std::function<absl::Status(std::span<float>)> sum, size_t world);
  absl::Status TakeSyncStatus();

  // Called from TrainStepLocal's backward, while it runs, with a parameter
  // index below which the deltas are not all final yet: every delta (mu and
  // var) from there to the end of the arena is, so a caller can reduce it
  // (spec/buckets.h) while the rest of the backward goes on. Non-increasing
  // within a step; 0 by the end. Empty: none.
  void SetBackwardObserver(std::function<void(size_t ready_from)> observer);

  // Wall time per plan step, summed over the calls since SetProfile (a
  // bench's split of a step by kind of work: cnn_bench --split). Timing
  // costs two clock reads per step; null (the default) times nothing.
  struct StepProfile {
    std::vector<double> forward;   // seconds per plan step
    std::vector<double> backward;  // seconds per plan step
    double head = 0;               // the output layer's innovations
  };
  // Sizes `profile` to the plan and zeroes it; it must outlive its use.
  void SetProfile(StepProfile* profile);

  // Classification: class probabilities [batch][K] of the last Forward.
  void ClassProbabilities(size_t batch, float* probs) const;
  const HsmTree* hsm_tree() const { return tree_ ? &*tree_ : nullptr; }

 private:
  explicit Model(spec::Plan plan) : plan_(std::move(plan)) {}
  absl::Status Build();
  void Backward(size_t batch);
  ArenaBases Bases();
  GaussianView At(const spec::Slot& slot) {
    return {batch_.data() + slot.mu, batch_.data() + slot.var};
  }

  spec::Plan plan_;
  std::vector<std::unique_ptr<Layer>> layers_;  // per planned layer
  std::vector<float> params_;
  std::vector<float> deltas_;
  std::vector<float> state_;
  std::vector<float> derived_;
  std::vector<float> batch_;
  std::vector<float> workspace_;
  std::optional<HsmTree> tree_;
  std::optional<BatchSync> batch_sync_;
  // The elementwise loops' threads: as many as BLAS threads at Create().
  std::unique_ptr<ThreadTeam> team_;
  absl::Status sync_status_;
  std::function<void(size_t)> backward_observer_;
  // What LayerIo::deltas_final calls: the observer, with the index of the
  // reported delta.
  std::function<void(const float*)> deltas_final_;
  // Per plan step: ReadyFromAfterStep; per planned layer: the end of its
  // parameters.
  std::vector<size_t> ready_from_;
  std::vector<size_t> layer_end_;
  StepProfile* profile_ = nullptr;
  // Node probabilities for ClassProbabilities (no allocation per call).
  // mutable: scratch only, ClassProbabilities is logically const.
  mutable std::vector<float> node_scratch_;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_MODEL_H_
