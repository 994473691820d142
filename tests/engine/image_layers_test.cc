// The CPU image layers (Conv2d, AvgPool2d, MaxPool2d, BatchNorm, LayerNorm)
// against the plain double-precision reference of docs/maths.md
// (tests/engine/cnn_reference.h): forward moments, input innovations,
// parameter deltas, running statistics and the stepped parameters, on small
// odd-sized cases: both padding types, overlapping, padded and global pools,
// strides past the kernel, non-square images, B = 1 and B > 1, convolutions
// whose samples span several im2col chunks; convolutions both on oneDNN's
// direct kernels (where it has one: slices of several samples, remainders,
// more samples than the workspace has slots) and on im2col + SGEMM.
//
// Each layer runs as the Model runs it: planned (spec::MakePlan of a
// one-layer network), built by MakeLayer, on the arenas the plan lays out.
// Tolerance: |engine - reference| <= 2e-5 * max |reference| per vector (fp32
// sums of up to a few hundred terms).
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"
#include "spec/plan.h"
#include "tests/engine/cnn_reference.h"
#include "tests/spec/spec_builders.h"
#include "worker/engine/conv2d.h"
#include "worker/engine/initialize.h"
#include "worker/engine/layer.h"
#include "worker/engine/model.h"

namespace tagi::engine {
namespace {

using spec::testing::Avg;
using spec::testing::BN;
using spec::testing::Conv;
using spec::testing::LN;
using spec::testing::Max;
using LayerProto = tagi::v1::Layer;

constexpr double kTolerance = 2e-5;

void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-30;
  for (double w : want) scale = std::max(scale, std::abs(w));
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(got[i] - want[i]);
    if (d > worst) {
      worst = d;
      at = i;
    }
  }
  EXPECT_LE(worst, kTolerance * scale)
      << what << ": element " << at << " is " << got[at] << ", the reference " << want[at]
      << " (scale " << scale << ")";
}

std::vector<double> Wide(const float* p, size_t n) { return {p, p + n}; }
std::vector<float> Floats(const float* p, size_t n) { return {p, p + n}; }

// One planned layer on its own arenas.
class Planned {
 public:
  // `products`: how a CONV2D layer runs (other kinds ignore it).
  Planned(const spec::LayerSpec& layer, spec::Shape in, size_t batch,
          ConvProducts products = ConvProducts::kDirect)
      : batch_(batch) {
    spec::Architecture arch;
    arch.input = in;
    arch.layers = {layer};
    arch.head = {spec::HeadKind::kRegression, 0};
    auto plan = spec::MakePlan(arch, {batch, 16});
    EXPECT_TRUE(plan.ok()) << plan.status();
    plan_ = std::move(*plan);
    auto made = MakeLayer(plan_.layers[0]);
    EXPECT_TRUE(made.ok()) << made.status();
    if (made.ok()) layer_ = *std::move(made);
    if (layer.kind == LayerProto::CONV2D) {
      auto conv = std::make_unique<Conv2d>(plan_.layers[0], products);
      direct_ = conv->direct();
      layer_ = std::move(conv);
    }
    params_.assign(2 * plan_.num_parameters, 0.0f);
    deltas_.assign(2 * plan_.num_parameters, 0.0f);
    state_.assign(plan_.num_state, 0.0f);
    InitializeState(plan_, state_);
    derived_.assign(plan_.derived_floats, 0.0f);
    batch_arena_.assign(plan_.batch_floats, 0.0f);
    workspace_.assign(plan_.workspace_floats, 0.0f);
    delta_in_mu_.assign(batch * in.size(), 0.0f);
    delta_in_var_.assign(batch * in.size(), 0.0f);
  }

  const spec::PlannedLayer& planned() const { return plan_.layers[0]; }
  bool direct() const { return direct_; }
  size_t in_size() const { return batch_ * plan_.input().size; }
  size_t out_size() const { return batch_ * plan_.output().size; }

