// Linear against docs/maths.md: forward (section 3), backward innovations
// and parameter deltas (section 6), the capped step (section 7) and
// initialisation (section 1). The layer is bound to buffers owned by the
// test, so every product can be checked on hand-set numbers.
#include "worker/engine/linear.h"

#include <cmath>
#include <vector>

#include "common/rng.h"
#include "spec/plan.h"
#include "tests/engine/layer_harness.h"
#include "gtest/gtest.h"
#include "worker/engine/activation.h"
#include "worker/engine/initialize.h"

namespace tagi::engine {
namespace {

// A Linear layer bound to its own parameter and delta buffers, with input
// and output boundaries for up to max_batch samples.
struct LinearFixture {
  LinearFixture(size_t in, size_t out, size_t max_batch)
      : width_out(out), layer(in, out),
        mw(in * out), vw(in * out), mb(out), vb(out),
        dmw(in * out), dvw(in * out), dmb(out), dvb(out) {
    layer.Reserve(max_batch);
    layer.Bind({{mw.data(), vw.data()}, {mb.data(), vb.data()}},
               {{dmw.data(), dvw.data()}, {dmb.data(), dvb.data()}});
    x.width = in;
    z.width = out;
    x.Reserve(max_batch);
    z.Reserve(max_batch);
  }
  LinearFixture(const LinearFixture&) = delete;
  LinearFixture& operator=(const LinearFixture&) = delete;

  void SetParams(const std::vector<float>& mu_w, const std::vector<float>& var_w,
                 const std::vector<float>& mu_b, const std::vector<float>& var_b) {
    mw = mu_w;
    vw = var_w;
    mb = mu_b;
    vb = var_b;
    layer.RefreshDerived();
  }
  void SetInputs(const std::vector<float>& mu, const std::vector<float>& var) {
    for (size_t i = 0; i < mu.size(); ++i) {
      x.units.mu()[i] = mu[i];
      x.units.var()[i] = var[i];
    }
  }
  float mu_z(size_t b, size_t o) const { return z.units.mu()[b * width_out + o]; }
  float var_z(size_t b, size_t o) const { return z.units.var()[b * width_out + o]; }

