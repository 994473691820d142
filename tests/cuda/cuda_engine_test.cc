// GPU tests of the CUDA engine against the CPU engine, its numerical spec
// (the project's rule: every fast kernel is checked against the plain one). They run
// where a CUDA device is present and skip with the runtime's reason
// everywhere else.
//
// Parity: for random networks (every activation kind, both heads, chains
// and residual graphs: identity and projection shortcuts, a block reading
// the data, blocks nested in a main branch, a block ending the network) and
// random batches, the CUDA and CPU engines start from the same bits and
// must agree, step after step, on the forward output (means, variances),
// the output innovations, every parameter delta and the updated parameters,
// within 1e-4 relative in fp32. Element k passes when
//   |gpu - cpu| <= 1e-4 * max(|cpu|, floor)
// where floor is 1e-2 of the largest magnitude of that tensor half (a sum
// over a batch or a layer can cancel to a tiny number whose relative error
// is meaningless; the products sum in a different order on the GPU).
// A case whose ReLU inputs come within 1e-4 of zero is redrawn: there a
// last-bit difference may legitimately flip the unit. Steps alternate
// between a local step and the two reduce paths (device buffer with the
// factors still pending, host staging), each with an averaging scale.
#include "worker/engine/cuda/cuda_engine.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"
#include "spec/plan.h"
#include "worker/engine/blas.h"
#include "worker/engine/cpu_engine.h"
#include "worker/engine/cuda/cublas_gemm.h"
#include "worker/engine/cuda/device.h"
#include "worker/engine/cuda/device_memory.h"
#include "worker/engine/cuda/gemm_mapping.h"
#include "worker/engine/elementwise.h"
#include "worker/engine/model_file.h"
#include "worker/engine/output.h"

