#include "worker/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/base/internal/raw_logging.h"
#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/protocol.h"
#include "common/rng.h"
#include "common/status.h"
#include "spec/buckets.h"
#include "spec/plan.h"
#include "worker/engine/engine_factory.h"
#include "worker/engine/model_file.h"
#include "worker/engine/output.h"

namespace tagi {
namespace {

constexpr double kLogTwoPi = 1.8378770664093453;
constexpr double kMinProbability = 1e-12;

size_t EffectiveCapBatch(const tagi::v1::JobSpec& spec, int world) {
  const size_t b = spec.batch_size();
  return IsSumReduction(spec) ? b * static_cast<size_t>(world) : b;
}

absl::Status ScoreClassification(engine::Engine& model, const data::Dataset& test, size_t first,
                                 size_t n, std::vector<float>& probs, EvalSums& s) {
  const int k = test.num_classes;
  probs.resize(n * static_cast<size_t>(k));
  TAGI_RETURN_IF_ERROR(model.ClassProbabilities(n, probs.data()));
  for (size_t i = 0; i < n; ++i) {
    const float* p = probs.data() + i * static_cast<size_t>(k);
    const int label = test.labels[first + i];
    const int top = engine::Argmax(p, k);
    const bool right = top == label;
    if (right) s.correct += 1.0;
    s.log_likelihood += std::log(std::max<double>(p[label], kMinProbability));
    double brier = 0.0;
    for (int c = 0; c < k; ++c) {
      const double miss = static_cast<double>(p[c]) - (c == label ? 1.0 : 0.0);
      brier += miss * miss;
    }
    s.brier += brier;
    const int bin = CalibrationBin(p[top]);
    s.bin_count[bin] += 1.0;
    s.bin_confidence[bin] += p[top];
    if (right) s.bin_correct[bin] += 1.0;
  }
  s.observed += static_cast<double>(n);
  return absl::OkStatus();
}

// Heteroscedastic heads give [mean, noise] pairs: the predictive variance is
// var(mean) + E[noise], and sigma_v is not used.
absl::Status ScoreRegression(engine::Engine& model, const data::Dataset& test,
                             const data::Standardizer& target, float sigma_v, size_t first,
                             size_t n, EvalSums& s) {
  const size_t width = test.output_dim;
  const bool learned_noise = model.architecture().head.heteroscedastic;
  TAGI_ASSIGN_OR_RETURN(const engine::ConstGaussianView out, model.Output(n));
  const double var_v = static_cast<double>(sigma_v) * sigma_v;
  for (size_t i = 0; i < n * width; ++i) {
    const size_t col = i % width;
    const float y = test.targets[first * width + i];
    if (std::isnan(y)) continue;
    const size_t unit = learned_noise ? 2 * i : i;
    const double noise = learned_noise ? static_cast<double>(out.mu[unit + 1]) : var_v;
    // Predictions and targets back in the data's original units.
    const double mu = data::InvertMean(target, col, out.mu[unit]);
    const double var =
        data::InvertVariance(target, col, static_cast<float>(out.var[unit] + noise));
    const double err = data::InvertMean(target, col, y) - mu;
    s.squared_error += err * err;
    s.log_likelihood += -0.5 * (kLogTwoPi + std::log(var) + err * err / var);
    s.observed += 1.0;
    const double sd = std::sqrt(var);
    s.predictive_std += sd;
    if (std::abs(err) <= kZ68 * sd) s.within_68 += 1.0;
    if (std::abs(err) <= kZ95 * sd) s.within_95 += 1.0;
  }
  return absl::OkStatus();
}

absl::Status CheckDataFitsModel(const data::LoadedData& d, const engine::Architecture& arch) {
  const auto& train = d.data.train;
  if (train.input_dim != arch.input_width()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the data has %d inputs per sample but layers[0].in_features is %d", train.input_dim,
        arch.input_width()));
  }
  if (train.is_classification() &&
      static_cast<uint32_t>(train.num_classes) != arch.head.num_classes) {
    // An image folder's classes are its sub-folders.
    return absl::InvalidArgumentError(absl::StrFormat(
        "the data has %d classes%s but head.classification.num_classes is %d",
        train.num_classes,
        train.class_names.empty()
            ? ""
            : absl::StrCat(" (", absl::StrJoin(train.class_names.begin(),
                                                train.class_names.begin() +
                                                    std::min<size_t>(train.class_names.size(), 8),
                                                ", "),
                           train.class_names.size() > 8 ? ", ..." : "", ")"),
        arch.head.num_classes));
  }
  const size_t per_target = arch.head.units_per_target();
  if (!train.is_classification() && train.output_dim * per_target != arch.output_width()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the data has %d targets per sample but the network has %d outputs%s", train.output_dim,
        arch.output_width(),
        per_target == 2 ? " (a heteroscedastic head needs two per target)" : ""));
  }
  return absl::OkStatus();
}

}  // namespace

