// CpuEngine: the Engine of the CPU Model (model.h), which it owns.
//
// Every call forwards to the Model; buffers are the Model's own (the reduce
// span is its delta arena, no copy). Never fails except on a span of the
// wrong size. Not thread-safe, like the Model.
#ifndef TAGI_WORKER_ENGINE_CPU_ENGINE_H_
#define TAGI_WORKER_ENGINE_CPU_ENGINE_H_

#include <memory>

#include "worker/engine/engine.h"
#include "worker/engine/model.h"

namespace tagi::engine {

class CpuEngine final : public Engine {
 public:
  // REQUIRES: model is not null.
  explicit CpuEngine(std::unique_ptr<Model> model) : model_(std::move(model)) {}
  static absl::StatusOr<std::unique_ptr<CpuEngine>> Create(const Architecture& arch,
                                                           size_t max_batch);

  Model& model() { return *model_; }

  const Architecture& architecture() const override { return model_->architecture(); }
  std::string device() const override { return "cpu"; }
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
  absl::StatusOr<float> EndReduce(float scale, float state_scale) override;
  absl::Status CheckReduced() override;
  absl::StatusOr<ReduceBuffer> SetBackwardObserver(BackwardObserver ready,
                                                   bool device_memory) override;
  absl::Status ApplyStep(float cap_factor) override;
  absl::Status SetBatchSync(std::function<absl::Status(std::span<float>)> sum,
                            size_t world) override;

 private:
  std::unique_ptr<Model> model_;
};

// InvalidArgument unless a span meant for an arena of `num_parameters`
// parameters holds 2 * num_parameters floats.
absl::Status CheckArenaSpan(const char* what, size_t size, size_t num_parameters);
// InvalidArgument unless a span meant for the state holds num_state floats.
absl::Status CheckStateSpan(const char* what, size_t size, size_t num_state);

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_CPU_ENGINE_H_
