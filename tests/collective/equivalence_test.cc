// The acceptance test of data-parallel training: with SUM reduction, two
// ranks of batch 8 train the same model as one process of batch 16 (the
// distributed sampler gives them the same global batches); with AVERAGE,
// they follow the definition (mean of the ranks' deltas, step capped for
// the local batch); a stop requested on one rank stops both after the same
// step. Each runs with the in-process fake, with real Gloo and with the
// ring backend (worker/collective/tcp).
//
// Tolerance: after 50 steps the largest scaled difference must be <= 1e-5,
// separately over the mean and the variance halves of the arena, where
//   variance k: |a - b| / max(|a|, |b|)
//   mean k:     |a - b| / max(|a|, |b|, sd_k),  sd_k = sqrt(reference var k)
// i.e. relative, except that a mean smaller than its own standard deviation
// is compared on the scale of that deviation (as tests/engine/model_test.cc
// does). Why: summing a batch of 16 at once or as 8 + 8 rounds differently,
// and the rounding error of a sum is relative to its terms, not to the
// result; a weight mean that happens to pass near zero (seen: 2.1e-4 with
// sd 0.139, |a - b| = 2.3e-8) has a plain relative error of 1e-4 although
// it agrees to 2e-7 of its deviation. The plain relative figure
// |a - b| / max(|a|, |b|, 1e-6) is printed for information. Bit equality
// with the single process is not expected; the ranks among themselves must
// be bit-identical.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <functional>
#include <latch>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/job_spec.h"
#include "common/rng.h"
#include "gtest/gtest.h"
#include "tests/collective/random_split.h"
#include "tests/collective/rank_threads.h"
#include "worker/collective/failing_collective.h"
#include "worker/collective/gloo/gloo_collective.h"
#include "worker/collective/in_process.h"
#include "worker/collective/tcp/ring_collective.h"
#include "worker/data/sampler.h"
#include "worker/engine/architecture.h"
#include "worker/engine/model.h"
#include "worker/engine/cpu_engine.h"
#include "worker/trainer.h"
#include "spec/buckets.h"