engine::InitOptions InitOptionsFromSpec(const tagi::v1::JobSpec& spec) {
  const auto& init = spec.init();
  return {init.method() == tagi::v1::Init::XAVIER ? engine::InitMethod::kXavier
                                                  : engine::InitMethod::kHe,
          InitGainWeight(init), InitGainBias(init)};
}

absl::StatusOr<std::unique_ptr<engine::Engine>> BuildModel(const tagi::v1::JobSpec& spec,
                                                           const data::LoadedData& data,
                                                           size_t max_batch, int device) {
  TAGI_ASSIGN_OR_RETURN(const engine::Architecture arch, engine::ArchitectureFromJobSpec(spec));
  TAGI_RETURN_IF_ERROR(CheckDataFitsModel(data, arch));
  TAGI_ASSIGN_OR_RETURN(auto model, engine::CreateEngine(arch, max_batch, device));
  TAGI_RETURN_IF_ERROR(
      model->Initialize(DeriveSeed(spec.seed(), kInitStream), InitOptionsFromSpec(spec)));
  if (!spec.init_from().empty()) TAGI_RETURN_IF_ERROR(InitFrom(spec.init_from(), *model));
  return model;
}

absl::Status InitFrom(const std::string& path, engine::Engine& model) {
  absl::StatusOr<engine::ModelFile> file = engine::LoadModelFile(path);
  if (!file.ok()) {
    // The loader's message starts with the path.
    return absl::Status(file.status().code(),
                        absl::StrCat("init_from: ", file.status().message()));
  }
  if (auto st = engine::CheckSameArchitecture(model.architecture(), file->architecture);
      !st.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("init_from ", path, " holds another network: ", st.message()));
  }
  TAGI_RETURN_IF_ERROR(model.WriteParameters(file->parameters));
  // A file without running statistics (an MLP's, or one converted without
  // them) keeps the initial ones.
  if (!file->state.empty()) TAGI_RETURN_IF_ERROR(model.WriteState(file->state));
  return absl::OkStatus();
}

absl::StatusOr<EvalSums> ScoreModel(engine::Engine& model, const data::Dataset& test,
                                    const data::Standardizer& target, float sigma_v,
                                    size_t eval_batch, size_t first, size_t last) {
  EvalSums s;
  std::vector<float> probs;
  for (size_t begin = first; begin < last; begin += eval_batch) {
    const size_t n = std::min(eval_batch, last - begin);
    TAGI_RETURN_IF_ERROR(model.Forward(test.inputs.data() + begin * test.input_dim, n));
    if (test.is_classification()) {
      TAGI_RETURN_IF_ERROR(ScoreClassification(model, test, begin, n, probs, s));
    } else {
      TAGI_RETURN_IF_ERROR(ScoreRegression(model, test, target, sigma_v, begin, n, s));
    }
    s.samples += static_cast<double>(n);
  }
  return s;
}

int CalibrationBin(double p) {
  const int bin = static_cast<int>(p * kCalibrationBins);
  return std::clamp(bin, 0, kCalibrationBins - 1);
}

void EvalSums::Pack(float* out) const {
  const double head[9] = {correct, log_likelihood, squared_error, observed, samples,
                          brier, within_68, within_95, predictive_std};
  for (size_t i = 0; i < 9; ++i) out[i] = static_cast<float>(head[i]);
  for (int b = 0; b < kCalibrationBins; ++b) {
    out[9 + b] = static_cast<float>(bin_count[b]);
    out[9 + kCalibrationBins + b] = static_cast<float>(bin_confidence[b]);
    out[9 + 2 * kCalibrationBins + b] = static_cast<float>(bin_correct[b]);
  }
}