  // Parameter block k (0: weights / gamma, 1: biases / beta).
  size_t block_count(size_t k) const { return plan_.blocks[planned().first_block + k].spec.count; }
  float* block_mu(size_t k) { return params_.data() + plan_.blocks[planned().first_block + k].offset; }
  float* block_var(size_t k) { return block_mu(k) + plan_.num_parameters; }
  float* delta_mu(size_t k) { return deltas_.data() + plan_.blocks[planned().first_block + k].offset; }
  float* delta_var(size_t k) { return delta_mu(k) + plan_.num_parameters; }
  std::vector<float>& state() { return state_; }

  float* in_mu() { return batch_arena_.data() + plan_.input().units.mu; }
  float* in_var() { return batch_arena_.data() + plan_.input().units.var; }
  float* out_mu() { return batch_arena_.data() + plan_.output().units.mu; }
  float* out_var() { return batch_arena_.data() + plan_.output().units.var; }
  float* dout_mu() { return batch_arena_.data() + plan_.output().delta.mu; }
  float* dout_var() { return batch_arena_.data() + plan_.output().delta.var; }
  const std::vector<float>& delta_in_mu() const { return delta_in_mu_; }
  const std::vector<float>& delta_in_var() const { return delta_in_var_; }

  void Refresh() { layer_->Refresh(ModelIo(plan_, Bases(), 0)); }
  void Forward(Mode mode, bool input_is_data = false) {
    LayerIo io = Io();
    io.input_is_data = input_is_data;
    layer_->Forward(io, mode);
  }
  void Backward() { layer_->Backward(Io()); }
  void set_team(ThreadTeam* team) { team_ = team; }
  std::vector<float> Outputs() {
    std::vector<float> all = Floats(out_mu(), out_size());
    const std::vector<float> var = Floats(out_var(), out_size());
    all.insert(all.end(), var.begin(), var.end());
    all.insert(all.end(), delta_in_mu_.begin(), delta_in_mu_.end());
    all.insert(all.end(), delta_in_var_.begin(), delta_in_var_.end());
    all.insert(all.end(), deltas_.begin(), deltas_.end());
    all.insert(all.end(), state_.begin(), state_.end());
    return all;
  }
  void Step(float cap) { layer_->ApplyStep(ModelIo(plan_, Bases(), 0), 1.0f / cap, kVarianceFloor); }

 private:
  ArenaBases Bases() {
    return {params_.data(),  deltas_.data(),       plan_.num_parameters, state_.data(),
            derived_.data(), batch_arena_.data(), workspace_.data()};
  }
  // The step's io, with the input treated as a hidden layer's (variance,
  // innovations), which the data boundary of a one-layer plan is not.
  LayerIo Io() {
    LayerIo io = StepIo(plan_, Bases(), plan_.steps[0], batch_);
    io.team = team_;
    io.input_is_data = false;
    io.delta_in = {delta_in_mu_.data(), delta_in_var_.data()};
    return io;
  }

  size_t batch_;
  bool direct_ = false;
  ThreadTeam* team_ = nullptr;
  spec::Plan plan_;
  std::unique_ptr<Layer> layer_;
  std::vector<float> params_, deltas_, state_, derived_, batch_arena_, workspace_;
  std::vector<float> delta_in_mu_, delta_in_var_;
};

// Random moments: means N(0, s^2), variances in [lo, hi).
void Fill(Rng& rng, float* mu, float* var, size_t n, double s, double lo, double hi,
          double mu_offset = 0.0) {
  for (size_t i = 0; i < n; ++i) {
    mu[i] = static_cast<float>(mu_offset + s * rng.Normal());
    var[i] = static_cast<float>(lo + (hi - lo) * rng.Uniform());
  }
}

ref::Geometry Geo(const spec::Shape& s) {
  return {static_cast<int>(s.c), static_cast<int>(s.h), static_cast<int>(s.w)};
}