namespace tagi::engine::cuda {
namespace {

constexpr double kRel = 1e-4;
constexpr double kFloorFraction = 1e-2;
constexpr double kMinReluMargin = 1e-4;

#define SKIP_WITHOUT_GPU()                               \
  do {                                                   \
    const DeviceList gpus = ListCudaDevices();           \
    if (gpus.devices.empty()) {                          \
      GTEST_SKIP() << "no CUDA device: " << gpus.reason; \
    }                                                    \
  } while (0)

using tagi::v1::Layer;  // the kinds: Layer::LINEAR, Layer::RELU, ...

LayerDesc Lin(uint32_t in, uint32_t out) {
  LayerDesc d;
  d.kind = Layer::LINEAR;
  d.in = in;
  d.out = out;
  return d;
}
LayerDesc Act(LayerKind kind, float slope = 0.0f) {
  LayerDesc d;
  d.kind = kind;
  d.slope = slope;
  return d;
}
// A residual block; an empty shortcut is the identity.
LayerDesc Res(std::vector<LayerDesc> main, std::vector<LayerDesc> shortcut = {}) {
  LayerDesc d;
  d.kind = Layer::RESIDUAL;
  d.main = std::move(main);
  d.shortcut = std::move(shortcut);
  return d;
}
Shape Flat(uint32_t width) { return {width, 1, 1}; }
Shape Image(uint32_t c, uint32_t h, uint32_t w) { return {c, h, w}; }
LayerDesc Conv(uint32_t in, uint32_t out, uint32_t kernel, uint32_t stride, uint32_t padding,
               bool bias = true, spec::Padding type = Layer::SYMMETRIC) {
  LayerDesc d;
  d.kind = Layer::CONV2D;
  d.in = in;
  d.out = out;
  d.kernel = kernel;
  d.stride = stride;
  d.padding = padding;
  d.padding_type = type;  // a Conv2d's is resolved (SYMMETRIC when unset)
  d.bias = bias;
  return d;
}
LayerDesc Pool(LayerKind kind, uint32_t kernel, uint32_t stride, uint32_t padding = 0) {
  LayerDesc d;
  d.kind = kind;
  d.kernel = kernel;
  d.stride = stride;
  d.padding = padding;
  d.padding_type = padding > 0 ? Layer::SYMMETRIC : Layer::PADDING_UNSPECIFIED;
  return d;
}
LayerDesc Norm(LayerKind kind, bool bias = true) {
  LayerDesc d;
  d.kind = kind;
  d.eps = 1e-5f;
  d.momentum = kind == Layer::BATCH_NORM ? 0.9f : 0.0f;
  d.bias = bias;
  return d;
}

std::unique_ptr<CudaEngine> MakeGpu(const Architecture& arch, size_t max_batch) {
  auto gpu = CudaEngine::Create(arch, max_batch, 0);
  EXPECT_TRUE(gpu.ok()) << gpu.status();
  return gpu.ok() ? std::move(*gpu) : nullptr;
}

std::unique_ptr<CpuEngine> MakeCpu(const Architecture& arch, size_t max_batch) {
  auto cpu = CpuEngine::Create(arch, max_batch);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  return cpu.ok() ? std::move(*cpu) : nullptr;
}

// Compares two tensors made of `halves` equal halves (1: a plain tensor,
// 2: an arena [mu][var]), each half against its own floor.
void ExpectNear(std::span<const float> gpu, std::span<const float> cpu, size_t halves,
                const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  const size_t n = cpu.size() / halves;
  int failures = 0;
  for (size_t h = 0; h < halves; ++h) {
    double largest = 0.0;
    for (size_t k = h * n; k < (h + 1) * n; ++k)
      largest = std::max(largest, std::abs(double{cpu[k]}));
    const double floor = kFloorFraction * largest;
    for (size_t k = h * n; k < (h + 1) * n; ++k) {
      const double tol = kRel * std::max(std::abs(double{cpu[k]}), floor);
      const bool both_nan = std::isnan(gpu[k]) && std::isnan(cpu[k]);
      if (!both_nan && !(std::abs(double{gpu[k]} - cpu[k]) <= tol) && ++failures <= 8) {
        ADD_FAILURE() << what << "[" << k << "]: gpu " << gpu[k] << ", cpu " << cpu[k]
                      << " (tolerance " << tol << ")";
      }
    }
  }
  EXPECT_EQ(failures, 0) << what << ": " << failures << " elements differ";
}

std::vector<float> Normal(Rng& rng, size_t n, double scale) {
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(scale * rng.Normal());
  return v;
}

// How a step's deltas reach ApplyStep.
enum class Reduce { kNone, kDevice, kHost };

struct Case {
  Architecture arch;
  size_t batch = 1;
  float sigma_v = 1.0f;
  uint64_t seed = 0;
  bool cycle_reduce = false;  // steps cycle through Reduce's modes
};

constexpr LayerKind kActivations[] = {Layer::RELU, Layer::LEAKY_RELU, Layer::SIGMOID,
                                      Layer::TANH, Layer::SOFTPLUS,   Layer::MIXTURE_RELU};

LayerDesc RandomActivation(Rng& rng) {
  const LayerKind kind = kActivations[rng.Below(6)];
  return Act(kind, kind == Layer::LEAKY_RELU ? 0.1f : 0.0f);
}

uint32_t Width(Rng& rng, uint32_t max) { return 1 + static_cast<uint32_t>(rng.Below(max)); }

// Either head, with its output width.
void RandomHead(Rng& rng, Case& c, uint32_t* out) {
  const bool hsm = rng.Below(2) == 0;
  const uint32_t classes = 2 + static_cast<uint32_t>(rng.Below(11));
  *out = hsm ? static_cast<uint32_t>(HsmTree::OutputWidth(classes)) : Width(rng, 5);
  c.arch.head =
      hsm ? HeadDesc{HeadKind::kClassification, classes} : HeadDesc{HeadKind::kRegression, 0};
}

// A random chain: 1 to 3 hidden layers of width 1..64 with any activation
// (an activation may also end the network), then either head.
Case RandomCase(uint64_t seed) {
  Rng rng(seed);
  Case c;
  c.seed = seed;
  c.batch = 1 + rng.Below(40);
  c.sigma_v = static_cast<float>(0.2 + rng.Uniform());
  uint32_t out = 0;
  RandomHead(rng, c, &out);
  uint32_t width = Width(rng, 64);
  c.arch.input = Flat(width);
  const int hidden = 1 + static_cast<int>(rng.Below(3));
  for (int l = 0; l < hidden; ++l) {
    const uint32_t next = Width(rng, 64);
    c.arch.layers.push_back(Lin(width, next));
    c.arch.layers.push_back(RandomActivation(rng));
    width = next;
  }
  c.arch.layers.push_back(Lin(width, out));
  if (c.arch.head.kind == HeadKind::kRegression && rng.Below(4) == 0) {
    c.arch.layers.push_back(Act(Layer::TANH));
  }
  return c;
}

// A random residual block from `in` features to `out`: a main branch of
// one to three layers (sometimes with a block nested in it, while `depth`
// allows), and the identity shortcut when the widths agree (half the
// time), else a projection (LINEAR, sometimes with an activation).
LayerDesc RandomBlock(Rng& rng, uint32_t in, uint32_t out, int depth) {
  std::vector<LayerDesc> main;
  const uint32_t hidden = Width(rng, 24);
  main.push_back(Lin(in, hidden));
  main.push_back(RandomActivation(rng));
  if (depth > 0 && rng.Below(2) == 0) main.push_back(RandomBlock(rng, hidden, hidden, depth - 1));
  main.push_back(Lin(hidden, out));
  if (rng.Below(3) == 0) main.push_back(RandomActivation(rng));
  std::vector<LayerDesc> shortcut;
  if (in != out || rng.Below(2) == 0) {
    shortcut.push_back(Lin(in, out));
    if (rng.Below(3) == 0) shortcut.push_back(RandomActivation(rng));
  }
  return Res(std::move(main), std::move(shortcut));
}

// A random residual network: a block or a LINEAR-activation pair on the
// data, one or two blocks (an activation between them, or none: then a
// block reads another block's sum), and a LINEAR head or a block ending the
// network. Batches 1..12, a third of them 1.
Case RandomResidualCase(uint64_t seed) {
  Rng rng(seed * 7919 + 1);
  Case c;
  c.seed = seed;
  c.batch = rng.Below(3) == 0 ? 1 : 2 + rng.Below(11);
  c.sigma_v = static_cast<float>(0.2 + rng.Uniform());
  c.cycle_reduce = true;
  uint32_t out = 0;
  RandomHead(rng, c, &out);
  const uint32_t in = Width(rng, 16);
  c.arch.input = Flat(in);
  uint32_t width = Width(rng, 16);
  if (rng.Below(2) == 0) {
    if (rng.Below(2) == 0) width = in;  // maybe the identity on the data
    c.arch.layers.push_back(RandomBlock(rng, in, width, 1));
  } else {
    c.arch.layers.push_back(Lin(in, width));
    c.arch.layers.push_back(RandomActivation(rng));
  }
  const int blocks = 1 + static_cast<int>(rng.Below(2));
  for (int b = 0; b < blocks; ++b) {
    const uint32_t next = rng.Below(2) == 0 ? width : Width(rng, 16);
    c.arch.layers.push_back(RandomBlock(rng, width, next, 1));
    if (rng.Below(2) == 0) c.arch.layers.push_back(RandomActivation(rng));
    width = next;
  }
  if (rng.Below(3) == 0) {
    c.arch.layers.push_back(RandomBlock(rng, width, out, 0));
  } else {
    c.arch.layers.push_back(Lin(width, out));
  }
  return c;
}

// The smallest |mu_z| that enters a RELU or LEAKY_RELU in a
// double-precision forward pass of the plan's steps (near zero, the two
// engines' summation orders may take different branches). Independent of
// both engines except for the smooth activations' moments.
double ReluMargin(const Architecture& arch, std::span<const float> arena,
                  const std::vector<float>& x, size_t batch) {
  auto plan = spec::MakePlan(arch, {batch, 1});
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return 0.0;
  // The image networks' tests pick their seeds and activations themselves.
  for (const spec::PlannedLayer& l : plan->layers) {
    const bool activation = std::find(std::begin(kActivations), std::end(kActivations),
                                      l.spec.kind) != std::end(kActivations);
    if (l.spec.kind != Layer::LINEAR && !activation) {
      return std::numeric_limits<double>::infinity();
    }
  }
  const size_t n = plan->num_parameters;
  std::vector<std::vector<double>> mu(plan->boundaries.size()), var(plan->boundaries.size());
  mu[0].assign(x.begin(), x.end());
  var[0].assign(x.size(), 0.0);
  double margin = std::numeric_limits<double>::infinity();
  for (const spec::Step& step : plan->steps) {
    const auto in = static_cast<size_t>(step.in), out = static_cast<size_t>(step.out);
    if (step.op == spec::Step::Op::kAdd) {
      const auto in2 = static_cast<size_t>(step.in2);
      mu[out] = mu[in];
      var[out] = var[in];
      for (size_t k = 0; k < mu[out].size(); ++k) {
        mu[out][k] += mu[in2][k];
        var[out][k] += var[in2][k];
      }
      continue;
    }
    const spec::PlannedLayer& l = plan->layers[static_cast<size_t>(step.layer)];
    if (l.spec.kind != Layer::LINEAR) {
      mu[out] = mu[in];
      var[out] = var[in];
      for (size_t k = 0; k < mu[out].size(); ++k) {
        if (l.spec.kind == Layer::RELU || l.spec.kind == Layer::LEAKY_RELU) {
          margin = std::min(margin, std::abs(mu[in][k]));
        }
        const elementwise::Moments m =
            elementwise::Activate(static_cast<int>(l.spec.kind), l.spec.slope,
                                  static_cast<float>(mu[in][k]), static_cast<float>(var[in][k]));
        mu[out][k] = m.mu;
        var[out][k] = m.var;
      }
      continue;
    }
    const size_t w = plan->blocks[l.first_block].offset, b = plan->blocks[l.first_block + 1].offset;
    const size_t ni = l.spec.in, no = l.spec.out;
    mu[out].assign(batch * no, 0.0);
    var[out].assign(batch * no, 0.0);
    for (size_t s = 0; s < batch; ++s) {
      for (size_t o = 0; o < no; ++o) {
        double m = arena[b + o], v = arena[n + b + o];
        for (size_t i = 0; i < ni; ++i) {
          const double mw = arena[w + o * ni + i], vw = arena[n + w + o * ni + i];
          const double ma = mu[in][s * ni + i], va = var[in][s * ni + i];
          m += mw * ma;
          v += (mw * mw + vw) * va + vw * ma * ma;
        }
        mu[out][s * no + o] = m;
        var[out][s * no + o] = v;
      }
    }
  }
  return margin;
}

// The CPU reference of the output innovations (output.h) after a forward.
void CpuInnovations(const Architecture& arch, ConstGaussianView out, size_t batch,
                    const std::vector<int32_t>& labels, const std::vector<float>& targets,
                    float sigma_v, std::vector<float>& dmu, std::vector<float>& dvar) {
  const size_t n = batch * arch.output_width();
  dmu.assign(n, 0.0f);
  dvar.assign(n, 0.0f);
  if (arch.head.one_hot) {
    OneHotDeltas(out, batch, arch.output_width(), labels.data(), sigma_v,
                 {dmu.data(), dvar.data()});
  } else if (arch.head.heteroscedastic) {
    // EVEN_EXP's jcb of a noise unit is that unit's mean.
    HeteroscedasticDeltas(out, out.mu, n / 2, targets.data(), {dmu.data(), dvar.data()});
  } else if (arch.head.kind == HeadKind::kClassification) {
    HsmTree tree(static_cast<int>(arch.head.num_classes));
    HsmDeltas(tree, out, batch, labels.data(), sigma_v, {dmu.data(), dvar.data()});
  } else {
    RegressionDeltas(out, targets.data(), n, sigma_v, {dmu.data(), dvar.data()});
  }
}

// The state arenas (running mean, variance, first-batch flag of each
// batch norm), compared as one tensor.
void CompareState(Engine& cpu, Engine& gpu, const std::string& what) {
  ASSERT_EQ(cpu.num_state(), gpu.num_state());
  if (cpu.num_state() == 0) return;
  std::vector<float> s_cpu(cpu.num_state()), s_gpu(gpu.num_state());
  ASSERT_TRUE(cpu.ReadState(s_cpu).ok());
  ASSERT_TRUE(gpu.ReadState(s_gpu).ok());
  ExpectNear(s_gpu, s_cpu, 1, what);
}

// Takes both engines' deltas through a reduce of one rank (the sum is the
// buffer itself) with an averaging scale: the CPU engine's host buffer,
// the GPU's device buffer (factors still pending) or host staging.
void ReduceAlone(Engine& cpu, Engine& gpu, Reduce mode, float scale) {
  if (mode == Reduce::kNone) return;
  auto c = cpu.BeginReduce(false, 1.0f);
  auto g = gpu.BeginReduce(mode == Reduce::kDevice, 1.0f);
  ASSERT_TRUE(c.ok() && g.ok()) << c.status() << " / " << g.status();
  // The state (running statistics) rides in the buffer too, averaged by
  // the second scale.
  auto c_end = cpu.EndReduce(scale, 0.75f);
  auto g_end = gpu.EndReduce(scale, 0.75f);
  ASSERT_TRUE(c_end.ok() && g_end.ok()) << c_end.status() << " / " << g_end.status();
  EXPECT_EQ(*g_end, 1.0f);
}

// Runs `steps` steps on both engines and compares everything after each.
// Returns false (comparing nothing) when a ReLU input comes too close to 0.
bool CompareSteps(const Case& c, int steps) {
  SCOPED_TRACE(c.arch.ToString() + " batch " + std::to_string(c.batch) + " seed " +
               std::to_string(c.seed));
  auto cpu = MakeCpu(c.arch, c.batch);
  auto gpu = MakeGpu(c.arch, c.batch);
  if (cpu == nullptr || gpu == nullptr) return true;
  EXPECT_TRUE(cpu->Initialize(c.seed, {}).ok());
  EXPECT_TRUE(gpu->Initialize(c.seed, {}).ok());
  const size_t n = cpu->num_parameters();
  std::vector<float> p_cpu(2 * n), p_gpu(2 * n), d_cpu(2 * n), d_gpu(2 * n);
  EXPECT_TRUE(gpu->ReadParameters(p_gpu).ok());
  EXPECT_TRUE(cpu->ReadParameters(p_cpu).ok());
  EXPECT_EQ(p_gpu, p_cpu) << "the same seed must give the same bits on both devices";

  const bool hsm = c.arch.head.kind == HeadKind::kClassification;
  const size_t in = c.arch.input_width(), out = c.arch.output_width();
  const size_t n_out = c.batch * out;
  Rng rng(c.seed + 7);
  for (int step = 0; step < steps; ++step) {
    const Reduce reduce = c.cycle_reduce ? static_cast<Reduce>(step % 3) : Reduce::kNone;
    SCOPED_TRACE("step " + std::to_string(step) + " reduce " +
                 std::to_string(static_cast<int>(reduce)));
    const std::vector<float> x = Normal(rng, c.batch * in, 1.0);
    std::vector<int32_t> labels;
    std::vector<float> targets;
    if (hsm) {
      for (size_t b = 0; b < c.batch; ++b) {
        labels.push_back(static_cast<int32_t>(rng.Below(c.arch.head.num_classes)));
      }
    } else {
      targets = Normal(rng, n_out / c.arch.head.units_per_target(), 1.0);
      targets[0] = std::numeric_limits<float>::quiet_NaN();  // a masked output
    }
    EXPECT_TRUE(cpu->ReadParameters(p_cpu).ok());
    if (ReluMargin(c.arch, p_cpu, x, c.batch) < kMinReluMargin) return false;
    const int32_t* lp = hsm ? labels.data() : nullptr;
    const float* tp = hsm ? nullptr : targets.data();
    EXPECT_TRUE(cpu->TrainStep(x.data(), lp, tp, c.batch, c.sigma_v).ok());
    const absl::Status st = gpu->TrainStep(x.data(), lp, tp, c.batch, c.sigma_v);
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) return true;

    auto y_cpu = cpu->Output(c.batch);
    auto y_gpu = gpu->Output(c.batch);
    EXPECT_TRUE(y_gpu.ok()) << y_gpu.status();
    if (!y_gpu.ok() || !y_cpu.ok()) return true;
    ExpectNear({y_gpu->mu, n_out}, {y_cpu->mu, n_out}, 1, "output mu");
    ExpectNear({y_gpu->var, n_out}, {y_cpu->var, n_out}, 1, "output var");

    std::vector<float> dmu_cpu, dvar_cpu, dmu_gpu(n_out), dvar_gpu(n_out);
    CpuInnovations(c.arch, *y_cpu, c.batch, labels, targets, c.sigma_v, dmu_cpu, dvar_cpu);
    EXPECT_TRUE(gpu->ReadOutputInnovations(c.batch, dmu_gpu, dvar_gpu).ok());
    ExpectNear(dmu_gpu, dmu_cpu, 1, "output innovation mu");
    ExpectNear(dvar_gpu, dvar_cpu, 1, "output innovation var");

    ReduceAlone(*cpu, *gpu, reduce, 0.5f);
    EXPECT_TRUE(cpu->ReadDeltas(d_cpu).ok());
    EXPECT_TRUE(gpu->ReadDeltas(d_gpu).ok());
    ExpectNear(d_gpu, d_cpu, 2, "parameter deltas");

    const float cap = CapFactor(c.batch);
    EXPECT_TRUE(cpu->ApplyStep(cap).ok());
    EXPECT_TRUE(gpu->ApplyStep(cap).ok());
    EXPECT_TRUE(cpu->ReadParameters(p_cpu).ok());
    EXPECT_TRUE(gpu->ReadParameters(p_gpu).ok());
    ExpectNear(p_gpu, p_cpu, 2, "updated parameters");
    CompareState(*cpu, *gpu, "state after the step");
  }
  // Evaluation: the running statistics instead of the batch's.
  const std::vector<float> x = Normal(rng, c.batch * in, 1.0);
  EXPECT_TRUE(cpu->Forward(x.data(), c.batch).ok());
  EXPECT_TRUE(gpu->Forward(x.data(), c.batch).ok());
  auto y_cpu = cpu->Output(c.batch);
  auto y_gpu = gpu->Output(c.batch);
  EXPECT_TRUE(y_gpu.ok() && y_cpu.ok());
  if (y_gpu.ok() && y_cpu.ok()) {
    ExpectNear({y_gpu->mu, n_out}, {y_cpu->mu, n_out}, 1, "evaluation mu");
    ExpectNear({y_gpu->var, n_out}, {y_cpu->var, n_out}, 1, "evaluation var");
  }
  return true;
}

// Compares `c` under the first seeds from c.seed that keep every ReLU input
// away from zero.
void ExpectParity(Case c, int steps) {
  for (int tries = 0; tries < 4; ++tries, ++c.seed) {
    if (CompareSteps(c, steps)) return;
  }
  FAIL() << "every seed put a ReLU input within 1e-4 of zero";
}

TEST(CudaEngineParity, RandomNetworksMatchTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  int compared = 0;
  for (uint64_t seed = 1; seed <= 40 && compared < 24; ++seed) {
    if (CompareSteps(RandomCase(seed), 3)) ++compared;
    if (HasFailure()) return;
  }
  EXPECT_GE(compared, 20) << "too many cases redrawn for ReLU inputs near zero";
}

TEST(CudaEngineParity, RandomResidualNetworksMatchTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  int compared = 0;
  int single_sample = 0;
  for (uint64_t seed = 1; seed <= 48 && compared < 32; ++seed) {
    const Case c = RandomResidualCase(seed);
    if (CompareSteps(c, 3)) {
      ++compared;
      single_sample += c.batch == 1 ? 1 : 0;
    }
    if (HasFailure()) return;
  }
  EXPECT_GE(compared, 24) << "too many cases redrawn for ReLU inputs near zero";
  EXPECT_GE(single_sample, 4) << "batch 1 must be among the cases";
}

// Linear-ReLU, a block with the identity shortcut, a block with a
// projection shortcut, then the head.
Architecture ResidualMlp(uint32_t out) {
  Architecture arch;
  arch.input = Flat(12);
  arch.layers = {Lin(12, 16), Act(Layer::RELU), Res({Lin(16, 24), Act(Layer::RELU), Lin(24, 16)}),
                 Res({Lin(16, 8), Act(Layer::TANH)}, {Lin(16, 8)}), Lin(8, out)};
  return arch;
}

TEST(CudaEngineParity, ResidualMlpMatchesTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  for (const size_t batch : {size_t{1}, size_t{9}}) {
    for (const bool hsm : {false, true}) {
      Case c;
      c.arch = ResidualMlp(hsm ? static_cast<uint32_t>(HsmTree::OutputWidth(10)) : 3);
      c.arch.head =
          hsm ? HeadDesc{HeadKind::kClassification, 10} : HeadDesc{HeadKind::kRegression, 0};
      c.batch = batch;
      c.sigma_v = 0.7f;
      c.seed = 21;
      c.cycle_reduce = true;
      ExpectParity(c, 4);
    }
  }
}

// The data feed a block: its main branch's first LINEAR skips the variance
// product, the identity shortcut adds the data's zero variance, and the
// data get no innovations.
TEST(CudaEngineParity, ResidualBlockReadingTheDataMatchesTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  for (const bool projection : {false, true}) {
    Case c;
    c.arch.input = Flat(10);
    c.arch.layers = {Res({Lin(10, 20), Act(Layer::LEAKY_RELU, 0.1f), Lin(20, 10)},
                         projection ? std::vector<LayerDesc>{Lin(10, 10), Act(Layer::SIGMOID)}
                                    : std::vector<LayerDesc>{}),
                     Act(Layer::MIXTURE_RELU), Lin(10, 2)};
    c.arch.head = {HeadKind::kRegression, 0};
    c.batch = 5;
    c.seed = 31;
    c.cycle_reduce = true;
    ExpectParity(c, 3);
  }
}

// A block nested in a main branch, itself inside a block nested in another
// (three levels of forks), ending the network.
TEST(CudaEngineParity, NestedResidualBlocksMatchTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.arch.input = Flat(6);
  const LayerDesc inner = Res({Lin(8, 8), Act(Layer::SOFTPLUS), Lin(8, 8)});
  const LayerDesc middle = Res({Lin(8, 8), Act(Layer::RELU), inner, Lin(8, 8)}, {Lin(8, 8)});
  c.arch.layers = {Lin(6, 8), Act(Layer::TANH),
                   Res({Lin(8, 8), Act(Layer::RELU), middle, Act(Layer::TANH)}),
                   Res({Lin(8, 4)}, {Lin(8, 4)})};
  c.arch.head = {HeadKind::kRegression, 0};
  for (const size_t batch : {size_t{1}, size_t{7}}) {
    c.batch = batch;
    c.seed = 41;
    c.cycle_reduce = true;
    ExpectParity(c, 4);
  }
}

TEST(CudaEngineParity, FashionMnistShapedNetworkMatchesTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.arch.input = Flat(784);
  c.arch.layers = {Lin(784, 100), Act(Layer::RELU), Lin(100, 100), Act(Layer::RELU), Lin(100, 11)};
  c.arch.head = {HeadKind::kClassification, 10};
  c.batch = 16;
  c.sigma_v = 1.0f;
  c.seed = 11;
  ExpectParity(c, 5);
}

// The heads of docs/heads.md: the row kernels of REMAX and
// CLOSED_FORM_SOFTMAX (one thread per sample), EVEN_EXP, and the one-hot
// and heteroscedastic output updates, at B 1 and B > 1.
TEST(CudaEngineParity, OutputHeadsMatchTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  for (const LayerKind kind : {Layer::REMAX, Layer::CLOSED_FORM_SOFTMAX, Layer::EVEN_EXP}) {
    for (const size_t batch : {size_t{1}, size_t{9}}) {
      Case c;
      c.arch.input = Flat(12);
      const bool noise = kind == Layer::EVEN_EXP;
      c.arch.layers = {Lin(12, 24), Act(Layer::MIXTURE_RELU), Lin(24, noise ? 6 : 7), Act(kind)};
      c.arch.head = noise ? HeadDesc{HeadKind::kRegression, 0}
                          : HeadDesc{HeadKind::kClassification, 7};
      c.arch.head.one_hot = !noise;
      c.arch.head.heteroscedastic = noise;
      c.batch = batch;
      c.sigma_v = 0.1f;
      c.seed = 17 + batch;
      c.cycle_reduce = true;
      ExpectParity(c, 3);
    }
  }
}

TEST(CudaEngineParity, WideSmoothNetworkMatchesTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.arch.input = Flat(784);
  c.arch.layers = {Lin(784, 512), Act(Layer::MIXTURE_RELU), Lin(512, 256), Act(Layer::TANH),
                   Lin(256, 11)};
  c.arch.head = {HeadKind::kClassification, 10};
  c.batch = 128;
  c.sigma_v = 0.5f;
  c.seed = 3;
  EXPECT_TRUE(CompareSteps(c, 2));
}

// ---- Image layers (issue 13): Conv2d on cuDNN, pools, batch and layer
// norms, residual CNN blocks. Smooth activations mostly, so that a unit
// near a ReLU's kink cannot flip between the engines' summation orders;
// the seeds of the ReLU networks were checked to keep their inputs away
// from zero.

Case ImageCase(Shape input, std::vector<LayerDesc> layers, uint32_t classes, size_t batch,
               uint64_t seed) {
  Case c;
  c.arch.input = input;
  c.arch.layers = std::move(layers);
  c.arch.head = classes > 0 ? HeadDesc{HeadKind::kClassification, classes}
                            : HeadDesc{HeadKind::kRegression, 0};
  c.batch = batch;
  c.sigma_v = 0.6f;
  c.seed = seed;
  c.cycle_reduce = true;
  return c;
}

// Conv (symmetric padding, bias) - batch norm - overlapping average pool,
// conv (no bias) - layer norm - overlapping max pool, a flat batch norm after
// a LINEAR, the hierarchical softmax.
TEST(CudaEngineParity, ConvPoolNormNetworkMatchesTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  const uint32_t out = static_cast<uint32_t>(HsmTree::OutputWidth(5));
  for (const size_t batch : {size_t{1}, size_t{6}}) {
    const Case c = ImageCase(
        Image(2, 9, 9),
        {Conv(2, 4, 3, 1, 1), Act(Layer::MIXTURE_RELU), Norm(Layer::BATCH_NORM),
         Pool(Layer::AVG_POOL2D, 3, 2), Conv(4, 6, 3, 1, 1, /*bias=*/false), Act(Layer::TANH),
         Norm(Layer::LAYER_NORM), Pool(Layer::MAX_POOL2D, 2, 1), Lin(54, 10),
         Act(Layer::SIGMOID), Norm(Layer::BATCH_NORM, /*bias=*/false), Lin(10, out)},
        5, batch, 7);
    EXPECT_TRUE(CompareSteps(c, 4));
  }
}

// Padding at the bottom and right only (a zero-padded copy for cuDNN),
// strides past the kernel, padded pools, a global average pool.
TEST(CudaEngineParity, BottomRightPaddingAndOddWindowsMatchTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  const Case c = ImageCase(
      Image(3, 8, 14),
      {Conv(3, 5, 3, 2, 1, true, Layer::BOTTOM_RIGHT), Act(Layer::SOFTPLUS),
       Pool(Layer::MAX_POOL2D, 3, 1, 1), Conv(5, 4, 1, 3, 0), Act(Layer::MIXTURE_RELU),
       Pool(Layer::AVG_POOL2D, 1, 1), Norm(Layer::LAYER_NORM, false), Lin(24, 3)},
      0, 5, 13);
  EXPECT_TRUE(CompareSteps(c, 4));
}

// A small ResNet: a stem, a block with the identity shortcut, a block that
// halves the map with a projection shortcut (1x1 conv, stride 2, batch
// norm), a global average pool and the head (the reference's ResNet18
// pattern, docs/maths.md section 13).
TEST(CudaEngineParity, ResidualCnnMatchesTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  const uint32_t out = static_cast<uint32_t>(HsmTree::OutputWidth(4));
  const LayerDesc identity = Res({Conv(4, 4, 3, 1, 1, false), Norm(Layer::BATCH_NORM),
                                  Act(Layer::MIXTURE_RELU), Conv(4, 4, 3, 1, 1, false),
                                  Norm(Layer::BATCH_NORM)});
  const LayerDesc down = Res({Conv(4, 8, 3, 2, 1, false), Norm(Layer::BATCH_NORM),
                              Act(Layer::MIXTURE_RELU), Conv(8, 8, 3, 1, 1, false),
                              Norm(Layer::BATCH_NORM)},
                             {Conv(4, 8, 1, 2, 0, false), Norm(Layer::BATCH_NORM)});
  for (const size_t batch : {size_t{2}, size_t{5}}) {
    const Case c = ImageCase(Image(3, 9, 9),
                             {Conv(3, 4, 3, 1, 1, false), Norm(Layer::BATCH_NORM),
                              Act(Layer::MIXTURE_RELU), identity, Act(Layer::MIXTURE_RELU), down,
                              Act(Layer::MIXTURE_RELU), Pool(Layer::AVG_POOL2D, 5, 5),
                              Lin(8, out)},
                             4, batch, 17);
    EXPECT_TRUE(CompareSteps(c, 3));
  }
}

// The reference's MNIST CNN shape (examples/fmnist_cnn.json) with ReLU,
// scaled down: its inputs stay clear of zero for this seed.
TEST(CudaEngineParity, MnistCnnWithReluMatchesTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  const uint32_t out = static_cast<uint32_t>(HsmTree::OutputWidth(10));
  const Case c = ImageCase(
      Image(1, 12, 12),
      {Conv(1, 4, 4, 1, 1), Act(Layer::RELU), Norm(Layer::BATCH_NORM),
       Pool(Layer::AVG_POOL2D, 3, 2), Conv(4, 6, 3, 1, 0), Act(Layer::RELU),
       Norm(Layer::BATCH_NORM), Pool(Layer::AVG_POOL2D, 2, 1), Lin(24, 16), Act(Layer::RELU),
       Lin(16, out)},
      10, 8, 3);
  EXPECT_TRUE(CompareSteps(c, 3));
}

// Synchronised batch norm: each engine's statistics go through its sum,
// here a world of two identical replicas (the sum doubles every value).
TEST(CudaEngineParity, SynchronisedBatchNormMatchesTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  const Case c = ImageCase(Image(2, 6, 6),
                           {Conv(2, 3, 3, 1, 1), Norm(Layer::BATCH_NORM), Act(Layer::TANH),
                            Pool(Layer::AVG_POOL2D, 2, 2), Lin(27, 6), Norm(Layer::BATCH_NORM),
                            Lin(6, 2)},
                           0, 4, 23);
  auto cpu = MakeCpu(c.arch, c.batch);
  auto gpu = MakeGpu(c.arch, c.batch);
  ASSERT_NE(gpu, nullptr);
  int cpu_sums = 0;
  int gpu_sums = 0;
  auto doubling = [](int* calls) {
    return [calls](std::span<float> values) {
      ++*calls;
      for (float& v : values) v *= 2.0f;
      return absl::OkStatus();
    };
  };
  ASSERT_TRUE(cpu->SetBatchSync(doubling(&cpu_sums), 2).ok());
  ASSERT_TRUE(gpu->SetBatchSync(doubling(&gpu_sums), 2).ok());
  ASSERT_TRUE(cpu->Initialize(c.seed, {}).ok());
  ASSERT_TRUE(gpu->Initialize(c.seed, {}).ok());
  Rng rng(c.seed);
  const size_t in = c.arch.input_width(), n_out = c.batch * c.arch.output_width();
  const size_t n = cpu->num_parameters();
  std::vector<float> p_cpu(2 * n), p_gpu(2 * n);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> x = Normal(rng, c.batch * in, 1.0);
    const std::vector<float> y = Normal(rng, n_out, 1.0);
    ASSERT_TRUE(cpu->TrainStep(x.data(), nullptr, y.data(), c.batch, c.sigma_v).ok());
    const absl::Status st = gpu->TrainStep(x.data(), nullptr, y.data(), c.batch, c.sigma_v);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_TRUE(cpu->ApplyStep(CapFactor(c.batch)).ok());
    ASSERT_TRUE(gpu->ApplyStep(CapFactor(c.batch)).ok());
    ASSERT_TRUE(cpu->ReadParameters(p_cpu).ok());
    ASSERT_TRUE(gpu->ReadParameters(p_gpu).ok());
    ExpectNear(p_gpu, p_cpu, 2, "parameters after a synchronised step");
    CompareState(*cpu, *gpu, "running statistics");
  }
  EXPECT_EQ(gpu_sums, cpu_sums);
  EXPECT_EQ(gpu_sums, 3 * 2 * 2) << "two sums per batch norm and step";

