#include "worker/engine/activation.h"

#include <bit>
#include <cstdint>

#include "worker/engine/cpu_layers.h"

namespace tagi::engine {

// elementwise.h restates the proto's activation numbers for device code
// (nvcc does not read the protobuf headers); they must agree.
static_assert(static_cast<int>(tagi::v1::Layer::RELU) == elementwise::kRelu);
static_assert(static_cast<int>(tagi::v1::Layer::LEAKY_RELU) == elementwise::kLeakyRelu);
static_assert(static_cast<int>(tagi::v1::Layer::SIGMOID) == elementwise::kSigmoid);
static_assert(static_cast<int>(tagi::v1::Layer::TANH) == elementwise::kTanh);
static_assert(static_cast<int>(tagi::v1::Layer::SOFTPLUS) == elementwise::kSoftplus);
static_assert(static_cast<int>(tagi::v1::Layer::MIXTURE_RELU) == elementwise::kMixtureRelu);

ActivationMoments Activate(LayerKind kind, float slope, float mu, float var) {
  return elementwise::Activate(static_cast<int>(kind), slope, mu, var);
}

namespace {

// The mixture ReLU over units [begin, end): most of ResNet18's activations,
// branch-free so that the loop vectorises (it was a tenth of the step as
// scalar double libm). Compiled for AVX-512 and AVX2 besides the baseline
// (SSE2, four lanes), the widest the CPU has picked when the program loads.
// This file builds with -ffp-contract=off, so no variant fuses a multiply
// and an add: each computes every unit with the same float operations, and
// a result does not depend on which one ran.
__attribute__((target_clones("avx512f", "avx2", "default"))) void MixtureReluRange(
    const float* __restrict mz, const float* __restrict vz, float* __restrict ma,
    float* __restrict va, float* __restrict jcb, size_t begin, size_t end) {
  for (size_t i = begin; i < end; ++i) {
    const elementwise::Moments m = elementwise::MixtureRelu(mz[i], vz[i]);
    ma[i] = m.mu;
    va[i] = m.var;
    jcb[i] = m.jcb;
  }
}

}  // namespace

void Activation::Forward(const LayerIo& io, Mode /*mode*/) {
  const size_t n = io.batch * width_;
  const float* __restrict mz = io.in.mu;
  const float* __restrict vz = io.in.var;
  float* __restrict ma = io.out.mu;
  float* __restrict va = io.out.var;
  float* __restrict jcb = io.out_jcb;
  const int kind = static_cast<int>(kind_);
  const float slope = slope_;
  ParallelFor(io.team, n, kParallelMinElements, [&](size_t begin, size_t end) {
    if (kind == tagi::v1::Layer::RELU) {
      // The hot path of most networks: elementwise::Relu's numbers, with
      // its 0/1 factor made from a mask so that the compiler vectorises the
      // loop (a float select compiled to a branch, mispredicted for half of
      // the units: this loop was 8-10 % of the CNN's step).
      for (size_t i = begin; i < end; ++i) {
        const uint32_t mask = 0u - static_cast<uint32_t>(mz[i] > 0.0f);
        const float on = std::bit_cast<float>(std::bit_cast<uint32_t>(1.0f) & mask);
        ma[i] = on * mz[i];
        va[i] = on * vz[i];
        jcb[i] = on;
      }
      return;
    }
    if (kind == tagi::v1::Layer::MIXTURE_RELU) {
      MixtureReluRange(mz, vz, ma, va, jcb, begin, end);
      return;
    }
    for (size_t i = begin; i < end; ++i) {
      const elementwise::Moments m = elementwise::Activate(kind, slope, mz[i], vz[i]);
      ma[i] = m.mu;
      va[i] = m.var;
      jcb[i] = m.jcb;
    }
  });
}

void JcbBackward(const LayerIo& io, size_t n) {
  if (io.delta_in.mu == nullptr) return;
  const float* __restrict jcb = io.out_jcb;
  const float* __restrict dmu = io.delta_out.mu;
  const float* __restrict dvar = io.delta_out.var;
  float* __restrict dmu_in = io.delta_in.mu;
  float* __restrict dvar_in = io.delta_in.var;
  ParallelFor(io.team, n, kParallelMinElements, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      dmu_in[i] = jcb[i] * dmu[i];
      dvar_in[i] = jcb[i] * jcb[i] * dvar[i];
    }
  });
}

void Activation::Backward(const LayerIo& io) { JcbBackward(io, io.batch * width_); }

using Made = absl::StatusOr<std::unique_ptr<Layer>>;

void RegisterActivationLayers(CpuLayerRegistry& r) {
  for (const spec::LayerKind kind :
       {tagi::v1::Layer::RELU, tagi::v1::Layer::LEAKY_RELU, tagi::v1::Layer::SIGMOID,
        tagi::v1::Layer::TANH, tagi::v1::Layer::SOFTPLUS, tagi::v1::Layer::MIXTURE_RELU}) {
    r.Add(kind, [](const spec::PlannedLayer& p) -> Made {
      return std::make_unique<Activation>(p.spec.kind, p.spec.slope, p.in.size());
    });
  }
}

}  // namespace tagi::engine