ref::Window Win(const spec::LayerSpec& l) {
  return {static_cast<int>(l.kernel), static_cast<int>(l.stride), static_cast<int>(l.padding),
          l.padding_type == LayerProto::BOTTOM_RIGHT ? ref::PadType::kBottomRight
                                                : ref::PadType::kSymmetric};
}

// Inputs and output innovations of a case, as floats in the layer's arenas
// and as doubles for the reference.
struct Io {
  ref::Gaussians a, delta_z;
  std::vector<double> ones;
};

Io FillIo(Planned& p, Rng& rng) {
  Fill(rng, p.in_mu(), p.in_var(), p.in_size(), 1.0, 0.05, 0.5);
  Fill(rng, p.dout_mu(), p.dout_var(), p.out_size(), 0.3, -0.2, 0.0);
  Io io;
  io.a = {Wide(p.in_mu(), p.in_size()), Wide(p.in_var(), p.in_size())};
  io.delta_z = {Wide(p.dout_mu(), p.out_size()), Wide(p.dout_var(), p.out_size())};
  io.ones.assign(p.in_size(), 1.0);
  return io;
}

// ---------------------------------------------------------------------------

struct ConvCase {
  spec::LayerSpec layer;
  spec::Shape in;
  size_t batch;
  bool data_input = false;  // the input's variance is zero and the layer is told so
};

class ConvTest : public ::testing::TestWithParam<std::tuple<ConvCase, ConvProducts>> {};