  // A failed sum fails the step that made it, with the collective's error.
  ASSERT_TRUE(gpu->SetBatchSync([](std::span<float>) { return absl::UnavailableError("peer gone"); },
                                2)
                  .ok());
  const std::vector<float> x = Normal(rng, c.batch * in, 1.0);
  const std::vector<float> y = Normal(rng, n_out, 1.0);
  const absl::Status st = gpu->TrainStep(x.data(), nullptr, y.data(), c.batch, c.sigma_v);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
}

// ---- Fusion: an activation that only a norm reads runs inside the norm's
// kernels (spec::Step::absorbed). Two GPU engines from the same seed, one
// fused and one not, must give the same bits everywhere: outputs, output
// innovations, deltas (three reduce paths), parameters, running state, and
// evaluation. Where fusion could go wrong: the activation's units computed
// twice (statistics and normalisation), its jcb applied on the way back,
// its input's innovations written a step early (the plan's lives), the
// data as the activation's input (no innovations), synchronised statistics.

size_t AbsorbedSteps(const Architecture& arch, size_t batch) {
  auto plan = spec::MakePlan(arch, {batch, 64, /*fuse_activations=*/true});
  EXPECT_TRUE(plan.ok()) << plan.status();
  if (!plan.ok()) return 0;
  return static_cast<size_t>(std::count_if(plan->steps.begin(), plan->steps.end(),
                                           [](const spec::Step& s) { return s.absorbed; }));
}

