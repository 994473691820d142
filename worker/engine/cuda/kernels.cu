// Kernels of kernels.h. Plain grid-stride loops, one element per thread
// step: the products dominate the time, these only have to stream memory.
// The per-element formulas are the CPU engine's own (elementwise.h).
#include "worker/engine/cuda/kernels.h"

#include "worker/engine/cuda/launch.h"
#include "worker/engine/elementwise.h"
#include "worker/engine/heads.h"

namespace tagi::engine::cuda::kernels {
namespace {

using elementwise::ActivateUnit;
using elementwise::Moments;
using elementwise::Observe;

__global__ void BroadcastBiasKernel(const float* mu_b, const float* var_b, size_t out, size_t n,
                                    float* mu_z, float* var_z) {
  TAGI_GRID_STRIDE(i, n) {
    const size_t o = i % out;
    mu_z[i] = mu_b[o];
    var_z[i] = var_b[o];
  }
}

__global__ void SquareKernel(const float* x, size_t n, float* y) {
  TAGI_GRID_STRIDE(i, n) { y[i] = x[i] * x[i]; }
}

__global__ void FlagNonFiniteKernel(const float* x, size_t n, float* flag) {
  // Every writer writes the same value: the result does not depend on order.
  TAGI_GRID_STRIDE(i, n) {
    if (!isfinite(x[i])) *flag = 1.0f;
  }
}

__global__ void SplitKPartialsKernel(bool ta, bool tb, size_t m, size_t n, size_t k,
                                     const float* a, size_t lda, const float* b, size_t ldb,
                                     size_t slices, float* partials) {
  const size_t len = (k + slices - 1) / slices;
  TAGI_GRID_STRIDE(t, slices * m * n) {
    const size_t s = t / (m * n);
    const size_t i = (t % (m * n)) / n;
    const size_t j = t % n;
    const size_t end = (s + 1) * len < k ? (s + 1) * len : k;
    float acc = 0.0f;
    for (size_t kk = s * len; kk < end; ++kk) {
      acc += (ta ? a[kk * lda + i] : a[i * lda + kk]) * (tb ? b[j * ldb + kk] : b[kk * ldb + j]);
    }
    partials[t] = acc;
  }
}

__global__ void SplitKSumKernel(size_t m, size_t n, size_t slices, const float* partials,
                                float beta, float* c, size_t ldc) {
  TAGI_GRID_STRIDE(t, m * n) {
    float sum = 0.0f;
    for (size_t s = 0; s < slices; ++s) sum += partials[s * m * n + t];
    float& out = c[(t / n) * ldc + t % n];
    out = beta == 0.0f ? sum : sum + beta * out;
  }
}

__global__ void ReluKernel(const float* mz, const float* vz, size_t n, float* ma, float* va,
                           float* jcb) {
  TAGI_GRID_STRIDE(i, n) {
    const Moments m = elementwise::Relu(mz[i], vz[i]);
    ma[i] = m.mu;
    va[i] = m.var;
    jcb[i] = m.jcb;
  }
}

__global__ void ActivationKernel(int kind, float slope, const float* mz, const float* vz, size_t n,
                                 float* ma, float* va, float* jcb) {
  TAGI_GRID_STRIDE(i, n) {
    const Moments m = ActivateUnit(kind, slope, mz[i], vz[i]);
    ma[i] = m.mu;
    va[i] = m.var;
    jcb[i] = m.jcb;
  }
}

__global__ void ActivationBackwardKernel(const float* jcb, const float* dmu, const float* dvar,
                                         size_t n, float* dmu_in, float* dvar_in) {
  TAGI_GRID_STRIDE(i, n) {
    dmu_in[i] = jcb[i] * dmu[i];
    dvar_in[i] = jcb[i] * jcb[i] * dvar[i];
  }
}

__global__ void RegressionKernel(const float* mu, const float* var, const float* y, size_t n,
                                 float var_v, float* dmu, float* dvar) {
  TAGI_GRID_STRIDE(i, n) { Observe(mu[i], var[i], y[i], var_v, &dmu[i], &dvar[i]); }
}

// One thread per (sample, level).
__global__ void HsmKernel(const float* mu, const float* var, size_t width, const int32_t* labels,
                          const int32_t* nodes, const float* node_targets, int levels, size_t n,
                          float var_v, float* dmu, float* dvar) {
  TAGI_GRID_STRIDE(t, n) {
    const size_t b = t / static_cast<size_t>(levels);
    const size_t l = t % static_cast<size_t>(levels);
    const size_t entry = static_cast<size_t>(labels[b]) * levels + l;
    const size_t i = b * width + static_cast<size_t>(nodes[entry]);
    Observe(mu[i], var[i], node_targets[entry], var_v, &dmu[i], &dvar[i]);
  }
}

// One thread per sample: the K units of a row depend on each other.
__global__ void SoftmaxKernel(bool remax, const float* mz, const float* vz, size_t width,
                              size_t batch, float* ma, float* va, float* jcb) {
  TAGI_GRID_STRIDE(b, batch) {
    const size_t row = b * width;
    if (remax) {
      heads::RemaxRow(mz + row, vz + row, width, ma + row, va + row, jcb + row);
    } else {
      heads::ClosedFormSoftmaxRow(mz + row, vz + row, width, ma + row, va + row, jcb + row);
    }
  }
}

__global__ void EvenExpKernel(const float* mz, const float* vz, size_t n, float* ma, float* va,
                              float* jcb) {
  TAGI_GRID_STRIDE(i, n) {
    const Moments m = heads::EvenExp(i, mz[i], vz[i]);
    ma[i] = m.mu;
    va[i] = m.var;
    jcb[i] = m.jcb;
  }
}

__global__ void OneHotKernel(const float* mu, const float* var, size_t width,
                             const int32_t* labels, size_t n, float var_v, float* dmu,
                             float* dvar) {
  TAGI_GRID_STRIDE(i, n) {
    const size_t b = i / width;
    const bool is_label = static_cast<size_t>(labels[b]) == i % width;
    heads::OneHotObserve(mu[i], var[i], is_label, var_v, &dmu[i], &dvar[i]);
  }
}

// One thread per target (a [mean, noise] pair of units).
__global__ void HeteroscedasticKernel(const float* mu, const float* var, const float* jcb,
                                      const float* y, size_t n, float* dmu, float* dvar) {
  TAGI_GRID_STRIDE(t, n) {
    const size_t m = 2 * t;
    heads::HeteroscedasticPair(mu[m], var[m], mu[m + 1], var[m + 1], jcb[m + 1], y[t], &dmu[m],
                               &dvar[m], &dmu[m + 1], &dvar[m + 1]);
  }
}

__global__ void ScaleWeightDeltasKernel(const float* var_w, size_t n, float* dmw, float* dvw) {
  TAGI_GRID_STRIDE(i, n) {
    dmw[i] *= var_w[i];
    dvw[i] *= var_w[i] * var_w[i];
  }
}

// One thread per output; the batch is summed in order, as on the CPU.
__global__ void BiasDeltasKernel(const float* dmu, const float* dvar, size_t batch, size_t out,
                                 const float* var_b, float* dmb, float* dvb) {
  TAGI_GRID_STRIDE(o, out) {
    float sum_mu = 0.0f;
    float sum_var = 0.0f;
    for (size_t b = 0; b < batch; ++b) {
      sum_mu += dmu[b * out + o];
      sum_var += dvar[b * out + o];
    }
    const float vb = var_b[o];
    dmb[o] = vb * sum_mu;
    dvb[o] = vb * vb * sum_var;
  }
}

__global__ void CappedStepKernel(float inv_cap, float floor_v, size_t n, float* mu, float* var,
                                 const float* dmu, const float* dvar, const float* var_scale,
                                 float scale, float* mu_sq, float* second) {
  TAGI_GRID_STRIDE(i, n) {
    float m = mu[i];
    float v = var[i];
    float d_mu = dmu[i];
    float d_var = dvar[i];
    if (var_scale != nullptr) {
      const float vs = var_scale[i];
      d_mu *= vs;
      d_var *= vs * vs;
    }
    d_mu *= scale;
    d_var *= scale;
    elementwise::CappedStep(inv_cap, floor_v, d_mu, d_var, &m, &v);
    mu[i] = m;
    var[i] = v;
    if (mu_sq != nullptr) {
      mu_sq[i] = m * m;
      second[i] = m * m + v;
    }
  }
}

__global__ void RefreshDerivedKernel(const float* mu, const float* var, size_t n, float* mu_sq,
                                     float* second) {
  TAGI_GRID_STRIDE(i, n) {
    const float m = mu[i];
    mu_sq[i] = m * m;
    second[i] = m * m + var[i];
  }
}

__global__ void AddGaussiansKernel(const float* am, const float* av, const float* bm,
                                   const float* bv, size_t n, float* om, float* ov) {
  TAGI_GRID_STRIDE(i, n) {
    om[i] = am[i] + bm[i];
    ov[i] = av[i] + bv[i];
  }
}

__global__ void AccumulateKernel(const float* sm, const float* sv, size_t n, float* dm, float* dv) {
  TAGI_GRID_STRIDE(i, n) {
    dm[i] += sm[i];
    dv[i] += sv[i];
  }
}

__global__ void ScaleKernel(float* x, size_t n, float s) {
  TAGI_GRID_STRIDE(i, n) { x[i] *= s; }
}

}  // namespace

cudaError_t BroadcastBias(const float* mu_b, const float* var_b, size_t batch, size_t out,
                          float* mu_z, float* var_z, cudaStream_t stream) {
  const size_t n = batch * out;
  return Launch(BroadcastBiasKernel, n, stream, mu_b, var_b, out, n, mu_z, var_z);
}

cudaError_t Square(const float* x, size_t n, float* y, cudaStream_t stream) {
  return Launch(SquareKernel, n, stream, x, n, y);
}

cudaError_t ActivationForward(int kind, float slope, const float* mu_z, const float* var_z,
                              size_t n, float* mu_a, float* var_a, float* jcb,
                              cudaStream_t stream) {
  if (kind == elementwise::kRelu) {
    return Launch(ReluKernel, n, stream, mu_z, var_z, n, mu_a, var_a, jcb);
  }
  return Launch(ActivationKernel, n, stream, kind, slope, mu_z, var_z, n, mu_a, var_a, jcb);
}

cudaError_t ActivationBackward(const float* jcb, const float* delta_mu, const float* delta_var,
                               size_t n, float* delta_mu_in, float* delta_var_in,
                               cudaStream_t stream) {
  return Launch(ActivationBackwardKernel, n, stream, jcb, delta_mu, delta_var, n, delta_mu_in,
                delta_var_in);
}

cudaError_t RegressionDeltas(const float* mu, const float* var, const float* targets, size_t n,
                             float var_v, float* delta_mu, float* delta_var, cudaStream_t stream) {
  return Launch(RegressionKernel, n, stream, mu, var, targets, n, var_v, delta_mu, delta_var);
}

cudaError_t HsmDeltas(const float* mu, const float* var, size_t batch, size_t width,
                      const int32_t* labels, const int32_t* nodes, const float* node_targets,
                      int levels, float var_v, float* delta_mu, float* delta_var,
                      cudaStream_t stream) {
  const size_t n = batch * static_cast<size_t>(levels);
  return Launch(HsmKernel, n, stream, mu, var, width, labels, nodes, node_targets, levels, n, var_v,
                delta_mu, delta_var);
}

cudaError_t SoftmaxForward(bool remax, const float* mu_z, const float* var_z, size_t batch,
                           size_t width, float* mu_a, float* var_a, float* jcb,
                           cudaStream_t stream) {
  return Launch(SoftmaxKernel, batch, stream, remax, mu_z, var_z, width, batch, mu_a, var_a, jcb);
}

cudaError_t EvenExpForward(const float* mu_z, const float* var_z, size_t n, float* mu_a,
                           float* var_a, float* jcb, cudaStream_t stream) {
  return Launch(EvenExpKernel, n, stream, mu_z, var_z, n, mu_a, var_a, jcb);
}

cudaError_t OneHotDeltas(const float* mu, const float* var, size_t batch, size_t width,
                         const int32_t* labels, float var_v, float* delta_mu, float* delta_var,
                         cudaStream_t stream) {
  const size_t n = batch * width;
  return Launch(OneHotKernel, n, stream, mu, var, width, labels, n, var_v, delta_mu, delta_var);
}

cudaError_t HeteroscedasticDeltas(const float* mu, const float* var, const float* jcb,
                                  const float* targets, size_t n, float* delta_mu,
                                  float* delta_var, cudaStream_t stream) {
  return Launch(HeteroscedasticKernel, n, stream, mu, var, jcb, targets, n, delta_mu, delta_var);
}

cudaError_t ScaleWeightDeltas(const float* var_w, size_t n, float* delta_mu_w, float* delta_var_w,
                              cudaStream_t stream) {
  return Launch(ScaleWeightDeltasKernel, n, stream, var_w, n, delta_mu_w, delta_var_w);
}

cudaError_t BiasDeltas(const float* delta_mu, const float* delta_var, size_t batch, size_t out,
                       const float* var_b, float* delta_mu_b, float* delta_var_b,
                       cudaStream_t stream) {
  return Launch(BiasDeltasKernel, out, stream, delta_mu, delta_var, batch, out, var_b, delta_mu_b,
                delta_var_b);
}

cudaError_t CappedStep(float inv_cap_factor, float variance_floor, size_t n, float* mu, float* var,
                       const float* delta_mu, const float* delta_var, const float* var_scale,
                       float scale, float* mu_sq, float* second, cudaStream_t stream) {
  return Launch(CappedStepKernel, n, stream, inv_cap_factor, variance_floor, n, mu, var, delta_mu,
                delta_var, var_scale, scale, mu_sq, second);
}

cudaError_t RefreshDerived(const float* mu, const float* var, size_t n, float* mu_sq, float* second,
                           cudaStream_t stream) {
  return Launch(RefreshDerivedKernel, n, stream, mu, var, n, mu_sq, second);
}

cudaError_t AddGaussians(const float* a_mu, const float* a_var, const float* b_mu,
                         const float* b_var, size_t n, float* out_mu, float* out_var,
                         cudaStream_t stream) {
  return Launch(AddGaussiansKernel, n, stream, a_mu, a_var, b_mu, b_var, n, out_mu, out_var);
}

cudaError_t Accumulate(const float* src_mu, const float* src_var, size_t n, float* dst_mu,
                       float* dst_var, cudaStream_t stream) {
  return Launch(AccumulateKernel, n, stream, src_mu, src_var, n, dst_mu, dst_var);
}

cudaError_t Scale(float* x, size_t n, float scale, cudaStream_t stream) {
  return Launch(ScaleKernel, n, stream, x, n, scale);
}

cudaError_t FlagNonFinite(const float* x, size_t n, float* flag, cudaStream_t stream) {
  return Launch(FlagNonFiniteKernel, n, stream, x, n, flag);
}

cudaError_t SplitKPartials(bool ta, bool tb, size_t m, size_t n, size_t k, const float* a,
                           size_t lda, const float* b, size_t ldb, size_t slices,
                           float* partials, cudaStream_t stream) {
  return Launch(SplitKPartialsKernel, slices * m * n, stream, ta, tb, m, n, k, a, lda, b, ldb,
                slices, partials);
}

cudaError_t SplitKSum(size_t m, size_t n, size_t slices, const float* partials, float beta,
                      float* c, size_t ldc, cudaStream_t stream) {
  return Launch(SplitKSumKernel, m * n, stream, m, n, slices, partials, beta, c, ldc);
}

}  // namespace tagi::engine::cuda::kernels