namespace tagi {
namespace {

using tagi::v1::JobSpec;

constexpr uint32_t kInputs = 16;
constexpr uint32_t kHidden = 32;
constexpr uint32_t kClasses = 10;
constexpr size_t kSamples = 800;  // 50 steps of a global batch of 16
constexpr size_t kSteps = 50;
constexpr uint64_t kSeed = 2024;
constexpr double kTolerance = 1e-5;
constexpr absl::Duration kTimeout = absl::Seconds(30);

// With `residual`, a block of Linear-ReLU-Linear with an identity shortcut
// follows the first ReLU: its parameters are in the one all-reduce too.
JobSpec Spec(uint32_t batch, JobSpec::Reduction reduction, bool residual = false) {
  JobSpec spec;
  auto* l1 = spec.add_layers();
  l1->set_kind(tagi::v1::Layer::LINEAR);
  l1->set_in_features(kInputs);
  l1->set_out_features(kHidden);
  spec.add_layers()->set_kind(tagi::v1::Layer::RELU);
  if (residual) {
    auto* block = spec.add_layers()->mutable_residual();
    for (int i = 0; i < 2; ++i) {
      auto* linear = block->add_main()->mutable_linear();
      linear->set_in_features(kHidden);
      linear->set_out_features(kHidden);
      if (i == 0) block->add_main()->mutable_relu();
    }
  }
  spec.mutable_head()->mutable_classification()->set_num_classes(kClasses);
  auto* l2 = spec.add_layers();
  l2->set_kind(tagi::v1::Layer::LINEAR);
  l2->set_in_features(kHidden);
  l2->set_out_features(static_cast<uint32_t>(ExpectedOutputWidth(spec)));
  spec.mutable_noise()->set_sigma_v(1.0f);
  spec.set_batch_size(batch);
  spec.set_epochs(1);
  spec.set_seed(kSeed);
  spec.set_reduction(reduction);
  return spec;
}

// A small image network over the 16 inputs as a 1x4x4 image: a padded
// convolution, a batch norm over its map, an average pool, and a batch
// norm over the features of a Linear: parameters and running statistics
// of every kind in the one all-reduce.
JobSpec CnnSpec(uint32_t batch) {
  JobSpec spec = Spec(batch, JobSpec::SUM);
  spec.mutable_input()->set_channels(1);
  spec.mutable_input()->set_height(4);
  spec.mutable_input()->set_width(4);
  const tagi::v1::Layer head = spec.layers(spec.layers_size() - 1);
  spec.clear_layers();
  auto* conv = spec.add_layers()->mutable_conv2d();
  conv->set_in_channels(1);
  conv->set_out_channels(4);
  conv->set_kernel_size(3);
  conv->set_padding(1);
  spec.add_layers()->mutable_relu();
  spec.add_layers()->mutable_batch_norm();
  spec.add_layers()->mutable_avg_pool2d()->set_kernel_size(2);
  auto* linear = spec.add_layers()->mutable_linear();
  linear->set_in_features(16);
  linear->set_out_features(kHidden);
  spec.add_layers()->mutable_batch_norm();
  spec.add_layers()->mutable_relu();
  *spec.add_layers() = head;
  return spec;
}

// The MLP with a one-hot head: its last LINEAR gives one output per class
// into `output` (REMAX or CLOSED_FORM_SOFTMAX).
JobSpec OneHotSpec(uint32_t batch, tagi::v1::Layer::Kind output) {
  JobSpec spec = Spec(batch, JobSpec::SUM);
  spec.mutable_head()->mutable_classification()->set_output(tagi::v1::Head::ONE_HOT);
  spec.mutable_layers(spec.layers_size() - 1)->set_out_features(kClasses);
  spec.add_layers()->set_kind(output);
  spec.mutable_noise()->set_sigma_v(0.2f);
  return spec;
}

// Heteroscedastic regression of one target: [mean, noise] through EVEN_EXP,
// no sigma_v.
JobSpec HeteroscedasticSpec(uint32_t batch) {
  JobSpec spec = Spec(batch, JobSpec::SUM);
  spec.mutable_head()->mutable_regression()->set_heteroscedastic(true);
  spec.mutable_layers(spec.layers_size() - 1)->set_out_features(2);
  spec.add_layers()->mutable_even_exp();
  spec.clear_noise();
  return spec;
}

// The job with its 16 inputs read as a 1x4x4 image, cropped (padding 1) and
// flipped for training.
JobSpec Augmented(JobSpec spec) {
  spec.mutable_input()->set_channels(1);
  spec.mutable_input()->set_height(4);
  spec.mutable_input()->set_width(4);
  spec.mutable_data()->mutable_augment()->set_random_crop_padding(1);
  spec.mutable_data()->mutable_augment()->set_horizontal_flip(true);
  return spec;
}

// Random inputs in [-1, 1]; the label is the largest of the first ten
// features, so there is something to learn.
data::Dataset RandomSplit(size_t n, uint64_t seed) {
  return testing_data::RandomSplit(n, kInputs, kClasses, seed);
}

data::LoadedData MakeData() {
  data::LoadedData data;
  data.data.train = RandomSplit(kSamples, 1);
  data.data.test = RandomSplit(64, 2);
  return data;
}

// One target: the sum of the first three inputs plus noise whose spread
// grows with the first input.
data::Dataset RegressionSplit(size_t n, uint64_t seed) {
  data::Dataset d = RandomSplit(n, seed);
  d.labels.clear();
  d.num_classes = 0;
  d.output_dim = 1;
  Rng rng(seed + 100);
  for (size_t i = 0; i < n; ++i) {
    const float* x = d.inputs.data() + i * kInputs;
    const double noise = (0.1 + std::abs(x[0])) * rng.Normal();
    d.targets.push_back(static_cast<float>(x[0] + x[1] + x[2] + noise));
  }
  return d;
}

data::LoadedData MakeRegressionData() {
  data::LoadedData data;
  data.data.train = RegressionSplit(kSamples, 3);
  data.data.test = RegressionSplit(64, 4);
  return data;
}

std::unique_ptr<engine::Model> MakeModel(const JobSpec& spec) {
  auto arch = engine::ArchitectureFromJobSpec(spec);
  EXPECT_TRUE(arch.ok()) << arch.status();
  if (!arch.ok()) return nullptr;
  auto model = engine::Model::Create(*arch, spec.batch_size());
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return nullptr;
  (*model)->Initialize(DeriveSeed(spec.seed(), kInitStream), engine::InitOptions{});
  return std::move(*model);
}

std::vector<float> Params(const engine::Model& model) {
  auto p = model.parameters();
  return {p.begin(), p.end()};
}

struct Diff {
  double mean = 0.0;
  double var = 0.0;
};

// The scaled difference of the header comment; `b` is the reference.
Diff MaxScaledDiff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  Diff d;
  if (a.size() != b.size()) return {1.0, 1.0};
  const size_t n = a.size() / 2;
  for (size_t k = 0; k < a.size(); ++k) {
    const double x = a[k];
    const double y = b[k];
    const double floor = k < n ? std::sqrt(static_cast<double>(b[n + k])) : 0.0;
    const double scale = std::max({std::abs(x), std::abs(y), floor, 1e-30});
    double& worst = k < n ? d.mean : d.var;
    worst = std::max(worst, std::abs(x - y) / scale);
  }
  return d;
}

// |a - b| / max(|a|, |b|, 1e-6), for information.
Diff MaxPlainRelativeDiff(const std::vector<float>& a, const std::vector<float>& b) {
  Diff d;
  const size_t n = a.size() / 2;
  for (size_t k = 0; k < std::min(a.size(), b.size()); ++k) {
    const double x = a[k];
    const double y = b[k];
    double& worst = k < n ? d.mean : d.var;
    worst = std::max(worst, std::abs(x - y) / std::max({std::abs(x), std::abs(y), 1e-6}));
  }
  return d;
}

// The test split's metrics into `out` (a failure is the test's).
void EvaluateInto(Trainer& trainer, EvalMetrics& out) {
  auto m = trainer.Evaluate();
  EXPECT_TRUE(m.ok()) << m.status();
  if (m.ok()) out = *m;
}

// `eval`, when given, receives the test split's metrics after the steps.
std::vector<float> TrainSingle(const JobSpec& spec, const data::LoadedData& data, size_t steps,
                               EvalMetrics* eval = nullptr) {
  auto model = MakeModel(spec);
  if (model == nullptr) return {};
  engine::CpuEngine engine(std::move(model));
  RealClock clock;
  Trainer trainer(spec, engine, data, clock, TrainerOptions{});
  for (size_t s = 0; s < steps; ++s) {
    const absl::Status st = trainer.Step(0, s);
    EXPECT_TRUE(st.ok()) << "step " << s << ": " << st;
  }
  if (eval != nullptr) EvaluateInto(trainer, *eval);
  return Params(engine.model());
}

// An epoch resumed mid-way (a new generation, from a snapshot) reports the
// whole epoch: the training accuracy over all its samples, the same as the
// uninterrupted epoch's, and the time spent before the resume point too.
TEST(ResumedEpoch, ReportsTheWholeEpochFromWhatItCarries) {
  const JobSpec spec = Spec(16, JobSpec::SUM);
  const data::LoadedData data = MakeData();
  constexpr size_t kCut = 20;  // of 50 steps
  RealClock clock;
  auto first_model = MakeModel(spec);
  ASSERT_NE(first_model, nullptr);
  engine::CpuEngine first(std::move(first_model));
  Trainer whole(spec, first, data, clock, TrainerOptions{});
  std::vector<float> params(2 * first.num_parameters()), state(first.num_state());
  EpochSoFar at_cut;
  auto uninterrupted = whole.RunEpoch(0, 0, [&](uint64_t, size_t done, size_t, absl::Duration) {
    if (done != kCut) return;
    ASSERT_TRUE(first.ReadParameters(params).ok());
    ASSERT_TRUE(first.ReadState(state).ok());
    at_cut = whole.so_far();
  });
  ASSERT_TRUE(uninterrupted.ok()) << uninterrupted.status();
  EXPECT_EQ(at_cut.samples, kCut * 16);
  EXPECT_GT(at_cut.correct, 0u);

  auto second_model = MakeModel(spec);
  ASSERT_NE(second_model, nullptr);
  engine::CpuEngine second(std::move(second_model));
  ASSERT_TRUE(second.WriteParameters(params).ok());
  ASSERT_TRUE(second.WriteState(state).ok());
  Trainer resumed(spec, second, data, clock, TrainerOptions{});
  EpochSoFar carried = at_cut;
  carried.time += absl::Seconds(7);  // the first generation's epoch was slow
  auto rest = resumed.RunEpoch(0, kCut * 16, {}, carried);
  ASSERT_TRUE(rest.ok()) << rest.status();
  EXPECT_EQ(rest->steps, kSteps - kCut);
  EXPECT_EQ(rest->samples, uninterrupted->samples);
  EXPECT_EQ(rest->train_accuracy, uninterrupted->train_accuracy);
  EXPECT_EQ(rest->test.accuracy, uninterrupted->test.accuracy);
  EXPECT_GE(rest->seconds, 7.0);
  EXPECT_EQ(Params(second.model()), Params(first.model()));
}

enum class Backend { kInProcess, kGloo, kRing };

std::string BackendName(Backend b) {
  switch (b) {
    case Backend::kInProcess:
      return "InProcess";
    case Backend::kGloo:
      return "Gloo";
    case Backend::kRing:
      return "Ring";
  }
  return "Unknown";
}

// A member of a real backend, connected through `store`.
absl::StatusOr<std::unique_ptr<Collective>> Connect(Backend backend, Store& store, int rank,
                                                    int world) {
  if (backend == Backend::kRing) return CreateRingCollective(store, rank, world, RingOptions{});
  return CreateGlooCollective(store, rank, world, GlooOptions{});
}

struct RankRun {
  std::vector<float> params;
  std::vector<float> state;
  std::vector<absl::Status> steps;  // up to and including the first failure
  StepTimings last;                 // of the last step
  EvalMetrics eval;                 // when asked for: the sharded evaluation
};

// One rank's training loop over `member`; fills `run`.
void TrainRank(int rank, Collective& member, const JobSpec& spec, const data::LoadedData& data,
               size_t steps, std::function<bool()> stop, RankRun& run, bool evaluate) {
  auto model = MakeModel(spec);
  ASSERT_NE(model, nullptr);
  engine::CpuEngine engine(std::move(model));
  RealClock clock;
  TrainerOptions options;
  options.collective = &member;
  options.collective_timeout = kTimeout;
  options.stop_requested = std::move(stop);
  Trainer trainer(spec, engine, data, clock, std::move(options));
  ASSERT_EQ(trainer.rank(), rank);
  for (size_t s = 0; s < steps; ++s) {
    run.steps.push_back(trainer.Step(0, s));
    if (!run.steps.back().ok()) break;
    run.last = trainer.last_step();
  }
  if (evaluate) EvaluateInto(trainer, run.eval);
  run.params = Params(engine.model());
  const auto state = engine.model().state();
  run.state.assign(state.begin(), state.end());
}

// How TrainRanks runs its group.
struct Ranks {
  int world = 2;
  // stop_for(rank) gives that rank's stop_requested (may be empty).
  std::function<std::function<bool()>(int)> stop_for;
  bool evaluate = false;
  // Wraps rank r's member (a rogue or failing rank); may be empty.
  std::function<std::unique_ptr<Collective>(int, std::unique_ptr<Collective>)> wrap;
};

// `how.world` ranks, each with its own model, trainer and collective member.
std::vector<RankRun> TrainRanks(Backend backend, const JobSpec& spec, const data::LoadedData& data,
                                size_t steps, const Ranks& how = {}) {
  const int world = how.world;
  InProcessGroup group(world);
  InMemoryStore base;
  PrefixStore store("equivalence/", base);
  std::vector<RankRun> runs(static_cast<size_t>(world));
  // Members are destroyed only once every rank has finished, so that a
  // rank that is done does not tear down a connection a peer still reads.
  std::latch finished(world);
  testing::RunRanks(world, [&](int r) {
    std::unique_ptr<Collective> member;
    if (backend == Backend::kInProcess) {
      member = group.Member(r);
    } else if (auto made = Connect(backend, store, r, world); made.ok()) {
      member = std::move(*made);
    } else {
      ADD_FAILURE() << made.status();
    }
    if (member != nullptr && how.wrap) member = how.wrap(r, std::move(member));
    if (member != nullptr) {
      TrainRank(r, *member, spec, data, steps, how.stop_for ? how.stop_for(r) : nullptr, runs[r],
                how.evaluate);
    }
    finished.arrive_and_wait();
  });
  return runs;
}

// AVERAGE by its definition: per step, both ranks' local deltas, averaged
// elementwise, applied with the cap factor of the local batch.
std::vector<float> AverageReference(const JobSpec& spec, const data::LoadedData& data,
                                    size_t steps) {
  const size_t b = spec.batch_size();
  const auto& train = data.data.train;
  std::array<std::unique_ptr<engine::Model>, 2> models = {MakeModel(spec), MakeModel(spec)};
  if (models[0] == nullptr || models[1] == nullptr) return {};
  const uint64_t sampler_seed = DeriveSeed(spec.seed(), kSamplerStream);
  std::array<data::DistributedSampler, 2> samplers = {
      data::DistributedSampler(train.num_samples, sampler_seed, 2, 0, b),
      data::DistributedSampler(train.num_samples, sampler_seed, 2, 1, b)};
  const float sigma_v = SigmaVAtEpoch(spec.noise(), 0);
  std::vector<uint32_t> idx(b);
  std::vector<float> x(b * train.input_dim);
  std::vector<int32_t> labels(b);
  for (size_t s = 0; s < steps; ++s) {
    for (int r = 0; r < 2; ++r) {
      samplers[r].Batch(0, s, idx);
      for (size_t i = 0; i < b; ++i) {
        std::copy_n(train.inputs.begin() + idx[i] * train.input_dim, train.input_dim,
                    x.begin() + i * train.input_dim);
        labels[i] = train.labels[idx[i]];
      }
      models[r]->TrainStepLocal(x.data(), labels.data(), nullptr, b, sigma_v);
    }
    auto d0 = models[0]->deltas();
    auto d1 = models[1]->deltas();
    for (size_t k = 0; k < d0.size(); ++k) d0[k] = d1[k] = (d0[k] + d1[k]) / 2.0f;
    for (auto& m : models) m->ApplyStep(engine::CapFactor(b));
  }
  EXPECT_EQ(Params(*models[0]), Params(*models[1]));
  return Params(*models[0]);
}

void ExpectAllOk(const std::vector<RankRun>& runs, size_t steps) {
  for (size_t r = 0; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].steps.size(), steps)
        << "rank " << r << " stopped early: "
        << (runs[r].steps.empty() ? absl::UnknownError("no step") : runs[r].steps.back());
  }
}