EvalSums EvalSums::Unpack(const float* in) {
  EvalSums s;
  s.correct = in[0];
  s.log_likelihood = in[1];
  s.squared_error = in[2];
  s.observed = in[3];
  s.samples = in[4];
  s.brier = in[5];
  s.within_68 = in[6];
  s.within_95 = in[7];
  s.predictive_std = in[8];
  for (int b = 0; b < kCalibrationBins; ++b) {
    s.bin_count[b] = in[9 + b];
    s.bin_confidence[b] = in[9 + kCalibrationBins + b];
    s.bin_correct[b] = in[9 + 2 * kCalibrationBins + b];
  }
  return s;
}

EvalMetrics MetricsFromSums(const EvalSums& s, bool classification) {
  EvalMetrics m;
  m.samples = static_cast<size_t>(s.samples);
  if (s.observed <= 0) return m;
  m.log_likelihood = s.log_likelihood / s.observed;
  m.nll = -m.log_likelihood;
  if (classification) {
    m.accuracy = s.correct / s.observed;
    m.brier = s.brier / s.observed;
    double gap = 0.0;
    for (int b = 0; b < kCalibrationBins; ++b) gap += std::abs(s.bin_confidence[b] - s.bin_correct[b]);
    m.ece = gap / s.observed;
  } else {
    m.rmse = std::sqrt(s.squared_error / s.observed);
    m.coverage_68 = s.within_68 / s.observed;
    m.coverage_95 = s.within_95 / s.observed;
    m.mean_std = s.predictive_std / s.observed;
  }
  return m;
}

Trainer::Trainer(const tagi::v1::JobSpec& spec, engine::Engine& model,
                 const data::LoadedData& data, Clock& clock, TrainerOptions options)
    : spec_(spec),
      model_(model),
      data_(data),
      clock_(clock),
      options_(std::move(options)),
      rank_(options_.collective ? options_.collective->rank() : 0),
      world_(options_.collective ? options_.collective->world() : 1),
      sampler_(data.data.train.num_samples, DeriveSeed(spec.seed(), kSamplerStream), world_,
               rank_, spec.batch_size()),
      cap_factor_(engine::CapFactor(EffectiveCapBatch(spec, world_))),
      wire_(WireFromSpec(spec)) {
  const size_t b = spec.batch_size();
  const auto& train = data.data.train;
  const spec::Shape& input = model_.architecture().input;
  image_ = {input.c, input.h, input.w};
  augmenting_ = data::AugmentsImages(spec.data().augment());
  ABSL_RAW_CHECK(!augmenting_ || image_.size() == train.input_dim,
                 "Trainer: the model's input shape must hold the data's inputs (BuildModel)");
  indices_.resize(b);
  x_.resize(b * train.input_dim);
  if (train.is_classification()) {
    labels_.resize(b);
    probs_.resize(b * static_cast<size_t>(train.num_classes));
  } else {
    targets_.resize(b * train.output_dim);
  }
  eval_batch_ = EvalBatchFor(model_.architecture(), b, options_.eval_batch);
  reserve_status_ = model_.Reserve(std::max(b, eval_batch_));
  if (reserve_status_.ok() && spec.sync_batch_norm() && options_.collective != nullptr) {
    reserve_status_ = model_.SetBatchSync(
        [this](std::span<float> values) {
          return options_.collective->AllReduceSum(values, options_.collective_timeout);
        },
        static_cast<size_t>(world_));
  }
  if (reserve_status_.ok()) SetUpOverlap();
}

Trainer::~Trainer() {
  if (overlap_ == nullptr) return;
  // The engine outlives the trainer: it must not call into a dead reducer.
  (void)model_.SetBackwardObserver({}, false);
  overlap_.reset();
}

void Trainer::SetUpOverlap() {
  if (options_.collective == nullptr || world_ < 2) return;
  std::vector<spec::Bucket> buckets =
      spec::PlanBuckets(model_.num_parameters(), BucketBytes(spec_));
  if (buckets.empty()) return;
  if (buckets.size() < 2 && wire_ == WirePrecision::kFp32) return;
  // A GPU engine hands out device memory, for a collective that takes it
  // (NCCL); with a host collective it reduces after its backward.
  auto buffer = model_.SetBackwardObserver(
      [this](size_t ready_from, void* device_event) { overlap_->Ready(ready_from, device_event); },
      options_.collective->AcceptsDeviceMemory());
  if (!buffer.ok()) return;  // the engine reduces after its backward only
  overlap_ = std::make_unique<OverlappedReduce>(*options_.collective,
                                                options_.collective_timeout, clock_,
                                                buffer->values, buffer->var_offset,
                                                std::move(buckets), wire_);
}