TEST_P(ConvTest, MatchesTheReference) {
  const ConvCase& c = std::get<0>(GetParam());
  Planned p(c.layer, c.in, c.batch, std::get<1>(GetParam()));
  if (std::get<1>(GetParam()) == ConvProducts::kIm2col) {
    EXPECT_FALSE(p.direct());
  } else if (c.layer.in % 16 == 0 && __builtin_cpu_supports("avx2")) {
    EXPECT_TRUE(p.direct());  // oneDNN's blocks fit: its direct kernels run it
  }
  Rng rng(11);
  const size_t n_w = p.block_count(0);
  Fill(rng, p.block_mu(0), p.block_var(0), n_w, 0.4, 0.01, 0.1);
  if (c.layer.bias) Fill(rng, p.block_mu(1), p.block_var(1), p.block_count(1), 0.2, 0.01, 0.1);
  p.Refresh();
  Io io = FillIo(p, rng);
  if (c.data_input) {
    std::fill_n(p.in_var(), p.in_size(), 0.0f);
    std::fill(io.a.var.begin(), io.a.var.end(), 0.0);
  }
  ref::ConvParams rp;
  rp.mu_w = Wide(p.block_mu(0), n_w);
  rp.var_w = Wide(p.block_var(0), n_w);
  if (c.layer.bias) {
    rp.mu_b = Wide(p.block_mu(1), c.layer.out);
    rp.var_b = Wide(p.block_var(1), c.layer.out);
  }
  rp.bias = c.layer.bias;
  rp.c_out = static_cast<int>(c.layer.out);
  const ref::Geometry g = Geo(c.in);
  const ref::Window w = Win(c.layer);
  const int b = static_cast<int>(c.batch);

  p.Forward(Mode::kTrain, c.data_input);
  const ref::Gaussians z = ref::ConvForward(rp, g, w, io.a, b);
  ExpectClose(Floats(p.out_mu(), p.out_size()), z.mu, "mu_z");
  ExpectClose(Floats(p.out_var(), p.out_size()), z.var, "var_z");

  p.Backward();
  const ref::Gaussians d = ref::ConvBackwardInput(rp, g, w, io.ones, io.delta_z, b);
  ExpectClose(p.delta_in_mu(), d.mu, "delta_mu_a");
  ExpectClose(p.delta_in_var(), d.var, "delta_var_a");
  const ref::ParamDeltas pd = ref::ConvBackwardParams(rp, g, w, io.a, io.delta_z, b);
  ExpectClose(Floats(p.delta_mu(0), n_w), pd.mu_w, "delta_mu_w");
  ExpectClose(Floats(p.delta_var(0), n_w), pd.var_w, "delta_var_w");
  if (c.layer.bias) {
    ExpectClose(Floats(p.delta_mu(1), c.layer.out), pd.mu_b, "delta_mu_b");
    ExpectClose(Floats(p.delta_var(1), c.layer.out), pd.var_b, "delta_var_b");
  }

  // The capped step, and the derived buffers follow it (the next forward).
  const float cap = CapFactor(c.batch);
  p.Step(cap);
  ref::CappedStep(pd.mu_w, pd.var_w, cap, &rp.mu_w, &rp.var_w);
  ExpectClose(Floats(p.block_mu(0), n_w), rp.mu_w, "stepped mu_w");
  ExpectClose(Floats(p.block_var(0), n_w), rp.var_w, "stepped var_w");
  if (c.layer.bias) {
    ref::CappedStep(pd.mu_b, pd.var_b, cap, &rp.mu_b, &rp.var_b);
    ExpectClose(Floats(p.block_mu(1), c.layer.out), rp.mu_b, "stepped mu_b");
  }
  for (size_t i = 0; i < n_w; ++i) {  // continue from the engine's own numbers
    rp.mu_w[i] = p.block_mu(0)[i];
    rp.var_w[i] = p.block_var(0)[i];
  }
  if (c.layer.bias) {
    for (size_t i = 0; i < c.layer.out; ++i) {
      rp.mu_b[i] = p.block_mu(1)[i];
      rp.var_b[i] = p.block_var(1)[i];
    }
  }
  p.Forward(Mode::kTrain, c.data_input);
  const ref::Gaussians z2 = ref::ConvForward(rp, g, w, io.a, b);
  ExpectClose(Floats(p.out_var(), p.out_size()), z2.var, "var_z after the step");
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ConvTest,
    ::testing::Combine(::testing::Values(
        // Non-square, symmetric padding, bias, B = 2.
        ConvCase{Conv(2, 3, 3, 1, 1), {2, 5, 7}, 2},
        // ResNet18's stride-2 convolution: bottom/right padding, no bias.
        ConvCase{Conv(2, 3, 3, 2, 1, false, LayerProto::BOTTOM_RIGHT), {2, 6, 6}, 3},
        // A stride past the kernel (B6): pixels no window reads, B = 1.
        ConvCase{Conv(2, 3, 1, 2), {2, 5, 5}, 1},
        // ResNet18's projection shortcut shape, even kernel, non-square.
        ConvCase{Conv(3, 2, 2, 2, 0, false), {3, 4, 6}, 2},
        // 1024 positions: two samples per im2col chunk, the last chunk partial.
        ConvCase{Conv(1, 2, 3, 1, 1), {1, 32, 32}, 3},
        // The first layer: zero input variance skips a product.
        ConvCase{Conv(1, 4, 4, 1, 1, false), {1, 9, 9}, 2, true},
        // Channels in oneDNN's blocks of 16; 64 positions: a sample per
        // call, 19 samples: three rounds of the workspace's 8 slots.
        ConvCase{Conv(16, 32, 3, 1, 1), {16, 8, 8}, 19},
        // 16 positions: slices of 4 samples, then 2 one-sample calls.
        ConvCase{Conv(32, 16, 3, 2, 1, false, LayerProto::BOTTOM_RIGHT), {32, 8, 8}, 6},
        // The projection shortcut; and a first layer of 3 channels.
        ConvCase{Conv(16, 32, 2, 2, 0, false), {16, 8, 8}, 5},
        ConvCase{Conv(3, 16, 3, 1, 1), {3, 10, 10}, 3, true}),
    ::testing::Values(ConvProducts::kDirect, ConvProducts::kIm2col)));

