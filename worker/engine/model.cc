#include "worker/engine/model.h"

#include <algorithm>
#include <cstring>

#include "common/checksum.h"
#include "worker/engine/activation.h"
#include "worker/engine/output.h"

namespace tagi::engine {

float CapFactor(size_t batch, const CapPolicy& policy) {
  if (batch <= 1) return policy.single_sample;
  if (batch < policy.large_batch_from) return policy.small_batch;
  return policy.large_batch;
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(const Architecture& arch,
                                                     size_t max_batch) {
  if (auto st = ValidateArchitecture(arch); !st.ok()) return st;
  std::unique_ptr<Model> model(new Model(arch));
  model->Build();
  model->Reserve(std::max<size_t>(max_batch, 1));
  return model;
}

void Model::Build() {
  size_t width = arch_.input_width();
  states_.emplace_back();
  states_.back().width = width;
  for (const LayerDesc& d : arch_.layers) {
    if (d.kind == LayerKind::kLinear) {
      auto linear = std::make_unique<Linear>(d.in, d.out);
      linears_.push_back(linear.get());
      layers_.push_back(std::move(linear));
    } else {
      layers_.push_back(std::make_unique<Activation>(d.kind, d.slope));
    }
    width = layers_.back()->OutputWidth(width);
    states_.emplace_back();
    states_.back().width = width;
    states_.back().has_jcb = layers_.back()->ProducesJcb();
  }
  // The first layer reads the data, whose variance is zero.
  linears_.front()->set_input_variance_zero(true);

  num_params_ = arch_.num_parameters();
  params_.assign(2 * num_params_, 0.0f);
  deltas_.assign(2 * num_params_ + kControlWords, 0.0f);
  size_t offset = 0;
  for (Linear* l : linears_) {
    const size_t nw = l->num_weights();
    auto slice = [&](std::vector<float>& arena) {
      float* mu = arena.data();
      float* var = arena.data() + num_params_;
      return LinearParams{{mu + offset, var + offset}, {mu + offset + nw, var + offset + nw}};
    };
    l->Bind(slice(params_), slice(deltas_));
    offset += nw + l->out();
  }
  if (arch_.head.kind == HeadKind::kClassification) {
    tree_.emplace(static_cast<int>(arch_.head.num_classes));
    node_scratch_.resize(static_cast<size_t>(tree_->output_width()));
  }
}

void Model::Reserve(size_t max_batch) {
  if (max_batch <= max_batch_) return;
  max_batch_ = max_batch;
  size_t widest = 0;
  for (HiddenState& s : states_) {
    s.Reserve(max_batch);
    widest = std::max(widest, s.width);
  }
  for (auto& layer : layers_) layer->Reserve(max_batch);
  delta_a_.Resize(max_batch * widest);
  delta_b_.Resize(max_batch * widest);
}

void Model::Initialize(uint64_t seed, const InitOptions& options) {
  Rng rng(seed);
  for (Linear* l : linears_) l->Initialize(rng, options.method, options.gain_w, options.gain_b);
}

void Model::ParametersChanged() {
  for (Linear* l : linears_) l->RefreshDerived();
}

uint64_t Model::ParameterFingerprint() const {
  return Fingerprint64(params_.data(), params_.size() * sizeof(float));
}

void Model::Forward(const float* x, size_t batch) {
  Reserve(batch);
  HiddenState& input = states_.front();
  std::memcpy(input.units.mu(), x, batch * input.width * sizeof(float));
  std::memset(input.units.var(), 0, batch * input.width * sizeof(float));
  for (size_t i = 0; i < layers_.size(); ++i) {
    layers_[i]->Forward(states_[i], states_[i + 1], batch);
  }
}

ConstGaussianView Model::output() const { return states_.back().units.view(); }

void Model::TrainStepLocal(const float* x, const int32_t* labels, const float* targets,
                           size_t batch, float sigma_v) {
  Forward(x, batch);
  GaussianView delta = delta_a_.view();
  if (tree_) {
    HsmDeltas(*tree_, output(), batch, labels, sigma_v, delta);
  } else {
    RegressionDeltas(output(), targets, batch * output_width(), sigma_v, delta);
  }
  Backward(batch);
}

void Model::Backward(size_t batch) {
  GaussianTensor* cur = &delta_a_;   // innovations of boundary i + 1
  GaussianTensor* next = &delta_b_;  // innovations of boundary i
  for (size_t i = layers_.size(); i-- > 0;) {
    const bool need_input = i > 0;
    layers_[i]->Backward(states_[i], states_[i + 1], std::as_const(*cur).view(),
                         next->view(), batch, need_input);
    std::swap(cur, next);
  }
}

void Model::ApplyStep(float cap_factor) {
  for (Linear* l : linears_) l->ApplyStep(cap_factor, kVarianceFloor);
}

void Model::ClassProbabilities(size_t batch, float* probs) const {
  HsmClassProbabilities(*tree_, output(), batch, probs, node_scratch_.data());
}

}  // namespace tagi::engine
