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
#include <string.h>

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
constexpr float kInvSqrt2Pi = 0.398942280f;

// 2^n as a float, from its exponent bits. REQUIRES: -126 <= n <= 127.
TAGI_HOST_DEVICE float Pow2(int n) {
  const int bits = (n + 127) << 23;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

// e^y in float for -87 <= y <= 0, without branches or library calls, so
// that the compiler vectorises loops over it: y = n ln 2 + r with |r| <=
// ln 2 / 2 (ln 2 in two parts, the first exact times any such n), e^r by
// its Taylor series to r^7 (truncation below 1e-8 relative).
TAGI_HOST_DEVICE float ExpNonPositive(float y) {
  constexpr float kLog2e = 1.44269504f;
  constexpr float kLn2Hi = 0.693145751953125f;  // 15 significant bits
  constexpr float kLn2Lo = 1.42860677e-6f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float n = (y * kLog2e + kRound) - kRound;
  const float r = (y - n * kLn2Hi) - n * kLn2Lo;
  const float p =
      1.0f +
      r * (1.0f +
           r * (1.0f / 2 +
                r * (1.0f / 6 +
                     r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
  return p * Pow2(static_cast<int>(n));
}

// For x >= 0 and z standard normal: the upper tail Q = P(z > x) and the
// first two moments of the excess over x, r = E[max(z - x, 0)] = phi - x Q
// and s = E[max(z - x, 0)^2] = (1 + x^2) Q - x phi (phi the density at x).
struct Tail {
  float q;
  float r;
  float s;
};

// All three are taken as 0 past kTailEnd, where they are below 6e-16:
// beside 1 they are below float's resolution, and the moments they make on
// the far negative side are below sd * 1e-16, which the 1e-6 floor
// replaces. Stopping there also keeps their products out of the denormals,
// which cost some CPUs a hundred cycles each.
constexpr float kTailEnd = 8.0f;

// One fitted function, B = s / phi = (1 + x^2) Q / phi - x, gives all
// three without a difference of nearly equal numbers (x B < 0.32):
// Q = phi (B + x) / (1 + x^2), r = phi (1 - x B) / (1 + x^2), s = phi B.
// B = t^3 P(t), t = 1 / (1 + x / 4), P fitted by tools/fit_gauss_tail.py:
// relative error below 8e-7 in float on [0, kTailEnd]. Branch-free, like
// ExpNonPositive.
TAGI_HOST_DEVICE Tail GaussTail(float x) {
  const float in = x <= kTailEnd ? 1.0f : 0.0f;  // 0 for NaN too
  const float xc = x <= kTailEnd ? x : kTailEnd;
  const float t = 1.0f / (1.0f + 0.25f * xc);
  const float p =
      3.141266480e-02f +
      t * (8.770043403e-02f +
           t * (2.462760806e-01f +
                t * (-1.585982591e-01f +
                     t * (1.707671881e+00f +
                          t * (-2.669107199e+00f +
                               t * (3.944501400e+00f +
                                    t * (-2.475811243e+00f + t * 5.392683148e-01f)))))));
  const float b = p * t * t * t;
  const float pdf = in * kInvSqrt2Pi * ExpNonPositive(-0.5f * xc * xc);
  const float inv = 1.0f / (1.0f + xc * xc);
  return {pdf * (b + xc) * inv, pdf * (1.0f - xc * b) * inv, pdf * b};
}

// Rectified Gaussian moments of max(z, 0), z ~ N(mu, var), in float and
// without cancellation (docs/maths.md section 3). With alpha = mu / sd,
// x = |alpha| and the tail (q, r, s) at x:
//   alpha < 0:  mu_a = sd r,       var_a = var (s - r^2),
//               jcb = Phi(alpha) = q;
//   alpha >= 0: mu_a = mu + sd r,  var_a = var (1 - q - r (x + r)),
//               jcb = 1 - q.
// Far on the positive side r and q -> 0, so var_a -> var with no
// difference of large numbers (E[a^2] - mu_a^2 taken in float lost 22 % at
// mu 300, var 0.01); s - r^2 cancels by at most a third. activation_test
// sweeps alpha against long double: relative errors about 1e-6, growing on
// the negative side as 1e-7 x^2 with the rounding of alpha inside
// exp(-x^2 / 2). Branch-free: activation.cc's loop over it vectorises. A
// non-finite mu gives NaN moments.
TAGI_HOST_DEVICE Moments MixtureRelu(float mu, float var) {
  const bool spread = var > 0.0f;
  const float v = spread ? var : 1.0f;
  const float sd = sqrtf(v);
  const float alpha = mu / sd;
  const bool positive = alpha >= 0.0f;
  const float x = positive ? alpha : -alpha;
  const float xc = x <= kTailEnd ? x : kTailEnd;
  const Tail tail = GaussTail(x);
  const float h = positive ? 1.0f - tail.q - tail.r * (xc + tail.r) : tail.s - tail.r * tail.r;
  const float cdf = positive ? 1.0f - tail.q : tail.q;
  const float not_finite = mu - mu;  // NaN for an infinite or NaN mu, else 0
  const float rect = positive ? mu : 0.0f;
  const float mu_a = (spread ? rect + sd * tail.r : mu) + not_finite;
  const float var_a = spread ? v * h + not_finite : 0.0f;
  const float jcb = spread ? cdf : (mu > 0.0f ? 1.0f : 0.0f);
  return {mu_a < kMixtureFloor ? kMixtureFloor : mu_a,
          var_a < kMixtureFloor ? kMixtureFloor : var_a, jcb};
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

// One unit as an activation layer's loop computes it: RELU branch-free
// (Relu; its zeros keep the sign of mu), every other kind by Activate. The
// CUDA activation kernels (kernels.cu; RELU's own kernel calls Relu) and
// the norms' fused passes call this, so a fused pass gives the bits of the
// activation's own.
TAGI_HOST_DEVICE Moments ActivateUnit(int kind, float slope, float mu, float var) {
  return kind == kRelu ? Relu(mu, var) : Activate(kind, slope, mu, var);
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
