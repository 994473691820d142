#include "worker/engine/model.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "common/checksum.h"
#include "spec/buckets.h"
#include "worker/engine/activation.h"
#include "worker/engine/blas.h"
#include "worker/engine/conv2d.h"
#include "worker/engine/cpu_layers.h"
#include "worker/engine/head_layers.h"
#include "worker/engine/linear.h"
#include "worker/engine/norm.h"
#include "worker/engine/output.h"
#include "worker/engine/pool.h"

namespace tagi::engine {
namespace {

void AddInto(GaussianView dst, ConstGaussianView src, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    dst.mu[i] += src.mu[i];
    dst.var[i] += src.var[i];
  }
}

}  // namespace

float CapFactor(size_t batch, const CapPolicy& policy) {
  if (batch <= 1) return policy.single_sample;
  if (batch < policy.large_batch_from) return policy.small_batch;
  return policy.large_batch;
}

const CpuLayerRegistry& CpuLayers() {
  // Built once, on first use, and never changed (no registration from
  // static initialisers: the list of files is here, in one place).
  static const CpuLayerRegistry* const registry = [] {
    auto* r = new CpuLayerRegistry("CPU");
    RegisterLinearLayers(*r);
    RegisterActivationLayers(*r);
    RegisterHeadLayers(*r);
    RegisterConv2dLayers(*r);
    RegisterPoolLayers(*r);
    RegisterNormLayers(*r);
    return r;
  }();
  return *registry;
}

absl::StatusOr<std::unique_ptr<Layer>> MakeLayer(const spec::PlannedLayer& planned) {
  return CpuLayers().Make(planned);
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const Architecture& arch,
                                                     size_t max_batch) {
  auto plan = spec::MakePlan(arch, {std::max<size_t>(max_batch, 1), spec::kCpuAlignFloats});
  if (!plan.ok()) return plan.status();
  std::unique_ptr<Model> model(new Model(std::move(*plan)));
  if (absl::Status st = model->Build(); !st.ok()) return st;
  return model;
}

absl::Status Model::Build() {
  for (const spec::PlannedLayer& l : plan_.layers) {
    absl::StatusOr<std::unique_ptr<Layer>> layer = MakeLayer(l);
    if (!layer.ok()) return layer.status();
    layers_.push_back(*std::move(layer));
  }
  if (BlasThreads() > 1) team_ = std::make_unique<ThreadTeam>(BlasThreads());
  params_.assign(2 * plan_.num_parameters, 0.0f);
  deltas_.assign(2 * plan_.num_parameters + plan_.num_state + kControlWords, 0.0f);
  state_.assign(plan_.num_state, 0.0f);
  InitializeState(plan_, state_);
  derived_.assign(plan_.derived_floats, 0.0f);
  batch_.assign(plan_.batch_floats, 0.0f);
  workspace_.assign(plan_.workspace_floats, 0.0f);
  const Architecture& arch = plan_.arch;
  if (arch.head.hierarchical_softmax()) {
    tree_.emplace(static_cast<int>(arch.head.num_classes));
    node_scratch_.resize(static_cast<size_t>(tree_->output_width()));
  }
  return absl::OkStatus();
}

void Model::Reserve(size_t max_batch) {
  if (max_batch <= plan_.max_batch) return;
  // The architecture was valid when the model was made: planning again
  // for a larger batch cannot fail.
  plan_ = std::move(spec::MakePlan(plan_.arch, {max_batch, spec::kCpuAlignFloats})).value();
  batch_.assign(plan_.batch_floats, 0.0f);
}

void Model::Initialize(uint64_t seed, const InitOptions& options) {
  InitializeParameters(plan_, seed, options, params_);
  InitializeState(plan_, state_);
  ParametersChanged();
}

ArenaBases Model::Bases() {
  return {params_.data(), deltas_.data(), plan_.num_parameters, state_.data(), derived_.data(),
          batch_.data(), workspace_.data()};
}

void Model::ParametersChanged() {
  for (size_t l = 0; l < layers_.size(); ++l) layers_[l]->Refresh(ModelIo(plan_, Bases(), l));
}