class EquivalenceTest : public ::testing::TestWithParam<Backend> {
 protected:
  const data::LoadedData data_ = MakeData();
};

TEST_P(EquivalenceTest, SumModeTwoRanksOfEightMatchOneProcessOfSixteen) {
  const std::vector<float> initial = Params(*MakeModel(Spec(16, JobSpec::SUM)));
  const std::vector<float> single = TrainSingle(Spec(16, JobSpec::SUM), data_, kSteps);
  const auto runs = TrainRanks(GetParam(), Spec(8, JobSpec::SUM), data_, kSteps);
  ExpectAllOk(runs, kSteps);
  const Diff d = MaxScaledDiff(runs[0].params, single);
  EXPECT_LE(d.mean, kTolerance) << "mean arena";
  EXPECT_LE(d.var, kTolerance) << "variance arena";
  EXPECT_EQ(runs[0].params, runs[1].params) << "ranks are not bit-identical";
  // Not vacuous: training moved the parameters far beyond the tolerance.
  const Diff moved = MaxScaledDiff(single, initial);
  EXPECT_GT(std::min(moved.mean, moved.var), 1e-2);
  const Diff plain = MaxPlainRelativeDiff(runs[0].params, single);
  std::printf(
      "SUM vs one process: scaled difference mean %.3g, variance %.3g; "
      "plain relative mean %.3g, variance %.3g\n",
      d.mean, d.var, plain.mean, plain.var);
}

