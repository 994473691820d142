// GPU tests of the CUDA engine against the CPU engine, its numerical spec
// (STYLE.md: every fast kernel is checked against the plain one). They run
// where a CUDA device is present and skip with the runtime's reason
// everywhere else.
//
// Parity: for random networks (every activation kind, both heads) and
// random batches, the CUDA and CPU engines start from the same bits and
// must agree, step after step, on the forward output (means, variances),
// the output innovations, every parameter delta and the updated parameters,
// within 1e-4 relative in fp32. Element k passes when
//   |gpu - cpu| <= 1e-4 * max(|cpu|, floor)
// where floor is 1e-2 of the largest magnitude of that tensor half (a sum
// over a batch or a layer can cancel to a tiny number whose relative error
// is meaningless; the products sum in a different order on the GPU).
// A case whose ReLU inputs come within 1e-4 of zero is redrawn: there a
// last-bit difference may legitimately flip the unit.
#include "worker/engine/cuda/cuda_engine.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"
#include "tests/engine/naive_tagi.h"
#include "worker/engine/cpu_engine.h"
#include "worker/engine/cuda/device.h"
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

LayerDesc Lin(uint32_t in, uint32_t out) { return {LayerKind::kLinear, in, out, 0.0f}; }
LayerDesc Act(LayerKind kind, float slope = 0.0f) { return {kind, 0, 0, slope}; }

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

struct Case {
  Architecture arch;
  size_t batch = 1;
  float sigma_v = 1.0f;
  uint64_t seed = 0;
};

// A random network: 1 to 3 hidden layers of width 1..64 with any activation
// (an activation may also end the network), then either head.
Case RandomCase(uint64_t seed) {
  Rng rng(seed);
  static constexpr LayerKind kKinds[] = {LayerKind::kRelu,     LayerKind::kLeakyRelu,
                                         LayerKind::kSigmoid,  LayerKind::kTanh,
                                         LayerKind::kSoftplus, LayerKind::kMixtureRelu};
  Case c;
  c.seed = seed;
  c.batch = 1 + rng.Below(40);
  c.sigma_v = static_cast<float>(0.2 + rng.Uniform());
  const bool hsm = rng.Below(2) == 0;
  const uint32_t classes = 2 + static_cast<uint32_t>(rng.Below(11));
  const uint32_t out = hsm ? static_cast<uint32_t>(HsmTree::OutputWidth(classes))
                           : 1 + static_cast<uint32_t>(rng.Below(5));
  uint32_t width = 1 + static_cast<uint32_t>(rng.Below(64));
  const int hidden = 1 + static_cast<int>(rng.Below(3));
  for (int l = 0; l < hidden; ++l) {
    const uint32_t next = 1 + static_cast<uint32_t>(rng.Below(64));
    c.arch.layers.push_back(Lin(width, next));
    const LayerKind kind = kKinds[rng.Below(6)];
    c.arch.layers.push_back(Act(kind, kind == LayerKind::kLeakyRelu ? 0.1f : 0.0f));
    width = next;
  }
  c.arch.layers.push_back(Lin(width, out));
  if (!hsm && rng.Below(4) == 0) c.arch.layers.push_back(Act(LayerKind::kTanh));
  c.arch.head =
      hsm ? HeadDesc{HeadKind::kClassification, classes} : HeadDesc{HeadKind::kRegression, 0};
  return c;
}

// The CPU reference of the output innovations (output.h) after a forward.
void CpuInnovations(const Architecture& arch, ConstGaussianView out, size_t batch,
                    const std::vector<int32_t>& labels, const std::vector<float>& targets,
                    float sigma_v, std::vector<float>& dmu, std::vector<float>& dvar) {
  const size_t n = batch * arch.output_width();
  dmu.assign(n, 0.0f);
  dvar.assign(n, 0.0f);
  if (arch.head.kind == HeadKind::kClassification) {
    HsmTree tree(static_cast<int>(arch.head.num_classes));
    HsmDeltas(tree, out, batch, labels.data(), sigma_v, {dmu.data(), dvar.data()});
  } else {
    RegressionDeltas(out, targets.data(), n, sigma_v, {dmu.data(), dvar.data()});
  }
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
    SCOPED_TRACE("step " + std::to_string(step));
    const std::vector<float> x = Normal(rng, c.batch * in, 1.0);
    std::vector<int32_t> labels;
    std::vector<float> targets;
    if (hsm) {
      for (size_t b = 0; b < c.batch; ++b) {
        labels.push_back(static_cast<int32_t>(rng.Below(c.arch.head.num_classes)));
      }
    } else {
      targets = Normal(rng, n_out, 1.0);
      targets[0] = std::numeric_limits<float>::quiet_NaN();  // a masked output
    }
    {
      EXPECT_TRUE(cpu->ReadParameters(p_cpu).ok());
      testing::NaiveTagi naive(c.arch, p_cpu);
      naive.Forward(x.data(), c.batch);
      if (naive.relu_margin() < kMinReluMargin) return false;
    }
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

    EXPECT_TRUE(cpu->ReadDeltas(d_cpu).ok());
    EXPECT_TRUE(gpu->ReadDeltas(d_gpu).ok());
    ExpectNear(d_gpu, d_cpu, 2, "parameter deltas");

    const float cap = CapFactor(c.batch);
    EXPECT_TRUE(cpu->ApplyStep(cap).ok());
    EXPECT_TRUE(gpu->ApplyStep(cap).ok());
    EXPECT_TRUE(cpu->ReadParameters(p_cpu).ok());
    EXPECT_TRUE(gpu->ReadParameters(p_gpu).ok());
    ExpectNear(p_gpu, p_cpu, 2, "updated parameters");
  }
  return true;
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