uint64_t Model::ParameterFingerprint() const {
  return ModelFingerprint(params_.data(), params_.size(), state_.data(), state_.size());
}

void Model::StageState() {
  std::copy(state_.begin(), state_.end(), deltas_.begin() + 2 * num_parameters());
}

void Model::TakeReducedState(float scale) {
  const float* reduced = deltas_.data() + 2 * num_parameters();
  for (size_t i = 0; i < state_.size(); ++i) state_[i] = reduced[i] * scale;
}

namespace {

using ProfileClock = std::chrono::steady_clock;

// Adds the time since `*since` to `*to` and restarts `*since`.
void Lap(ProfileClock::time_point* since, double* to) {
  const ProfileClock::time_point now = ProfileClock::now();
  *to += std::chrono::duration<double>(now - *since).count();
  *since = now;
}

}  // namespace

void Model::SetProfile(StepProfile* profile) {
  profile_ = profile;
  if (profile_ == nullptr) return;
  profile_->forward.assign(plan_.steps.size(), 0.0);
  profile_->backward.assign(plan_.steps.size(), 0.0);
  profile_->head = 0.0;
}

void Model::Forward(const float* x, size_t batch, Mode mode) {
  Reserve(batch);
  ProfileClock::time_point lap = profile_ ? ProfileClock::now() : ProfileClock::time_point{};
  const GaussianView input = At(plan_.input().units);
  std::memcpy(input.mu, x, batch * input_width() * sizeof(float));
  std::memset(input.var, 0, batch * input_width() * sizeof(float));
  for (size_t s = 0; s < plan_.steps.size(); ++s) {
    const spec::Step& step = plan_.steps[s];
    if (step.op == spec::Step::Op::kLayer) {
      LayerIo io = StepIo(plan_, Bases(), step, batch);
      io.team = team_.get();
      if (mode == Mode::kTrain && batch_sync_) io.sync = &*batch_sync_;
      layers_[static_cast<size_t>(step.layer)]->Forward(io, mode);
      if (profile_) Lap(&lap, &profile_->forward[s]);
      continue;
    }
    // A residual merge: the branches are independent, so means and
    // variances add (docs/maths.md section 13).
    const spec::BoundaryPlan& out = plan_.boundaries[static_cast<size_t>(step.out)];
    const GaussianView a = At(plan_.boundaries[static_cast<size_t>(step.in)].units);
    const GaussianView b = At(plan_.boundaries[static_cast<size_t>(step.in2)].units);
    const GaussianView o = At(out.units);
    const size_t n = batch * out.size;
    for (size_t i = 0; i < n; ++i) {
      o.mu[i] = a.mu[i] + b.mu[i];
      o.var[i] = a.var[i] + b.var[i];
    }
    if (profile_) Lap(&lap, &profile_->forward[s]);
  }
}

ConstGaussianView Model::output() const {
  const spec::Slot& s = plan_.output().units;
  return {batch_.data() + s.mu, batch_.data() + s.var};
}

void Model::TrainStepLocal(const float* x, const int32_t* labels, const float* targets,
                           size_t batch, float sigma_v) {
  Forward(x, batch, Mode::kTrain);
  ProfileClock::time_point lap = profile_ ? ProfileClock::now() : ProfileClock::time_point{};
  const GaussianView delta = At(plan_.output().delta);
  const HeadDesc& head = plan_.arch.head;
  if (tree_) {
    HsmDeltas(*tree_, output(), batch, labels, sigma_v, delta);
  } else if (head.one_hot) {
    OneHotDeltas(output(), batch, output_width(), labels, sigma_v, delta);
  } else if (head.heteroscedastic) {
    HeteroscedasticDeltas(output(), batch_.data() + plan_.output().jcb,
                          batch * output_width() / 2, targets, delta);
  } else {
    RegressionDeltas(output(), targets, batch * output_width(), sigma_v, delta);
  }
  if (profile_) Lap(&lap, &profile_->head);
  Backward(batch);
}

