#include "worker/engine/linear.h"

#include <algorithm>

#include "worker/engine/blas.h"
#include "worker/engine/elementwise.h"
#include "worker/engine/cpu_layers.h"

namespace tagi::engine {

void Linear::Refresh(const LayerIo& io) {
  RefreshWeightSquares({io.params[0].mu, io.params[0].var}, weights(), io.derived);
}

void Linear::Forward(const LayerIo& io, Mode /*mode*/) {
  const size_t batch = io.batch;
  const GaussianView w = io.params[0];
  const GaussianView b = io.params[1];
  const float* mu_a = io.in.mu;
  float* mu_z = io.out.mu;
  float* var_z = io.out.var;
  // Start from the biases, then accumulate the products (beta = 1).
  for (size_t s = 0; s < batch; ++s) {
    std::copy_n(b.mu, out_, mu_z + s * out_);
    std::copy_n(b.var, out_, var_z + s * out_);
  }
  float* __restrict sq = io.scratch;
  for (size_t i = 0; i < batch * in_; ++i) sq[i] = mu_a[i] * mu_a[i];

  // mu_z = mu_a mu_w^T + mu_b
  Gemm(Trans::kNo, Trans::kYes, batch, out_, in_, mu_a, in_, w.mu, in_, 1.0f, mu_z, out_,
       io.team);
  // var_z = var_a (mu_w^2 + var_w)^T + mu_a^2 var_w^T + var_b; the data's
  // variance is zero, which skips the first product.
  if (!io.input_is_data) {
    Gemm(Trans::kNo, Trans::kYes, batch, out_, in_, io.in.var, in_, io.derived + weights(), in_,
         1.0f, var_z, out_, io.team);
  }
  Gemm(Trans::kNo, Trans::kYes, batch, out_, in_, sq, in_, w.var, in_, 1.0f, var_z, out_,
       io.team);
}

void Linear::Backward(const LayerIo& io) {
  const size_t batch = io.batch;
  const float* dmu = io.delta_out.mu;
  const float* dvar = io.delta_out.var;
  const GaussianView w = io.params[0];
  const GaussianView dw = io.deltas[0];
  const GaussianView db = io.deltas[1];
  // The biases (the top of the layer's parameters) first.
  const float* var_b = io.params[1].var;
  for (size_t o = 0; o < out_; ++o) {
    float sum_mu = 0.0f;
    float sum_var = 0.0f;
    for (size_t s = 0; s < batch; ++s) {
      sum_mu += dmu[s * out_ + o];
      sum_var += dvar[s * out_ + o];
    }
    db.mu[o] = var_b[o] * sum_mu;
    db.var[o] = var_b[o] * var_b[o] * sum_var;
  }
  // Weight deltas, summed over the batch against the same prior:
  // delta_mu_w = var_w * (dmu^T mu_a), delta_var_w = var_w^2 * (dvar^T mu_a^2).
  // A large layer computes them in blocks of rows from the last, each
  // handed out as soon as it is final (the same blocks whether anyone
  // listens or not, so the bits do not depend on the overlap).
  const size_t rows = RowsPerDeltaBlock(out_, in_);
  for (size_t end = out_; end > 0;) {
    const size_t begin = end > rows ? end - rows : 0;
    const size_t n = end - begin;
    float* dmw = dw.mu + begin * in_;
    float* dvw = dw.var + begin * in_;
    Gemm(Trans::kYes, Trans::kNo, n, in_, batch, dmu + begin, out_, io.in.mu, in_, 0.0f, dmw,
         in_, io.team);
    Gemm(Trans::kYes, Trans::kNo, n, in_, batch, dvar + begin, out_, io.scratch, in_, 0.0f, dvw,
         in_, io.team);
    const float* __restrict var_w = w.var + begin * in_;
    for (size_t i = 0; i < n * in_; ++i) {
      dmw[i] *= var_w[i];
      dvw[i] *= var_w[i] * var_w[i];
    }
    if (io.deltas_final != nullptr) (*io.deltas_final)(dmw);
    end = begin;
  }
  if (io.delta_in.mu == nullptr) return;
  // Innovations of the input units (only the weight means enter):
  // delta_mu_a = dmu mu_w, delta_var_a = dvar mu_w^2.
  Gemm(Trans::kNo, Trans::kNo, batch, in_, out_, dmu, out_, w.mu, in_, 0.0f, io.delta_in.mu, in_,
       io.team);
  Gemm(Trans::kNo, Trans::kNo, batch, in_, out_, dvar, out_, io.derived, in_, 0.0f,
       io.delta_in.var, in_, io.team);
}

size_t RowsPerDeltaBlock(size_t out, size_t in) {
  if (out * in < kDeltaBlockSplitWeights) return out;
  return std::max<size_t>(1, kDeltaBlockWeights / in);
}

void Linear::ApplyStep(const LayerIo& io, float inv_cap, float variance_floor) {
  float* __restrict mw = io.params[0].mu;
  float* __restrict vw = io.params[0].var;
  const float* __restrict dmw = io.deltas[0].mu;
  const float* __restrict dvw = io.deltas[0].var;
  float* __restrict msq = io.derived;
  float* __restrict second = io.derived + weights();
  for (size_t i = 0; i < weights(); ++i) {
    float m = mw[i];
    float v = vw[i];
    elementwise::CappedStep(inv_cap, variance_floor, dmw[i], dvw[i], &m, &v);
    mw[i] = m;
    vw[i] = v;
    msq[i] = m * m;
    second[i] = m * m + v;
  }
  const GaussianView b = io.params[1];
  const GaussianView db = io.deltas[1];
  for (size_t o = 0; o < out_; ++o) {
    elementwise::CappedStep(inv_cap, variance_floor, db.mu[o], db.var[o], &b.mu[o], &b.var[o]);
  }
}

using Made = absl::StatusOr<std::unique_ptr<Layer>>;

void RegisterLinearLayers(CpuLayerRegistry& r) {
  r.Add(tagi::v1::Layer::LINEAR, [](const spec::PlannedLayer& p) -> Made {
    return std::make_unique<Linear>(p.spec.in, p.spec.out);
  });
}

}  // namespace tagi::engine