WirePrecision WireFromSpec(const tagi::v1::JobSpec& spec) {
  switch (spec.wire_precision()) {
    case tagi::v1::JobSpec::BF16:
      return WirePrecision::kBf16;
    case tagi::v1::JobSpec::FP16:
      return WirePrecision::kFp16;
    default:
      return WirePrecision::kFp32;
  }
}

void Trainer::GatherBatch(uint64_t epoch, size_t offset) {
  const auto& train = data_.data.train;
  sampler_.BatchAt(epoch, offset, indices_);
  const size_t d = train.input_dim;
  const uint64_t augment_seed = DeriveSeed(spec_.seed(), kAugmentStream);
  for (size_t i = 0; i < indices_.size(); ++i) {
    const size_t s = indices_[i];
    const std::span<const float> row(train.inputs.data() + s * d, d);
    if (augmenting_) {
      data::AugmentImage(spec_.data().augment(), image_, augment_seed, epoch, s, row,
                         std::span<float>(x_.data() + i * d, d));
    } else {
      std::memcpy(x_.data() + i * d, row.data(), d * sizeof(float));
    }
    if (train.is_classification()) {
      labels_[i] = train.labels[s];
    } else {
      const size_t w = train.output_dim;
      std::memcpy(targets_.data() + i * w, train.targets.data() + s * w, w * sizeof(float));
    }
  }
}

absl::Status Trainer::ReduceAfterBackward(std::span<float> buffer) {
  Collective& c = *options_.collective;
  const absl::Duration timeout = options_.collective_timeout;
  if (wire_ == WirePrecision::kFp32) return c.AllReduceSum(buffer, timeout);
  // A 16-bit wire carries the deltas only (each half with its own FP16
  // scale); the state and the control word go in FP32. The halves are
  // those of the packed host layout (Reduce asks for it here).
  const size_t n = model_.num_parameters();
  TAGI_RETURN_IF_ERROR(c.AllReduceSumOnWire(buffer.subspan(0, n), wire_, timeout));
  TAGI_RETURN_IF_ERROR(c.AllReduceSumOnWire(buffer.subspan(n, n), wire_, timeout));
  return c.AllReduceSum(buffer.subspan(2 * n), timeout);
}

absl::Status Trainer::Reduce(bool stop_vote, bool* stop_agreed) {
  // Device memory where the collective takes it: the buffer the buckets
  // went from (SetUpOverlap), or the one after the backward; but a 16-bit
  // wire after the backward splits the halves of the packed host layout
  // (ReduceAfterBackward), which only the host staging buffer has.
  const bool device = options_.collective->AcceptsDeviceMemory() &&
                      (overlap_ != nullptr || wire_ == WirePrecision::kFp32);
  TAGI_ASSIGN_OR_RETURN(const std::span<float> buffer,
                        model_.BeginReduce(device, stop_vote ? 1.0f : 0.0f));
  if (overlap_ != nullptr) {
    // The buckets went while the backward ran; the last one and the
    // staged state and control word go now.
    TAGI_RETURN_IF_ERROR(overlap_->Finish());
    timings_.allreduce_seconds = overlap_->busy_seconds();
    timings_.allreduce_wait_seconds = overlap_->wait_seconds();
    timings_.buckets = overlap_->num_buckets();
  } else {
    const absl::Time start = clock_.Now();
    if (auto st = ReduceAfterBackward(buffer); !st.ok()) return st;
    timings_.allreduce_seconds = absl::ToDoubleSeconds(clock_.Now() - start);
    timings_.allreduce_wait_seconds = timings_.allreduce_seconds;
    timings_.buckets = 1;
  }
  // Bytes this rank puts into the sum: the deltas at the wire's width.
  const size_t deltas = 2 * model_.num_parameters();
  timings_.allreduce_bytes =
      deltas * WireBytes(wire_) + (buffer.size() - std::min(buffer.size(), deltas)) * sizeof(float);
  // A rank that sends NaN or Inf (broken or rogue) fails the step on every
  // rank alike; the generation ends and nothing of it is applied.
  TAGI_RETURN_IF_ERROR(model_.CheckReduced());
  const float scale = IsSumReduction(spec_) ? 1.0f : 1.0f / static_cast<float>(world_);
  TAGI_ASSIGN_OR_RETURN(const float control,
                        model_.EndReduce(scale, 1.0f / static_cast<float>(world_)));
  *stop_agreed = control > 0.0f;
  return absl::OkStatus();
}

