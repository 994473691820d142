#include "worker/engine/activation.h"

namespace tagi::engine {

static_assert(static_cast<int>(LayerKind::kRelu) == elementwise::kRelu);
static_assert(static_cast<int>(LayerKind::kLeakyRelu) == elementwise::kLeakyRelu);
static_assert(static_cast<int>(LayerKind::kSigmoid) == elementwise::kSigmoid);
static_assert(static_cast<int>(LayerKind::kTanh) == elementwise::kTanh);
static_assert(static_cast<int>(LayerKind::kSoftplus) == elementwise::kSoftplus);
static_assert(static_cast<int>(LayerKind::kMixtureRelu) == elementwise::kMixtureRelu);

namespace {

template <typename F>
void ForEachUnit(const HiddenState& in, HiddenState& out, size_t n, F f) {
  const float* __restrict mz = in.units.mu();
  const float* __restrict vz = in.units.var();
  float* __restrict ma = out.units.mu();
  float* __restrict va = out.units.var();
  float* __restrict jcb = out.jcb.data();
  for (size_t i = 0; i < n; ++i) {
    const ActivationMoments m = f(mz[i], vz[i]);
    ma[i] = m.mu;
    va[i] = m.var;
    jcb[i] = m.jcb;
  }
}

}  // namespace

ActivationMoments Activate(LayerKind kind, float slope, float mu, float var) {
  return elementwise::Activate(static_cast<int>(kind), slope, mu, var);
}

void Activation::Forward(const HiddenState& in, HiddenState& out, size_t batch) {
  const size_t n = batch * in.width;
  switch (kind_) {
    case LayerKind::kRelu: {
      // The hot path of most networks: a branch-free loop.
      const float* __restrict mz = in.units.mu();
      const float* __restrict vz = in.units.var();
      float* __restrict ma = out.units.mu();
      float* __restrict va = out.units.var();
      float* __restrict jcb = out.jcb.data();
      for (size_t i = 0; i < n; ++i) {
        const elementwise::Moments m = elementwise::Relu(mz[i], vz[i]);
        ma[i] = m.mu;
        va[i] = m.var;
        jcb[i] = m.jcb;
      }
      break;
    }
    default: {
      const LayerKind kind = kind_;
      const float slope = slope_;
      ForEachUnit(in, out, n, [kind, slope](float mu, float var) {
        return Activate(kind, slope, mu, var);
      });
    }
  }
}

void Activation::Backward(const HiddenState& /*in*/, const HiddenState& out,
                          ConstGaussianView delta_out, GaussianView delta_in,
                          size_t batch, bool need_input_delta) {
  if (!need_input_delta) return;
  const size_t n = batch * out.width;
  const float* __restrict jcb = out.jcb.data();
  const float* __restrict dmu = delta_out.mu;
  const float* __restrict dvar = delta_out.var;
  float* __restrict dmu_in = delta_in.mu;
  float* __restrict dvar_in = delta_in.var;
  for (size_t i = 0; i < n; ++i) {
    dmu_in[i] = jcb[i] * dmu[i];
    dvar_in[i] = jcb[i] * jcb[i] * dvar[i];
  }
}

}  // namespace tagi::engine