void ExpectSameBits(std::span<const float> fused, std::span<const float> plain,
                    const std::string& what) {
  ASSERT_EQ(fused.size(), plain.size()) << what;
  for (size_t k = 0; k < plain.size(); ++k) {
    // memcmp-like: NaNs compare by their bits, and -0 differs from +0.
    ASSERT_EQ(std::bit_cast<uint32_t>(fused[k]), std::bit_cast<uint32_t>(plain[k]))
        << what << " at " << k << ": " << fused[k] << " fused, " << plain[k] << " not";
  }
}

void ExpectFusionKeepsTheBits(const Case& c, int steps, size_t absorbed, bool sync = false) {
  SCOPED_TRACE(c.arch.ToString() + " batch " + std::to_string(c.batch));
  ASSERT_EQ(AbsorbedSteps(c.arch, c.batch), absorbed) << "the case must absorb what it says";
  auto fused = CudaEngine::Create(c.arch, c.batch, 0);
  auto plain = CudaEngine::Create(c.arch, c.batch, 0, {.fuse_activations = false});
  ASSERT_TRUE(fused.ok() && plain.ok()) << fused.status() << " / " << plain.status();
  std::vector<CudaEngine*> engines = {fused->get(), plain->get()};
  if (sync) {
    for (CudaEngine* e : engines) {
      ASSERT_TRUE(e->SetBatchSync(
                       [](std::span<float> values) {
                         for (float& v : values) v *= 2.0f;
                         return absl::OkStatus();
                       },
                       2)
                      .ok());
    }
  }
  for (CudaEngine* e : engines) ASSERT_TRUE(e->Initialize(c.seed, {}).ok());
  const bool classes = c.arch.head.kind == HeadKind::kClassification;
  const size_t in = c.arch.input_width(), n_out = c.batch * c.arch.output_width();
  const size_t n = (*fused)->num_parameters();
  Rng rng(c.seed + 11);
  auto read = [&](auto member, size_t size) {
    std::vector<std::vector<float>> out(2, std::vector<float>(size));
    for (size_t e = 0; e < 2; ++e) EXPECT_TRUE((engines[e]->*member)(out[e]).ok());
    return out;
  };
  for (int step = 0; step < steps; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<float> x = Normal(rng, c.batch * in, 1.0);
    std::vector<int32_t> labels(c.batch);
    for (int32_t& l : labels) {
      l = classes ? static_cast<int32_t>(rng.Below(c.arch.head.num_classes)) : 0;
    }
    const std::vector<float> y = Normal(rng, n_out, 1.0);
    for (CudaEngine* e : engines) {
      ASSERT_TRUE(e->TrainStep(x.data(), classes ? labels.data() : nullptr,
                               classes ? nullptr : y.data(), c.batch, c.sigma_v)
                      .ok());
    }
    std::vector<std::vector<float>> out(2), dmu(2, std::vector<float>(n_out)),
        dvar(2, std::vector<float>(n_out));
    for (size_t e = 0; e < 2; ++e) {
      auto o = engines[e]->Output(c.batch);
      ASSERT_TRUE(o.ok()) << o.status();
      out[e].assign(o->mu, o->mu + n_out);
      out[e].insert(out[e].end(), o->var, o->var + n_out);
      ASSERT_TRUE(engines[e]->ReadOutputInnovations(c.batch, dmu[e], dvar[e]).ok());
    }
    ExpectSameBits(out[0], out[1], "output");
    ExpectSameBits(dmu[0], dmu[1], "output innovations (mu)");
    ExpectSameBits(dvar[0], dvar[1], "output innovations (var)");
    const Reduce reduce = static_cast<Reduce>(step % 3);
    if (reduce != Reduce::kNone) {
      for (CudaEngine* e : engines) {
        ASSERT_TRUE(e->BeginReduce(reduce == Reduce::kDevice, 1.0f).ok());
        ASSERT_TRUE(e->EndReduce(0.5f, 0.75f).ok());
      }
    }
    const auto deltas = read(&CudaEngine::ReadDeltas, 2 * n);
    ExpectSameBits(deltas[0], deltas[1], "parameter deltas");
    for (CudaEngine* e : engines) ASSERT_TRUE(e->ApplyStep(CapFactor(c.batch)).ok());
    const auto params = read(&CudaEngine::ReadParameters, 2 * n);
    ExpectSameBits(params[0], params[1], "parameters");
    const auto state = read(&CudaEngine::ReadState, (*fused)->num_state());
    ExpectSameBits(state[0], state[1], "running state");
  }
  const std::vector<float> x = Normal(rng, c.batch * in, 1.0);
  std::vector<std::vector<float>> out(2);
  for (size_t e = 0; e < 2; ++e) {
    ASSERT_TRUE(engines[e]->Forward(x.data(), c.batch).ok());
    auto o = engines[e]->Output(c.batch);
    ASSERT_TRUE(o.ok()) << o.status();
    out[e].assign(o->mu, o->mu + n_out);
    out[e].insert(out[e].end(), o->var, o->var + n_out);
  }
  ExpectSameBits(out[0], out[1], "evaluation output");
}

