// Model against docs/maths.md end to end: whole training steps compared
// with the independent double-precision implementation in naive_tagi.h,
// plus initialisation (section 1), the arena layout documented in model.h,
// the batch-sum property of the deltas (section 6), the capped step
// (section 7) and classification (section 5).
#include "worker/engine/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/rng.h"
#include "spec/plan.h"
#include "worker/engine/architecture.h"
#include "gtest/gtest.h"
#include "tests/engine/naive_tagi.h"
#include "worker/engine/output.h"

namespace tagi::engine {
namespace {

using testing::EncodeHsmLabel;
using testing::NaiveCapFactor;
using testing::NaiveTagi;

LayerDesc Lin(uint32_t in, uint32_t out) { return {v1::Layer::LINEAR, in, out, 0.0f}; }
LayerDesc Act(LayerKind kind, float slope = 0.0f) { return {kind, 0, 0, slope}; }

Architecture Regression(std::vector<LayerDesc> layers) {
  const Shape input{layers.front().in, 1, 1};
  return {input, std::move(layers), {HeadKind::kRegression, 0}};
}
Architecture Hsm(std::vector<LayerDesc> layers, uint32_t classes) {
  const Shape input{layers.front().in, 1, 1};
  return {input, std::move(layers), {HeadKind::kClassification, classes}};
}
Architecture OneHot(std::vector<LayerDesc> layers, uint32_t classes) {
  Architecture arch = Hsm(std::move(layers), classes);
  arch.head.one_hot = true;
  return arch;
}
Architecture Heteroscedastic(std::vector<LayerDesc> layers) {
  Architecture arch = Regression(std::move(layers));
  arch.head.heteroscedastic = true;
  return arch;
}

std::unique_ptr<Model> MakeModel(const Architecture& arch, size_t max_batch) {
  auto model = Model::Create(arch, max_batch);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

std::vector<float> Uniform(Rng& rng, size_t n, double lo, double hi) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(lo + (hi - lo) * rng.Uniform());
  return v;
}

// |got - want| <= rel * max(|want|, scale[k]) for every element; scale lets
// a mean near zero be compared on the scale of its standard deviation.
void ExpectClose(std::span<const float> got, const std::vector<double>& want,
                 const std::vector<double>& scale, double rel, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int failures = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    const double tol = rel * std::max(std::abs(want[k]), scale[k]);
    if (std::abs(got[k] - want[k]) > tol && ++failures <= 10) {
      ADD_FAILURE() << what << "[" << k << "]: got " << got[k] << ", want " << want[k]
                    << " (tolerance " << tol << ")";
    }
  }
  EXPECT_EQ(failures, 0) << what;
}

// Scales for a [mu N][var N] arena: sqrt(var) for each mean, the variance
// itself for each variance.
std::vector<double> ArenaScale(const std::vector<double>& arena) {
  const size_t n = arena.size() / 2;
  std::vector<double> s(arena.size());
  for (size_t k = 0; k < n; ++k) {
    s[k] = std::sqrt(arena[n + k]);
    s[n + k] = arena[n + k];
  }
  return s;
}

// Deltas: scale each half by its largest magnitude (sums over the batch
// can cancel, leaving a small element with a large relative error).
std::vector<double> DeltaScale(const std::vector<double>& deltas) {
  const size_t n = deltas.size() / 2;
  double max_mu = 0.0, max_var = 0.0;
  for (size_t k = 0; k < n; ++k) {
    max_mu = std::max(max_mu, std::abs(deltas[k]));
    max_var = std::max(max_var, std::abs(deltas[n + k]));
  }
  std::vector<double> s(deltas.size());
  std::fill(s.begin(), s.begin() + n, 0.01 * max_mu);
  std::fill(s.begin() + n, s.end(), 0.01 * max_var);
  return s;
}

struct EndToEndCase {
  std::string name;
  Architecture arch;
  size_t batch;
  float sigma_v;
  uint64_t seed;
  int steps;
};

// Runs `steps` TrainStepLocal + ApplyStep on the engine and on NaiveTagi
// from the same initial arena and compares outputs, deltas and parameters.
// Counts in *clipped the deltas that the cap clipped (naive side).
void CompareWithNaive(const EndToEndCase& c, size_t* clipped = nullptr) {
  SCOPED_TRACE(c.name);
  auto model = MakeModel(c.arch, c.batch);
  ASSERT_NE(model, nullptr);
  model->Initialize(c.seed, {});
  NaiveTagi naive(c.arch, model->parameters());
  const bool hsm = c.arch.head.kind == HeadKind::kClassification;
  const bool sigmoid_out = c.arch.layers.back().kind == v1::Layer::SIGMOID;
  const size_t in = c.arch.input_width();
  const size_t out = c.arch.output_width() / c.arch.head.units_per_target();
  Rng rng(c.seed + 1000);
  size_t num_clipped = 0;
  for (int step = 0; step < c.steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<float> x = Uniform(rng, c.batch * in, -1.5, 1.5);
    std::vector<int32_t> labels;
    std::vector<float> targets;
    if (hsm) {
      for (size_t b = 0; b < c.batch; ++b) {
        labels.push_back(static_cast<int32_t>(rng.Below(c.arch.head.num_classes)));
      }
    } else {
      targets = sigmoid_out ? Uniform(rng, c.batch * out, 0.05, 0.95)
                            : Uniform(rng, c.batch * out, -2.0, 2.0);
      if (step == 0 && targets.size() > 1) targets[1] = std::numeric_limits<float>::quiet_NaN();
    }
    const int32_t* lp = hsm ? labels.data() : nullptr;
    const float* tp = hsm ? nullptr : targets.data();

    model->TrainStepLocal(x.data(), lp, tp, c.batch, c.sigma_v);
    naive.TrainStep(x.data(), lp, tp, c.batch, c.sigma_v);
    ASSERT_GT(naive.relu_margin(), 1e-3) << "a ReLU input is too close to 0 to compare";

    const ConstGaussianView y = model->output();
    const size_t n_out = c.batch * model->output_width();
    ExpectClose({y.mu, n_out}, naive.output_mu(),
                std::vector<double>(n_out, 1e-2), 1e-5, "output mu");
    ExpectClose({y.var, n_out}, naive.output_var(),
                std::vector<double>(n_out, 1e-2), 1e-5, "output var");
    const std::vector<double> want_deltas = naive.Deltas();
    ExpectClose(model->deltas(), want_deltas, DeltaScale(want_deltas), 1e-4, "deltas");

    const std::vector<double> prior = naive.Parameters();
    const double cf = NaiveCapFactor(c.batch);
    for (size_t k = 0, n = prior.size() / 2; k < 2 * n; ++k) {
      const double cap = std::sqrt(prior[n + k % n]) / cf;
      if (std::abs(want_deltas[k]) > cap) ++num_clipped;
    }
    model->ApplyStep(CapFactor(c.batch));
    naive.ApplyStep(cf);
    const std::vector<double> want = naive.Parameters();
    ExpectClose(model->parameters(), want, ArenaScale(want), 1e-5, "parameters");
    // The step did something: the parameters moved away from the prior.
    double moved = 0.0;
    for (size_t k = 0; k < want.size(); ++k) moved = std::max(moved, std::abs(want[k] - prior[k]));
    EXPECT_GT(moved, 1e-3);
  }
  if (clipped != nullptr) *clipped = num_clipped;
}

TEST(ModelEndToEnd, RegressionReluNetworkMatchesTheNaiveTagiStep) {
  size_t clipped = 0;
  CompareWithNaive({"3-4-RELU-2 regression",
                    Regression({Lin(3, 4), Act(v1::Layer::RELU), Lin(4, 2)}), 3, 0.5f, 7, 3},
                   &clipped);
  EXPECT_GT(clipped, 0u);  // the comparison covers clipped and unclipped deltas
}

TEST(ModelEndToEnd, HsmReluNetworkMatchesTheNaiveTagiStep) {
  CompareWithNaive({"3-5-RELU-3 hsm(3)",
                    Hsm({Lin(3, 5), Act(v1::Layer::RELU), Lin(5, 3)}, 3), 4, 1.0f, 21, 3});
}

TEST(ModelEndToEnd, HsmTenClassNetworkMatchesTheNaiveTagiStep) {
  CompareWithNaive({"4-8-RELU-11 hsm(10)",
                    Hsm({Lin(4, 8), Act(v1::Layer::RELU), Lin(8, 11)}, 10), 5, 1.0f, 3, 2});
}

TEST(ModelEndToEnd, SmoothActivationsEndingInSigmoidMatchTheNaiveTagiStep) {
  // The output update goes through the last activation's jcb (docs/maths.md section 4).
  CompareWithNaive({"3-6-MIXTURE_RELU-4-TANH-2-SIGMOID regression",
                    Regression({Lin(3, 6), Act(v1::Layer::MIXTURE_RELU), Lin(6, 4),
                                Act(v1::Layer::TANH), Lin(4, 2), Act(v1::Layer::SIGMOID)}),
                    3, 0.2f, 5, 3});
}

TEST(ModelEndToEnd, SingleSampleStepsWithLeakyReluAndSoftplusMatchTheNaiveTagiStep) {
  // B = 1: cap factor 0.1.
  CompareWithNaive({"4-5-LEAKY_RELU-3-SOFTPLUS-2 regression",
                    Regression({Lin(4, 5), Act(v1::Layer::LEAKY_RELU, 0.1f), Lin(5, 3),
                                Act(v1::Layer::SOFTPLUS), Lin(3, 2)}),
                    1, 0.3f, 13, 3});
}

// The heads of docs/heads.md against naive_heads.h (docs/maths.md section 5):
// forward moments, jcb, innovations, deltas and stepped parameters, at
// B = 1 and B > 1 (a NaN target in the first step's batch).
TEST(ModelEndToEnd, RemaxOneHotMatchesTheNaiveStep) {
  for (size_t batch : {size_t{1}, size_t{4}}) {
    CompareWithNaive({"3-6-RELU-4-REMAX onehot(4), B " + std::to_string(batch),
                      OneHot({Lin(3, 6), Act(v1::Layer::RELU), Lin(6, 4),
                              Act(v1::Layer::REMAX)}, 4),
                      batch, 0.05f, 31, 3});
  }
}

TEST(ModelEndToEnd, ClosedFormSoftmaxOneHotMatchesTheNaiveStep) {
  for (size_t batch : {size_t{1}, size_t{5}}) {
    CompareWithNaive({"3-6-MIXTURE_RELU-3-CLOSED_FORM_SOFTMAX onehot(3), B " +
                          std::to_string(batch),
                      OneHot({Lin(3, 6), Act(v1::Layer::MIXTURE_RELU), Lin(6, 3),
                              Act(v1::Layer::CLOSED_FORM_SOFTMAX)}, 3),
                      batch, 0.1f, 41, 3});
  }
}

TEST(ModelEndToEnd, EvenExpHeteroscedasticMatchesTheNaiveStep) {
  for (size_t batch : {size_t{1}, size_t{3}}) {
    CompareWithNaive({"2-6-RELU-4-EVEN_EXP heteroscedastic, B " + std::to_string(batch),
                      Heteroscedastic({Lin(2, 6), Act(v1::Layer::RELU), Lin(6, 4),
                                       Act(v1::Layer::EVEN_EXP)}),
                      batch, 0.0f, 51, 3});
  }
}

TEST(ModelClassification, OneHotProbabilitiesAreTheNormalisedMeans) {
  const Architecture arch = OneHot({Lin(3, 5), Act(v1::Layer::RELU), Lin(5, 4),
                                    Act(v1::Layer::CLOSED_FORM_SOFTMAX)}, 4);
  auto model = MakeModel(arch, 2);
  ASSERT_NE(model, nullptr);
  model->Initialize(3, {});
  const float x[] = {0.5f, -1.0f, 2.0f, 1.0f, 0.0f, -0.5f};
  model->Forward(x, 2);
  float probs[8];
  model->ClassProbabilities(2, probs);
  const ConstGaussianView out = model->output();
  for (int b = 0; b < 2; ++b) {
    double total = 0.0;
    for (int j = 0; j < 4; ++j) total += out.mu[b * 4 + j];
    double sum = 0.0;
    for (int j = 0; j < 4; ++j) {
      EXPECT_NEAR(probs[b * 4 + j], out.mu[b * 4 + j] / total, 1e-6);
      sum += probs[b * 4 + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(ModelEndToEnd, LargeBatchUsesCapFactorThree) {
  CompareWithNaive({"2-3-TANH-1 regression B=256",
                    Regression({Lin(2, 3), Act(v1::Layer::TANH), Lin(3, 1)}), 256, 0.5f, 17,
                    2});
}

TEST(Model, CreateRejectsAnInvalidArchitecture) {
  const Architecture bad_first = Regression({Act(v1::Layer::RELU), Lin(3, 2)});
  const Architecture bad_chain = Regression({Lin(3, 4), Act(v1::Layer::RELU), Lin(5, 2)});
  const Architecture bad_head = Hsm({Lin(3, 10)}, 10);  // hsm(10) needs 11 outputs
  for (const Architecture& arch : {bad_first, bad_chain, bad_head}) {
    auto model = Model::Create(arch, 4);
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << arch.ToString();
  }
}

TEST(Model, ArenasHoldMeansThenVariancesWithWeightsBeforeBiases) {
  const Architecture arch = Regression({Lin(3, 4), Act(v1::Layer::RELU), Lin(4, 2)});
  auto model = MakeModel(arch, 2);
  // N = 3*4 + 4 + 4*2 + 2 = 26.
  ASSERT_EQ(model->num_parameters(), 26u);
  ASSERT_EQ(model->parameters().size(), 52u);
  ASSERT_EQ(model->deltas().size(), 52u);
  model->Initialize(9, {});
  const std::span<const float> p = model->parameters();
  // He variances: 1/3 for layer 1 (weights at [0, 12), biases [12, 16)),
  // 1/4 for layer 2 (weights [16, 24), biases [24, 26)), in the second half.
  for (size_t k = 0; k < 16; ++k) EXPECT_FLOAT_EQ(p[26 + k], 1.0f / 3) << k;
  for (size_t k = 16; k < 26; ++k) EXPECT_FLOAT_EQ(p[26 + k], 1.0f / 4) << k;
  for (size_t k = 0; k < 26; ++k) EXPECT_NE(p[k], 0.0f) << k;  // drawn means
}

TEST(Model, ForwardReadsParametersWrittenIntoTheArena) {
  const Architecture arch = Regression({Lin(2, 2), Act(v1::Layer::RELU), Lin(2, 1)});
  auto model = MakeModel(arch, 1);
  // N = 2*2 + 2 + 2*1 + 1 = 9. Layer 1: w = [[1, -1], [0.5, 2]], b = [0.1, -0.2];
  // layer 2: w = [[3, -2]], b = [0.5]. Variances: all weights 0.1, biases 0.01.
  const float arena[18] = {1, -1, 0.5f, 2, 0.1f, -0.2f, 3, -2, 0.5f,
                           0.1f, 0.1f, 0.1f, 0.1f, 0.01f, 0.01f, 0.1f, 0.1f, 0.01f};
  std::copy(std::begin(arena), std::end(arena), model->parameters().begin());
  model->ParametersChanged();
  const float x[] = {1.0f, 0.5f};
  model->Forward(x, 1);
  // Layer 1: mu_z = [1 - 0.5 + 0.1, 0.5 + 1 - 0.2] = [0.6, 1.3];
  // var_z = [0.1*1 + 0.1*0.25 + 0.01, same] = [0.135, 0.135]. ReLU keeps both.
  // Layer 2: mu = 3*0.6 - 2*1.3 + 0.5 = -0.3;
  // var = (9+0.1)*0.135 + 0.1*0.36 + (4+0.1)*0.135 + 0.1*1.69 + 0.01
  //     = 1.2285 + 0.036 + 0.5535 + 0.169 + 0.01 = 1.997
  EXPECT_NEAR(model->output().mu[0], -0.3f, 1e-6);  // 1.8 - 2.6 cancels
  EXPECT_FLOAT_EQ(model->output().var[0], 1.997f);
}

TEST(Model, FirstLayerSeesNoInputVariance) {
  const Architecture arch = Regression({Lin(2, 1)});
  auto model = MakeModel(arch, 1);
  const float arena[6] = {2.0f, -1.0f, 0.5f, 0.3f, 0.2f, 0.05f};
  std::copy(std::begin(arena), std::end(arena), model->parameters().begin());
  model->ParametersChanged();
  const float x[] = {1.0f, 3.0f};
  model->Forward(x, 1);
  // mu = 2 - 3 + 0.5 = -0.5; var = 0.3*1 + 0.2*9 + 0.05 = 2.15.
  EXPECT_FLOAT_EQ(model->output().mu[0], -0.5f);
  EXPECT_FLOAT_EQ(model->output().var[0], 2.15f);
}

TEST(Model, GrowsItsBuffersForABatchLargerThanCreatedFor) {
  const Architecture arch = Regression({Lin(3, 4), Act(v1::Layer::TANH), Lin(4, 2)});
  auto model = MakeModel(arch, 1);
  model->Initialize(4, {});
  Rng rng(8);
  const std::vector<float> x = Uniform(rng, 5 * 3, -1.0, 1.0);
  model->Forward(x.data(), 5);
  EXPECT_GE(model->max_batch(), 5u);
  const std::vector<float> mu(model->output().mu, model->output().mu + 10);
  const std::vector<float> var(model->output().var, model->output().var + 10);
  for (size_t b = 0; b < 5; ++b) {
    model->Forward(x.data() + 3 * b, 1);
    for (size_t o = 0; o < 2; ++o) {
      EXPECT_FLOAT_EQ(model->output().mu[o], mu[2 * b + o]) << b;
      EXPECT_FLOAT_EQ(model->output().var[o], var[2 * b + o]) << b;
    }
  }
}

TEST(Model, BatchDeltasAreTheSumOfEachSamplesDeltas) {
  const Architecture arch = Regression({Lin(3, 4), Act(v1::Layer::TANH), Lin(4, 2)});
  auto batch = MakeModel(arch, 2);
  auto single = MakeModel(arch, 2);
  batch->Initialize(5, {});
  single->Initialize(5, {});
  const float x[] = {0.3f, -1.0f, 0.8f, -0.5f, 0.2f, 1.1f};
  const float y[] = {0.5f, -1.0f, 1.5f, 0.2f};
  batch->TrainStepLocal(x, nullptr, y, 2, 0.5f);
  single->TrainStepLocal(x, nullptr, y, 1, 0.5f);
  const std::vector<float> first(single->deltas().begin(), single->deltas().end());
  single->TrainStepLocal(x + 3, nullptr, y + 2, 1, 0.5f);
  const std::span<const float> second = single->deltas();
  const std::span<const float> both = batch->deltas();
  double largest = 0.0;
  for (size_t k = 0; k < both.size(); ++k) {
    EXPECT_NEAR(both[k], double{first[k]} + second[k],
                1e-6 + 1e-5 * (std::abs(first[k]) + std::abs(second[k])))
        << k;
    largest = std::max(largest, double{std::abs(both[k])});
  }
  EXPECT_GT(largest, 1e-3);
}

TEST(Model, ObservationsWithNanTargetsLeaveAllDeltasZero) {
  const Architecture arch = Regression({Lin(3, 4), Act(v1::Layer::RELU), Lin(4, 2)});
  auto model = MakeModel(arch, 2);
  model->Initialize(1, {});
  const float x[] = {0.3f, -1.0f, 0.8f, -0.5f, 0.2f, 1.1f};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float y[] = {nan, nan, nan, nan};
  model->TrainStepLocal(x, nullptr, y, 2, 0.5f);
  for (float d : model->deltas()) EXPECT_EQ(d, 0.0f);
  const uint64_t before = model->ParameterFingerprint();
  model->ApplyStep(CapFactor(2));
  EXPECT_EQ(model->ParameterFingerprint(), before);
}

TEST(Model, ApplyStepCapsEachDeltaAndFloorsVariances) {
  const Architecture arch = Regression({Lin(1, 1)});
  auto model = MakeModel(arch, 1);
  // Arena [mu_w, mu_b, var_w, var_b].
  const float params[] = {1.0f, 0.0f, 0.04f, 0.25f};
  std::copy(std::begin(params), std::end(params), model->parameters().begin());
  const float deltas[] = {0.5f, -1.0f, -0.3f, -0.1f};
  std::copy(std::begin(deltas), std::end(deltas), model->deltas().begin());
  model->ParametersChanged();
  model->ApplyStep(2.0f);
  // caps sqrt(0.04)/2 = 0.1 (weight), sqrt(0.25)/2 = 0.25 (bias):
  // mu_w = 1 + 0.1; mu_b = 0 - 0.25; var_w = 0.04 - 0.1 <= 0 -> 1e-5; var_b = 0.25 - 0.1.
  const std::span<const float> p = model->parameters();
  EXPECT_FLOAT_EQ(p[0], 1.1f);
  EXPECT_FLOAT_EQ(p[1], -0.25f);
  EXPECT_EQ(p[2], kVarianceFloor);
  EXPECT_FLOAT_EQ(p[3], 0.15f);
  // The next forward uses the stepped parameters:
  // mu = 1.1*2 - 0.25 = 1.95; var = 1e-5*4 + 0.15 = 0.15004.
  const float x[] = {2.0f};
  model->Forward(x, 1);
  EXPECT_FLOAT_EQ(model->output().mu[0], 1.95f);
  EXPECT_FLOAT_EQ(model->output().var[0], 0.15004f);
}

TEST(Model, VarianceFloorIsOneHundredThousandth) { EXPECT_EQ(kVarianceFloor, 1e-5f); }

TEST(CapFactor, FollowsTheBatchSizeHeuristics) {
  EXPECT_FLOAT_EQ(CapFactor(1), 0.1f);
  EXPECT_FLOAT_EQ(CapFactor(2), 2.0f);
  EXPECT_FLOAT_EQ(CapFactor(64), 2.0f);
  EXPECT_FLOAT_EQ(CapFactor(255), 2.0f);
  EXPECT_FLOAT_EQ(CapFactor(256), 3.0f);
  EXPECT_FLOAT_EQ(CapFactor(10000), 3.0f);
  CapPolicy policy;
  policy.single_sample = 0.5f;
  policy.small_batch = 4.0f;
  policy.large_batch = 8.0f;
  policy.large_batch_from = 16;
  EXPECT_FLOAT_EQ(CapFactor(1, policy), 0.5f);
  EXPECT_FLOAT_EQ(CapFactor(15, policy), 4.0f);
  EXPECT_FLOAT_EQ(CapFactor(16, policy), 8.0f);
}

TEST(ModelInitialize, SameSeedGivesIdenticalModelsAndOtherSeedsDiffer) {
  const Architecture arch = Regression({Lin(3, 5), Act(v1::Layer::RELU), Lin(5, 2)});
  auto a = MakeModel(arch, 1);
  auto b = MakeModel(arch, 8);
  a->Initialize(42, {});
  b->Initialize(42, {});
  EXPECT_EQ(a->ParameterFingerprint(), b->ParameterFingerprint());
  EXPECT_EQ(std::memcmp(a->parameters().data(), b->parameters().data(),
                        a->parameters().size() * sizeof(float)),
            0);
  const uint64_t seed42 = a->ParameterFingerprint();
  b->Initialize(43, {});
  EXPECT_NE(b->ParameterFingerprint(), seed42);
  // Re-initialising a trained model reproduces the fresh one.
  const float x[] = {0.1f, 0.2f, 0.3f};
  const float y[] = {1.0f, -1.0f};
  a->TrainStepLocal(x, nullptr, y, 1, 0.5f);
  a->ApplyStep(CapFactor(1));
  EXPECT_NE(a->ParameterFingerprint(), seed42);
  a->Initialize(42, {});
  EXPECT_EQ(a->ParameterFingerprint(), seed42);
}

TEST(ModelInitialize, FingerprintSeesASingleChangedParameter) {
  const Architecture arch = Regression({Lin(3, 5), Act(v1::Layer::RELU), Lin(5, 2)});
  auto model = MakeModel(arch, 1);
  model->Initialize(42, {});
  const uint64_t before = model->ParameterFingerprint();
  const size_t last = model->parameters().size() - 1;
  model->parameters()[last] = std::nextafter(model->parameters()[last], 1.0f);
  EXPECT_NE(model->ParameterFingerprint(), before);
}

struct Stats {
  double mean = 0.0;
  double var = 0.0;  // about zero: E[x^2] - mean^2
};
Stats Moments(std::span<const float> v) {
  Stats s;
  double sq = 0.0;
  for (float x : v) {
    s.mean += x;
    sq += double{x} * x;
  }
  s.mean /= v.size();
  s.var = sq / v.size() - s.mean * s.mean;
  return s;
}

TEST(ModelInitialize, HeDrawsMeansWithVarianceOneOverFanIn) {
  // One 300-in / 200-out layer: s^2 = 1/300; gains scale only the variances.
  const Architecture arch = Regression({Lin(300, 200)});
  auto model = MakeModel(arch, 1);
  model->Initialize(2024, {InitMethod::kHe, 0.5f, 2.0f});
  const std::span<const float> p = model->parameters();
  const size_t n = model->num_parameters(), nw = 300 * 200;
  for (size_t k = 0; k < nw; ++k) ASSERT_FLOAT_EQ(p[n + k], 0.25f / 300) << k;   // (0.5 s)^2
  for (size_t k = nw; k < n; ++k) ASSERT_FLOAT_EQ(p[n + k], 4.0f / 300) << k;    // (2 s)^2
  const Stats w = Moments(p.subspan(0, nw));
  EXPECT_NEAR(w.mean, 0.0, 5 * std::sqrt(1.0 / 300 / nw));
  EXPECT_NEAR(w.var, 1.0 / 300, 0.03 / 300);  // 60000 draws: sd of the estimate 0.6 %
  const Stats b = Moments(p.subspan(nw, 200));
  EXPECT_NEAR(b.var, 1.0 / 300, 0.4 / 300);   // 200 draws: sd 10 %
}

TEST(ModelInitialize, XavierUsesFanInPlusFanOut) {
  const Architecture arch = Regression({Lin(300, 200)});
  auto model = MakeModel(arch, 1);
  model->Initialize(7, {InitMethod::kXavier, 1.0f, 1.0f});
  const std::span<const float> p = model->parameters();
  const size_t n = model->num_parameters(), nw = 300 * 200;
  // s^2 = 2 / (300 + 200) = 0.004.
  for (size_t k = 0; k < n; ++k) ASSERT_FLOAT_EQ(p[n + k], 0.004f) << k;
  const Stats w = Moments(p.subspan(0, nw));
  EXPECT_NEAR(w.mean, 0.0, 5 * std::sqrt(0.004 / nw));
  EXPECT_NEAR(w.var, 0.004, 0.03 * 0.004);
}

TEST(ModelClassification, ProbabilitiesSumToOneAndFollowTheLabelsNodes) {
  // 2-11 hsm(10), weights 0: the outputs are the biases, set to +-3 along
  // label 7's path and 0 elsewhere.
  const Architecture arch = Hsm({Lin(2, 11)}, 10);
  auto model = MakeModel(arch, 2);
  ASSERT_EQ(model->num_parameters(), 33u);
  std::span<float> p = model->parameters();
  std::fill(p.begin(), p.end(), 0.0f);
  std::fill(p.begin() + 33, p.end(), 0.01f);
  const auto code = EncodeHsmLabel(10, 7);
  for (size_t l = 0; l < code.nodes.size(); ++l) {
    p[22 + code.nodes[l]] = static_cast<float>(3.0 * code.targets[l]);
  }
  model->ParametersChanged();
  const float x[] = {0.5f, -0.5f, 2.0f, 1.0f};
  model->Forward(x, 2);
  float probs[20];
  model->ClassProbabilities(2, probs);
  for (size_t b = 0; b < 2; ++b) {
    double sum = 0.0;
    for (size_t r = 0; r < 10; ++r) sum += probs[b * 10 + r];
    EXPECT_NEAR(sum, 1.0, 1e-5);
    EXPECT_EQ(Argmax(probs + b * 10, 10), 7);
  }
}

TEST(ModelClassification, ProbabilitiesOfATrainedNetworkSumToOne) {
  const Architecture arch = Hsm({Lin(4, 8), Act(v1::Layer::RELU), Lin(8, 11)}, 10);
  auto model = MakeModel(arch, 3);
  model->Initialize(77, {});
  const float x[] = {0.1f, 0.9f, -0.3f, 0.4f, 1.0f, -1.0f, 0.0f, 0.5f, -0.7f, 0.2f, 0.3f, 0.8f};
  const int32_t labels[] = {3, 9, 0};
  for (int step = 0; step < 5; ++step) {
    model->TrainStepLocal(x, labels, nullptr, 3, 1.0f);
    model->ApplyStep(CapFactor(3));
  }
  model->Forward(x, 3);
  float probs[30];
  model->ClassProbabilities(3, probs);
  for (size_t b = 0; b < 3; ++b) {
    double sum = 0.0;
    for (size_t r = 0; r < 10; ++r) {
      EXPECT_GE(probs[b * 10 + r], 0.0f);
      sum += probs[b * 10 + r];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

// The backward's hand-out of final deltas (Model::SetBackwardObserver):
// the watermark only falls, reaches 0, moves inside a layer large enough
// to be computed in blocks (1024 x 1536 weights), and is sound: no delta
// above a reported watermark changes afterwards. The deltas are the same
// bits with and without an observer.
TEST(ModelBackward, HandsOutFinalDeltasInPiecesAndSoundly) {
  const Architecture arch = Regression({Lin(8, 1024), Act(v1::Layer::RELU), Lin(1024, 1536),
                                        Act(v1::Layer::RELU), Lin(1536, 2)});
  const size_t batch = 4;
  Rng rng(7);
  const std::vector<float> x = Uniform(rng, batch * 8, -1, 1);
  const std::vector<float> y = Uniform(rng, batch * 2, -1, 1);
  auto plain = MakeModel(arch, batch);
  auto watched = MakeModel(arch, batch);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(watched, nullptr);
  plain->Initialize(3, {});
  watched->Initialize(3, {});
  const size_t n = watched->num_parameters();
  struct Report {
    size_t ready_from;
    std::vector<float> mu, var;  // deltas [ready_from, n) of each half then
  };
  std::vector<Report> reports;
  watched->SetBackwardObserver([&](size_t ready_from) {
    const auto d = watched->deltas();
    reports.push_back({ready_from, {d.begin() + ready_from, d.begin() + n},
                       {d.begin() + n + ready_from, d.end()}});
  });
  plain->TrainStepLocal(x.data(), nullptr, y.data(), batch, 1.0f);
  watched->TrainStepLocal(x.data(), nullptr, y.data(), batch, 1.0f);
  const auto final_deltas = watched->deltas();
  ASSERT_TRUE(std::equal(final_deltas.begin(), final_deltas.end(), plain->deltas().begin()));
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().ready_from, 0u);
  const size_t big_begin = 8 * 1024 + 1024;              // the 1024 x 1536 layer's weights
  const size_t big_end = big_begin + 1024 * 1536 + 1536;  // and biases
  size_t inside = 0;
  for (size_t i = 0; i < reports.size(); ++i) {
    const Report& r = reports[i];
    if (i > 0) EXPECT_LE(r.ready_from, reports[i - 1].ready_from);
    if (r.ready_from > big_begin && r.ready_from < big_end) ++inside;
    EXPECT_TRUE(std::equal(r.mu.begin(), r.mu.end(), final_deltas.begin() + r.ready_from))
        << "a mean delta above " << r.ready_from << " changed after it was reported final";
    EXPECT_TRUE(std::equal(r.var.begin(), r.var.end(), final_deltas.begin() + n + r.ready_from))
        << "a variance delta above " << r.ready_from << " changed after it was reported final";
  }
  EXPECT_GE(inside, 2u) << "the large layer did not hand out its deltas in pieces";
}

// Every shipped example, planned at its batch and at the evaluation batch:
// the buffers live at once never overlap, and innovations take less room
// shared than each in its own place (spec/plan.h).
TEST(ModelPlan, EveryExamplesBuffersStayApartWhileLiveAndInnovationsShare) {
  for (const char* name : {"fmnist_fnn", "fmnist_cnn", "fmnist_cnn_remax", "fmnist_resmlp",
                           "cifar10_resnet18", "heteroscedastic", "toy_cubic"}) {
    auto job = LoadJobSpecFile(std::string(TAGI_SOURCE_DIR) + "/examples/" + name + ".json");
    ASSERT_TRUE(job.ok()) << name << ": " << job.status();
    auto arch = ArchitectureFromJobSpec(*job);
    ASSERT_TRUE(arch.ok()) << name << ": " << arch.status();
    for (const size_t batch : {static_cast<size_t>(job->batch_size()), size_t{256}}) {
      // The CUDA engine's plan too: 64-float alignment, activations fused.
      auto fused = spec::MakePlan(*arch, {batch, 64, /*fuse_activations=*/true});
      ASSERT_TRUE(fused.ok()) << fused.status();
      const absl::Status fused_st = spec::CheckPlanMemory(*fused);
      EXPECT_TRUE(fused_st.ok()) << name << " fused at batch " << batch << ": " << fused_st;
      auto plan = spec::MakePlan(*arch, {batch, 16});
      ASSERT_TRUE(plan.ok()) << plan.status();
      const absl::Status st = spec::CheckPlanMemory(*plan);
      EXPECT_TRUE(st.ok()) << name << " at batch " << batch << ": " << st;
      // A network of three steps or fewer keeps every boundary's at once.
      if (plan->steps.size() > 3) {
        EXPECT_LT(plan->delta_floats, plan->delta_floats_unshared) << name;
      } else {
        EXPECT_EQ(plan->delta_floats, plan->delta_floats_unshared) << name;
      }
    }
  }
}

// The bench's split of a step: every plan step is timed in both passes,
// the times add up within the step's wall time, and nothing is timed once
// the profile is removed.
TEST(ModelProfile, TimesEveryStepOfBothPassesWithinTheStep) {
  auto model = MakeModel(Hsm({Lin(6, 8), Act(v1::Layer::RELU), Lin(8, 3)}, 4), 4);
  ASSERT_NE(model, nullptr);
  model->Initialize(1, {});
  Rng rng(3);
  const std::vector<float> x = Uniform(rng, 4 * 6, -1, 1);
  const int32_t labels[] = {0, 1, 3, 2};
  Model::StepProfile profile;
  profile.forward.assign(1, 99.0);  // SetProfile sizes and zeroes it
  model->SetProfile(&profile);
  ASSERT_EQ(profile.forward.size(), model->plan().steps.size());
  ASSERT_EQ(profile.backward.size(), model->plan().steps.size());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) model->TrainStepLocal(x.data(), labels, nullptr, 4, 0.5f);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                          .count();
  double total = profile.head;
  for (size_t s = 0; s < profile.forward.size(); ++s) {
    EXPECT_GT(profile.forward[s], 0.0) << "forward of step " << s;
    EXPECT_GT(profile.backward[s], 0.0) << "backward of step " << s;
    total += profile.forward[s] + profile.backward[s];
  }
  EXPECT_GT(profile.head, 0.0);
  EXPECT_LE(total, wall);
  model->SetProfile(nullptr);
  const Model::StepProfile before = profile;
  model->TrainStepLocal(x.data(), labels, nullptr, 4, 0.5f);
  EXPECT_EQ(profile.forward, before.forward);
  EXPECT_EQ(profile.backward, before.backward);
}

}  // namespace
}  // namespace tagi::engine
