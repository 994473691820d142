// The per-element formulas of the TAGI engine (docs/maths.md sections 3,
// 4, 7 and 12), written once for both engines: the CPU layers (activation.cc,
// output.cc, linear.cc) call them in their loops and the CUDA kernels
// (cuda/kernels.cu, cuda/image_kernels.cu) call them per thread; norm.cc
// too. So the CPU engine's tests (the
// double-precision reference, the broken engines) check the arithmetic the
// GPU runs, and the GPU parity tests are left with the indexing, the
// launches and the products.
//
// The header is plain C++17 with no project includes so that nvcc compiles
// it on its own. Each function is __host__ __device__ under nvcc and inline
// elsewhere; the math functions are the C library's float/double ones,
// which CUDA provides on the device under the same names.
#ifndef TAGI_WORKER_ENGINE_ELEMENTWISE_H_
#define TAGI_WORKER_ENGINE_ELEMENTWISE_H_

#include <math.h>

#if defined(__CUDACC__)
#define TAGI_HOST_DEVICE __host__ __device__ inline
#else
#define TAGI_HOST_DEVICE inline
#endif

namespace tagi::engine::elementwise {

// The activation kinds, numbered as engine::LayerKind (static_asserts in
// activation.cc and cuda/cuda_engine.cc keep them equal).
enum ActivationKind : int {
  kRelu = 2,
  kLeakyRelu = 3,
  kSigmoid = 4,
  kTanh = 5,
  kSoftplus = 6,
  kMixtureRelu = 7,
};

// Moments of one unit through an activation and its jcb = cov(a, z) / var(z).
struct Moments {
  float mu;
  float var;
  float jcb;
};

constexpr float kMixtureFloor = 1e-6f;  // docs/maths.md section 3: floor of mu_a and var_a
constexpr double kInvSqrt2 = 0.70710678118654752;
constexpr double kInvSqrt2Pi = 0.39894228040143268;

// Rectified Gaussian moments of max(z, 0), z ~ N(mu, var). In double: for a
// large mu / sd the variance E[a^2] - mu_a^2 cancels almost completely, and
// float would lose it (mu 300, var 0.01 came out 22 % low).
TAGI_HOST_DEVICE Moments MixtureRelu(float mu_f, float var_f) {
  if (!(var_f > 0.0f)) {
    const float m = mu_f < kMixtureFloor ? kMixtureFloor : mu_f;
    return {m, kMixtureFloor, mu_f > 0.0f ? 1.0f : 0.0f};
  }
  const double mu = mu_f;
  const double var = var_f;
  const double sd = sqrt(var);
  const double alpha = mu / sd;
  const double cdf = 0.5 * erfc(-alpha * kInvSqrt2);
  const double pdf = kInvSqrt2Pi * exp(-0.5 * alpha * alpha);
  const double mu_a = mu * cdf + sd * pdf;
  const double second = (mu * mu + var) * cdf + mu * sd * pdf;  // E[a^2]
  const double var_a = second - mu_a * mu_a;
  const float m = static_cast<float>(mu_a);
  const float v = static_cast<float>(var_a);
  return {m < kMixtureFloor ? kMixtureFloor : m, v < kMixtureFloor ? kMixtureFloor : v,
          static_cast<float>(cdf)};
}

// Linearised at the mean: a ~ f(mu) + f'(mu) (z - mu).
TAGI_HOST_DEVICE Moments Linearised(float f, float slope, float var) {
  return {f, slope * slope * var, slope};
}

// One unit through activation `kind` (slope: LEAKY_RELU only). An unknown
// kind passes the unit through. REQUIRES: var >= 0.
TAGI_HOST_DEVICE Moments Activate(int kind, float slope, float mu, float var) {
  switch (kind) {
    case kRelu:
      return mu > 0.0f ? Moments{mu, var, 1.0f} : Moments{0.0f, 0.0f, 0.0f};
    case kLeakyRelu:
      return mu > 0.0f ? Moments{mu, var, 1.0f} : Moments{slope * mu, slope * slope * var, slope};
    case kSigmoid: {
      const float s = 1.0f / (1.0f + expf(-mu));
      return Linearised(s, s * (1.0f - s), var);
    }
    case kTanh: {
      const float t = tanhf(mu);
      return Linearised(t, 1.0f - t * t, var);
    }
    case kSoftplus: {
      // log(1 + e^mu) without overflow; its slope is the logistic function.
      const float sp = mu > 0.0f ? mu + log1pf(expf(-mu)) : log1pf(expf(mu));
      return Linearised(sp, 1.0f / (1.0f + expf(-mu)), var);
    }
    case kMixtureRelu:
      return MixtureRelu(mu, var);
    default:
      return {mu, var, 1.0f};
  }
}

// ReLU as the branch-free hot loop of most networks writes it.
TAGI_HOST_DEVICE Moments Relu(float mu, float var) {
  const float on = mu > 0.0f ? 1.0f : 0.0f;
  return {on * mu, on * var, on};
}

// Innovation of one observed output with noise variance var_v; zero when
// the target is masked (NaN), the gain is not finite, or the output is not
// (an output that overflowed teaches nothing rather than NaN everywhere).
TAGI_HOST_DEVICE void Observe(float mu, float var, float y, float var_v, float* dmu, float* dvar) {
  const float k = 1.0f / (var + var_v);
  const float d = k * (y - mu);
  if (isnan(y) || !isfinite(k) || !isfinite(d)) {
    *dmu = 0.0f;
    *dvar = 0.0f;
    return;
  }
  *dmu = d;
  *dvar = -k;
}

// d clamped to [-cap, cap] (sign(d) * min(|d|, cap)), comparing as
// std::min(std::max(d, -cap), cap) does.
TAGI_HOST_DEVICE float Capped(float d, float cap) {
  const float lo = d < -cap ? -cap : d;
  return cap < lo ? cap : lo;
}

// The capped step of one parameter with the variance floor (docs/maths.md
// section 7): each delta is clamped to sqrt(var) / cap_factor, and a
// variance that would not stay positive becomes variance_floor.
TAGI_HOST_DEVICE void CappedStep(float inv_cap_factor, float variance_floor, float delta_mu,
                                 float delta_var, float* mu, float* var) {
  const float cap = sqrtf(*var) * inv_cap_factor;
  const float v = *var + Capped(delta_var, cap);
  *mu += Capped(delta_mu, cap);
  *var = v <= 0.0f ? variance_floor : v;
}

// BatchNorm and LayerNorm (docs/maths.md section 12): the TAGI product
// of gamma with the input standardised by (mean, r = 1 / sqrt(var + eps)),
// plus beta. second_g = mu_g^2 + var_g, computed once per channel.
TAGI_HOST_DEVICE void Normalise(float mu_a, float var_a, float mean, float r, float mu_g,
                                float second_g, float var_g, float mu_b, float var_b, float* mu_z,
                                float* var_z) {
  const float centred = mu_a - mean;
  *mu_z = r * centred * mu_g + mu_b;
  *var_z = r * r * (var_a * second_g + var_g * centred * centred) + var_b;
}

// The factor of gamma's delta terms for one input (the statistics are
// constants in backward): its delta adds g * delta_mu, and g^2 * delta_var.
TAGI_HOST_DEVICE float GammaFactor(float mu_a, float mean, float r, float var_g) {
  return r * (mu_a - mean) * var_g;
}

// A running statistic moved towards the batch's: `momentum` is the weight
// of the old value (0 for the first training batch, which replaces it).
TAGI_HOST_DEVICE float RunningUpdate(float old_value, float batch_value, float momentum) {
  return momentum * old_value + (1.0f - momentum) * batch_value;
}

}  // namespace tagi::engine::elementwise

#undef TAGI_HOST_DEVICE

#endif  // TAGI_WORKER_ENGINE_ELEMENTWISE_H_
