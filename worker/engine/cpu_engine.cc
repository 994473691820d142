#include "worker/engine/cpu_engine.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "common/protocol.h"

namespace tagi::engine {

absl::Status CheckArenaSpan(const char* what, size_t size, size_t num_parameters) {
  if (size == 2 * num_parameters) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %d floats given, the arena of %d parameters holds %d", what, size,
                      num_parameters, 2 * num_parameters));
}

absl::Status CheckStateSpan(const char* what, size_t size, size_t num_state) {
  if (size == num_state) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %d floats given, the model holds %d state values", what, size,
                      num_state));
}

absl::StatusOr<std::unique_ptr<CpuEngine>> CpuEngine::Create(const Architecture& arch,
                                                             size_t max_batch) {
  auto model = Model::Create(arch, max_batch);
  if (!model.ok()) return model.status();
  return std::make_unique<CpuEngine>(std::move(*model));
}

absl::Status CpuEngine::Reserve(size_t max_batch) {
  model_->Reserve(max_batch);
  return absl::OkStatus();
}

absl::Status CpuEngine::Initialize(uint64_t seed, const InitOptions& options) {
  model_->Initialize(seed, options);
  return absl::OkStatus();
}

absl::Status CpuEngine::ReadParameters(std::span<float> out) {
  if (auto st = CheckArenaSpan("ReadParameters", out.size(), num_parameters()); !st.ok()) {
    return st;
  }
  std::copy(model_->parameters().begin(), model_->parameters().end(), out.begin());
  return absl::OkStatus();
}

absl::Status CpuEngine::WriteParameters(std::span<const float> in) {
  if (auto st = CheckArenaSpan("WriteParameters", in.size(), num_parameters()); !st.ok()) {
    return st;
  }
  std::copy(in.begin(), in.end(), model_->parameters().begin());
  model_->ParametersChanged();
  return absl::OkStatus();
}

absl::Status CpuEngine::ReadState(std::span<float> out) {
  if (auto st = CheckStateSpan("ReadState", out.size(), num_state()); !st.ok()) return st;
  std::copy(model_->state().begin(), model_->state().end(), out.begin());
  return absl::OkStatus();
}

absl::Status CpuEngine::WriteState(std::span<const float> in) {
  if (auto st = CheckStateSpan("WriteState", in.size(), num_state()); !st.ok()) return st;
  std::copy(in.begin(), in.end(), model_->state().begin());
  return absl::OkStatus();
}

absl::Status CpuEngine::ReadDeltas(std::span<float> out) {
  if (auto st = CheckArenaSpan("ReadDeltas", out.size(), num_parameters()); !st.ok()) {
    return st;
  }
  std::copy(model_->deltas().begin(), model_->deltas().end(), out.begin());
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> CpuEngine::ParameterFingerprint() {
  return model_->ParameterFingerprint();
}

absl::Status CpuEngine::Forward(const float* x, size_t batch) {
  model_->Forward(x, batch);
  return absl::OkStatus();
}

absl::StatusOr<ConstGaussianView> CpuEngine::Output(size_t /*batch*/) { return model_->output(); }

absl::Status CpuEngine::ClassProbabilities(size_t batch, float* probs) {
  model_->ClassProbabilities(batch, probs);
  return absl::OkStatus();
}

absl::Status CpuEngine::TrainStep(const float* x, const int32_t* labels, const float* targets,
                                  size_t batch, float sigma_v) {
  model_->TrainStepLocal(x, labels, targets, batch, sigma_v);
  return model_->TakeSyncStatus();
}

absl::StatusOr<std::span<float>> CpuEngine::BeginReduce(bool /*device_memory*/, float control) {
  std::span<float> buffer = model_->reduce_buffer();
  model_->StageState();
  buffer.back() = control;
  return buffer;
}

absl::StatusOr<float> CpuEngine::EndReduce(float scale, float state_scale) {
  if (scale != 1.0f) {
    for (float& v : model_->deltas()) v *= scale;
  }
  model_->TakeReducedState(state_scale);
  return model_->reduce_buffer().back();
}

absl::StatusOr<Engine::ReduceBuffer> CpuEngine::SetBackwardObserver(BackwardObserver ready,
                                                                    bool /*device_memory*/) {
  // Host memory whatever the collective takes (BeginReduce's too).
  if (!ready) {
    model_->SetBackwardObserver({});
  } else {
    model_->SetBackwardObserver(
        [ready = std::move(ready)](size_t ready_from) { ready(ready_from, nullptr); });
  }
  return ReduceBuffer{model_->reduce_buffer(), model_->num_parameters()};
}

absl::StatusOr<Engine::ReduceBuffer> Engine::SetBackwardObserver(BackwardObserver /*ready*/,
                                                                 bool /*device_memory*/) {
  return absl::UnimplementedError(absl::StrFormat(
      "the %s engine reduces its deltas after the backward pass only", device()));
}

absl::Status CpuEngine::CheckReduced() { return CheckFiniteReduced(model_->reduce_buffer()); }

absl::Status CheckFiniteReduced(std::span<const float> values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::DataLossError(absl::StrFormat(
          "%s: value %d of %d of the all-reduced deltas is %f (a rank sent NaN or Inf); the "
          "step is not applied",
          kNonFiniteStepReason, i, values.size(), values[i]));
    }
  }
  return absl::OkStatus();
}

absl::Status CpuEngine::SetBatchSync(std::function<absl::Status(std::span<float>)> sum,
                                     size_t world) {
  model_->SetBatchSync(std::move(sum), world);
  return absl::OkStatus();
}

absl::Status CpuEngine::ApplyStep(float cap_factor) {
  model_->ApplyStep(cap_factor);
  return absl::OkStatus();
}

}  // namespace tagi::engine