  size_t width_out;
  LinearUnderTest layer;
  // SetParams assigns equally sized vectors, so the bound pointers stay valid.
  std::vector<float> mw, vw, mb, vb, dmw, dvw, dmb, dvb;
  HiddenState x, z;
};

// The 3-in / 2-out layer used by most tests (weights [out][in]).
const std::vector<float> kMuW = {0.5f, -1.0f, 0.25f,  //
                                 2.0f, 0.0f, -0.5f};
const std::vector<float> kVarW = {0.1f, 0.2f, 0.05f,  //
                                  0.3f, 0.4f, 0.01f};
const std::vector<float> kMuB = {0.1f, -0.2f};
const std::vector<float> kVarB = {0.02f, 0.03f};

// Batch of 3 inputs [b][i].
const std::vector<float> kMuA = {1.0f, 2.0f, -1.0f,  //
                                 0.5f, -1.0f, 4.0f,  //
                                 -2.0f, 0.5f, 1.0f};
const std::vector<float> kVarA = {0.5f, 0.1f, 0.2f,  //
                                  0.0f, 0.3f, 1.0f,  //
                                  0.1f, 0.1f, 0.1f};

// Output innovations [b][o] for the batch of 3.
const std::vector<float> kDeltaMu = {0.4f, -0.3f, -0.2f, 0.5f, 1.0f, 0.25f};
const std::vector<float> kDeltaVar = {-0.5f, -0.25f, -0.1f, -0.4f, -0.2f, -0.05f};

void SetUpStandardLayer(LinearFixture& f) {
  f.SetParams(kMuW, kVarW, kMuB, kVarB);
  f.SetInputs(kMuA, kVarA);
}

TEST(LinearForward, PropagatesMeansAndVariancesWithInputVariance) {
  LinearFixture f(3, 2, 3);
  SetUpStandardLayer(f);
  f.layer.Forward(f.x, f.z, 2);
  // mu_z[0,0] = 0.5*1 - 1*2 + 0.25*(-1) + 0.1 = -1.65
  // mu_z[0,1] = 2*1 + 0*2 - 0.5*(-1) - 0.2 = 2.3
  // mu_z[1,0] = 0.5*0.5 - 1*(-1) + 0.25*4 + 0.1 = 2.35
  // mu_z[1,1] = 2*0.5 + 0 - 0.5*4 - 0.2 = -1.2
  EXPECT_FLOAT_EQ(f.mu_z(0, 0), -1.65f);
  EXPECT_FLOAT_EQ(f.mu_z(0, 1), 2.3f);
  EXPECT_FLOAT_EQ(f.mu_z(1, 0), 2.35f);
  EXPECT_FLOAT_EQ(f.mu_z(1, 1), -1.2f);
  // var_z[0,0] = (0.25+0.1)*0.5 + 0.1*1 + (1+0.2)*0.1 + 0.2*4
  //            + (0.0625+0.05)*0.2 + 0.05*1 + 0.02
  //            = 0.175 + 0.1 + 0.12 + 0.8 + 0.0225 + 0.05 + 0.02 = 1.2875
  // var_z[0,1] = (4+0.3)*0.5 + 0.3*1 + (0+0.4)*0.1 + 0.4*4
  //            + (0.25+0.01)*0.2 + 0.01*1 + 0.03 = 4.182
  // var_z[1,0] = 0 + 0.1*0.25 + 1.2*0.3 + 0.2*1 + 0.1125*1 + 0.05*16 + 0.02 = 1.5175
  // var_z[1,1] = 0 + 0.3*0.25 + 0.4*0.3 + 0.4*1 + 0.26*1 + 0.01*16 + 0.03 = 1.045
  EXPECT_FLOAT_EQ(f.var_z(0, 0), 1.2875f);
  EXPECT_FLOAT_EQ(f.var_z(0, 1), 4.182f);
  EXPECT_FLOAT_EQ(f.var_z(1, 0), 1.5175f);
  EXPECT_FLOAT_EQ(f.var_z(1, 1), 1.045f);
}

TEST(LinearForward, WithoutInputVarianceKeepsOnlyWeightAndBiasVariance) {
  const std::vector<float> zero(9, 0.0f);
  for (bool flag : {true, false}) {
    LinearFixture f(3, 2, 3);
    f.SetParams(kMuW, kVarW, kMuB, kVarB);
    f.SetInputs(kMuA, zero);
    f.layer.set_input_variance_zero(flag);
    f.layer.Forward(f.x, f.z, 2);
    // var_z = sum_i var_w mu_a^2 + var_b:
    // [0,0] = 0.1*1 + 0.2*4 + 0.05*1 + 0.02 = 0.97
    // [0,1] = 0.3*1 + 0.4*4 + 0.01*1 + 0.03 = 1.94
    // [1,0] = 0.1*0.25 + 0.2*1 + 0.05*16 + 0.02 = 1.045
    // [1,1] = 0.3*0.25 + 0.4*1 + 0.01*16 + 0.03 = 0.665
    EXPECT_FLOAT_EQ(f.var_z(0, 0), 0.97f) << flag;
    EXPECT_FLOAT_EQ(f.var_z(0, 1), 1.94f) << flag;
    EXPECT_FLOAT_EQ(f.var_z(1, 0), 1.045f) << flag;
    EXPECT_FLOAT_EQ(f.var_z(1, 1), 0.665f) << flag;
    EXPECT_FLOAT_EQ(f.mu_z(0, 0), -1.65f) << flag;
    EXPECT_FLOAT_EQ(f.mu_z(1, 1), -1.2f) << flag;
  }
}

TEST(LinearForward, RepeatedCallsDoNotAccumulate) {
  LinearFixture f(3, 2, 3);
  SetUpStandardLayer(f);
  f.layer.Forward(f.x, f.z, 3);
  const std::vector<float> mu(f.z.units.mu(), f.z.units.mu() + 6);
  const std::vector<float> var(f.z.units.var(), f.z.units.var() + 6);
  f.layer.Forward(f.x, f.z, 3);
  EXPECT_EQ(std::vector<float>(f.z.units.mu(), f.z.units.mu() + 6), mu);
  EXPECT_EQ(std::vector<float>(f.z.units.var(), f.z.units.var() + 6), var);
}

TEST(LinearBackward, SumsTheFourParameterDeltasOverTheBatch) {
  LinearFixture f(3, 2, 3);
  SetUpStandardLayer(f);
  f.layer.Forward(f.x, f.z, 3);
  std::vector<float> din_mu(9), din_var(9);
  f.layer.Backward(f.x, f.z, {kDeltaMu.data(), kDeltaVar.data()},
                   {din_mu.data(), din_var.data()}, 3, true);
  // delta_mu_w[o,i] = var_w[o,i] * sum_b mu_a[b,i] delta_mu[b,o], e.g.
  // [0,0] = 0.1 * (1*0.4 + 0.5*(-0.2) + (-2)*1.0) = 0.1 * -1.7 = -0.17
  // [1,2] = 0.01 * ((-1)*(-0.3) + 4*0.5 + 1*0.25) = 0.01 * 2.55 = 0.0255
  const float want_dmw[] = {-0.17f, 0.3f, -0.01f, -0.165f, -0.39f, 0.0255f};
  // delta_var_w[o,i] = var_w^2 * sum_b mu_a[b,i]^2 delta_var[b,o], e.g.
  // [0,0] = 0.01 * (1*(-0.5) + 0.25*(-0.1) + 4*(-0.2)) = 0.01 * -1.325 = -0.01325
  // [1,1] = 0.16 * (4*(-0.25) + 1*(-0.4) + 0.25*(-0.05)) = 0.16 * -1.4125 = -0.226
  const float want_dvw[] = {-0.01325f, -0.086f, -0.00575f, -0.0495f, -0.226f, -0.00067f};
  for (size_t k = 0; k < 6; ++k) {
    EXPECT_NEAR(f.dmw[k], want_dmw[k], 1e-6) << k;
    EXPECT_NEAR(f.dvw[k], want_dvw[k], 1e-7) << k;
  }
  // delta_mu_b[0] = 0.02 * (0.4 - 0.2 + 1.0) = 0.024
  // delta_mu_b[1] = 0.03 * (-0.3 + 0.5 + 0.25) = 0.0135
  // delta_var_b[0] = 0.0004 * (-0.5 - 0.1 - 0.2) = -0.00032
  // delta_var_b[1] = 0.0009 * (-0.25 - 0.4 - 0.05) = -0.00063
  EXPECT_NEAR(f.dmb[0], 0.024f, 1e-7);
  EXPECT_NEAR(f.dmb[1], 0.0135f, 1e-7);
  EXPECT_NEAR(f.dvb[0], -0.00032f, 1e-9);
  EXPECT_NEAR(f.dvb[1], -0.00063f, 1e-9);
}

TEST(LinearBackward, InputInnovationsUseOnlyTheWeightMeans) {
  LinearFixture f(3, 2, 3);
  SetUpStandardLayer(f);
  f.layer.Forward(f.x, f.z, 3);
  std::vector<float> din_mu(9), din_var(9);
  f.layer.Backward(f.x, f.z, {kDeltaMu.data(), kDeltaVar.data()},
                   {din_mu.data(), din_var.data()}, 3, true);
  // Sample 0: delta_mu_a[i] = sum_o mu_w[o,i] delta_mu[o]:
  // i0 = 0.5*0.4 + 2*(-0.3) = -0.4; i1 = -1*0.4 + 0 = -0.4; i2 = 0.25*0.4 - 0.5*(-0.3) = 0.25
  // delta_var_a[i] = sum_o mu_w[o,i]^2 delta_var[o]:
  // i0 = 0.25*(-0.5) + 4*(-0.25) = -1.125; i1 = -0.5; i2 = 0.0625*(-0.5) + 0.25*(-0.25) = -0.09375
  EXPECT_FLOAT_EQ(din_mu[0], -0.4f);
  EXPECT_FLOAT_EQ(din_mu[1], -0.4f);
  EXPECT_FLOAT_EQ(din_mu[2], 0.25f);
  EXPECT_FLOAT_EQ(din_var[0], -1.125f);
  EXPECT_FLOAT_EQ(din_var[1], -0.5f);
  EXPECT_FLOAT_EQ(din_var[2], -0.09375f);
  for (size_t b = 0; b < 3; ++b) {
    for (size_t i = 0; i < 3; ++i) {
      double mu = 0.0, var = 0.0;
      for (size_t o = 0; o < 2; ++o) {
        mu += double{kMuW[o * 3 + i]} * kDeltaMu[b * 2 + o];
        var += double{kMuW[o * 3 + i]} * kMuW[o * 3 + i] * kDeltaVar[b * 2 + o];
      }
      EXPECT_NEAR(din_mu[b * 3 + i], mu, 1e-6) << b << "," << i;
      EXPECT_NEAR(din_var[b * 3 + i], var, 1e-6) << b << "," << i;
    }
  }
}

TEST(LinearBackward, ThroughThePrecedingActivationScalesByJcb) {
  // z_prev --TANH--> a --LINEAR--> z. docs/maths.md section 6:
  // delta_mu_prev = jcb * sum_o mu_w delta_mu; delta_var_prev = jcb^2 * sum_o mu_w^2 delta_var.
  LinearFixture f(3, 2, 3);
  f.SetParams(kMuW, kVarW, kMuB, kVarB);
  HiddenState z_prev;
  z_prev.width = 3;
  z_prev.Reserve(3);
  f.x.has_jcb = true;
  f.x.Reserve(3);
  for (size_t k = 0; k < 9; ++k) {
    z_prev.units.mu()[k] = kMuA[k] * 0.5f;
    z_prev.units.var()[k] = kVarA[k] + 0.1f;
  }
  f.x.has_jcb = true;
  f.x.Reserve(3);
  Activation tanh(v1::Layer::TANH, 0.0f, 3);
  ActivationUnderTest tanh_layer(tanh);
  tanh_layer.Forward(z_prev, f.x, 3);
  f.layer.Forward(f.x, f.z, 3);
  std::vector<float> da_mu(9), da_var(9), dz_mu(9), dz_var(9);
  f.layer.Backward(f.x, f.z, {kDeltaMu.data(), kDeltaVar.data()}, {da_mu.data(), da_var.data()},
                   3, true);
  tanh_layer.Backward(z_prev, f.x, {da_mu.data(), da_var.data()}, {dz_mu.data(), dz_var.data()},
                      3, true);
  for (size_t b = 0; b < 3; ++b) {
    for (size_t i = 0; i < 3; ++i) {
      const double t = std::tanh(double{z_prev.units.mu()[b * 3 + i]});
      const double jcb = 1.0 - t * t;
      double mu = 0.0, var = 0.0;
      for (size_t o = 0; o < 2; ++o) {
        mu += double{kMuW[o * 3 + i]} * kDeltaMu[b * 2 + o];
        var += double{kMuW[o * 3 + i]} * kMuW[o * 3 + i] * kDeltaVar[b * 2 + o];
      }
      EXPECT_NEAR(dz_mu[b * 3 + i], jcb * mu, 1e-6) << b << "," << i;
      EXPECT_NEAR(dz_var[b * 3 + i], jcb * jcb * var, 1e-6) << b << "," << i;
    }
  }
  // The weight deltas use the activation's output means (tanh), not z_prev.
  double sum = 0.0;
  for (size_t b = 0; b < 3; ++b) sum += std::tanh(double{z_prev.units.mu()[b * 3]}) * kDeltaMu[b * 2];
  EXPECT_NEAR(f.dmw[0], kVarW[0] * sum, 1e-6);
}

TEST(LinearBackward, FirstLayerLeavesTheInputInnovationsUntouched) {
  LinearFixture f(3, 2, 3);
  SetUpStandardLayer(f);
  f.layer.Forward(f.x, f.z, 3);
  std::vector<float> din_mu(9, 42.0f), din_var(9, 42.0f);
  f.layer.Backward(f.x, f.z, {kDeltaMu.data(), kDeltaVar.data()},
                   {din_mu.data(), din_var.data()}, 3, false);
  EXPECT_EQ(din_mu, std::vector<float>(9, 42.0f));
  EXPECT_EQ(din_var, std::vector<float>(9, 42.0f));
  EXPECT_NEAR(f.dmw[0], -0.17f, 1e-6);  // parameter deltas are still written
  EXPECT_NEAR(f.dmb[1], 0.0135f, 1e-7);
}

TEST(LinearBackward, OverwritesTheDeltasOfThePreviousStep) {
  LinearFixture f(3, 2, 3);
  SetUpStandardLayer(f);
  std::vector<float> din_mu(9), din_var(9);
  for (int step = 0; step < 3; ++step) {
    f.layer.Forward(f.x, f.z, 3);
    f.layer.Backward(f.x, f.z, {kDeltaMu.data(), kDeltaVar.data()},
                     {din_mu.data(), din_var.data()}, 3, true);
  }
  EXPECT_NEAR(f.dmw[0], -0.17f, 1e-6);
  EXPECT_NEAR(f.dvw[4], -0.226f, 1e-6);
  EXPECT_NEAR(f.dmb[0], 0.024f, 1e-7);
  EXPECT_NEAR(f.dvb[1], -0.00063f, 1e-9);
}

TEST(LinearBackward, BatchDeltasEqualTheSumOfSingleSampleDeltas) {
  LinearFixture batch(3, 2, 3);
  SetUpStandardLayer(batch);
  batch.layer.Forward(batch.x, batch.z, 3);
  std::vector<float> din_mu(9), din_var(9);
  batch.layer.Backward(batch.x, batch.z, {kDeltaMu.data(), kDeltaVar.data()},
                       {din_mu.data(), din_var.data()}, 3, true);
  std::vector<double> sum_mw(6), sum_vw(6), sum_mb(2), sum_vb(2);
  for (size_t b = 0; b < 3; ++b) {
    LinearFixture one(3, 2, 1);
    one.SetParams(kMuW, kVarW, kMuB, kVarB);
    one.SetInputs(std::vector<float>(kMuA.begin() + 3 * b, kMuA.begin() + 3 * b + 3),
                  std::vector<float>(kVarA.begin() + 3 * b, kVarA.begin() + 3 * b + 3));
    one.layer.Forward(one.x, one.z, 1);
    one.layer.Backward(one.x, one.z, {kDeltaMu.data() + 2 * b, kDeltaVar.data() + 2 * b},
                       {din_mu.data(), din_var.data()}, 1, true);
    for (size_t k = 0; k < 6; ++k) {
      sum_mw[k] += one.dmw[k];
      sum_vw[k] += one.dvw[k];
    }
    for (size_t o = 0; o < 2; ++o) {
      sum_mb[o] += one.dmb[o];
      sum_vb[o] += one.dvb[o];
    }
  }
  for (size_t k = 0; k < 6; ++k) {
    EXPECT_NEAR(batch.dmw[k], sum_mw[k], 1e-6) << k;
    EXPECT_NEAR(batch.dvw[k], sum_vw[k], 1e-6) << k;
  }
  for (size_t o = 0; o < 2; ++o) {
    EXPECT_NEAR(batch.dmb[o], sum_mb[o], 1e-7) << o;
    EXPECT_NEAR(batch.dvb[o], sum_vb[o], 1e-9) << o;
  }
}

// A 2-in / 2-out layer whose weights all have variance 0.04, so that with
// cap_factor 2 the cap is sqrt(0.04) / 2 = 0.1.
class CappedStepTest : public ::testing::Test {
 protected:
  CappedStepTest() : f_(2, 2, 1) {
    f_.SetParams({1.0f, 1.0f, 1.0f, 1.0f}, {0.04f, 0.04f, 0.04f, 0.04f}, {0.0f, 0.0f},
                 {0.25f, 0.01f});
  }
  LinearFixture f_;
};

TEST_F(CappedStepTest, ClipsLargeDeltasOfBothSignsAndAppliesSmallOnes) {
  f_.dmw = {0.5f, -0.5f, 0.05f, -0.05f};
  f_.dvw = {-0.01f, 0.5f, -0.3f, 0.02f};
  f_.layer.ApplyStep(2.0f, 1e-5f);
  // Means: cap 0.1 -> 1 + 0.1, 1 - 0.1, 1 + 0.05, 1 - 0.05.
  EXPECT_FLOAT_EQ(f_.mw[0], 1.1f);
  EXPECT_FLOAT_EQ(f_.mw[1], 0.9f);
  EXPECT_FLOAT_EQ(f_.mw[2], 1.05f);
  EXPECT_FLOAT_EQ(f_.mw[3], 0.95f);
  // Variances: 0.04 - 0.01 = 0.03; 0.04 + min(0.5, 0.1) = 0.14;
  // 0.04 - min(0.3, 0.1) = -0.06 <= 0 -> floor; 0.04 + 0.02 = 0.06.
  EXPECT_FLOAT_EQ(f_.vw[0], 0.03f);
  EXPECT_FLOAT_EQ(f_.vw[1], 0.14f);
  EXPECT_EQ(f_.vw[2], 1e-5f);
  EXPECT_FLOAT_EQ(f_.vw[3], 0.06f);
}

TEST_F(CappedStepTest, TheMeanCapUsesThePriorVariance) {
  // The variance collapses to the floor in the same step; the mean is still
  // capped at sqrt(0.04) / 2 = 0.1, not sqrt(1e-5) / 2.
  f_.dmw = {0.5f, 0.0f, 0.0f, 0.0f};
  f_.dvw = {-0.3f, 0.0f, 0.0f, 0.0f};
  f_.layer.ApplyStep(2.0f, 1e-5f);
  EXPECT_FLOAT_EQ(f_.mw[0], 1.1f);
  EXPECT_EQ(f_.vw[0], 1e-5f);
}

TEST_F(CappedStepTest, AVarianceDrivenExactlyToZeroIsFloored) {
  f_.dvw = {-0.04f, 0.0f, 0.0f, 0.0f};
  f_.layer.ApplyStep(2.0f, 1e-5f);
  EXPECT_EQ(f_.vw[0], 1e-5f);
  EXPECT_EQ(f_.vw[1], 0.04f);
}

TEST_F(CappedStepTest, BiasesAreCappedByTheirOwnVariance) {
  // caps: sqrt(0.25)/2 = 0.25 and sqrt(0.01)/2 = 0.05.
  f_.dmb = {-1.0f, 0.02f};
  f_.dvb = {-0.1f, -0.2f};
  f_.layer.ApplyStep(2.0f, 1e-5f);
  EXPECT_FLOAT_EQ(f_.mb[0], -0.25f);
  EXPECT_FLOAT_EQ(f_.mb[1], 0.02f);
  EXPECT_FLOAT_EQ(f_.vb[0], 0.15f);  // 0.25 - 0.1
  EXPECT_EQ(f_.vb[1], 1e-5f);        // 0.01 - 0.05 < 0
}

TEST_F(CappedStepTest, ASmallCapFactorLetsLargeDeltasThrough) {
  // cap_factor 0.1: cap = sqrt(0.04) / 0.1 = 2.
  f_.dmw = {1.5f, -3.0f, 0.0f, 0.0f};
  f_.layer.ApplyStep(0.1f, 1e-5f);
  EXPECT_FLOAT_EQ(f_.mw[0], 2.5f);
  EXPECT_FLOAT_EQ(f_.mw[1], -1.0f);  // 1 - 2
}

TEST_F(CappedStepTest, RefreshesTheProductsUsedByTheNextForwardAndBackward) {
  f_.dmw = {0.1f, -0.1f, 0.0f, 0.05f};
  f_.dvw = {0.01f, -0.02f, 0.0f, 0.0f};
  f_.layer.ApplyStep(2.0f, 1e-5f);
  // New parameters: mu_w = [1.1, 0.9, 1, 1.05], var_w = [0.05, 0.02, 0.04, 0.04].
  f_.SetInputs({2.0f, -1.0f}, {0.5f, 0.25f});
  f_.layer.Forward(f_.x, f_.z, 1);
  // var_z[0] = (1.21+0.05)*0.5 + 0.05*4 + (0.81+0.02)*0.25 + 0.02*1 + 0.25
  //          = 0.63 + 0.2 + 0.2075 + 0.02 + 0.25 = 1.3075
  // var_z[1] = (1+0.04)*0.5 + 0.04*4 + (1.1025+0.04)*0.25 + 0.04*1 + 0.01
  //          = 0.52 + 0.16 + 0.285625 + 0.04 + 0.01 = 1.015625
  EXPECT_FLOAT_EQ(f_.var_z(0, 0), 1.3075f);
  EXPECT_FLOAT_EQ(f_.var_z(0, 1), 1.015625f);
  const float dmu[] = {0.0f, 0.0f};
  const float dvar[] = {-1.0f, -2.0f};
  float din_mu[2], din_var[2];
  f_.layer.Backward(f_.x, f_.z, {dmu, dvar}, {din_mu, din_var}, 1, true);
  // delta_var_a[0] = 1.21*(-1) + 1*(-2) = -3.21; [1] = 0.81*(-1) + 1.1025*(-2) = -3.015
  EXPECT_FLOAT_EQ(din_var[0], -3.21f);
  EXPECT_FLOAT_EQ(din_var[1], -3.015f);
}

// Draws the layer's parameters as the engines do (initialize.h): a network
// of this one layer, its blocks copied into the fixture.
void InitializeLayer(LinearFixture& f, uint64_t seed, InitMethod method, float gain_w,
                     float gain_b) {
  const size_t in = f.mw.size() / f.width_out;
  spec::Architecture arch;
  arch.input = {static_cast<uint32_t>(in), 1, 1};
  arch.layers = {{v1::Layer::LINEAR, static_cast<uint32_t>(in),
                  static_cast<uint32_t>(f.width_out)}};
  arch.head = {spec::HeadKind::kRegression, 0};
  const spec::Plan plan = spec::MakePlan(arch, {}).value();
  std::vector<float> arena(2 * plan.num_parameters);
  InitializeParameters(plan, seed, {method, gain_w, gain_b}, arena);
  const size_t n = plan.num_parameters, nw = f.mw.size();
  std::copy_n(arena.begin(), nw, f.mw.begin());
  std::copy_n(arena.begin() + n, nw, f.vw.begin());
  std::copy_n(arena.begin() + nw, f.width_out, f.mb.begin());
  std::copy_n(arena.begin() + n + nw, f.width_out, f.vb.begin());
  f.layer.RefreshDerived();
}

TEST(LinearInitialize, HeSetsConstantVariancesFromTheGains) {
  LinearFixture f(50, 40, 1);
  InitializeLayer(f, 11, InitMethod::kHe, 0.5f, 2.0f);
  // s^2 = 1 / fan_in = 1/50; var_w = (0.5 s)^2 = 0.005; var_b = (2 s)^2 = 0.08.
  for (float v : f.vw) EXPECT_FLOAT_EQ(v, 0.005f);
  for (float v : f.vb) EXPECT_FLOAT_EQ(v, 0.08f);
  double sq = 0.0;
  for (float m : f.mw) sq += double{m} * m;
  EXPECT_NEAR(sq / f.mw.size(), 1.0 / 50, 0.15 / 50);  // 2000 draws of N(0, 1/50)
}

TEST(LinearInitialize, XavierUsesFanInPlusFanOut) {
  LinearFixture f(50, 30, 1);
  InitializeLayer(f, 12, InitMethod::kXavier, 1.0f, 1.0f);
  // s^2 = 2 / (50 + 30) = 0.025.
  for (float v : f.vw) EXPECT_FLOAT_EQ(v, 0.025f);
  for (float v : f.vb) EXPECT_FLOAT_EQ(v, 0.025f);
  double sq = 0.0;
  for (float m : f.mw) sq += double{m} * m;
  EXPECT_NEAR(sq / f.mw.size(), 0.025, 0.15 * 0.025);  // 1500 draws
}

TEST(LinearInitialize, RefreshesTheDerivedProducts) {
  LinearFixture f(2, 1, 1);
  InitializeLayer(f, 3, InitMethod::kHe, 1.0f, 1.0f);
  f.SetInputs({1.0f, -2.0f}, {0.3f, 0.7f});
  f.layer.Forward(f.x, f.z, 1);
  double var = f.vb[0];
  const float mu_a[] = {1.0f, -2.0f}, var_a[] = {0.3f, 0.7f};
  for (size_t i = 0; i < 2; ++i) {
    var += (double{f.mw[i]} * f.mw[i] + f.vw[i]) * var_a[i] + double{f.vw[i]} * mu_a[i] * mu_a[i];
  }
  EXPECT_NEAR(f.var_z(0, 0), var, 1e-6);
}

}  // namespace
}  // namespace tagi::engine