// Where oneDNN has direct kernels for this CPU (x86-64 with AVX2 or more),
// ResNet18's convolutions run on them: otherwise the test above would
// check im2col twice.
TEST(Conv2d, ResNetShapesRunOnTheDirectKernels) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2: oneDNN has no direct kernels";
  const struct {
    spec::LayerSpec layer;
    spec::Shape in;
  } cases[] = {{Conv(3, 64, 3, 1, 1), {3, 32, 32}},
               {Conv(64, 64, 3, 1, 1), {64, 32, 32}},
               {Conv(64, 128, 3, 2, 1, false, LayerProto::BOTTOM_RIGHT), {64, 32, 32}},
               {Conv(256, 512, 2, 2, 0, false), {256, 8, 8}},
               {Conv(512, 512, 3, 1, 1), {512, 4, 4}}};
  for (const auto& c : cases) {
    Planned p(c.layer, c.in, 2);
    EXPECT_TRUE(p.direct()) << c.layer.in << "->" << c.layer.out << " " << c.in.h;
  }
}

// ---------------------------------------------------------------------------

struct PoolCase {
  spec::LayerSpec layer;
  spec::Shape in;
  size_t batch;
};

class PoolTest : public ::testing::TestWithParam<PoolCase> {};

TEST_P(PoolTest, MatchesTheReference) {
  const PoolCase& c = GetParam();
  Planned p(c.layer, c.in, c.batch);
  Rng rng(12);
  Io io = FillIo(p, rng);
  const ref::Geometry g = Geo(c.in);
  const ref::Window w = Win(c.layer);
  const int b = static_cast<int>(c.batch);
  p.Forward(Mode::kTrain);
  p.Backward();
  if (c.layer.kind == LayerProto::AVG_POOL2D) {
    const ref::Gaussians z = ref::AvgPoolForward(g, w, io.a, b);
    ExpectClose(Floats(p.out_mu(), p.out_size()), z.mu, "mu_z");
    ExpectClose(Floats(p.out_var(), p.out_size()), z.var, "var_z");
    const ref::Gaussians d = ref::AvgPoolBackwardInput(g, w, io.ones, io.delta_z, b);
    ExpectClose(p.delta_in_mu(), d.mu, "delta_mu_a");
    ExpectClose(p.delta_in_var(), d.var, "delta_var_a");
  } else {
    const ref::MaxPoolResult z = ref::MaxPoolForward(g, w, io.a, b);
    ExpectClose(Floats(p.out_mu(), p.out_size()), z.z.mu, "mu_z");
    ExpectClose(Floats(p.out_var(), p.out_size()), z.z.var, "var_z");
    const ref::Gaussians d = ref::MaxPoolBackwardInput(g, w, z.index, io.ones, io.delta_z, b);
    ExpectClose(p.delta_in_mu(), d.mu, "delta_mu_a");
    ExpectClose(p.delta_in_var(), d.var, "delta_var_a");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, PoolTest,
    ::testing::Values(
        // The MNIST CNN's overlapping pool, on an odd map.
        PoolCase{Avg(3, 2), {2, 7, 7}, 2}, PoolCase{Max(3, 2), {2, 7, 7}, 2},
        // Padded (B5: padding reads zeros, still divides by k^2).
        PoolCase{Avg(2, 2, 1, LayerProto::SYMMETRIC), {2, 4, 4}, 2},
        PoolCase{Max(2, 2, 1, LayerProto::SYMMETRIC), {2, 4, 4}, 2},
        PoolCase{Avg(3, 2, 1, LayerProto::BOTTOM_RIGHT), {1, 6, 4}, 1},
        // Global (ResNet18's head) and a stride past the kernel, non-square.
        PoolCase{Avg(4, 4), {3, 4, 4}, 3}, PoolCase{Avg(2, 3), {2, 5, 8}, 2},
        PoolCase{Max(2, 3), {2, 5, 8}, 1}));

TEST(MaxPool, TiesGoToTheFirstCellAndOverlapsAccumulate) {
  Planned p(Max(2, 1), {1, 2, 3}, 1);
  // Two windows (columns 0-1 and 1-2) over equal means: each takes its
  // first cell; column 1 is the first of the second window only.
  std::fill_n(p.in_mu(), 6, 0.5f);
  for (int i = 0; i < 6; ++i) p.in_var()[i] = 0.1f * static_cast<float>(i + 1);
  p.Forward(Mode::kTrain);
  EXPECT_FLOAT_EQ(p.out_var()[0], 0.1f);
  EXPECT_FLOAT_EQ(p.out_var()[1], 0.2f);
  std::fill_n(p.dout_mu(), 2, 1.0f);
  std::fill_n(p.dout_var(), 2, -1.0f);
  p.Backward();
  EXPECT_EQ(p.delta_in_mu(), (std::vector<float>{1, 1, 0, 0, 0, 0}));
}

// ---------------------------------------------------------------------------

struct NormCase {
  spec::LayerSpec layer;
  spec::Shape in;
  size_t batch;
};

class NormTest : public ::testing::TestWithParam<NormCase> {};

TEST_P(NormTest, MatchesTheReferenceInTrainingAndEvaluation) {
  const NormCase& c = GetParam();
  const bool batch_norm = c.layer.kind == LayerProto::BATCH_NORM;
  Planned p(c.layer, c.in, c.batch);
  Rng rng(13);
  const size_t ch = c.in.c;
  Fill(rng, p.block_mu(0), p.block_var(0), ch, 0.2, 0.05, 0.3, 1.0);
  if (c.layer.bias) Fill(rng, p.block_mu(1), p.block_var(1), ch, 0.2, 0.05, 0.3);
  ref::NormParams rp;
  rp.mu_w = Wide(p.block_mu(0), ch);
  rp.var_w = Wide(p.block_var(0), ch);
  if (c.layer.bias) {
    rp.mu_b = Wide(p.block_mu(1), ch);
    rp.var_b = Wide(p.block_var(1), ch);
  }
  rp.bias = c.layer.bias;
  const ref::Geometry g = Geo(c.in);
  const int b = static_cast<int>(c.batch);
  ref::RunningStats running = ref::InitialRunningStats(static_cast<int>(ch));
  // Two training steps (the first replaces the running statistics, the
  // second mixes them by the momentum), then evaluation.
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    Io io = FillIo(p, rng);
    p.Forward(Mode::kTrain);
    p.Backward();
    ref::NormForward f;
    ref::Gaussians d;
    ref::ParamDeltas pd;
    if (batch_norm) {
      f = ref::BatchNormTrainForward(rp, g, io.a, b, c.layer.eps, c.layer.momentum, &running);
      d = ref::BatchNormBackwardInput(rp, g, f.stats, c.layer.eps, io.ones, io.delta_z, b);
      pd = ref::BatchNormBackwardParams(rp, g, f.stats, c.layer.eps, io.a, io.delta_z, b);
    } else {
      f = ref::LayerNormForward(rp, g, io.a, b, c.layer.eps);
      d = ref::LayerNormBackwardInput(rp, g, f.stats, c.layer.eps, io.ones, io.delta_z, b);
      pd = ref::LayerNormBackwardParams(rp, g, f.stats, c.layer.eps, io.a, io.delta_z, b);
    }
    ExpectClose(Floats(p.out_mu(), p.out_size()), f.z.mu, "mu_z");
    ExpectClose(Floats(p.out_var(), p.out_size()), f.z.var, "var_z");
    ExpectClose(p.delta_in_mu(), d.mu, "delta_mu_a");
    ExpectClose(p.delta_in_var(), d.var, "delta_var_a");
    ExpectClose(Floats(p.delta_mu(0), ch), pd.mu_w, "delta_mu_gamma");
    ExpectClose(Floats(p.delta_var(0), ch), pd.var_w, "delta_var_gamma");
    if (c.layer.bias) {
      ExpectClose(Floats(p.delta_mu(1), ch), pd.mu_b, "delta_mu_beta");
      ExpectClose(Floats(p.delta_var(1), ch), pd.var_b, "delta_var_beta");
    }
    if (batch_norm) {
      ExpectClose(Floats(p.state().data(), ch), running.mu, "running mean");
      ExpectClose(Floats(p.state().data() + ch, ch), running.var, "running variance");
      EXPECT_EQ(p.state()[2 * ch], 0.0f) << "first-batch flag";
    }
  }
  Io io = FillIo(p, rng);
  const std::vector<float> state_before = p.state();
  p.Forward(Mode::kEval);
  const ref::Gaussians z =
      batch_norm ? ref::BatchNormEvalForward(rp, g, io.a, b, c.layer.eps, running)
                 : ref::LayerNormForward(rp, g, io.a, b, c.layer.eps).z;
  ExpectClose(Floats(p.out_mu(), p.out_size()), z.mu, "eval mu_z");
  ExpectClose(Floats(p.out_var(), p.out_size()), z.var, "eval var_z");
  EXPECT_EQ(p.state(), state_before) << "evaluation changed the state";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, NormTest,
    ::testing::Values(
        // After a convolution: per channel over (b, y, x); non-square.
        NormCase{BN(), {3, 4, 5}, 2}, NormCase{BN(false, 0.8f), {2, 3, 3}, 1},
        // After a Linear: per feature over the batch (B3: by the input's shape).
        NormCase{BN(true, 0.9f, 1e-3f), {6, 1, 1}, 4},
        // Layer norm over a map (per-channel scale) and over features.
        NormCase{LN(), {3, 4, 4}, 2}, NormCase{LN(false), {7, 1, 1}, 3}));