// The CNN pattern (conv, activation, batch norm, pool) with every
// elementwise kind, a layer norm after a LINEAR, and a batch norm reading
// an activation of the data itself (its input takes no innovations).
TEST(CudaEngineFusion, AbsorbedActivationsKeepTheBitsInAChain) {
  SKIP_WITHOUT_GPU();
  const uint32_t out = static_cast<uint32_t>(HsmTree::OutputWidth(4));
  for (const LayerKind kind : kActivations) {
    const float slope = kind == Layer::LEAKY_RELU ? 0.2f : 0.0f;
    for (const size_t batch : {size_t{1}, size_t{5}}) {
      const Case c = ImageCase(
          Image(2, 7, 7),
          {Act(kind, slope), Norm(Layer::BATCH_NORM), Conv(2, 3, 3, 1, 1), Act(kind, slope),
           Norm(Layer::BATCH_NORM, /*bias=*/false), Pool(Layer::AVG_POOL2D, 3, 2), Lin(27, 8),
           Act(kind, slope), Norm(Layer::LAYER_NORM), Lin(8, out)},
          4, batch, 31 + batch);
      ExpectFusionKeepsTheBits(c, 3, 3);
    }
  }
}

// ResNet18's pattern (conv, mixture ReLU, batch norm in each branch), an
// activation whose output a residual add reads too (not absorbed), and
// synchronised batch statistics.
TEST(CudaEngineFusion, AbsorbedActivationsKeepTheBitsInResidualBlocks) {
  SKIP_WITHOUT_GPU();
  const LayerDesc block =
      Res({Conv(4, 4, 3, 1, 1, false), Act(Layer::MIXTURE_RELU), Norm(Layer::BATCH_NORM),
           Conv(4, 4, 3, 1, 1, false), Act(Layer::MIXTURE_RELU), Norm(Layer::BATCH_NORM)});
  const LayerDesc down =
      Res({Conv(4, 6, 3, 2, 1, false), Act(Layer::MIXTURE_RELU), Norm(Layer::BATCH_NORM)},
          {Conv(4, 6, 1, 2, 0, false), Act(Layer::MIXTURE_RELU), Norm(Layer::BATCH_NORM)});
  const Case c = ImageCase(Image(3, 9, 9),
                           {Conv(3, 4, 3, 1, 1, false), Act(Layer::MIXTURE_RELU),
                            Norm(Layer::BATCH_NORM), block, Act(Layer::TANH), down,
                            Pool(Layer::AVG_POOL2D, 5, 5), Lin(6, 3)},
                           0, 4, 41);
  ExpectFusionKeepsTheBits(c, 3, 5);
  ExpectFusionKeepsTheBits(c, 2, 5, /*sync=*/true);
  // The activation after the first norm feeds the block and its identity
  // shortcut: two readers, so it runs on its own.
  Case fork = c;
  fork.arch.layers = {Conv(3, 4, 3, 1, 1, false), Norm(Layer::BATCH_NORM),
                      Act(Layer::MIXTURE_RELU), block, Pool(Layer::AVG_POOL2D, 9, 9), Lin(4, 3)};
  ExpectFusionKeepsTheBits(fork, 2, 2);
}

