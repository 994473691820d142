// Activations against docs/maths.md section 3 (forward moments and jcb)
// and section 2 (backward scales innovations by jcb and jcb^2). Expected
// values are written out with their arithmetic, or computed in double
// precision directly from those formulas.
#include "worker/engine/activation.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "spec/kinds.h"
#include "tests/engine/layer_harness.h"
#include "worker/engine/elementwise.h"

namespace tagi::engine {
namespace {

constexpr double kPi = 3.14159265358979323846;

// docs/maths.md section 3, MixtureReLU, in double precision (without the floors).
struct Moments {
  double mu;
  double var;
  double jcb;
};
Moments RectifiedGaussian(double mu, double var) {
  const double sd = std::sqrt(var);
  const double alpha = mu / sd;
  const double cdf = 0.5 * std::erfc(-alpha / std::sqrt(2.0));
  const double pdf = std::exp(-0.5 * alpha * alpha) / std::sqrt(2.0 * kPi);
  const double mu_a = mu * cdf + sd * pdf;
  const double second = (mu * mu + var) * cdf + mu * sd * pdf;
  return {mu_a, second - mu_a * mu_a, cdf};
}

// E[a], Var[a] and cov(a, z) / var(z) for a = max(z, 0), z ~ N(mu, var), by
// composite Simpson integration over mu +- 12 sd.
Moments IntegrateRelu(double mu, double var) {
  const double sd = std::sqrt(var);
  const int n = 200000;  // even
  const double lo = mu - 12.0 * sd;
  const double h = 24.0 * sd / n;
  double e1 = 0.0, e2 = 0.0, ez = 0.0;
  for (int i = 0; i <= n; ++i) {
    const double z = lo + i * h;
    const double w = (i == 0 || i == n) ? 1.0 : (i % 2 == 1 ? 4.0 : 2.0);
    const double pdf = std::exp(-0.5 * (z - mu) * (z - mu) / var) / (sd * std::sqrt(2.0 * kPi));
    const double a = z > 0.0 ? z : 0.0;
    e1 += w * a * pdf;
    e2 += w * a * a * pdf;
    ez += w * a * (z - mu) * pdf;
  }
  e1 *= h / 3.0;
  e2 *= h / 3.0;
  ez *= h / 3.0;
  return {e1, e2 - e1 * e1, ez / var};
}

TEST(Activate, ReluPassesAPositiveMeanUnchanged) {
  const ActivationMoments m = Activate(v1::Layer::RELU, 0.0f, 1.5f, 0.4f);
  EXPECT_EQ(m.mu, 1.5f);
  EXPECT_EQ(m.var, 0.4f);
  EXPECT_EQ(m.jcb, 1.0f);
}

TEST(Activate, ReluZeroesANegativeOrZeroMean) {
  for (float mu : {-0.7f, 0.0f}) {
    const ActivationMoments m = Activate(v1::Layer::RELU, 0.0f, mu, 0.3f);
    EXPECT_EQ(m.mu, 0.0f) << mu;
    EXPECT_EQ(m.var, 0.0f) << mu;
    EXPECT_EQ(m.jcb, 0.0f) << mu;
  }
}

TEST(Activate, LeakyReluScalesTheNegativeSideBySlope) {
  // mu_a = k mu_z = 0.1 * -2 = -0.2; var_a = k^2 var_z = 0.01 * 0.5 = 0.005.
  const ActivationMoments neg = Activate(v1::Layer::LEAKY_RELU, 0.1f, -2.0f, 0.5f);
  EXPECT_FLOAT_EQ(neg.mu, -0.2f);
  EXPECT_FLOAT_EQ(neg.var, 0.005f);
  EXPECT_FLOAT_EQ(neg.jcb, 0.1f);
  const ActivationMoments pos = Activate(v1::Layer::LEAKY_RELU, 0.1f, 2.0f, 0.5f);
  EXPECT_EQ(pos.mu, 2.0f);
  EXPECT_EQ(pos.var, 0.5f);
  EXPECT_EQ(pos.jcb, 1.0f);
}

TEST(Activate, SigmoidIsLinearisedAtTheMean) {
  // s = 1 / (1 + e^-0.5) = 0.62245933; jcb = s (1 - s) = 0.23500371;
  // var_a = jcb^2 * 0.2 = 0.01104535.
  const ActivationMoments m = Activate(v1::Layer::SIGMOID, 0.0f, 0.5f, 0.2f);
  EXPECT_NEAR(m.mu, 0.6224593312, 1e-6);
  EXPECT_NEAR(m.jcb, 0.2350037122, 1e-6);
  EXPECT_NEAR(m.var, 0.0110453489, 1e-7);
}

TEST(Activate, TanhIsLinearisedAtTheMean) {
  // t = tanh(-0.3) = -0.29131261; jcb = 1 - t^2 = 0.91513696;
  // var_a = jcb^2 * 0.5 = 0.41873783.
  const ActivationMoments m = Activate(v1::Layer::TANH, 0.0f, -0.3f, 0.5f);
  EXPECT_NEAR(m.mu, -0.2913126125, 1e-6);
  EXPECT_NEAR(m.jcb, 0.9151369618, 1e-6);
  EXPECT_NEAR(m.var, 0.4187378295, 1e-6);
}

TEST(Activate, SoftplusIsLinearisedAtTheMean) {
  // sp = log(1 + e^1.2) = 1.46328247; jcb = 1 / (1 + e^-1.2) = 0.76852478;
  // var_a = jcb^2 * 0.3 = 0.17718910.
  const ActivationMoments m = Activate(v1::Layer::SOFTPLUS, 0.0f, 1.2f, 0.3f);
  EXPECT_NEAR(m.mu, 1.4632824673, 1e-6);
  EXPECT_NEAR(m.jcb, 0.7685247835, 1e-6);
  EXPECT_NEAR(m.var, 0.1771891029, 1e-6);
}

TEST(Activate, SmoothActivationsStayFiniteAtLargeMeans) {
  for (LayerKind kind : {v1::Layer::SIGMOID, v1::Layer::TANH, v1::Layer::SOFTPLUS}) {
    for (float mu : {-100.0f, -30.0f, 30.0f, 100.0f}) {
      const ActivationMoments m = Activate(kind, 0.0f, mu, 1.0f);
      EXPECT_TRUE(std::isfinite(m.mu) && std::isfinite(m.var) && std::isfinite(m.jcb))
          << static_cast<int>(kind) << " at " << mu;
      EXPECT_GE(m.var, 0.0f);
      EXPECT_GE(m.jcb, 0.0f);
    }
  }
  // softplus(100) = 100 + log(1 + e^-100) = 100 in float; its slope is 1.
  const ActivationMoments big = Activate(v1::Layer::SOFTPLUS, 0.0f, 100.0f, 1.0f);
  EXPECT_FLOAT_EQ(big.mu, 100.0f);
  EXPECT_FLOAT_EQ(big.jcb, 1.0f);
  // softplus(-30) = log(1 + e^-30) = 9.3576e-14, slope sigmoid(-30) the same.
  const ActivationMoments small = Activate(v1::Layer::SOFTPLUS, 0.0f, -30.0f, 1.0f);
  EXPECT_NEAR(small.mu, 9.357623e-14, 1e-18);
  EXPECT_NEAR(small.jcb, 9.357623e-14, 1e-18);
}

TEST(Activate, MixtureReluMatchesTheRectifiedGaussianMoments) {
  struct Case {
    float mu, var;
  };
  for (const Case c : {Case{0.5f, 2.0f}, Case{-1.0f, 0.25f}, Case{2.0f, 0.5f},
                       Case{-0.3f, 4.0f}}) {
    const Moments want = RectifiedGaussian(c.mu, c.var);
    const ActivationMoments got = Activate(v1::Layer::MIXTURE_RELU, 0.0f, c.mu, c.var);
    EXPECT_NEAR(got.mu, want.mu, 1e-6 + 1e-5 * want.mu) << c.mu << " " << c.var;
    EXPECT_NEAR(got.var, want.var, 1e-6 + 1e-4 * want.var) << c.mu << " " << c.var;
    EXPECT_NEAR(got.jcb, want.jcb, 1e-6) << c.mu << " " << c.var;
  }
}

// The rectified Gaussian's moments in long double, unfloored: the
// cancellations of the direct formulas stay below 1e-15 for |alpha| <= 20.
struct Exact {
  long double mu, var, jcb;
};
Exact ExactRectified(long double mu, long double var) {
  const long double sd = std::sqrt(var);
  const long double alpha = mu / sd;
  const long double cdf = 0.5L * std::erfc(-alpha / std::sqrt(2.0L));
  const long double pdf = std::exp(-0.5L * alpha * alpha) / std::sqrt(2.0L * kPi);
  const long double mu_a = mu * cdf + sd * pdf;
  const long double second = (mu * mu + var) * cdf + mu * sd * pdf;
  return {mu_a, second - mu_a * mu_a, cdf};
}

// Every alpha = mu / sd in [-20, 20] by 1/64, at three spreads, through the
// layer's vectorised loop: the jcb within 4e-7 of Phi(alpha); mu_a and
// var_a within 1e-6 (1 + x^2) relative of the exact moments (or of the
// floor), x = -alpha on the negative side and 0 on the positive. The x^2
// is the rounding of alpha inside exp(-x^2 / 2); measured here: 2e-7 and
// 5e-7 times the bound's factor.
TEST(Activate, MixtureReluIsAccurateAcrossTheWholeRange) {
  for (const float sd : {1e-3f, 1.0f, 30.0f}) {
    const size_t n = 40 * 64 + 1;
    HiddenState in, out;
    in.width = out.width = n;
    out.has_jcb = true;
    in.Reserve(1);
    out.Reserve(1);
    const float* mz = in.units.mu();
    const float* vz = in.units.var();
    for (size_t i = 0; i < n; ++i) {
      in.units.mu()[i] = sd * (static_cast<float>(i) - 20 * 64) / 64.0f;
      in.units.var()[i] = sd * sd;
    }
    Activation activation(v1::Layer::MIXTURE_RELU, 0.0f, n);
    ActivationUnderTest layer(activation);
    layer.Forward(in, out, 1);
    const float* ma = out.units.mu();
    const float* va = out.units.var();
    const float* jcb = out.jcb.data();
    double worst_mu = 0.0, worst_var = 0.0, worst_jcb = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const Exact want = ExactRectified(mz[i], vz[i]);
      const double x = mz[i] < 0.0f ? -mz[i] / sd : 0.0;
      const auto err = [](long double got, long double exact) {
        const long double floored = exact < 1e-6L ? 1e-6L : exact;
        return static_cast<double>(std::fabs(got - floored) / floored);
      };
      const double e_mu = err(ma[i], want.mu) / (1.0 + x * x);
      const double e_var = err(va[i], want.var) / (1.0 + x * x);
      const double e_jcb = std::fabs(static_cast<double>(jcb[i] - want.jcb));
      EXPECT_LT(e_mu, 1e-6) << "mu " << mz[i] << " var " << vz[i] << " got " << ma[i];
      EXPECT_LT(e_var, 1e-6) << "mu " << mz[i] << " var " << vz[i] << " got " << va[i];
      EXPECT_LT(e_jcb, 4e-7) << "mu " << mz[i] << " var " << vz[i];
      worst_mu = std::max(worst_mu, e_mu);
      worst_var = std::max(worst_var, e_var);
      worst_jcb = std::max(worst_jcb, e_jcb);
      // The scalar call computes the same numbers as the vectorised loop.
      const ActivationMoments one = Activate(v1::Layer::MIXTURE_RELU, 0.0f, mz[i], vz[i]);
      EXPECT_EQ(one.mu, ma[i]);
      EXPECT_EQ(one.var, va[i]);
      EXPECT_EQ(one.jcb, jcb[i]);
    }
    std::printf("sd %g: worst scaled relative error mu %.2e var %.2e, jcb %.2e\n", sd,
                worst_mu, worst_var, worst_jcb);
  }
}

// A diverged unit stays visible: a NaN or infinite mean gives NaN moments
// (a floored 1e-6 would hide it from the trainer's finiteness checks).
TEST(Activate, MixtureReluPropagatesANonFiniteMean) {
  for (const float mu : {std::numeric_limits<float>::quiet_NaN(),
                         std::numeric_limits<float>::infinity(),
                         -std::numeric_limits<float>::infinity()}) {
    const ActivationMoments m = Activate(v1::Layer::MIXTURE_RELU, 0.0f, mu, 0.5f);
    EXPECT_TRUE(std::isnan(m.mu)) << mu;
    EXPECT_TRUE(std::isnan(m.var)) << mu;
  }
  // A finite mean far out with a tiny spread: alpha overflows to infinity,
  // and the moments are those of the Gaussian itself.
  const ActivationMoments far = Activate(v1::Layer::MIXTURE_RELU, 0.0f, 1e30f, 1e-40f);
  EXPECT_EQ(far.mu, 1e30f);
  EXPECT_EQ(far.var, 1e-6f);
  EXPECT_EQ(far.jcb, 1.0f);
}

TEST(Activate, MixtureReluAtZeroMeanHasTheHalfNormalMoments) {
  // alpha = 0: mu_a = sd phi(0) = 1/sqrt(2 pi) = 0.39894228;
  // E[a^2] = var / 2 = 0.5; var_a = 0.5 - 1/(2 pi) = 0.34084506; jcb = 1/2.
  const ActivationMoments m = Activate(v1::Layer::MIXTURE_RELU, 0.0f, 0.0f, 1.0f);
  EXPECT_NEAR(m.mu, 0.3989422804, 1e-6);
  EXPECT_NEAR(m.var, 0.3408450569, 1e-6);
  EXPECT_NEAR(m.jcb, 0.5, 1e-7);
}

TEST(Activate, MixtureReluFloorsMeanAndVarianceAtOneMillionth) {
  // alpha = -10 / 0.1 = -100: both moments underflow to 0 and are floored.
  const ActivationMoments m = Activate(v1::Layer::MIXTURE_RELU, 0.0f, -10.0f, 0.01f);
  EXPECT_EQ(m.mu, 1e-6f);
  EXPECT_EQ(m.var, 1e-6f);
  EXPECT_NEAR(m.jcb, 0.0f, 1e-12);
}

TEST(Activate, MixtureReluAgreesWithNumericalIntegration) {
  const float mu = 0.7f, var = 1.3f;
  const Moments want = IntegrateRelu(mu, var);
  const ActivationMoments got = Activate(v1::Layer::MIXTURE_RELU, 0.0f, mu, var);
  EXPECT_NEAR(got.mu, want.mu, 1e-5);
  EXPECT_NEAR(got.var, want.var, 1e-5);
  EXPECT_NEAR(got.jcb, want.jcb, 1e-5);  // cov(a, z) / var(z) = Phi(alpha)
}

TEST(Activate, MixtureReluWithoutVarianceIsARectifierWithFlooredVariance) {
  const ActivationMoments pos = Activate(v1::Layer::MIXTURE_RELU, 0.0f, 2.0f, 0.0f);
  EXPECT_FLOAT_EQ(pos.mu, 2.0f);
  EXPECT_EQ(pos.var, 1e-6f);
  EXPECT_EQ(pos.jcb, 1.0f);
  const ActivationMoments neg = Activate(v1::Layer::MIXTURE_RELU, 0.0f, -2.0f, 0.0f);
  EXPECT_EQ(neg.mu, 1e-6f);
  EXPECT_EQ(neg.var, 1e-6f);
  EXPECT_EQ(neg.jcb, 0.0f);
}

// A batch of 2 samples x 3 units through an Activation layer.
struct ActivationFixture {
  static constexpr size_t kBatch = 2;
  static constexpr size_t kWidth = 3;
  HiddenState in, out;
  ActivationFixture() {
    in.width = out.width = kWidth;
    out.has_jcb = true;
    in.Reserve(kBatch);
    out.Reserve(kBatch);
    const float mu[] = {1.5f, -0.5f, 0.2f, -2.0f, 0.0f, 3.0f};
    const float var[] = {0.3f, 0.2f, 1.0f, 0.5f, 0.7f, 0.1f};
    for (size_t i = 0; i < kBatch * kWidth; ++i) {
      in.units.mu()[i] = mu[i];
      in.units.var()[i] = var[i];
    }
  }
};

TEST(ActivationLayer, ForwardAppliesTheUnitMomentsAndStoresJcb) {
  for (LayerKind kind : {v1::Layer::RELU, v1::Layer::LEAKY_RELU, v1::Layer::SIGMOID,
                         v1::Layer::TANH, v1::Layer::SOFTPLUS, v1::Layer::MIXTURE_RELU}) {
    ActivationFixture f;
    Activation activation(kind, 0.2f, ActivationFixture::kWidth);
    ActivationUnderTest layer(activation);
    EXPECT_TRUE(spec::RulesOf(kind)->produces_jcb());
    layer.Forward(f.in, f.out, ActivationFixture::kBatch);
    for (size_t i = 0; i < ActivationFixture::kBatch * ActivationFixture::kWidth; ++i) {
      const ActivationMoments m = Activate(kind, 0.2f, f.in.units.mu()[i], f.in.units.var()[i]);
      EXPECT_EQ(f.out.units.mu()[i], m.mu) << static_cast<int>(kind) << " unit " << i;
      EXPECT_EQ(f.out.units.var()[i], m.var) << static_cast<int>(kind) << " unit " << i;
      EXPECT_EQ(f.out.jcb[i], m.jcb) << static_cast<int>(kind) << " unit " << i;
    }
  }
}

TEST(ActivationLayer, ReluForwardRectifiesPerUnit) {
  ActivationFixture f;
  Activation activation(v1::Layer::RELU, 0.0f, ActivationFixture::kWidth);
  ActivationUnderTest layer(activation);
  layer.Forward(f.in, f.out, ActivationFixture::kBatch);
  const float want_mu[] = {1.5f, 0.0f, 0.2f, 0.0f, 0.0f, 3.0f};
  const float want_var[] = {0.3f, 0.0f, 1.0f, 0.0f, 0.0f, 0.1f};
  const float want_jcb[] = {1.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1.0f};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(f.out.units.mu()[i], want_mu[i]) << i;
    EXPECT_EQ(f.out.units.var()[i], want_var[i]) << i;
    EXPECT_EQ(f.out.jcb[i], want_jcb[i]) << i;
  }
}

