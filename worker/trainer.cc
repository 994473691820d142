#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/job_spec.h"
#include "common/rng.h"
#include "worker/engine/output.h"

namespace tagi {
namespace {

constexpr double kLogTwoPi = 1.8378770664093453;
constexpr double kMinProbability = 1e-12;

size_t EffectiveCapBatch(const tagi::v1::JobSpec& spec, int world) {
  const size_t b = spec.batch_size();
  return IsSumReduction(spec) ? b * static_cast<size_t>(world) : b;
}

void ScoreClassification(engine::Model& model, const data::Dataset& test, size_t first,
                         size_t n, std::vector<float>& probs, EvalMetrics& m) {
  const int k = test.num_classes;
  probs.resize(n * static_cast<size_t>(k));
  model.ClassProbabilities(n, probs.data());
  for (size_t i = 0; i < n; ++i) {
    const float* p = probs.data() + i * static_cast<size_t>(k);
    const int label = test.labels[first + i];
    if (engine::Argmax(p, k) == label) m.accuracy += 1.0;
    m.log_likelihood += std::log(std::max<double>(p[label], kMinProbability));
  }
}

// Returns the number of observed (non-NaN) targets scored.
size_t ScoreRegression(engine::Model& model, const data::Dataset& test,
                       const data::Standardizer& target, float sigma_v, size_t first,
                       size_t n, EvalMetrics& m) {
  const size_t width = test.output_dim;
  const auto out = model.output();
  const double var_v = static_cast<double>(sigma_v) * sigma_v;
  size_t observed = 0;
  for (size_t i = 0; i < n * width; ++i) {
    const size_t col = i % width;
    const float y = test.targets[first * width + i];
    if (std::isnan(y)) continue;
    // Predictions and targets back in the data's original units.
    const double mu = data::InvertMean(target, col, out.mu[i]);
    const double var = data::InvertVariance(target, col, static_cast<float>(out.var[i] + var_v));
    const double y0 = data::InvertMean(target, col, y);
    const double err = y0 - mu;
    m.rmse += err * err;
    m.log_likelihood += -0.5 * (kLogTwoPi + std::log(var) + err * err / var);
    ++observed;
  }
  return observed;
}

}  // namespace

EvalMetrics EvaluateModel(engine::Model& model, const data::Dataset& test,
                          const data::Standardizer& target, float sigma_v, size_t eval_batch) {
  EvalMetrics m;
  std::vector<float> probs;
  size_t observed = 0;
  for (size_t first = 0; first < test.num_samples; first += eval_batch) {
    const size_t n = std::min(eval_batch, test.num_samples - first);
    model.Forward(test.inputs.data() + first * test.input_dim, n);
    if (test.is_classification()) {
      ScoreClassification(model, test, first, n, probs, m);
    } else {
      observed += ScoreRegression(model, test, target, sigma_v, first, n, m);
    }
  }
  m.samples = test.num_samples;
  if (test.is_classification()) {
    const double count = std::max<size_t>(test.num_samples, 1);
    m.accuracy /= count;
    m.log_likelihood /= count;
  } else if (observed > 0) {
    m.rmse = std::sqrt(m.rmse / static_cast<double>(observed));
    m.log_likelihood /= static_cast<double>(observed);
  }
  return m;
}

Trainer::Trainer(const tagi::v1::JobSpec& spec, engine::Model& model,
                 const data::LoadedData& data, Clock& clock, TrainerOptions options)
    : spec_(spec),
      model_(model),
      data_(data),
      clock_(clock),
      options_(std::move(options)),
      sampler_(data.data.train.num_samples, DeriveSeed(spec.seed(), kSamplerStream),
               options_.world, options_.rank, spec.batch_size()),
      cap_factor_(engine::CapFactor(EffectiveCapBatch(spec, options_.world))) {
  const size_t b = spec.batch_size();
  const auto& train = data.data.train;
  indices_.resize(b);
  x_.resize(b * train.input_dim);
  if (train.is_classification()) {
    labels_.resize(b);
    probs_.resize(b * static_cast<size_t>(train.num_classes));
  } else {
    targets_.resize(b * train.output_dim);
  }
  model_.Reserve(std::max(b, options_.eval_batch));
}

void Trainer::GatherBatch(uint64_t epoch, size_t step) {
  const auto& train = data_.data.train;
  sampler_.Batch(epoch, step, indices_);
  const size_t d = train.input_dim;
  for (size_t i = 0; i < indices_.size(); ++i) {
    const size_t s = indices_[i];
    std::memcpy(x_.data() + i * d, train.inputs.data() + s * d, d * sizeof(float));
    if (train.is_classification()) {
      labels_[i] = train.labels[s];
    } else {
      const size_t w = train.output_dim;
      std::memcpy(targets_.data() + i * w, train.targets.data() + s * w, w * sizeof(float));
    }
  }
}

absl::Status Trainer::Step(uint64_t epoch, size_t step) {
  GatherBatch(epoch, step);
  const size_t b = indices_.size();
  model_.TrainStepLocal(x_.data(), labels_.empty() ? nullptr : labels_.data(),
                        targets_.empty() ? nullptr : targets_.data(), b, sigma_v_);
  if (!labels_.empty()) {
    // The forward pass of this step doubles as a training-accuracy probe.
    const int k = data_.data.train.num_classes;
    model_.ClassProbabilities(b, probs_.data());
    for (size_t i = 0; i < b; ++i) {
      if (engine::Argmax(probs_.data() + i * static_cast<size_t>(k), k) == labels_[i]) ++correct_;
    }
  }
  if (options_.reducer) {
    if (auto st = options_.reducer(model_.deltas()); !st.ok()) return st;
  }
  model_.ApplyStep(cap_factor_);
  return absl::OkStatus();
}

absl::StatusOr<EpochMetrics> Trainer::RunEpoch(uint64_t epoch, size_t first_step,
                                               const ProgressFn& progress) {
  EpochMetrics m;
  m.epoch = epoch;
  sigma_v_ = SigmaVAtEpoch(spec_.noise(), epoch);
  m.sigma_v = sigma_v_;
  correct_ = 0;
  const absl::Time start = clock_.Now();
  const size_t steps = sampler_.steps_per_epoch();
  for (size_t step = first_step; step < steps; ++step) {
    if (auto st = Step(epoch, step); !st.ok()) return st;
    if (progress) progress(epoch, step + 1, steps, clock_.Now() - start);
  }
  m.steps = steps - std::min(first_step, steps);
  m.samples = m.steps * spec_.batch_size();
  m.seconds = absl::ToDoubleSeconds(clock_.Now() - start);
  m.samples_per_second = m.seconds > 0 ? static_cast<double>(m.samples) / m.seconds : 0.0;
  if (m.samples > 0) m.train_accuracy = static_cast<double>(correct_) / static_cast<double>(m.samples);
  m.test = Evaluate();
  return m;
}

EvalMetrics Trainer::Evaluate() {
  return EvaluateModel(model_, data_.data.test, data_.target, sigma_v_, options_.eval_batch);
}

engine::Preprocessing Trainer::preprocessing() const {
  return {data_.input.mean, data_.input.stddev, data_.target.mean, data_.target.stddev};
}

}  // namespace tagi