// A CNN trained on the GPU is saved (parameters and running statistics)
// and evaluates on the CPU to the GPU's output, and back.
TEST(CudaEngine, CnnTrainedOnTheGpuEvaluatesOnTheCpuAndBack) {
  SKIP_WITHOUT_GPU();
  const uint32_t out = static_cast<uint32_t>(HsmTree::OutputWidth(3));
  const Case c = ImageCase(Image(1, 6, 6),
                           {Conv(1, 3, 3, 1, 1), Norm(Layer::BATCH_NORM), Act(Layer::MIXTURE_RELU),
                            Pool(Layer::MAX_POOL2D, 2, 2), Lin(27, out)},
                           3, 4, 29);
  auto gpu = MakeGpu(c.arch, c.batch);
  ASSERT_NE(gpu, nullptr);
  ASSERT_TRUE(gpu->Initialize(c.seed, {}).ok());
  Rng rng(1);
  const size_t in = c.arch.input_width(), n_out = c.batch * c.arch.output_width();
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> x = Normal(rng, c.batch * in, 1.0);
    std::vector<int32_t> labels = {0, 1, 2, 1};
    ASSERT_TRUE(gpu->TrainStep(x.data(), labels.data(), nullptr, c.batch, 1.0f).ok());
    ASSERT_TRUE(gpu->ApplyStep(CapFactor(c.batch)).ok());
  }
  std::vector<float> params(2 * gpu->num_parameters()), state(gpu->num_state());
  ASSERT_TRUE(gpu->ReadParameters(params).ok());
  ASSERT_TRUE(gpu->ReadState(state).ok());
  ASSERT_GT(state.size(), 0u);
  EXPECT_EQ(state.back(), 0.0f) << "the first-batch flag is cleared by training";
  auto file = DecodeModelFile(EncodeModelFile(c.arch, {}, params, state));
  ASSERT_TRUE(file.ok()) << file.status();
  auto cpu = MakeCpu(file->architecture, c.batch);
  ASSERT_TRUE(cpu->WriteParameters(file->parameters).ok());
  ASSERT_TRUE(cpu->WriteState(file->state).ok());
  EXPECT_EQ(*cpu->ParameterFingerprint(), *gpu->ParameterFingerprint());
  const std::vector<float> x = Normal(rng, c.batch * in, 1.0);
  ASSERT_TRUE(gpu->Forward(x.data(), c.batch).ok());
  ASSERT_TRUE(cpu->Forward(x.data(), c.batch).ok());
  auto y_gpu = gpu->Output(c.batch);
  auto y_cpu = cpu->Output(c.batch);
  ASSERT_TRUE(y_gpu.ok() && y_cpu.ok());
  ExpectNear({y_gpu->mu, n_out}, {y_cpu->mu, n_out}, 1, "GPU-trained model on the CPU, mu");
  ExpectNear({y_gpu->var, n_out}, {y_cpu->var, n_out}, 1, "GPU-trained model on the CPU, var");
  // And back: a fresh GPU engine loads what the CPU holds.
  auto gpu2 = MakeGpu(c.arch, c.batch);
  ASSERT_TRUE(gpu2->WriteParameters(file->parameters).ok());
  ASSERT_TRUE(gpu2->WriteState(file->state).ok());
  ASSERT_TRUE(gpu2->Forward(x.data(), c.batch).ok());
  auto y_gpu2 = gpu2->Output(c.batch);
  ASSERT_TRUE(y_gpu2.ok());
  ExpectNear({y_gpu2->mu, n_out}, {y_cpu->mu, n_out}, 1, "CPU model back on the GPU, mu");
}