// The heads of docs/heads.md: one-hot REMAX and CLOSED_FORM_SOFTMAX and the
// heteroscedastic EVEN_EXP (a regression data set), 2 x 8 = 1 x 16; and the
// sharded evaluation's metrics, calibration included, equal the single
// process's (float sums across ranks: to 1e-6).
TEST_P(EquivalenceTest, SumModeOutputHeadsTwoRanksOfEightMatchOneProcessOfSixteen) {
  const data::LoadedData regression = MakeRegressionData();
  const struct {
    std::string name;
    JobSpec one, two;
    const data::LoadedData* data;
  } cases[] = {
      {"remax", OneHotSpec(16, tagi::v1::Layer::REMAX), OneHotSpec(8, tagi::v1::Layer::REMAX),
       &data_},
      {"closed-form softmax", OneHotSpec(16, tagi::v1::Layer::CLOSED_FORM_SOFTMAX),
       OneHotSpec(8, tagi::v1::Layer::CLOSED_FORM_SOFTMAX), &data_},
      {"heteroscedastic", HeteroscedasticSpec(16), HeteroscedasticSpec(8), &regression},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::vector<float> initial = Params(*MakeModel(c.one));
    EvalMetrics single_eval;
    const std::vector<float> single = TrainSingle(c.one, *c.data, kSteps, &single_eval);
    const auto runs = TrainRanks(GetParam(), c.two, *c.data, kSteps, {.evaluate = true});
    ExpectAllOk(runs, kSteps);
    const Diff d = MaxScaledDiff(runs[0].params, single);
    EXPECT_LE(d.mean, kTolerance) << "mean arena";
    EXPECT_LE(d.var, kTolerance) << "variance arena";
    EXPECT_EQ(runs[0].params, runs[1].params) << "ranks are not bit-identical";
    const Diff moved = MaxScaledDiff(single, initial);
    EXPECT_GT(std::min(moved.mean, moved.var), 1e-2);
    for (const RankRun& run : runs) {
      const EvalMetrics& m = run.eval;
      EXPECT_EQ(m.samples, single_eval.samples);
      EXPECT_NEAR(m.accuracy, single_eval.accuracy, 1e-6);
      EXPECT_NEAR(m.nll, single_eval.nll, 1e-5);
      EXPECT_NEAR(m.ece, single_eval.ece, 1e-5);
      EXPECT_NEAR(m.brier, single_eval.brier, 1e-5);
      EXPECT_NEAR(m.coverage_68, single_eval.coverage_68, 1e-6);
      EXPECT_NEAR(m.coverage_95, single_eval.coverage_95, 1e-6);
      EXPECT_NEAR(m.mean_std, single_eval.mean_std, 1e-5);
    }
    // Not vacuous: the calibration figures of the head were computed.
    if (c.data == &data_) {
      EXPECT_GT(single_eval.ece, 0.0);
      EXPECT_GT(single_eval.brier, 0.0);
    } else {
      EXPECT_GT(single_eval.coverage_95, 0.5);
      EXPECT_GT(single_eval.mean_std, 0.0);
    }
  }
}