// The layer's ReLU loop makes its 0/1 factor from a mask (so that it
// vectorises); its outputs must keep elementwise::Relu's bits (the CUDA
// kernels call that) on every kind of value: -0 stays -0 times the factor,
// NaN means propagate, infinities, subnormals, both sides of zero.
TEST(ActivationLayer, ReluLoopGivesTheSameBitsAsTheElementwiseFormula) {
  constexpr size_t kWidth = 67;  // the vector loop and its tail
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                            inf, -inf, std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(), 3.0e38f, -3.0e38f};
  HiddenState in, out;
  in.width = out.width = kWidth;
  out.has_jcb = true;
  in.Reserve(1);
  out.Reserve(1);
  for (size_t i = 0; i < kWidth; ++i) {
    in.units.mu()[i] = i < std::size(specials) ? specials[i] : 0.37f * (static_cast<float>(i) - 33);
    in.units.var()[i] = i % 5 == 0 ? std::numeric_limits<float>::quiet_NaN() : 0.01f * i;
  }
  Activation activation(v1::Layer::RELU, 0.0f, kWidth);
  ActivationUnderTest layer(activation);
  layer.Forward(in, out, 1);
  for (size_t i = 0; i < kWidth; ++i) {
    const elementwise::Moments m = elementwise::Relu(in.units.mu()[i], in.units.var()[i]);
    EXPECT_EQ(std::bit_cast<uint32_t>(out.units.mu()[i]), std::bit_cast<uint32_t>(m.mu)) << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(out.units.var()[i]), std::bit_cast<uint32_t>(m.var)) << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(out.jcb[i]), std::bit_cast<uint32_t>(m.jcb)) << i;
  }
}