// A batch smaller than the planned one (the last batch of an epoch) and a
// larger evaluation batch re-describe the convolutions for cuDNN and
// re-plan the workspace; the results agree.
TEST(CudaEngine, ConvolutionsFollowTheBatchSize) {
  SKIP_WITHOUT_GPU();
  const Case c = ImageCase(Image(2, 5, 5),
                           {Conv(2, 3, 3, 1, 1), Act(Layer::TANH), Norm(Layer::BATCH_NORM),
                            Conv(3, 2, 2, 1, 0), Lin(32, 2)},
                           0, 6, 37);
  auto gpu = MakeGpu(c.arch, 6);
  auto cpu = MakeCpu(c.arch, 6);
  ASSERT_NE(gpu, nullptr);
  ASSERT_TRUE(gpu->Initialize(3, {}).ok());
  ASSERT_TRUE(cpu->Initialize(3, {}).ok());
  Rng rng(4);
  for (const size_t batch : {size_t{6}, size_t{3}, size_t{6}, size_t{40}}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const std::vector<float> x = Normal(rng, batch * 50, 1.0);
    const std::vector<float> y = Normal(rng, batch * 2, 1.0);
    if (batch <= 6) {
      ASSERT_TRUE(cpu->TrainStep(x.data(), nullptr, y.data(), batch, 0.5f).ok());
      const absl::Status st = gpu->TrainStep(x.data(), nullptr, y.data(), batch, 0.5f);
      ASSERT_TRUE(st.ok()) << st;
      ASSERT_TRUE(cpu->ApplyStep(CapFactor(batch)).ok());
      ASSERT_TRUE(gpu->ApplyStep(CapFactor(batch)).ok());
    } else {
      ASSERT_TRUE(cpu->Forward(x.data(), batch).ok());
      ASSERT_TRUE(gpu->Forward(x.data(), batch).ok());
    }
    auto y_cpu = cpu->Output(batch);
    auto y_gpu = gpu->Output(batch);
    ASSERT_TRUE(y_gpu.ok()) << y_gpu.status();
    ExpectNear({y_gpu->mu, batch * 2}, {y_cpu->mu, batch * 2}, 1, "mu");
    ExpectNear({y_gpu->var, batch * 2}, {y_cpu->var, batch * 2}, 1, "var");
  }
}

TEST(CudaEngine, ParametersRoundTripBitExactlyAndMatchTheCpuFingerprint) {
  SKIP_WITHOUT_GPU();
  const Case c = RandomResidualCase(99);
  auto gpu = MakeGpu(c.arch, 4);
  auto cpu = MakeCpu(c.arch, 4);
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cpu, nullptr);
  Rng rng(5);
  std::vector<float> arena = Normal(rng, 2 * cpu->num_parameters(), 0.3);
  for (size_t k = cpu->num_parameters(); k < arena.size(); ++k) arena[k] = std::abs(arena[k]);
  ASSERT_TRUE(gpu->WriteParameters(arena).ok());
  ASSERT_TRUE(cpu->WriteParameters(arena).ok());
  std::vector<float> back(arena.size());
  ASSERT_TRUE(gpu->ReadParameters(back).ok());
  EXPECT_EQ(back, arena);
  EXPECT_EQ(*gpu->ParameterFingerprint(), *cpu->ParameterFingerprint());

  // A model file written from the GPU loads into the CPU engine unchanged.
  const std::string bytes = EncodeModelFile(c.arch, {}, back);
  auto file = DecodeModelFile(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  auto cpu2 = MakeCpu(file->architecture, 4);
  ASSERT_TRUE(cpu2->WriteParameters(file->parameters).ok());
  EXPECT_EQ(*cpu2->ParameterFingerprint(), *gpu->ParameterFingerprint());

  std::vector<float> wrong(3);
  EXPECT_EQ(gpu->WriteParameters(wrong).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu->ReadDeltas(wrong).code(), absl::StatusCode::kInvalidArgument);
}

// A network without batch norms has no state: reads and writes of it
// succeed without touching the device, and a span of the wrong size is
// refused.
TEST(CudaEngine, EmptyStateReadsAndWritesAndRefusesWrongSizes) {
  SKIP_WITHOUT_GPU();
  const Case c = RandomResidualCase(5);
  auto gpu = MakeGpu(c.arch, 2);
  ASSERT_NE(gpu, nullptr);
  ASSERT_EQ(gpu->num_state(), 0u);
  EXPECT_TRUE(gpu->ReadState({}).ok());
  EXPECT_TRUE(gpu->WriteState({}).ok());
  std::vector<float> wrong(2);
  EXPECT_EQ(gpu->ReadState(wrong).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gpu->WriteState(wrong).code(), absl::StatusCode::kInvalidArgument);
}

// Reserve re-plans the batch arena of a residual network for a larger
// batch: every boundary, partial and scratch moves, and the results agree.
TEST(CudaEngine, EvaluationBatchLargerThanReservedGrowsAndMatches) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.arch.input = Flat(20);
  c.arch.layers = {Lin(20, 30), Act(Layer::SIGMOID),
                   Res({Lin(30, 10), Act(Layer::TANH), Lin(10, 30)}), Lin(30, 3)};
  c.arch.head = {HeadKind::kRegression, 0};
  auto gpu = MakeGpu(c.arch, 2);
  auto cpu = MakeCpu(c.arch, 2);
  ASSERT_NE(gpu, nullptr);
  ASSERT_TRUE(gpu->Initialize(4, {}).ok());
  ASSERT_TRUE(cpu->Initialize(4, {}).ok());
  Rng rng(8);
  const size_t batch = 300;
  const std::vector<float> x = Normal(rng, batch * 20, 1.0);
  ASSERT_TRUE(gpu->Forward(x.data(), batch).ok());
  ASSERT_TRUE(cpu->Forward(x.data(), batch).ok());
  auto y_gpu = gpu->Output(batch);
  auto y_cpu = cpu->Output(batch);
  ASSERT_TRUE(y_gpu.ok()) << y_gpu.status();
  ExpectNear({y_gpu->mu, batch * 3}, {y_cpu->mu, batch * 3}, 1, "eval mu");
  ExpectNear({y_gpu->var, batch * 3}, {y_cpu->var, batch * 3}, 1, "eval var");
}

TEST(CudaEngine, ClassProbabilitiesMatchTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.arch.input = Flat(10);
  c.arch.layers = {Lin(10, 40), Act(Layer::RELU), Lin(40, 11)};
  c.arch.head = {HeadKind::kClassification, 10};
  auto gpu = MakeGpu(c.arch, 32);
  auto cpu = MakeCpu(c.arch, 32);
  ASSERT_NE(gpu, nullptr);
  ASSERT_TRUE(gpu->Initialize(2, {}).ok());
  ASSERT_TRUE(cpu->Initialize(2, {}).ok());
  Rng rng(3);
  const std::vector<float> x = Normal(rng, 32 * 10, 1.0);
  ASSERT_TRUE(gpu->Forward(x.data(), 32).ok());
  ASSERT_TRUE(cpu->Forward(x.data(), 32).ok());
  std::vector<float> p_gpu(320), p_cpu(320);
  ASSERT_TRUE(gpu->ClassProbabilities(32, p_gpu.data()).ok());
  ASSERT_TRUE(cpu->ClassProbabilities(32, p_cpu.data()).ok());
  ExpectNear(p_gpu, p_cpu, 1, "class probabilities");
}

// An engine of RandomCase(17) after one training step, its deltas pending.
void OneStepEngine(std::unique_ptr<CudaEngine>& gpu) {
  Case c = RandomCase(17);
  gpu = MakeGpu(c.arch, c.batch);
  ASSERT_NE(gpu, nullptr);
  ASSERT_TRUE(gpu->Initialize(1, {}).ok());
  Rng rng(2);
  const std::vector<float> x = Normal(rng, c.batch * c.arch.input_width(), 1.0);
  std::vector<int32_t> labels(c.batch, 1);
  std::vector<float> targets(c.batch * c.arch.output_width(), 0.5f);
  ASSERT_TRUE(gpu->TrainStep(x.data(), labels.data(), targets.data(), c.batch, 1.0f).ok());
}

// The reduce buffer, in device memory and staged through the host: the
// control word comes back, and EndReduce scales the deltas.
TEST(CudaEngine, ReduceBufferCarriesTheControlWordAndScales) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<CudaEngine> gpu;
  ASSERT_NO_FATAL_FAILURE(OneStepEngine(gpu));
  const size_t n = gpu->num_parameters();
  std::vector<float> before(2 * n), after(2 * n);
  ASSERT_TRUE(gpu->ReadDeltas(before).ok());

  auto host = gpu->BeginReduce(/*device_memory=*/false, 1.0f);
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_EQ(host->size(), 2 * n + Model::kControlWords);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), host->begin()))
      << "the host reduce buffer is the packed CPU layout";
  for (float& v : *host) v *= 2.0f;  // what a world of two identical ranks sums to
  auto control = gpu->EndReduce(0.5f, 1.0f);
  ASSERT_TRUE(control.ok()) << control.status();
  EXPECT_EQ(*control, 2.0f);
  ASSERT_TRUE(gpu->ReadDeltas(after).ok());
  EXPECT_EQ(after, before);

  auto device = gpu->BeginReduce(/*device_memory=*/true, 1.0f);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_GE(device->size(), 2 * n + Model::kControlWords);
  control = gpu->EndReduce(0.25f, 1.0f);
  ASSERT_TRUE(control.ok()) << control.status();
  EXPECT_EQ(*control, 1.0f);
  ASSERT_TRUE(gpu->ReadDeltas(after).ok());
  for (size_t k = 0; k < after.size(); ++k) ASSERT_EQ(after[k], 0.25f * before[k]) << k;

  EXPECT_EQ(gpu->EndReduce(1.0f, 1.0f).status().code(), absl::StatusCode::kFailedPrecondition);
}