// Each image is augmented from (seed, epoch, sample index) alone, so the
// two ranks' halves of the global batch are augmented exactly as one
// process of 16 augments them: not by rank, batch position or thread.
TEST_P(EquivalenceTest, SumModeAugmentedTwoRanksOfEightMatchOneProcessOfSixteen) {
  const std::vector<float> single = TrainSingle(Augmented(Spec(16, JobSpec::SUM)), data_, kSteps);
  const auto runs = TrainRanks(GetParam(), Augmented(Spec(8, JobSpec::SUM)), data_, kSteps);
  ExpectAllOk(runs, kSteps);
  const Diff d = MaxScaledDiff(runs[0].params, single);
  EXPECT_LE(d.mean, kTolerance) << "mean arena";
  EXPECT_LE(d.var, kTolerance) << "variance arena";
  EXPECT_EQ(runs[0].params, runs[1].params) << "ranks are not bit-identical";
  // Not vacuous: the augmentation changed what was learnt.
  const Diff plain = MaxScaledDiff(single, TrainSingle(Spec(16, JobSpec::SUM), data_, kSteps));
  EXPECT_GT(std::max(plain.mean, plain.var), 1e-2);
}

TEST_P(EquivalenceTest, SumModeResidualNetworkTwoRanksOfEightMatchOneProcessOfSixteen) {
  const JobSpec one = Spec(16, JobSpec::SUM, /*residual=*/true);
  const std::vector<float> initial = Params(*MakeModel(one));
  const std::vector<float> single = TrainSingle(one, data_, kSteps);
  const auto runs = TrainRanks(GetParam(), Spec(8, JobSpec::SUM, true), data_, kSteps);
  ExpectAllOk(runs, kSteps);
  const Diff d = MaxScaledDiff(runs[0].params, single);
  EXPECT_LE(d.mean, kTolerance) << "mean arena";
  EXPECT_LE(d.var, kTolerance) << "variance arena";
  EXPECT_EQ(runs[0].params, runs[1].params) << "ranks are not bit-identical";
  EXPECT_GT(initial.size(), Params(*MakeModel(Spec(16, JobSpec::SUM))).size());
  const Diff moved = MaxScaledDiff(single, initial);
  EXPECT_GT(std::min(moved.mean, moved.var), 1e-2);
}

// Batch statistics are per rank (as in the reference and PyTorch DDP), so
// two ranks do not equal one process here; but the running statistics are
// averaged in the step's all-reduce, so the replicas stay bit-identical,
// parameters and state alike.
TEST_P(EquivalenceTest, ImageNetworkReplicasStayBitIdenticalRunningStatisticsIncluded) {
  const JobSpec spec = CnnSpec(8);
  auto initial = MakeModel(spec);
  ASSERT_NE(initial, nullptr);
  const auto runs = TrainRanks(GetParam(), spec, data_, kSteps);
  ExpectAllOk(runs, kSteps);
  EXPECT_EQ(runs[0].params, runs[1].params) << "ranks are not bit-identical";
  ASSERT_EQ(runs[0].state.size(), (4u + 4 + 1) + (kHidden + kHidden + 1));
  EXPECT_EQ(runs[0].state, runs[1].state) << "running statistics differ between ranks";
  // Not vacuous: the running statistics moved from their start (0, 1, 1).
  const auto start = initial->state();
  EXPECT_NE(runs[0].state, std::vector<float>(start.begin(), start.end()));
  EXPECT_EQ(runs[0].state[8], 0.0f) << "the first-batch flag is cleared";
  const Diff moved = MaxScaledDiff(runs[0].params, Params(*initial));
  EXPECT_GT(std::min(moved.mean, moved.var), 1e-2);
}

// Synchronised batch norm: batch statistics over the global batch, so two
// ranks of 8 train the image network as one process of 16 (SUM mode), the
// running statistics included (averaged across the identical replicas).
TEST_P(EquivalenceTest, SyncBatchNormTwoRanksOfEightMatchOneProcessOfSixteen) {
  JobSpec one = CnnSpec(16);
  one.set_sync_batch_norm(true);  // a no-op in one process
  JobSpec two = CnnSpec(8);
  two.set_sync_batch_norm(true);
  auto initial = MakeModel(one);
  ASSERT_NE(initial, nullptr);
  auto model = MakeModel(one);
  ASSERT_NE(model, nullptr);
  engine::CpuEngine engine(std::move(model));
  RealClock clock;
  Trainer trainer(one, engine, data_, clock, TrainerOptions{});
  for (size_t s = 0; s < kSteps; ++s) ASSERT_TRUE(trainer.Step(0, s).ok());
  const std::vector<float> single = Params(engine.model());
  const auto single_state = engine.model().state();

  const auto runs = TrainRanks(GetParam(), two, data_, kSteps);
  ExpectAllOk(runs, kSteps);
  EXPECT_EQ(runs[0].params, runs[1].params) << "ranks are not bit-identical";
  EXPECT_EQ(runs[0].state, runs[1].state);
  const Diff d = MaxScaledDiff(runs[0].params, single);
  EXPECT_LE(d.mean, kTolerance) << "mean arena";
  EXPECT_LE(d.var, kTolerance) << "variance arena";
  ASSERT_EQ(runs[0].state.size(), single_state.size());
  for (size_t i = 0; i < single_state.size(); ++i) {
    EXPECT_NEAR(runs[0].state[i], single_state[i], kTolerance * std::max(1.0f, std::abs(single_state[i])))
        << "running statistic " << i;
  }
  const Diff moved = MaxScaledDiff(single, Params(*initial));
  EXPECT_GT(std::min(moved.mean, moved.var), 1e-2);
  // Without the synchronisation the ranks normalise by their own halves:
  // not the single process (the test above would see it).
  const auto unsynced = TrainRanks(GetParam(), CnnSpec(8), data_, kSteps);
  EXPECT_GT(MaxScaledDiff(unsynced[0].params, single).mean, 10 * kTolerance);
}

