// The maths of the output heads beside hierarchical softmax (docs/heads.md,
// which states every formula): the output activations REMAX and
// CLOSED_FORM_SOFTMAX (over the K units of one sample) and EVEN_EXP (over
// [mean, log-noise] pairs), the one-hot output update, and the
// heteroscedastic output update that learns the noise of each target.
//
// Written once for both engines, like elementwise.h: the CPU layers
// (head_layers.cc, output.cc) call these functions in their loops, the CUDA
// kernels (cuda/kernels.cu) once per sample or unit. Plain C++17 with no
// project includes but elementwise.h, so that nvcc compiles it on its own.
//
// Convention (the engine's, layer.h): a layer's output innovations are
// normalised, mu+ = mu + var * delta_mu and var+ = var + var^2 * delta_var,
// and an activation's Backward multiplies them by its jcb (and jcb^2). So
// the reference library's innovations for the pre-activation z equal the
// ones written here times the activation's jcb: the heteroscedastic update
// below writes, for the noise unit, (m+ - m) / s and (s+ - s) / s^2, which
// EVEN_EXP's Backward turns into the reference's Jv (m+ - m) and
// Jv^2 (s+ - s) with Jv = jcb / s.
#ifndef TAGI_WORKER_ENGINE_HEADS_H_
#define TAGI_WORKER_ENGINE_HEADS_H_

#include <math.h>
#include <stddef.h>

#include "worker/engine/elementwise.h"

#if defined(__CUDACC__)
#define TAGI_HOST_DEVICE __host__ __device__ inline
#else
#define TAGI_HOST_DEVICE inline
#endif