absl::Status Trainer::Step(uint64_t epoch, size_t step) {
  return StepAt(epoch, step * sampler_.global_batch());
}

absl::Status Trainer::StepAt(uint64_t epoch, size_t offset) {
  TAGI_RETURN_IF_ERROR(reserve_status_);
  const absl::Time start = clock_.Now();
  sigma_v_ = SigmaVAtEpoch(spec_.noise(), epoch);
  GatherBatch(epoch, offset);
  const size_t b = indices_.size();
  if (overlap_ != nullptr) overlap_->BeginStep();
  // A step that fails after buckets went leaves no reduction in flight
  // (a no-op once Finish has returned).
  absl::Cleanup settle = [this] {
    if (overlap_ != nullptr) overlap_->Abandon();
  };
  TAGI_RETURN_IF_ERROR(model_.TrainStep(x_.data(), labels_.empty() ? nullptr : labels_.data(),
                                        targets_.empty() ? nullptr : targets_.data(), b,
                                        sigma_v_));
  if (!labels_.empty()) {
    // The forward pass of this step doubles as a training-accuracy probe.
    const int k = data_.data.train.num_classes;
    TAGI_RETURN_IF_ERROR(model_.ClassProbabilities(b, probs_.data()));
    for (size_t i = 0; i < b; ++i) {
      if (engine::Argmax(probs_.data() + i * static_cast<size_t>(k), k) == labels_[i]) ++correct_;
    }
  }
  const bool stop_vote = options_.stop_requested && options_.stop_requested();
  bool stop = stop_vote;
  if (options_.collective != nullptr) {
    if (auto st = Reduce(stop_vote, &stop); !st.ok()) return st;
  }
  if (stop) return absl::CancelledError("training stopped on request");
  TAGI_RETURN_IF_ERROR(model_.ApplyStep(cap_factor_));
  timings_.step_seconds = absl::ToDoubleSeconds(clock_.Now() - start);
  return absl::OkStatus();
}

size_t EvalBatchFor(const spec::Architecture& arch, size_t train_batch, size_t eval_batch) {
  train_batch = std::max<size_t>(train_batch, 1);
  if (eval_batch <= train_batch) return std::max<size_t>(eval_batch, 1);
  // The architecture was planned when the model was made: these cannot fail.
  const auto train = spec::MakePlan(arch, {train_batch, spec::kCpuAlignFloats});
  const auto eval = spec::MakePlan(arch, {eval_batch, spec::kCpuAlignFloats});
  if (!train.ok() || !eval.ok()) return train_batch;
  const size_t more = (eval->batch_floats - train->batch_floats) * sizeof(float);
  return more > kEvalArenaSlackBytes ? train_batch : eval_batch;
}

absl::StatusOr<EpochMetrics> Trainer::RunEpoch(uint64_t epoch, size_t first_offset,
                                               const ProgressFn& progress,
                                               const EpochSoFar& before) {
  EpochMetrics m;
  m.epoch = epoch;
  sigma_v_ = SigmaVAtEpoch(spec_.noise(), epoch);
  m.sigma_v = sigma_v_;
  correct_ = 0;
  so_far_ = before;
  const absl::Time start = clock_.Now();
  const size_t steps = sampler_.StepsFrom(first_offset);
  for (size_t k = 0; k < steps; ++k) {
    if (auto st = StepAt(epoch, first_offset + k * sampler_.global_batch()); !st.ok()) return st;
    const absl::Duration elapsed = clock_.Now() - start;
    so_far_ = {before.time + elapsed, before.correct + correct_,
               before.samples + (k + 1) * spec_.batch_size()};
    if (progress) progress(epoch, k + 1, steps, elapsed);
  }
  so_far_ = {before.time + (clock_.Now() - start), before.correct + correct_,
             before.samples + steps * spec_.batch_size()};
  m.steps = steps;
  m.samples = so_far_.samples;
  m.seconds = absl::ToDoubleSeconds(so_far_.time);
  m.samples_per_second = m.seconds > 0 ? static_cast<double>(m.samples) / m.seconds : 0.0;
  if (m.samples > 0) {
    m.train_accuracy = static_cast<double>(so_far_.correct) / static_cast<double>(m.samples);
  }
  auto test = Evaluate();
  if (!test.ok()) return test.status();
  m.test = *test;
  return m;
}