TEST_P(EquivalenceTest, AverageModeMatchesItsDefinition) {
  const JobSpec spec = Spec(8, JobSpec::AVERAGE);
  const auto runs = TrainRanks(GetParam(), spec, data_, kSteps);
  ExpectAllOk(runs, kSteps);
  const Diff d = MaxScaledDiff(runs[0].params, AverageReference(spec, data_, kSteps));
  EXPECT_LE(d.mean, kTolerance) << "mean arena";
  EXPECT_LE(d.var, kTolerance) << "variance arena";
  EXPECT_EQ(runs[0].params, runs[1].params) << "ranks are not bit-identical";
}

TEST_P(EquivalenceTest, StopOnOneRankStopsBothAfterTheSameStep) {
  constexpr size_t kStopAt = 10;
  const JobSpec spec = Spec(8, JobSpec::SUM);
  auto stop_for = [](int rank) -> std::function<bool()> {
    if (rank != 1) return {};
    return [polls = size_t{0}]() mutable { return polls++ >= kStopAt; };
  };
  const auto runs = TrainRanks(GetParam(), spec, data_, kSteps, {.stop_for = stop_for});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(runs[r].steps.size(), kStopAt + 1) << "rank " << r;
    for (size_t s = 0; s < kStopAt; ++s) EXPECT_TRUE(runs[r].steps[s].ok()) << runs[r].steps[s];
    EXPECT_TRUE(absl::IsCancelled(runs[r].steps[kStopAt])) << runs[r].steps[kStopAt];
  }
  EXPECT_EQ(runs[0].params, runs[1].params);
  // The stopped step was not applied: the model is that of kStopAt steps.
  const auto ten = TrainRanks(Backend::kInProcess, spec, data_, kStopAt);
  EXPECT_EQ(runs[0].params, ten[0].params);
}

INSTANTIATE_TEST_SUITE_P(Backends, EquivalenceTest,
                         ::testing::Values(Backend::kInProcess, Backend::kGloo, Backend::kRing),
                         [](const auto& info) { return BackendName(info.param); });

TEST(Equivalence, GlooAndInProcessGiveBitIdenticalModelsWithTwoRanks) {
  const data::LoadedData data = MakeData();
  const JobSpec spec = Spec(8, JobSpec::SUM);
  const auto fake = TrainRanks(Backend::kInProcess, spec, data, kSteps);
  const auto gloo = TrainRanks(Backend::kGloo, spec, data, kSteps);
  ExpectAllOk(fake, kSteps);
  ExpectAllOk(gloo, kSteps);
  EXPECT_EQ(fake[0].params, gloo[0].params);
}

// With two ranks the ring adds each element once, as a + b: the same bits
// as the fake.
TEST(Equivalence, RingAndInProcessGiveBitIdenticalModelsWithTwoRanks) {
  const data::LoadedData data = MakeData();
  const JobSpec spec = Spec(8, JobSpec::SUM);
  const auto fake = TrainRanks(Backend::kInProcess, spec, data, kSteps);
  const auto ring = TrainRanks(Backend::kRing, spec, data, kSteps);
  ExpectAllOk(fake, kSteps);
  ExpectAllOk(ring, kSteps);
  EXPECT_EQ(fake[0].params, ring[0].params);
}

// The job with the all-reduce cut into buckets of 1 KiB (128 parameters'
// deltas): a few dozen buckets for these small networks.
JobSpec Bucketed(JobSpec spec) {
  spec.set_bucket_kib(1);
  return spec;
}

// The buckets of the job's model at 1 KiB.
size_t Buckets(const JobSpec& spec) {
  auto arch = engine::ArchitectureFromJobSpec(spec);
  EXPECT_TRUE(arch.ok()) << arch.status();
  return arch.ok() ? spec::PlanBuckets(arch->num_parameters(), 1024).size() : 0;
}

// With two ranks every element is one addition a + b, however the arena is
// cut, so the buckets reduced during the backward give the one all-reduce's
// bits, running statistics and all, on every backend.
TEST_P(EquivalenceTest, BucketedStepsGiveTheOneAllReducesBitsWithTwoRanks) {
  // Synchronised batch norms sum in the forward pass, on the trainer's
  // thread, while the communication thread is idle between steps.
  JobSpec synced = CnnSpec(8);
  synced.set_sync_batch_norm(true);
  for (const JobSpec& spec : {Spec(8, JobSpec::SUM, true), CnnSpec(8), synced}) {
    SCOPED_TRACE(spec.layers_size());
    const auto one = TrainRanks(GetParam(), spec, data_, kSteps);
    const auto bucketed = TrainRanks(GetParam(), Bucketed(spec), data_, kSteps);
    ExpectAllOk(one, kSteps);
    ExpectAllOk(bucketed, kSteps);
    EXPECT_EQ(one[0].last.buckets, 1u);
    EXPECT_GE(bucketed[0].last.buckets, 3u);
    EXPECT_EQ(bucketed[0].last.allreduce_bytes, one[0].last.allreduce_bytes);
    for (size_t r = 0; r < 2; ++r) {
      EXPECT_EQ(bucketed[r].params, one[r].params) << "rank " << r;
      EXPECT_EQ(bucketed[r].state, one[r].state) << "rank " << r;
    }
  }
}