void Model::SetBackwardObserver(std::function<void(size_t ready_from)> observer) {
  backward_observer_ = std::move(observer);
  deltas_final_ = nullptr;
  if (!backward_observer_) return;
  deltas_final_ = [this](const float* mu) {
    backward_observer_(static_cast<size_t>(mu - deltas_.data()));
  };
  ready_from_ = spec::ReadyFromAfterStep(plan_);
  layer_end_.assign(plan_.layers.size(), 0);
  for (size_t l = 0; l < plan_.layers.size(); ++l) {
    const spec::PlannedLayer& layer = plan_.layers[l];
    if (layer.num_blocks == 0) continue;
    const spec::PlannedBlock& last = plan_.blocks[layer.first_block + layer.num_blocks - 1];
    layer_end_[l] = last.offset + last.spec.count;
  }
}

void Model::Backward(size_t batch) {
  ProfileClock::time_point lap = profile_ ? ProfileClock::now() : ProfileClock::time_point{};
  for (size_t s = plan_.steps.size(); s-- > 0;) {
    const spec::Step& step = plan_.steps[s];
    const spec::BoundaryPlan& out = plan_.boundaries[static_cast<size_t>(step.out)];
    const size_t n = batch * out.size;
    const GaussianView delta_out = At(out.delta);
    // Every consumer of this boundary has run: its innovations are the sum
    // of what each of them sent back (a fork of a residual block).
    for (const spec::Slot& partial : out.partials) {
      const GaussianView p = At(partial);
      AddInto(delta_out, {p.mu, p.var}, n);
    }
    if (step.op == spec::Step::Op::kLayer) {
      LayerIo io = StepIo(plan_, Bases(), step, batch);
      io.team = team_.get();
      const size_t layer = static_cast<size_t>(step.layer);
      // A layer may hand out its deltas in pieces while every layer above
      // it in the arena is final (the watermark stands at its end).
      if (backward_observer_) {
        const size_t before = s + 1 < plan_.steps.size() ? ready_from_[s + 1] : num_parameters();
        if (before == layer_end_[layer]) io.deltas_final = &deltas_final_;
      }
      layers_[layer]->Backward(io);
      if (backward_observer_) backward_observer_(ready_from_[s]);
      if (profile_) Lap(&lap, &profile_->backward[s]);
      continue;
    }
    // A residual merge passes the innovations of its output unchanged to
    // both branches.
    for (const auto& [boundary, slot] : {std::pair{step.in, step.in_delta},
                                         std::pair{step.in2, step.in2_delta}}) {
      if (plan_.boundaries[static_cast<size_t>(boundary)].is_input) continue;
      const GaussianView d = At(slot);
      std::memcpy(d.mu, delta_out.mu, n * sizeof(float));
      std::memcpy(d.var, delta_out.var, n * sizeof(float));
    }
    if (profile_) Lap(&lap, &profile_->backward[s]);
  }
}

void Model::ApplyStep(float cap_factor) {
  const float inv_cap = 1.0f / cap_factor;
  for (size_t l = 0; l < layers_.size(); ++l) {
    layers_[l]->ApplyStep(ModelIo(plan_, Bases(), l), inv_cap, kVarianceFloor);
  }
}

void Model::SetBatchSync(std::function<absl::Status(std::span<float>)> sum, size_t world) {
  sync_status_ = absl::OkStatus();
  batch_sync_ = BatchSync{[this, sum = std::move(sum)](std::span<float> values) {
                            if (!sync_status_.ok()) return false;
                            sync_status_ = sum(values);
                            return sync_status_.ok();
                          },
                          world};
}

absl::Status Model::TakeSyncStatus() { return std::exchange(sync_status_, absl::OkStatus()); }

void Model::ClassProbabilities(size_t batch, float* probs) const {
  if (tree_) {
    HsmClassProbabilities(*tree_, output(), batch, probs, node_scratch_.data());
  } else {
    MeanClassProbabilities(output(), batch, output_width(), probs);
  }
}

}  // namespace tagi::engine