absl::StatusOr<EvalMetrics> Trainer::Evaluate() {
  const auto& test = data_.data.test;
  const size_t n = test.num_samples;
  const size_t first = n * static_cast<size_t>(rank_) / static_cast<size_t>(world_);
  const size_t last = n * static_cast<size_t>(rank_ + 1) / static_cast<size_t>(world_);
  TAGI_ASSIGN_OR_RETURN(
      EvalSums s,
      ScoreModel(model_, test, data_.target, sigma_v_, eval_batch_, first, last));
  if (options_.collective != nullptr) {
    // Float sums: counts stay exact up to 2^24 samples; the other sums
    // keep about seven significant digits.
    float sums[EvalSums::kFloats];
    s.Pack(sums);
    if (auto st = options_.collective->AllReduceSum(sums, options_.collective_timeout);
        !st.ok()) {
      return st;
    }
    s = EvalSums::Unpack(sums);
    TAGI_RETURN_IF_ERROR(CheckEvalSums(s, n, test.output_dim));
  }
  return MetricsFromSums(s, test.is_classification());
}

absl::Status CheckEvalSums(const EvalSums& s, size_t samples, size_t outputs) {
  const double n = static_cast<double>(samples);
  const double most = n * static_cast<double>(outputs > 0 ? outputs : 1);
  // Float sums of fractions (confidences, Brier terms) carry rounding.
  auto slack = [](double bound) { return bound * 1e-3 + 1e-3; };
  auto bad = [](const std::string& what) {
    return absl::DataLossError(
        absl::StrCat(kImpossibleEvalReason, " (a rank sent wrong sums): ", what));
  };
  const double head[] = {s.correct, s.log_likelihood, s.squared_error, s.observed, s.samples,
                         s.brier, s.within_68, s.within_95, s.predictive_std};
  for (double v : head) {
    if (!std::isfinite(v)) return bad("a sum is not finite");
  }
  if (s.samples != n) return bad(absl::StrFormat("%.0f samples, the test set has %d", s.samples, samples));
  if (s.observed < 0 || s.observed > most) {
    return bad(absl::StrFormat("%.0f observed of at most %.0f", s.observed, most));
  }
  if (s.correct < 0 || s.correct > s.observed) {
    return bad(absl::StrFormat("%.0f correct of %.0f", s.correct, s.observed));
  }
  if (s.squared_error < 0 || s.predictive_std < 0 || s.brier < 0 ||
      s.brier > 2 * s.observed + slack(2 * s.observed)) {
    return bad("a squared error, Brier score or predictive spread out of range");
  }
  if (s.within_68 < 0 || s.within_68 > s.within_95 || s.within_95 > s.observed) {
    return bad(absl::StrFormat("%.0f and %.0f inside the 68/95 %% intervals of %.0f",
                               s.within_68, s.within_95, s.observed));
  }
  double binned = 0;
  for (int b = 0; b < kCalibrationBins; ++b) {
    const double count = s.bin_count[b];
    if (!std::isfinite(count) || !std::isfinite(s.bin_confidence[b]) ||
        !std::isfinite(s.bin_correct[b]) || count < 0 || s.bin_correct[b] < 0 ||
        s.bin_correct[b] > count || s.bin_confidence[b] < 0 ||
        s.bin_confidence[b] > count + slack(count)) {
      return bad(absl::StrFormat("calibration bin %d", b));
    }
    binned += count;
  }
  if (binned > s.observed) return bad(absl::StrFormat("%.0f binned of %.0f", binned, s.observed));
  return absl::OkStatus();
}

engine::Preprocessing Trainer::preprocessing() const {
  return {data_.input.mean, data_.input.stddev, data_.target.mean, data_.target.stddev,
          data_.data.train.class_names};
}

}  // namespace tagi