// With three ranks the ring adds an element's three terms in an order that
// depends on where the element falls in the buffer being reduced, so
// buckets may change the last bits against the one all-reduce (the
// in-process fake, which always adds in rank order, does not). What must
// hold: every replica has the same bits, a second run repeats them, and the
// model is the fake's within the tolerance.
TEST(Equivalence, BucketedRingOfThreeRanksIsDeterministicOnEveryReplica) {
  const data::LoadedData data = MakeData();
  constexpr size_t kSteps3 = 30;  // 800 samples: 33 global batches of 24
  const JobSpec spec = Spec(8, JobSpec::SUM, true);
  const Ranks three{.world = 3};
  const auto ring = TrainRanks(Backend::kRing, Bucketed(spec), data, kSteps3, three);
  const auto again = TrainRanks(Backend::kRing, Bucketed(spec), data, kSteps3, three);
  const auto fake = TrainRanks(Backend::kInProcess, spec, data, kSteps3, three);
  const auto fake_bucketed = TrainRanks(Backend::kInProcess, Bucketed(spec), data, kSteps3, three);
  for (const auto* runs : {&ring, &again, &fake, &fake_bucketed}) ExpectAllOk(*runs, kSteps3);
  EXPECT_EQ(ring[0].last.buckets, Buckets(spec));
  EXPECT_EQ(ring[0].params, ring[1].params);
  EXPECT_EQ(ring[0].params, ring[2].params);
  EXPECT_EQ(ring[0].params, again[0].params);
  EXPECT_EQ(fake_bucketed[0].params, fake[0].params);
  const Diff d = MaxScaledDiff(ring[0].params, fake[0].params);
  EXPECT_LE(d.mean, kTolerance);
  EXPECT_LE(d.var, kTolerance);
}

// A rank whose link fails in the middle of a bucketed step (its second
// call: the first bucket's var half, while its backward is still running)
// fails that step, its peer fails the same step promptly (not after the
// collective timeout), and neither applies any of it.
TEST_P(EquivalenceTest, AFailureMidBucketFailsTheStepOnEveryRankAndAppliesNothing) {
  const JobSpec spec = Bucketed(Spec(8, JobSpec::SUM, true));
  const auto before = TrainRanks(GetParam(), spec, data_, 2);
  ExpectAllOk(before, 2);
  // Two calls per bucket and one for the tail; fail the second of step 2.
  const int calls_per_step = static_cast<int>(2 * Buckets(spec) + 1);
  const int fail_on = 2 * calls_per_step + 2;
  const absl::Time start = absl::Now();
  const auto runs = TrainRanks(
      GetParam(), spec, data_, 4,
      {.wrap = [&](int r, std::unique_ptr<Collective> member) -> std::unique_ptr<Collective> {
        if (r == 0) return std::make_unique<FailingCollective>(std::move(member), fail_on);
        return member;
      }});
  EXPECT_LT(absl::Now() - start, kTimeout / 2);
  for (size_t r = 0; r < 2; ++r) {
    ASSERT_EQ(runs[r].steps.size(), 3u) << "rank " << r;
    EXPECT_FALSE(runs[r].steps[2].ok()) << "rank " << r;
    EXPECT_EQ(runs[r].params, before[r].params) << "rank " << r << " applied part of the step";
  }
  EXPECT_EQ(runs[0].steps[2].code(), absl::StatusCode::kUnavailable) << runs[0].steps[2];
}

// 16-bit wires through the trainer on the ring, bucketed or not: every
// replica keeps the same bits, every variance stays positive, and the
// model scores the test split like the FP32 one. Not parameter by
// parameter: the variance floor of the capped step is a threshold, so a
// rounding that tips one variance under it moves that parameter a long way
// (seen: FP16 in four buckets 0.4 % of the means' L2 norm away after 10
// steps, 0.004 % in one), while the predictions barely move.
TEST(Equivalence, SixteenBitWiresKeepReplicasIdenticalAndScoreLikeFp32) {
  const data::LoadedData data = MakeData();
  const JobSpec fp32 = Spec(8, JobSpec::SUM, true);
  const auto reference = TrainRanks(Backend::kRing, fp32, data, kSteps, {.evaluate = true});
  ExpectAllOk(reference, kSteps);
  for (const auto wire : {JobSpec::BF16, JobSpec::FP16}) {
    for (const bool bucketed : {false, true}) {
      SCOPED_TRACE(absl::StrCat(JobSpec::WirePrecision_Name(wire), bucketed ? " bucketed" : ""));
      JobSpec spec = bucketed ? Bucketed(fp32) : fp32;
      spec.set_wire_precision(wire);
      const auto runs = TrainRanks(Backend::kRing, spec, data, kSteps, {.evaluate = true});
      ExpectAllOk(runs, kSteps);
      EXPECT_EQ(runs[0].params, runs[1].params);
      EXPECT_NE(runs[0].params, reference[0].params) << "the wire did not round anything";
      const size_t n = runs[0].params.size() / 2;
      // The deltas at 2 bytes each; the tail (here the control word) at 4.
      EXPECT_EQ(runs[0].last.allreduce_bytes, reference[0].last.allreduce_bytes - 2 * n * 2);
      for (size_t k = n; k < 2 * n; ++k) ASSERT_GT(runs[0].params[k], 0.0f) << k;
      EXPECT_NEAR(runs[0].eval.accuracy, reference[0].eval.accuracy, 3.0 / 64);
      EXPECT_NEAR(runs[0].eval.log_likelihood, reference[0].eval.log_likelihood,
                  0.05 * std::abs(reference[0].eval.log_likelihood));
    }
  }
}