// CheckReduced finds a NaN or an Inf that a rank sent, in the host buffer
// and in the device buffer (where NCCL sums), and passes a finite one.
TEST(CudaEngine, CheckReducedFindsANonFiniteValueInEitherBuffer) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<CudaEngine> gpu;
  ASSERT_NO_FATAL_FAILURE(OneStepEngine(gpu));
  auto host = gpu->BeginReduce(/*device_memory=*/false, 0.0f);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_TRUE(gpu->CheckReduced().ok());
  (*host)[3] = std::numeric_limits<float>::quiet_NaN();
  const absl::Status st = gpu->CheckReduced();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("non-finite reduced step: value 3 of"), absl::string_view::npos)
      << st;
  (*host)[3] = 0.0f;
  ASSERT_TRUE(gpu->EndReduce(1.0f, 1.0f).ok());

  auto device = gpu->BeginReduce(/*device_memory=*/true, 0.0f);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_TRUE(gpu->CheckReduced().ok());
  auto stream = Stream::Create();
  ASSERT_TRUE(stream.ok());
  const float inf = std::numeric_limits<float>::infinity();
  ASSERT_EQ(cudaMemcpyAsync(device->data() + device->size() / 2, &inf, sizeof(float),
                            cudaMemcpyHostToDevice, stream->get()),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
  const absl::Status dev = gpu->CheckReduced();
  EXPECT_EQ(dev.code(), absl::StatusCode::kDataLoss) << dev;
  EXPECT_NE(dev.message().find("non-finite reduced step"), absl::string_view::npos) << dev;
}

// Gemm's split-k path (a small output, a long inner dimension) and its
// cuBLAS path agree with the CPU's product for every transpose and both
// betas, with padded leading dimensions; with beta 0 the output is not read
// (it starts as NaN).
TEST(CudaGemm, SplitAlongKAndCublasMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  auto stream = Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status();
  auto handle = CublasHandle::Create(stream->get());
  ASSERT_TRUE(handle.ok()) << handle.status();
  struct Shape {
    size_t m, n, k;
  };
  // Split: 16 x 100 over 784 (the small MLP's first layer), an odd k and a
  // column; cuBLAS: an inner dimension too short, an output too large.
  const Shape shapes[] = {{16, 100, 784}, {7, 5, 1001}, {33, 1, 300}, {16, 100, 100},
                          {200, 100, 300}};
  EXPECT_GT(SplitKSlices(16, 100, 784, CublasHandle::kSplitKFloats), 1u);
  EXPECT_GT(SplitKSlices(7, 5, 1001, CublasHandle::kSplitKFloats), 1u);
  EXPECT_EQ(SplitKSlices(16, 100, 100, CublasHandle::kSplitKFloats), 1u);
  EXPECT_EQ(SplitKSlices(200, 100, 300, CublasHandle::kSplitKFloats), 1u);
  const auto copy = [&](void* dst, const void* src, size_t floats, cudaMemcpyKind kind) {
    return cudaMemcpyAsync(dst, src, floats * sizeof(float), kind, stream->get()) == cudaSuccess &&
           cudaStreamSynchronize(stream->get()) == cudaSuccess;
  };
  Rng rng(31);
  for (const Shape& sh : shapes) {
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        for (float beta : {0.0f, 1.0f}) {
          const size_t lda = (ta == Trans::kYes ? sh.m : sh.k) + 3;
          const size_t ldb = (tb == Trans::kYes ? sh.k : sh.n) + 2;
          const size_t ldc = sh.n + 1;
          std::vector<float> a((ta == Trans::kYes ? sh.k : sh.m) * lda);
          std::vector<float> b((tb == Trans::kYes ? sh.n : sh.k) * ldb);
          std::vector<float> c(sh.m * ldc);
          for (float& v : a) v = static_cast<float>(rng.Normal());
          for (float& v : b) v = static_cast<float>(rng.Normal());
          for (float& v : c) v = beta == 0.0f ? std::numeric_limits<float>::quiet_NaN()
                                             : static_cast<float>(rng.Normal());
          std::vector<float> want = c;
          if (beta == 0.0f) std::fill(want.begin(), want.end(), 0.0f);
          engine::Gemm(ta, tb, sh.m, sh.n, sh.k, a.data(), lda, b.data(), ldb, beta, want.data(),
                       ldc);
          auto da = DeviceFloats::Allocate(a.size());
          auto db = DeviceFloats::Allocate(b.size());
          auto dc = DeviceFloats::Allocate(c.size());
          ASSERT_TRUE(da.ok() && db.ok() && dc.ok());
          ASSERT_TRUE(copy(da->get(), a.data(), a.size(), cudaMemcpyHostToDevice));
          ASSERT_TRUE(copy(db->get(), b.data(), b.size(), cudaMemcpyHostToDevice));
          ASSERT_TRUE(copy(dc->get(), c.data(), c.size(), cudaMemcpyHostToDevice));
          ASSERT_TRUE(Gemm(*handle, ta, tb, sh.m, sh.n, sh.k, da->get(), lda, db->get(), ldb, beta,
                           dc->get(), ldc)
                          .ok());
          ASSERT_EQ(cudaStreamSynchronize(stream->get()), cudaSuccess);
          std::vector<float> got(c.size());
          ASSERT_TRUE(copy(got.data(), dc->get(), got.size(), cudaMemcpyDeviceToHost));
          for (size_t i = 0; i < sh.m; ++i) {
            for (size_t j = 0; j < sh.n; ++j) {
              const float w = want[i * ldc + j];
              ASSERT_NEAR(got[i * ldc + j], w, 1e-4 * std::sqrt(sh.k) * (1 + std::abs(w)))
                  << sh.m << "x" << sh.n << "x" << sh.k << " ta " << (ta == Trans::kYes)
                  << " tb " << (tb == Trans::kYes) << " beta " << beta << " at " << i << "," << j;
            }
            // Padding columns of C are never written.
            EXPECT_EQ(std::isnan(got[i * ldc + sh.n]), beta == 0.0f);
          }
        }
      }
    }
  }
}

// DeviceMemoryInUse (gpu_cnn_bench's memory figure) sees an engine's
// buffers come and go: at least its parameter arena (means and variances)
// while it lives, and back within the allocator's slack when it is gone.
TEST(CudaEngine, DeviceMemoryInUseCountsAnEnginesBuffers) {
  SKIP_WITHOUT_GPU();
  Architecture arch;
  arch.input = Flat(1024);
  arch.layers = {Lin(1024, 1024), Act(Layer::RELU), Lin(1024, 11)};
  arch.head = {HeadKind::kClassification, 10};
  const size_t arena = 2 * arch.num_parameters() * sizeof(float);
  const size_t before = DeviceMemoryInUse(0);
  {
    std::unique_ptr<CudaEngine> gpu = MakeGpu(arch, 64);
    ASSERT_NE(gpu, nullptr);
    EXPECT_GE(DeviceMemoryInUse(0), before + arena);
  }
  EXPECT_LT(DeviceMemoryInUse(0), before + arena);
}

// Runs everywhere: a device that does not exist is a clear error.
TEST(CudaEngine, AbsentDeviceIsFailedPrecondition) {
  Architecture arch;
  arch.input = Flat(2);
  arch.layers = {Lin(2, 1)};
  arch.head = {HeadKind::kRegression, 0};
  auto gpu = CudaEngine::Create(arch, 4, 1023);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(gpu.status().message().find("cuda:1023"), absl::string_view::npos) << gpu.status();
}

// Runs everywhere: an invalid architecture is refused before any device is
// touched, with the spec's message.
TEST(CudaEngine, InvalidArchitectureIsInvalidArgument) {
  Architecture arch;
  arch.input = Flat(3);
  arch.layers = {Lin(2, 1)};
  arch.head = {HeadKind::kRegression, 0};
  auto gpu = CudaEngine::Create(arch, 4, 1023);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kInvalidArgument) << gpu.status();
}

}  // namespace
}  // namespace tagi::engine::cuda