TEST(CudaEngineParity, FashionMnistShapedNetworkMatchesTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.arch.layers = {Lin(784, 100), Act(LayerKind::kRelu), Lin(100, 100), Act(LayerKind::kRelu),
                   Lin(100, 11)};
  c.arch.head = {HeadKind::kClassification, 10};
  c.batch = 16;
  c.sigma_v = 1.0f;
  for (c.seed = 11; c.seed < 15; ++c.seed) {
    if (CompareSteps(c, 5)) return;
  }
  FAIL() << "every seed put a ReLU input within 1e-4 of zero";
}

TEST(CudaEngineParity, WideSmoothNetworkMatchesTheCpuEngine) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.arch.layers = {Lin(784, 512), Act(LayerKind::kMixtureRelu), Lin(512, 256),
                   Act(LayerKind::kTanh), Lin(256, 11)};
  c.arch.head = {HeadKind::kClassification, 10};
  c.batch = 128;
  c.sigma_v = 0.5f;
  c.seed = 3;
  EXPECT_TRUE(CompareSteps(c, 2));
}

TEST(CudaEngine, ParametersRoundTripBitExactlyAndMatchTheCpuFingerprint) {
  SKIP_WITHOUT_GPU();
  const Case c = RandomCase(99);
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

TEST(CudaEngine, EvaluationBatchLargerThanReservedGrowsAndMatches) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.arch.layers = {Lin(20, 30), Act(LayerKind::kSigmoid), Lin(30, 3)};
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
  c.arch.layers = {Lin(10, 40), Act(LayerKind::kRelu), Lin(40, 11)};
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

// The reduce buffer, in device memory and staged through the host: the
// control word comes back, and EndReduce scales the deltas.
TEST(CudaEngine, ReduceBufferCarriesTheControlWordAndScales) {
  SKIP_WITHOUT_GPU();
  Case c = RandomCase(17);
  auto gpu = MakeGpu(c.arch, c.batch);
  ASSERT_NE(gpu, nullptr);
  ASSERT_TRUE(gpu->Initialize(1, {}).ok());
  Rng rng(2);
  const std::vector<float> x = Normal(rng, c.batch * c.arch.input_width(), 1.0);
  std::vector<int32_t> labels(c.batch, 1);
  std::vector<float> targets(c.batch * c.arch.output_width(), 0.5f);
  ASSERT_TRUE(gpu->TrainStep(x.data(), labels.data(), targets.data(), c.batch, 1.0f).ok());
  const size_t n = gpu->num_parameters();
  std::vector<float> before(2 * n), after(2 * n);
  ASSERT_TRUE(gpu->ReadDeltas(before).ok());

  auto host = gpu->BeginReduce(/*device_memory=*/false, 1.0f);
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_EQ(host->size(), 2 * n + Model::kControlWords);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), host->begin()))
      << "the host reduce buffer is the packed CPU layout";
  for (float& v : *host) v *= 2.0f;  // what a world of two identical ranks sums to
  auto control = gpu->EndReduce(0.5f);
  ASSERT_TRUE(control.ok()) << control.status();
  EXPECT_EQ(*control, 2.0f);
  ASSERT_TRUE(gpu->ReadDeltas(after).ok());
  EXPECT_EQ(after, before);

  auto device = gpu->BeginReduce(/*device_memory=*/true, 1.0f);
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_GE(device->size(), 2 * n + Model::kControlWords);
  control = gpu->EndReduce(0.25f);
  ASSERT_TRUE(control.ok()) << control.status();
  EXPECT_EQ(*control, 1.0f);
  ASSERT_TRUE(gpu->ReadDeltas(after).ok());
  for (size_t k = 0; k < after.size(); ++k) ASSERT_EQ(after[k], 0.25f * before[k]) << k;

  EXPECT_EQ(gpu->EndReduce(1.0f).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Runs everywhere: a device that does not exist is a clear error.
TEST(CudaEngine, AbsentDeviceIsFailedPrecondition) {
  Architecture arch;
  arch.layers = {Lin(2, 1)};
  arch.head = {HeadKind::kRegression, 0};
  auto gpu = CudaEngine::Create(arch, 4, 1023);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(gpu.status().message().find("cuda:1023"), absl::string_view::npos) << gpu.status();
}

}  // namespace
}  // namespace tagi::engine::cuda
