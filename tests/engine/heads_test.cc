// The heads' maths (worker/engine/heads.h) against the plain double
// reference of docs/maths.md section 5 (naive_heads.h), unit by unit: forward
// moments and jcb of REMAX, CLOSED_FORM_SOFTMAX and EVEN_EXP, the one-hot
// and heteroscedastic innovations (the non-finite target rule and the
// floors included), and the CPU layers and output functions built on them.
#include "worker/engine/heads.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"
#include "tests/engine/naive_heads.h"
#include "worker/engine/head_layers.h"
#include "worker/engine/output.h"

namespace tagi::engine {
namespace {

using testing::NaiveClosedFormSoftmax;
using testing::NaiveEvenExp;
using testing::NaiveHeteroscedastic;
using testing::NaiveMoments;
using testing::NaiveRemax;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

void ExpectRel(double got, double want, double rel, const std::string& what) {
  EXPECT_LE(std::abs(got - want), rel * std::max(std::abs(want), 1e-30))
      << what << ": got " << got << ", want " << want;
}

struct Row {
  std::vector<float> mu, var;
};

Row RandomRow(Rng& rng, size_t k, double mean_scale, double var_lo, double var_hi) {
  Row r;
  for (size_t j = 0; j < k; ++j) {
    r.mu.push_back(static_cast<float>(mean_scale * rng.Normal()));
    r.var.push_back(static_cast<float>(var_lo + (var_hi - var_lo) * rng.Uniform()));
  }
  return r;
}

// Float row function against the double reference, every output, each
// within `rel` of the largest magnitude of its vector in the row: the
// rounding of a sum is relative to its terms, so a tiny probability next
// to a large one carries the large one's absolute error. A variance is
// (exp(v) - 1) mu^2 with v a difference of log-variances, whose rounding is
// relative to those terms (the reference's float code has the same
// cancellation), so it is also allowed rel * mu^2 * (the terms of v).
template <typename RowFn>
void CompareRow(RowFn fn, const Row& r, const NaiveMoments& want, double rel,
                const std::string& what) {
  const size_t k = r.mu.size();
  std::vector<float> mu(k), var(k), jcb(k);
  fn(r.mu.data(), r.var.data(), k, mu.data(), var.data(), jcb.data());
  const struct {
    const char* name;
    const std::vector<float>& got;
    const std::vector<double>& want;
  } vectors[] = {{"mu", mu, want.mu}, {"var", var, want.var}, {"jcb", jcb, want.jcb}};
  for (const auto& v : vectors) {
    double scale = 0.0;
    for (const double w : v.want) scale = std::max(scale, std::abs(w));
    for (size_t j = 0; j < k; ++j) {
      const double terms = v.name == std::string("var")
                               ? want.mu[j] * want.mu[j] * want.log_var_terms[j]
                               : 0.0;
      EXPECT_LE(std::abs(v.got[j] - v.want[j]), rel * std::max(scale, terms))
          << what << "[" << j << "] " << v.name << ": got " << v.got[j] << ", want " << v.want[j];
    }
  }
}

std::vector<double> D(const std::vector<float>& v) { return {v.begin(), v.end()}; }

TEST(Remax, MatchesTheReferenceOnRandomRows) {
  Rng rng(1);
  for (int t = 0; t < 200; ++t) {
    const size_t k = 2 + rng.Below(20);
    const Row r = RandomRow(rng, k, t % 2 ? 3.0 : 0.5, 0.01, 2.0);
    CompareRow(heads::RemaxRow, r, NaiveRemax(D(r.mu), D(r.var)), 2e-5,
               "remax row " + std::to_string(t));
  }
}

TEST(Remax, MeansSumToOneAndStayPositive) {
  Rng rng(2);
  const Row r = RandomRow(rng, 10, 2.0, 0.1, 1.0);
  std::vector<float> mu(10), var(10), jcb(10);
  heads::RemaxRow(r.mu.data(), r.var.data(), 10, mu.data(), var.data(), jcb.data());
  double sum = 0;
  for (size_t j = 0; j < 10; ++j) {
    EXPECT_GT(mu[j], 0.0f);
    EXPECT_GT(var[j], 0.0f);
    sum += mu[j];
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

TEST(Remax, FarNegativeUnitsHitTheFloors) {
  // Every mean far below zero: MixtureReLU floors each unit's moments at
  // 1e-6, so all classes tie and share the probability equally.
  const std::vector<float> mz = {-30.0f, -40.0f, -50.0f};
  const std::vector<float> vz = {0.1f, 0.1f, 0.1f};
  std::vector<float> mu(3), var(3), jcb(3);
  heads::RemaxRow(mz.data(), vz.data(), 3, mu.data(), var.data(), jcb.data());
  const NaiveMoments want = NaiveRemax(D(mz), D(vz));
  for (size_t j = 0; j < 3; ++j) {
    EXPECT_NEAR(mu[j], 1.0 / 3.0, 1e-6);
    ExpectRel(mu[j], want.mu[j], 1e-5, "floored mu");
    EXPECT_TRUE(std::isfinite(jcb[j]));
  }
}

TEST(ClosedFormSoftmax, MatchesTheReferenceOnRandomRows) {
  Rng rng(3);
  for (int t = 0; t < 200; ++t) {
    const size_t k = 2 + rng.Below(20);
    const Row r = RandomRow(rng, k, t % 2 ? 2.0 : 0.5, 0.01, 1.0);
    CompareRow(heads::ClosedFormSoftmaxRow, r, NaiveClosedFormSoftmax(D(r.mu), D(r.var)), 2e-5,
               "closed-form softmax row " + std::to_string(t));
  }
}

TEST(ClosedFormSoftmax, LargeMeansStayFiniteAndMatchTheUnshiftedReference) {
  // exp(95) overflows a float; the double reference does not, and the
  // engine's shift by the row's largest mean is exact in maths.
  const std::vector<float> mz = {95.0f, 93.5f, 90.0f, 60.0f};
  const std::vector<float> vz = {0.2f, 0.5f, 0.1f, 0.3f};
  const NaiveMoments want = NaiveClosedFormSoftmax(D(mz), D(vz));
  std::vector<float> mu(4), var(4), jcb(4);
  heads::ClosedFormSoftmaxRow(mz.data(), vz.data(), 4, mu.data(), var.data(), jcb.data());
  for (size_t j = 0; j < 4; ++j) {
    ASSERT_TRUE(std::isfinite(mu[j]) && std::isfinite(var[j]) && std::isfinite(jcb[j]));
    EXPECT_NEAR(mu[j], want.mu[j], 1e-5);
    EXPECT_NEAR(var[j], want.var[j], 1e-5);
    EXPECT_NEAR(jcb[j], want.jcb[j], 1e-5);
  }
}

TEST(ClosedFormSoftmax, AUnitFarBelowTheLargestVanishesInsteadOfTurningNan) {
  // exp(-150) underflows a float to 0; var_E / (mu_S mu_E) was then 0 / 0,
  // and one NaN output spread to every parameter in the next step (seen
  // training the MNIST CNN at sigma_v 0.05).
  const std::vector<float> mz = {0.0f, -150.0f, -2.0f};
  const std::vector<float> vz = {0.3f, 0.4f, 0.2f};
  std::vector<float> mu(3), var(3), jcb(3);
  heads::ClosedFormSoftmaxRow(mz.data(), vz.data(), 3, mu.data(), var.data(), jcb.data());
  const NaiveMoments want = NaiveClosedFormSoftmax(D(mz), D(vz));
  for (size_t j = 0; j < 3; ++j) {
    ASSERT_TRUE(std::isfinite(mu[j]) && std::isfinite(var[j]) && std::isfinite(jcb[j])) << j;
    EXPECT_NEAR(mu[j], want.mu[j], 1e-6) << j;
    EXPECT_NEAR(jcb[j], want.jcb[j], 1e-6) << j;
  }
  EXPECT_EQ(mu[1], 0.0f);
}

TEST(ClosedFormSoftmax, LargeOutputVariancesStayFiniteAndMatchTheReference) {
  // Output variances of 40 to 60 (the MNIST CNN's reach 100 at
  // initialisation): exp(2 mu + v) (exp(v) - 1) overflows a float at v > 44;
  // the row is computed in double, its results fit a float.
  const std::vector<float> mz = {1.0f, -3.0f, 4.0f, 0.5f};
  const std::vector<float> vz = {60.0f, 45.0f, 50.0f, 40.0f};
  const NaiveMoments want = NaiveClosedFormSoftmax(D(mz), D(vz));
  std::vector<float> mu(4), var(4), jcb(4);
  heads::ClosedFormSoftmaxRow(mz.data(), vz.data(), 4, mu.data(), var.data(), jcb.data());
  for (size_t j = 0; j < 4; ++j) {
    ASSERT_TRUE(std::isfinite(want.mu[j]) && std::isfinite(want.var[j])) << j;
    ASSERT_TRUE(std::isfinite(mu[j]) && std::isfinite(var[j]) && std::isfinite(jcb[j])) << j;
    ExpectRel(mu[j], want.mu[j], 1e-5, "mu");
    ExpectRel(var[j], want.var[j], 1e-5, "var");
    ExpectRel(jcb[j], want.jcb[j], 1e-5, "jcb");
  }
}

TEST(ClosedFormSoftmax, AUnitWhoseMomentsOverflowPassesNoInnovation) {
  // Output variances 120 and 20 side by side: the log-normal mean of the
  // second unit is about e^100, past a float. Its jcb is 0 (and its output
  // update is zero, OneHotDeltas below), so no 0 * inf reaches the weights.
  const std::vector<float> mz = {0.0f, 0.0f};
  const std::vector<float> vz = {120.0f, 20.0f};
  std::vector<float> mu(2), var(2), jcb(2);
  heads::ClosedFormSoftmaxRow(mz.data(), vz.data(), 2, mu.data(), var.data(), jcb.data());
  ASSERT_FALSE(std::isfinite(mu[1]) && std::isfinite(var[1])) << "no overflow to test";
  EXPECT_EQ(jcb[1], 0.0f);
  for (const float j : jcb) EXPECT_TRUE(std::isfinite(j));
  const int32_t label = 1;
  float dmu[2], dvar[2];
  OneHotDeltas({mu.data(), var.data()}, 1, 2, &label, 0.05f, {dmu, dvar});
  EXPECT_EQ(dmu[1], 0.0f);
  EXPECT_EQ(dvar[1], 0.0f);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(std::isfinite(dmu[i]) && std::isfinite(dvar[i])) << i;
}

TEST(ClosedFormSoftmax, MeansAreNotRenormalised) {
  // The reference's quirk (docs/maths.md section 14, Q12), kept: the means need not sum to 1.
  const std::vector<float> mz = {0.0f, 2.0f};
  const std::vector<float> vz = {1.0f, 0.1f};
  std::vector<float> mu(2), var(2), jcb(2);
  heads::ClosedFormSoftmaxRow(mz.data(), vz.data(), 2, mu.data(), var.data(), jcb.data());
  EXPECT_GT(std::abs(mu[0] + mu[1] - 1.0f), 1e-3);
}

TEST(EvenExp, PassesMeansAndExponentiatesNoiseUnits) {
  Rng rng(4);
  for (size_t i = 0; i < 40; ++i) {
    const float mz = static_cast<float>(rng.Normal());
    const float vz = static_cast<float>(0.01 + rng.Uniform());
    double m, v, j;
    NaiveEvenExp(i, mz, vz, 1.0, &m, &v, &j);
    const elementwise::Moments got = heads::EvenExp(i, mz, vz);
    ExpectRel(got.mu, m, 1e-6, "mu");
    ExpectRel(got.var, v, 1e-5, "var");
    ExpectRel(got.jcb, j, 1e-6, "jcb");
  }
}

// The engine's innovations times the output's jcb (what EVEN_EXP's Backward
// does) against the reference's pre-activation innovations. Each within
// 1e-5 of the magnitude of the terms it is made of (the noise unit's
// innovations are differences of nearby values).
void CompareHeteroscedastic(float mu, float var, float mz_noise, float vz_noise, float y) {
  const elementwise::Moments noise = heads::EvenExp(1, mz_noise, vz_noise);
  float d[4];
  heads::HeteroscedasticPair(mu, var, noise.mu, noise.var, noise.jcb, y, &d[0], &d[1], &d[2],
                             &d[3]);
  double want[4];
  NaiveHeteroscedastic(mu, var, 1.0, noise.mu, noise.var, noise.jcb, y, want);
  const double got[4] = {d[0], d[1], d[2] * noise.jcb, d[3] * noise.jcb * noise.jcb};
  // The terms: m+ - m = kappa (E+ - m) and s+ - s = kappa^2 (Var+ - V2).
  const double m = noise.mu, s = noise.var, total = var + m;
  const double mu_v = m / total * (y - mu), var_v = m - m * m / total;
  const double kappa = s / (3 * s + 2 * m * m), jv = noise.jcb / s;
  const double scale[4] = {
      std::abs(want[0]), std::abs(want[1]),
      jv * kappa * (mu_v * mu_v + std::abs(var_v) + m),
      jv * jv * kappa * kappa *
          (2 * var_v * var_v + 4 * std::abs(var_v) * mu_v * mu_v + 3 * s + 2 * m * m)};
  const char* names[4] = {"dmu mean", "dvar mean", "dmu noise", "dvar noise"};
  for (int k = 0; k < 4; ++k) {
    EXPECT_LE(std::abs(got[k] - want[k]), 1e-5 * scale[k])
        << names[k] << ": got " << got[k] << ", want " << want[k];
  }
}

TEST(HeteroscedasticUpdate, MatchesTheReference) {
  Rng rng(5);
  for (int t = 0; t < 300; ++t) {
    CompareHeteroscedastic(static_cast<float>(rng.Normal()),
                           static_cast<float>(0.01 + rng.Uniform()),
                           static_cast<float>(rng.Normal()),
                           static_cast<float>(0.01 + 0.5 * rng.Uniform()),
                           static_cast<float>(2.0 * rng.Normal()));
  }
}

TEST(HeteroscedasticUpdate, ANonFiniteTargetZeroesBothUnits) {
  for (const float y : {kNaN, kInf, -kInf}) {
    float d[4] = {5, 5, 5, 5};
    heads::HeteroscedasticPair(0.5f, 0.2f, 0.3f, 0.1f, 0.3f, y, &d[0], &d[1], &d[2], &d[3]);
    for (const float v : d) EXPECT_EQ(v, 0.0f) << "target " << y;
  }
}

TEST(HeteroscedasticUpdate, ANoiseUnitWithoutVarianceGetsNoInnovation) {
  // Jv = jcb / s is not finite at s = 0: the noise unit is left alone, the
  // mean unit is still updated.
  float d[4];
  heads::HeteroscedasticPair(0.5f, 0.2f, 0.3f, 0.0f, 0.3f, 1.0f, &d[0], &d[1], &d[2], &d[3]);
  EXPECT_FLOAT_EQ(d[0], 0.5f / 0.5f);
  EXPECT_FLOAT_EQ(d[1], -1.0f / 0.5f);
  EXPECT_EQ(d[2], 0.0f);
  EXPECT_EQ(d[3], 0.0f);
}

TEST(HeteroscedasticUpdate, ALargeErrorRaisesTheNoiseAndASmallOneLowersIt) {
  float d[4];
  heads::HeteroscedasticPair(0.0f, 0.1f, 0.5f, 0.05f, 0.5f, 3.0f, &d[0], &d[1], &d[2], &d[3]);
  EXPECT_GT(d[2], 0.0f);
  heads::HeteroscedasticPair(0.0f, 0.1f, 0.5f, 0.05f, 0.5f, 0.01f, &d[0], &d[1], &d[2], &d[3]);
  EXPECT_LT(d[2], 0.0f);
}

TEST(OneHotDeltas, ObserveEveryClassOneForTheLabelZeroElsewhere) {
  const float mu[] = {0.7f, 0.2f, 0.1f, 0.3f, 0.3f, 0.4f};
  const float var[] = {0.01f, 0.02f, 0.03f, 0.01f, 0.01f, 0.01f};
  const int32_t labels[] = {0, 2};
  float dmu[6], dvar[6];
  OneHotDeltas({mu, var}, 2, 3, labels, 0.1f, {dmu, dvar});
  for (int i = 0; i < 6; ++i) {
    const float y = (i == 0 || i == 5) ? 1.0f : 0.0f;
    EXPECT_FLOAT_EQ(dmu[i], (y - mu[i]) / (var[i] + 0.01f)) << i;
    EXPECT_FLOAT_EQ(dvar[i], -1.0f / (var[i] + 0.01f)) << i;
  }
}

TEST(MeanClassProbabilities, NormaliseThePositiveMeans) {
  const float mu[] = {0.2f, 0.6f, 0.4f, -1.0f, 0.0f, 0.0f};
  const float var[6] = {};
  float p[6];
  MeanClassProbabilities({mu, var}, 2, 3, p);
  EXPECT_FLOAT_EQ(p[0], 0.2f / 1.2f);
  EXPECT_FLOAT_EQ(p[1], 0.6f / 1.2f);
  EXPECT_FLOAT_EQ(p[2], 0.4f / 1.2f);
  // Nothing positive: uniform.
  for (int j = 3; j < 6; ++j) EXPECT_FLOAT_EQ(p[j], 1.0f / 3.0f);
}

TEST(SoftmaxActivationLayer, RunsEachSampleThroughTheRowFunction) {
  Rng rng(6);
  const size_t batch = 3, k = 5;
  const Row r = RandomRow(rng, batch * k, 1.0, 0.05, 0.5);
  std::vector<float> mu(batch * k), var(batch * k), jcb(batch * k);
  LayerIo io;
  io.batch = batch;
  io.in = {r.mu.data(), r.var.data()};
  io.out = {mu.data(), var.data()};
  io.out_jcb = jcb.data();
  SoftmaxActivation layer(v1::Layer::REMAX, k);
  layer.Forward(io, Mode::kTrain);
  for (size_t b = 0; b < batch; ++b) {
    const std::vector<double> mz(r.mu.begin() + b * k, r.mu.begin() + (b + 1) * k);
    const std::vector<double> vz(r.var.begin() + b * k, r.var.begin() + (b + 1) * k);
    const NaiveMoments want = NaiveRemax(mz, vz);
    for (size_t j = 0; j < k; ++j) ExpectRel(mu[b * k + j], want.mu[j], 2e-4, "layer mu");
  }
  // Backward: jcb on the innovations.
  std::vector<float> dmu(batch * k, 2.0f), dvar(batch * k, -1.0f), dmu_in(batch * k),
      dvar_in(batch * k);
  io.delta_out = {dmu.data(), dvar.data()};
  io.delta_in = {dmu_in.data(), dvar_in.data()};
  layer.Backward(io);
  for (size_t i = 0; i < batch * k; ++i) {
    EXPECT_FLOAT_EQ(dmu_in[i], 2.0f * jcb[i]);
    EXPECT_FLOAT_EQ(dvar_in[i], -jcb[i] * jcb[i]);
  }
}

}  // namespace
}  // namespace tagi::engine