// The elementwise loops split over a thread team (a Model with more than
// one BLAS thread) give bit-identical numbers: every item is computed whole
// by one thread.
TEST(ThreadTeam, SplitLoopsGiveBitIdenticalLayers) {
  ThreadTeam team(3);
  const struct {
    spec::LayerSpec layer;
    spec::Shape in;
    size_t batch;
  } cases[] = {{Conv(2, 3, 3, 1, 1), {2, 9, 7}, 5},
               {Conv(1, 2, 3, 1, 1), {1, 32, 32}, 5},  // several chunks
               {Conv(16, 32, 3, 1, 1), {16, 8, 8}, 19},  // direct: rounds of slots
               // direct: slices of 4, then remainders
               {Conv(32, 16, 3, 2, 1, false, LayerProto::BOTTOM_RIGHT), {32, 8, 8}, 6},
               {Avg(3, 2), {3, 7, 7}, 4},
               {Max(2, 2, 1, LayerProto::SYMMETRIC), {3, 4, 4}, 3},
               {BN(), {5, 3, 3}, 4},
               {BN(), {7, 1, 1}, 4},
               {LN(), {3, 4, 4}, 5}};
  for (const auto& c : cases) {
    std::vector<float> results[2];
    for (int with_team = 0; with_team < 2; ++with_team) {
      Planned p(c.layer, c.in, c.batch);
      p.set_team(with_team ? &team : nullptr);
      Rng rng(21);
      for (size_t k = 0; k < p.planned().num_blocks; ++k) {
        Fill(rng, p.block_mu(k), p.block_var(k), p.block_count(k), 0.3, 0.01, 0.1, 0.5);
      }
      p.Refresh();
      FillIo(p, rng);
      p.Forward(Mode::kTrain);
      p.Backward();
      results[with_team] = p.Outputs();
    }
    EXPECT_EQ(results[0], results[1]) << spec::KindName(c.layer.kind);
  }
  // The team itself: every item once, whatever the count.
  for (size_t n : {0u, 1u, 2u, 3u, 10u, 1000u}) {
    std::vector<int> seen(n, 0);
    team.For(n, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) ++seen[i];
    });
    EXPECT_EQ(seen, std::vector<int>(n, 1)) << n;
  }
}

}  // namespace
}  // namespace tagi::engine