namespace tagi::engine::heads {

// The floor of Remax's unnormalised means (and of MixtureReLU's moments).
constexpr float kRemaxFloor = 1e-6f;

// Log-normal matching of a positive variable with mean mu and variance var:
// the variance and mean of its logarithm. ln(1 + x) and exp(x) - 1 are
// taken as log1p and expm1 throughout: the reference's logf(1 + x) and
// expf(x) - 1 lose most digits of a small x in float (a variance of 1e-4
// came out 0.2 % off), and these are the same functions, exactly.
TAGI_HOST_DEVICE float LogVariance(float mu, float var) { return log1pf(var / (mu * mu)); }
TAGI_HOST_DEVICE float LogMean(float mu, float log_var) { return logf(mu) - 0.5f * log_var; }

// The smaller of a and b as std::min(a, b) compares: b < a ? b : a (a NaN
// b leaves a).
TAGI_HOST_DEVICE float MinOf(float a, float b) { return b < a ? b : a; }

// REMAX over one sample's k units: M = MixtureReLU(Z), A_j = M_j / sum M by
// log-normal matching, renormalised so that the means sum to 1.
// mu_a and var_a double as scratch between the passes (they may not alias
// mu_z or var_z).
TAGI_HOST_DEVICE void RemaxRow(const float* mu_z, const float* var_z, size_t k, float* mu_a,
                               float* var_a, float* jcb) {
  float mu_t = 0.0f;
  float var_t = 0.0f;
  for (size_t j = 0; j < k; ++j) {
    const elementwise::Moments m = elementwise::MixtureRelu(mu_z[j], var_z[j]);
    mu_t += m.mu;
    var_t += m.var;
  }
  const float vl_t = LogVariance(mu_t, var_t);
  const float ml_t = LogMean(mu_t, vl_t);
  float total = 0.0f;
  for (size_t j = 0; j < k; ++j) {
    const elementwise::Moments m = elementwise::MixtureRelu(mu_z[j], var_z[j]);
    const float vl = LogVariance(m.mu, m.var);
    const float cov = log1pf(m.var / (mu_t * m.mu));
    const float ml_a = LogMean(m.mu, vl) - ml_t;
    const float vl_a = vl + vl_t - 2.0f * cov;
    const float a = expf(ml_a + 0.5f * vl_a);
    mu_a[j] = a < kRemaxFloor ? kRemaxFloor : a;  // unnormalised, for now
    var_a[j] = vl_a;                              // the log-variance, for now
    total += mu_a[j];
  }
  for (size_t j = 0; j < k; ++j) {
    const elementwise::Moments m = elementwise::MixtureRelu(mu_z[j], var_z[j]);
    const float vl = LogVariance(m.mu, m.var);
    const float cov = log1pf(m.var / (mu_t * m.mu));
    const float mu = mu_a[j] / total;
    const float var = expm1f(var_a[j]) * mu * mu;
    const float cov_am = expm1f(vl - cov) * mu * m.mu;
    // m.jcb is Phi(mu_z / sd_z), MixtureReLU's jcb.
    const float bound = sqrtf(var) * sqrtf(var_z[j]);
    jcb[j] = MinOf(bound, cov_am / m.jcb) / var_z[j];
    mu_a[j] = mu;
    var_a[j] = var;
  }
}

// CLOSED_FORM_SOFTMAX over one sample's k units: E = exp(Z) log-normal,
// A_j = E_j / sum E by log-normal matching, not renormalised. Two changes
// from the reference's float code, neither changing the maths:
//  - the units are shifted by the largest mu_z + var_z / 2 first: every
//    moment below is invariant to a common shift of mu_z (E and its sum
//    scale alike), and then every mu_E is at most 1;
//  - the row is computed in double: var_E = mu_E^2 (exp(var_z) - 1) grows
//    like exp(var_z), and a network's output variances reach 100 and more
//    (the MNIST CNN at its initialisation: median 18, largest 120), which
//    overflows a float and turned the whole model to NaN within an epoch;
// Neither changes a number the reference computes where it stays finite.
// What remains (docs/heads.md): the log-normal moments themselves are not
// bounded; when a row's output variances differ widely (var_z 120 next to
// 20) the matched mean of the lower one is about e^100, past a float;
// such a unit is left out of the update (below), and the head stops
// learning: the MNIST CNN at sigma_v 0.05 never passes 11 %, at sigma_v 0.2
// it collapses in its third epoch.
// var_E / (mu_S mu_E) is taken as mu_E (exp(v) - 1) / mu_S, so a unit far
// below the largest (mu_E underflowing to 0) gives c = 0, not 0 / 0.
TAGI_HOST_DEVICE void ClosedFormSoftmaxRow(const float* mu_z, const float* var_z, size_t k,
                                           float* mu_a, float* var_a, float* jcb) {
  double shift = mu_z[0] + 0.5 * var_z[0];
  for (size_t j = 1; j < k; ++j) {
    const double top = mu_z[j] + 0.5 * var_z[j];
    shift = top > shift ? top : shift;
  }
  double mu_s = 0.0;
  double var_s = 0.0;
  for (size_t j = 0; j < k; ++j) {
    const double v = var_z[j];
    const double mu_e = exp(mu_z[j] - shift + 0.5 * v);
    mu_s += mu_e;
    var_s += mu_e * mu_e * expm1(v);
  }
  const double vl_s = log1p(var_s / (mu_s * mu_s));
  const double ml_s = log(mu_s) - 0.5 * vl_s;
  for (size_t j = 0; j < k; ++j) {
    const double m = mu_z[j] - shift;
    const double v = var_z[j];
    const double mu_e = exp(m + 0.5 * v);
    const double c = log1p(mu_e * expm1(v) / mu_s);
    const double ml = m - ml_s;
    const double vl = v + vl_s - 2.0 * c;
    const double mu = exp(ml + 0.5 * vl);
    mu_a[j] = static_cast<float>(mu);
    var_a[j] = static_cast<float>(expm1(vl) * mu * mu);
    // A unit whose moments overflowed passes no innovation back (its
    // output update is zero too: elementwise.h Observe), as the reference
    // zeroes a non-finite gain; otherwise 0 * inf spread NaN to every
    // parameter in one step.
    const float j_float = static_cast<float>(mu * (v - c) / v);
    jcb[j] = isfinite(j_float) && isfinite(mu_a[j]) && isfinite(var_a[j]) ? j_float : 0.0f;
  }
}

// EVEN_EXP on flat unit i (over batch x width, width even): an even unit
// (a mean) passes through with jcb 1, an odd one (a log-noise) becomes
// exp(Z), log-normal, with jcb = cov(exp(Z), Z) / var(Z) = its mean.
TAGI_HOST_DEVICE elementwise::Moments EvenExp(size_t i, float mu, float var) {
  if (i % 2 == 0) return {mu, var, 1.0f};
  const float m = expf(mu + 0.5f * var);
  return {m, expf(2.0f * mu + var) * expm1f(var), m};
}

// One-hot classification: every unit of a sample observed, 1 for its label
// and 0 for the other classes, with noise variance var_v.
TAGI_HOST_DEVICE void OneHotObserve(float mu, float var, bool is_label, float var_v, float* dmu,
                                    float* dvar) {
  elementwise::Observe(mu, var, is_label ? 1.0f : 0.0f, var_v, dmu, dvar);
}

// The heteroscedastic update of one target y from its pair: the mean unit
// (mu, var) and the noise unit (m, s: EVEN_EXP's output, the noise
// variance's mean and variance, whose jcb is j). Writes the innovations of
// both units (see the convention above); a target that is not finite, and
// a noise unit whose gain j / s is not finite, give zeros.
TAGI_HOST_DEVICE void HeteroscedasticPair(float mu, float var, float m, float s, float j, float y,
                                          float* dmu_mean, float* dvar_mean, float* dmu_noise,
                                          float* dvar_noise) {
  *dmu_mean = 0.0f;
  *dvar_mean = 0.0f;
  *dmu_noise = 0.0f;
  *dvar_noise = 0.0f;
  if (!isfinite(y)) return;
  const float var_v2 = 3.0f * s + 2.0f * m * m;
  const float total = var + m;
  *dmu_mean = (y - mu) / total;
  *dvar_mean = -1.0f / total;
  const float mu_v = m / total * (y - mu);
  const float var_v = m - m * m / total;
  const float e_post = mu_v * mu_v + var_v;
  const float var_post = 2.0f * var_v * var_v + 4.0f * var_v * mu_v * mu_v;
  const float kappa = s / var_v2;
  const float m_post = m + kappa * (e_post - m);
  const float s_post = s + kappa * kappa * (var_post - var_v2);
  if (!isfinite(j / s)) return;
  *dmu_noise = (m_post - m) / s;
  *dvar_noise = (s_post - s) / (s * s);
}

}  // namespace tagi::engine::heads

#undef TAGI_HOST_DEVICE

#endif  // TAGI_WORKER_ENGINE_HEADS_H_