// A member that forwards every call to `inner`; the rogue ranks below change
// what they send.
class Forwarding : public Collective {
 public:
  explicit Forwarding(std::unique_ptr<Collective> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  absl::Status AllReduceSum(std::span<float> data, absl::Duration timeout) override {
    return inner_->AllReduceSum(data, timeout);
  }
  absl::Status Broadcast(std::span<float> data, int root, absl::Duration timeout) override {
    return inner_->Broadcast(data, root, timeout);
  }
  absl::Status Barrier(absl::Duration timeout) override { return inner_->Barrier(timeout); }
  void Abort() override { inner_->Abort(); }

 private:
  const std::unique_ptr<Collective> inner_;
};

// A rank that sends NaN in its `at`-th all-reduce (1-based), as a broken or
// rogue one would.
class PoisonAt final : public Forwarding {
 public:
  PoisonAt(std::unique_ptr<Collective> inner, int at) : Forwarding(std::move(inner)), at_(at) {}
  absl::Status AllReduceSum(std::span<float> data, absl::Duration timeout) override {
    if (++calls_ == at_ && !data.empty()) data[data.size() / 2] = std::nanf("");
    return Forwarding::AllReduceSum(data, timeout);
  }

 private:
  const int at_;
  int calls_ = 0;
};

// A rank that claims every test sample of its evaluation right, many times
// over (the evaluation all-reduce is the one of EvalSums::kFloats floats).
class InflateEval final : public Forwarding {
 public:
  using Forwarding::Forwarding;
  absl::Status AllReduceSum(std::span<float> data, absl::Duration timeout) override {
    if (data.size() == EvalSums::kFloats) data[0] += 1000.0f;  // correct
    return Forwarding::AllReduceSum(data, timeout);
  }
};

// One rank's NaN fails that step on every rank with the reason, and none of
// it is applied: both ranks hold the model of the step before.
TEST(Equivalence, ANaNFromOneRankFailsTheStepOnEveryRankAndIsNeverApplied) {
  const data::LoadedData data = MakeData();
  const JobSpec spec = Spec(8, JobSpec::SUM);
  const auto clean = TrainRanks(Backend::kInProcess, spec, data, 3);
  ExpectAllOk(clean, 3);
  const auto runs = TrainRanks(
      Backend::kInProcess, spec, data, 6,
      {.wrap = [](int r, std::unique_ptr<Collective> member) -> std::unique_ptr<Collective> {
        if (r == 1) return std::make_unique<PoisonAt>(std::move(member), 4);
        return member;
      }});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(runs[r].steps.size(), 4u) << "rank " << r;
    for (int s = 0; s < 3; ++s) EXPECT_TRUE(runs[r].steps[s].ok()) << runs[r].steps[s];
    EXPECT_EQ(runs[r].steps[3].code(), absl::StatusCode::kDataLoss) << runs[r].steps[3];
    EXPECT_NE(runs[r].steps[3].message().find("non-finite reduced step"), absl::string_view::npos)
        << runs[r].steps[3];
    EXPECT_EQ(runs[r].params, clean[r].params) << "rank " << r << " applied the poisoned step";
  }
}

// The sums an honest evaluation of 10 samples gives pass; impossible ones
// (the kind a rank inflating its accuracy sends) do not.
TEST(CheckEvalSums, PassesHonestSumsAndRefusesImpossibleOnes) {
  EvalSums honest;
  honest.samples = 10;
  honest.observed = 10;
  honest.correct = 7;
  honest.brier = 3.5;
  honest.log_likelihood = -6.0;
  honest.bin_count[kCalibrationBins - 1] = 10;
  honest.bin_confidence[kCalibrationBins - 1] = 9.5;
  honest.bin_correct[kCalibrationBins - 1] = 7;
  EXPECT_TRUE(CheckEvalSums(honest, 10, 10).ok());
  auto refused = [](const EvalSums& s) {
    const absl::Status st = CheckEvalSums(s, 10, 10);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    return std::string(st.message());
  };
  EvalSums s = honest;
  s.correct = 999;
  EXPECT_NE(refused(s).find("999 correct of 10"), std::string::npos);
  s = honest;
  s.samples = 1010;
  EXPECT_NE(refused(s).find("1010 samples, the test set has 10"), std::string::npos);
  s = honest;
  s.log_likelihood = std::nan("");
  EXPECT_NE(refused(s).find("not finite"), std::string::npos);
  s = honest;
  s.bin_correct[kCalibrationBins - 1] = 11;
  EXPECT_NE(refused(s).find("calibration bin"), std::string::npos);
  s = honest;
  s.within_68 = 5;  // more inside the narrower interval than the wider
  EXPECT_NE(refused(s).find("68/95"), std::string::npos);
}

// A rank that inflates its evaluation sums: the evaluation fails on every
// rank instead of reporting the accuracy it claims.
TEST(Equivalence, InflatedEvaluationSumsFailTheEvaluationOnEveryRank) {
  const data::LoadedData data = MakeData();
  const JobSpec spec = Spec(8, JobSpec::SUM);
  constexpr int kWorld = 2;
  InProcessGroup group(kWorld);
  std::vector<absl::Status> results(kWorld);
  std::latch finished(kWorld);
  testing::RunRanks(kWorld, [&](int r) {
    std::unique_ptr<Collective> member = group.Member(r);
    if (r == 1) member = std::make_unique<InflateEval>(std::move(member));
    auto model = MakeModel(spec);
    ASSERT_NE(model, nullptr);
    engine::CpuEngine engine(std::move(model));
    RealClock clock;
    TrainerOptions options;
    options.collective = member.get();
    options.collective_timeout = kTimeout;
    Trainer trainer(spec, engine, data, clock, std::move(options));
    results[r] = trainer.Evaluate().status();
    finished.arrive_and_wait();
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kDataLoss) << "rank " << r << ": " << results[r];
  }
}

}  // namespace
}  // namespace tagi
