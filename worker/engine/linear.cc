#include "worker/engine/linear.h"

#include <algorithm>
#include <cmath>

#include "worker/engine/blas.h"
#include "worker/engine/elementwise.h"

namespace tagi::engine {

void Linear::Reserve(size_t max_batch) {
  mu_w_sq_.resize(num_weights());
  w_second_.resize(num_weights());
  in_mu_sq_.resize(max_batch * in_);
}

void Linear::Bind(LinearParams params, LinearParams deltas) {
  p_ = params;
  d_ = deltas;
}

void Linear::Initialize(Rng& rng, InitMethod method, float gain_w, float gain_b) {
  const double fan_in = static_cast<double>(in_);
  const double fan_out = static_cast<double>(out_);
  const double scale = method == InitMethod::kHe ? std::sqrt(1.0 / fan_in)
                                                 : std::sqrt(2.0 / (fan_in + fan_out));
  const auto var_w = static_cast<float>((gain_w * scale) * (gain_w * scale));
  const auto var_b = static_cast<float>((gain_b * scale) * (gain_b * scale));
  for (size_t i = 0; i < num_weights(); ++i) {
    p_.w.mu[i] = static_cast<float>(scale * rng.Normal());
    p_.w.var[i] = var_w;
  }
  for (size_t o = 0; o < out_; ++o) {
    p_.b.mu[o] = static_cast<float>(scale * rng.Normal());
    p_.b.var[o] = var_b;
  }
  RefreshDerived();
}

void Linear::RefreshDerived() {
  for (size_t i = 0; i < num_weights(); ++i) {
    const float m = p_.w.mu[i];
    mu_w_sq_[i] = m * m;
    w_second_[i] = m * m + p_.w.var[i];
  }
}

void Linear::Forward(const HiddenState& in, HiddenState& out, size_t batch) {
  const float* mu_a = in.units.mu();
  const float* var_a = in.units.var();
  float* mu_z = out.units.mu();
  float* var_z = out.units.var();
  // Start from the biases, then accumulate the products (beta = 1).
  for (size_t b = 0; b < batch; ++b) {
    std::copy_n(p_.b.mu, out_, mu_z + b * out_);
    std::copy_n(p_.b.var, out_, var_z + b * out_);
  }
  float* __restrict sq = in_mu_sq_.data();
  for (size_t i = 0; i < batch * in_; ++i) sq[i] = mu_a[i] * mu_a[i];

  // mu_z = mu_a mu_w^T + mu_b
  Gemm(Trans::kNo, Trans::kYes, batch, out_, in_, mu_a, in_, p_.w.mu, in_, 1.0f, mu_z, out_);
  // var_z = var_a (mu_w^2 + var_w)^T + mu_a^2 var_w^T + var_b
  if (!input_variance_zero_) {
    Gemm(Trans::kNo, Trans::kYes, batch, out_, in_, var_a, in_, w_second_.data(), in_, 1.0f,
         var_z, out_);
  }
  Gemm(Trans::kNo, Trans::kYes, batch, out_, in_, sq, in_, p_.w.var, in_, 1.0f, var_z, out_);
}

void Linear::Backward(const HiddenState& in, const HiddenState& /*out*/,
                      ConstGaussianView delta_out, GaussianView delta_in, size_t batch,
                      bool need_input_delta) {
  const float* dmu = delta_out.mu;
  const float* dvar = delta_out.var;
  // Parameter deltas, summed over the batch against the same prior:
  // delta_mu_w = var_w * (dmu^T mu_a), delta_var_w = var_w^2 * (dvar^T mu_a^2).
  Gemm(Trans::kYes, Trans::kNo, out_, in_, batch, dmu, out_, in.units.mu(), in_, 0.0f,
       d_.w.mu, in_);
  Gemm(Trans::kYes, Trans::kNo, out_, in_, batch, dvar, out_, in_mu_sq_.data(), in_, 0.0f,
       d_.w.var, in_);
  {
    const float* __restrict var_w = p_.w.var;
    float* __restrict dmw = d_.w.mu;
    float* __restrict dvw = d_.w.var;
    for (size_t i = 0; i < num_weights(); ++i) {
      dmw[i] *= var_w[i];
      dvw[i] *= var_w[i] * var_w[i];
    }
  }
  for (size_t o = 0; o < out_; ++o) {
    float sum_mu = 0.0f;
    float sum_var = 0.0f;
    for (size_t b = 0; b < batch; ++b) {
      sum_mu += dmu[b * out_ + o];
      sum_var += dvar[b * out_ + o];
    }
    const float vb = p_.b.var[o];
    d_.b.mu[o] = vb * sum_mu;
    d_.b.var[o] = vb * vb * sum_var;
  }
  if (!need_input_delta) return;
  // Innovations of the input units (only the weight means enter):
  // delta_mu_a = dmu mu_w, delta_var_a = dvar mu_w^2.
  Gemm(Trans::kNo, Trans::kNo, batch, in_, out_, dmu, out_, p_.w.mu, in_, 0.0f, delta_in.mu, in_);
  Gemm(Trans::kNo, Trans::kNo, batch, in_, out_, dvar, out_, mu_w_sq_.data(), in_, 0.0f,
       delta_in.var, in_);
}

void Linear::ApplyStep(float cap_factor, float variance_floor) {
  const float inv_cap = 1.0f / cap_factor;
  float* __restrict mw = p_.w.mu;
  float* __restrict vw = p_.w.var;
  const float* __restrict dmw = d_.w.mu;
  const float* __restrict dvw = d_.w.var;
  float* __restrict msq = mu_w_sq_.data();
  float* __restrict second = w_second_.data();
  for (size_t i = 0; i < num_weights(); ++i) {
    float m = mw[i];
    float v = vw[i];
    elementwise::CappedStep(inv_cap, variance_floor, dmw[i], dvw[i], &m, &v);
    mw[i] = m;
    vw[i] = v;
    msq[i] = m * m;
    second[i] = m * m + v;
  }
  for (size_t o = 0; o < out_; ++o) {
    elementwise::CappedStep(inv_cap, variance_floor, d_.b.mu[o], d_.b.var[o], &p_.b.mu[o],
                            &p_.b.var[o]);
  }
}

}  // namespace tagi::engine