TEST(ActivationLayer, BackwardScalesInnovationsByJcbAndJcbSquared) {
  ActivationFixture f;
  Activation activation(v1::Layer::TANH, 0.0f, ActivationFixture::kWidth);
  ActivationUnderTest layer(activation);
  layer.Forward(f.in, f.out, ActivationFixture::kBatch);
  const std::vector<float> dmu = {0.4f, -1.0f, 2.0f, 0.3f, -0.6f, 1.1f};
  const std::vector<float> dvar = {-0.5f, -0.2f, -1.5f, -0.05f, -0.8f, -0.3f};
  std::vector<float> dmu_in(6, 99.0f), dvar_in(6, 99.0f);
  layer.Backward(f.in, f.out, {dmu.data(), dvar.data()}, {dmu_in.data(), dvar_in.data()},
                 ActivationFixture::kBatch, true);
  for (size_t i = 0; i < 6; ++i) {
    const double t = std::tanh(static_cast<double>(f.in.units.mu()[i]));
    const double jcb = 1.0 - t * t;
    EXPECT_NEAR(dmu_in[i], jcb * dmu[i], 1e-6) << i;
    EXPECT_NEAR(dvar_in[i], jcb * jcb * dvar[i], 1e-6) << i;
  }
}

TEST(ActivationLayer, BackwardWithoutInputDeltaWritesNothing) {
  ActivationFixture f;
  Activation activation(v1::Layer::SIGMOID, 0.0f, ActivationFixture::kWidth);
  ActivationUnderTest layer(activation);
  layer.Forward(f.in, f.out, ActivationFixture::kBatch);
  const std::vector<float> d(6, 1.0f);
  std::vector<float> dmu_in(6, 99.0f), dvar_in(6, 99.0f);
  layer.Backward(f.in, f.out, {d.data(), d.data()}, {dmu_in.data(), dvar_in.data()},
                 ActivationFixture::kBatch, false);
  EXPECT_EQ(dmu_in, std::vector<float>(6, 99.0f));
  EXPECT_EQ(dvar_in, std::vector<float>(6, 99.0f));
}

// Regression: far on the positive side the rectified Gaussian is the
// Gaussian itself, so var_a must equal var_z; computed in float,
// E[a^2] - mu_a^2 cancelled and came out 22 % low at mu 300, var 0.01.
TEST(Activate, MixtureReluKeepsTheVarianceFarOnThePositiveSide) {
  for (const auto& [mu, var] : {std::pair<float, float>{8.0f, 0.05f}, {30.0f, 0.01f},
                                {5.0f, 1e-4f}, {300.0f, 0.01f}}) {
    const ActivationMoments m = Activate(v1::Layer::MIXTURE_RELU, 0.0f, mu, var);
    EXPECT_NEAR(m.var, var, 1e-4 * var) << "mu " << mu << " var " << var;
    EXPECT_NEAR(m.mu, mu, 1e-6 * mu);
    EXPECT_FLOAT_EQ(m.jcb, 1.0f);
  }
}

}  // namespace
}  // namespace tagi::engine
