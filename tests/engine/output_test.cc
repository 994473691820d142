// Output innovations and class probabilities against docs/maths.md
// sections 4 and 5. The engine writes innovations of the output units a;
// the tests check that, folded through the last activation's Backward, they
// equal the gain form's pre-activation innovations k (y - mu_a) and -k J.
#include "worker/engine/output.h"

#include <cmath>
#include <limits>
#include <set>
#include <utility>
#include <vector>

#include "spec/hsm_tree.h"
#include "gtest/gtest.h"
#include "tests/engine/layer_harness.h"
#include "tests/engine/naive_tagi.h"
#include "worker/engine/activation.h"

namespace tagi::engine {
namespace {

using testing::EncodeHsmLabel;
using testing::HsmCode;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

double Phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }

TEST(RegressionDeltas, AreTheNormalisedInnovationsOfEachOutput) {
  const float mu[] = {0.5f, -1.0f};
  const float var[] = {0.2f, 0.5f};
  const float y[] = {1.0f, 0.0f};
  float dmu[2], dvar[2];
  RegressionDeltas({mu, var}, y, 2, 0.5f, {dmu, dvar});
  // V = 0.25. Output 0: 1 / (0.2 + 0.25) = 2.2222; delta_mu = 0.5 * 2.2222 = 1.1111.
  // Output 1: 1 / (0.5 + 0.25) = 1.3333; delta_mu = 1 * 1.3333.
  EXPECT_FLOAT_EQ(dmu[0], 0.5f / 0.45f);
  EXPECT_FLOAT_EQ(dvar[0], -1.0f / 0.45f);
  EXPECT_FLOAT_EQ(dmu[1], 1.0f / 0.75f);
  EXPECT_FLOAT_EQ(dvar[1], -1.0f / 0.75f);
}

TEST(RegressionDeltas, ANanTargetMasksOnlyThatOutput) {
  const float mu[] = {0.5f, -1.0f, 2.0f, 0.0f};
  const float var[] = {0.2f, 0.5f, 0.1f, 1.0f};
  const float y[] = {1.0f, kNaN, 0.0f, kNaN};
  float dmu[4] = {5, 5, 5, 5}, dvar[4] = {5, 5, 5, 5};
  RegressionDeltas({mu, var}, y, 4, 1.0f, {dmu, dvar});
  EXPECT_FLOAT_EQ(dmu[0], 0.5f / 1.2f);
  EXPECT_FLOAT_EQ(dvar[0], -1.0f / 1.2f);
  EXPECT_EQ(dmu[1], 0.0f);
  EXPECT_EQ(dvar[1], 0.0f);
  EXPECT_FLOAT_EQ(dmu[2], -2.0f / 1.1f);
  EXPECT_FLOAT_EQ(dvar[2], -1.0f / 1.1f);
  EXPECT_EQ(dmu[3], 0.0f);
  EXPECT_EQ(dvar[3], 0.0f);
}

TEST(RegressionDeltas, AnOutputThatOverflowedGivesZeroDeltas) {
  // A finite gain on an infinite mean would give inf (or NaN) innovations.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const float mu[] = {kInf, -kInf, 1.0f};
  const float var[] = {0.5f, 0.5f, 0.5f};
  const float y[] = {1.0f, 1.0f, 0.0f};
  float dmu[3], dvar[3];
  RegressionDeltas({mu, var}, y, 3, 0.5f, {dmu, dvar});
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(dmu[i], 0.0f) << i;
    EXPECT_EQ(dvar[i], 0.0f) << i;
  }
  EXPECT_FLOAT_EQ(dmu[2], -1.0f / 0.75f);
}

TEST(RegressionDeltas, ANonFiniteGainGivesZeroDeltas) {
  // var_a + V = 0: k = 1/0 is not finite.
  const float mu[] = {0.5f, 0.5f};
  const float var[] = {0.0f, 0.5f};
  const float y[] = {1.0f, 1.0f};
  float dmu[2] = {5, 5}, dvar[2] = {5, 5};
  RegressionDeltas({mu, var}, y, 2, 0.0f, {dmu, dvar});
  EXPECT_EQ(dmu[0], 0.0f);
  EXPECT_EQ(dvar[0], 0.0f);
  EXPECT_FLOAT_EQ(dmu[1], 1.0f);  // (1 - 0.5) / 0.5
  EXPECT_FLOAT_EQ(dvar[1], -2.0f);
}

TEST(RegressionDeltas, ThroughASigmoidEqualTheOutputUpdateOfTagiSection4) {
  // z --SIGMOID--> a, observed with sigma_v = 0.3. docs/maths.md section 4: J = s (1 - s),
  // k = J / (var_a + V), delta_mu_z = k (y - mu_a), delta_var_z = -k J.
  const std::vector<float> mu_z = {0.4f, -1.2f, 2.5f};
  const std::vector<float> var_z = {0.3f, 0.8f, 0.05f};
  const std::vector<float> y = {0.9f, 0.1f, 0.2f};
  const float sigma_v = 0.3f;
  HiddenState z, a;
  z.width = a.width = 3;
  a.has_jcb = true;
  z.Reserve(1);
  a.Reserve(1);
  for (size_t i = 0; i < 3; ++i) {
    z.units.mu()[i] = mu_z[i];
    z.units.var()[i] = var_z[i];
  }
  Activation sigmoid_layer(v1::Layer::SIGMOID, 0.0f, 3);
  ActivationUnderTest sigmoid(sigmoid_layer);
  sigmoid.Forward(z, a, 1);
  float da_mu[3], da_var[3], dz_mu[3], dz_var[3];
  RegressionDeltas(std::as_const(a.units).view(), y.data(), 3, sigma_v, {da_mu, da_var});
  sigmoid.Backward(z, a, {da_mu, da_var}, {dz_mu, dz_var}, 1, true);
  for (size_t i = 0; i < 3; ++i) {
    const double s = 1.0 / (1.0 + std::exp(-double{mu_z[i]}));
    const double jcb = s * (1.0 - s);
    const double var_a = jcb * jcb * var_z[i];
    const double v = double{sigma_v} * sigma_v;
    const double k = jcb / (var_a + v);
    const double want_mu = k * (y[i] - s);
    const double want_var = -k * jcb;
    EXPECT_NEAR(dz_mu[i], want_mu, 1e-5 * std::abs(want_mu) + 1e-7) << i;
    EXPECT_NEAR(dz_var[i], want_var, 1e-5 * std::abs(want_var) + 1e-7) << i;
    // The posterior of z is the Kalman update of the linearised observation.
    const double post_var = var_z[i] + var_z[i] * var_z[i] * dz_var[i];
    const double kalman_var = var_z[i] - var_z[i] * jcb * jcb * var_z[i] / (var_a + v);
    EXPECT_NEAR(post_var, kalman_var, 1e-6) << i;
  }
}

TEST(HsmTree, DerivesTheTagiTableForTenClasses) {
  const HsmTree tree(10);
  EXPECT_EQ(tree.levels(), 4);
  EXPECT_EQ(tree.output_width(), 11);
  // docs/maths.md section 5.1: label 0 -> (+1,+1,+1,+1) at 1-based nodes (1,2,4,7);
  // label 9 -> (-1,+1,+1,-1) at nodes (1,3,6,11).
  const int nodes0[] = {0, 1, 3, 6}, nodes9[] = {0, 2, 5, 10};
  const float targets0[] = {1, 1, 1, 1}, targets9[] = {-1, 1, 1, -1};
  for (int l = 0; l < 4; ++l) {
    EXPECT_EQ(tree.node(0, l), nodes0[l]) << l;
    EXPECT_EQ(tree.target(0, l), targets0[l]) << l;
    EXPECT_EQ(tree.node(9, l), nodes9[l]) << l;
    EXPECT_EQ(tree.target(9, l), targets9[l]) << l;
  }
}

TEST(HsmDeltas, ObserveOnlyTheLabelsNodesWithTargetsPlusOrMinusOne) {
  const HsmTree tree(10);
  const size_t width = 11;
  std::vector<float> mu(2 * width), var(2 * width);
  for (size_t b = 0; b < 2; ++b) {
    for (size_t n = 0; n < width; ++n) {
      mu[b * width + n] = 0.1f * static_cast<float>(n) - 0.5f + 0.05f * static_cast<float>(b);
      var[b * width + n] = 0.2f + 0.01f * static_cast<float>(n);
    }
  }
  const int32_t labels[] = {9, 0};
  std::vector<float> dmu(2 * width, 7.0f), dvar(2 * width, 7.0f);
  HsmDeltas(tree, {mu.data(), var.data()}, 2, labels, 1.0f, {dmu.data(), dvar.data()});
  // Label 9, node 0: target -1, mu -0.5, var 0.2: (-1 + 0.5) / 1.2 = -0.41667, -1/1.2.
  EXPECT_FLOAT_EQ(dmu[0], -0.5f / 1.2f);
  EXPECT_FLOAT_EQ(dvar[0], -1.0f / 1.2f);
  // Label 9, node 10: target -1, mu 0.5, var 0.3: (-1 - 0.5) / 1.3.
  EXPECT_FLOAT_EQ(dmu[10], -1.5f / 1.3f);
  const std::set<size_t> observed0 = {0, 2, 5, 10}, observed1 = {0, 1, 3, 6};
  for (size_t b = 0; b < 2; ++b) {
    const HsmCode e = EncodeHsmLabel(10, labels[b]);
    const std::set<size_t>& observed = b == 0 ? observed0 : observed1;
    for (size_t n = 0; n < width; ++n) {
      const size_t i = b * width + n;
      if (!observed.count(n)) {
        EXPECT_EQ(dmu[i], 0.0f) << b << "," << n;
        EXPECT_EQ(dvar[i], 0.0f) << b << "," << n;
        continue;
      }
      size_t l = 0;
      while (static_cast<size_t>(e.nodes[l]) != n) ++l;
      const double s = double{var[i]} + 1.0;
      EXPECT_NEAR(dmu[i], (e.targets[l] - mu[i]) / s, 1e-6) << b << "," << n;
      EXPECT_NEAR(dvar[i], -1.0 / s, 1e-6) << b << "," << n;
    }
  }
}

TEST(HsmDeltas, EveryLabelTouchesTheNodesOfItsCode) {
  for (int k : {2, 3, 5, 10, 17}) {
    const HsmTree tree(k);
    const auto width = static_cast<size_t>(tree.output_width());
    for (int r = 0; r < k; ++r) {
      const std::vector<float> mu(width, 0.0f), var(width, 0.0f);
      std::vector<float> dmu(width, 7.0f), dvar(width, 7.0f);
      const int32_t label = r;
      HsmDeltas(tree, {mu.data(), var.data()}, 1, &label, 1.0f, {dmu.data(), dvar.data()});
      // mu 0, var 0, V 1: delta_mu = target, delta_var = -1 on the path.
      const HsmCode e = EncodeHsmLabel(k, r);
      std::vector<float> want_mu(width, 0.0f), want_var(width, 0.0f);
      for (size_t l = 0; l < e.nodes.size(); ++l) {
        ASSERT_LT(static_cast<size_t>(e.nodes[l]), width);
        want_mu[e.nodes[l]] = e.targets[l];
        want_var[e.nodes[l]] = -1.0f;
      }
      EXPECT_EQ(dmu, want_mu) << "K=" << k << " label " << r;
      EXPECT_EQ(dvar, want_var) << "K=" << k << " label " << r;
    }
  }
}

TEST(HsmClassProbabilities, AreProductsOfNodeProbabilitiesForFourClasses) {
  // K = 4: node 0 decides the first bit, nodes 1 and 2 the second.
  const HsmTree tree(4);
  ASSERT_EQ(tree.output_width(), 3);
  const float mu[] = {0.5f, -1.0f, 0.3f};
  const float var[] = {0.2f, 0.5f, 1.0f};
  float probs[4];
  HsmClassProbabilities(tree, {mu, var}, 1, probs);
  // P_n = Phi(mu / sqrt(1/9 + var)): 0.81499, 0.10041, 0.61203.
  const double p0 = Phi(0.5 / std::sqrt(1.0 / 9 + 0.2));
  const double p1 = Phi(-1.0 / std::sqrt(1.0 / 9 + 0.5));
  const double p2 = Phi(0.3 / std::sqrt(1.0 / 9 + 1.0));
  EXPECT_NEAR(p0, 0.814986, 1e-6);
  EXPECT_NEAR(probs[0], p0 * p1, 1e-6);                // code 00
  EXPECT_NEAR(probs[1], p0 * (1 - p1), 1e-6);          // code 01
  EXPECT_NEAR(probs[2], (1 - p0) * p2, 1e-6);          // code 10
  EXPECT_NEAR(probs[3], (1 - p0) * (1 - p2), 1e-6);    // code 11
}

TEST(HsmClassProbabilities, SumToOneWhenKIsNotAPowerOfTwo) {
  for (int k : {3, 10}) {
    const HsmTree tree(k);
    const auto width = static_cast<size_t>(tree.output_width());
    std::vector<float> mu(2 * width), var(2 * width);
    for (size_t n = 0; n < 2 * width; ++n) {
      mu[n] = 0.8f * std::sin(1.7f * static_cast<float>(n));
      var[n] = 0.1f + 0.05f * static_cast<float>(n % 5);
    }
    std::vector<float> probs(2 * static_cast<size_t>(k));
    HsmClassProbabilities(tree, {mu.data(), var.data()}, 2, probs.data());
    for (size_t b = 0; b < 2; ++b) {
      double sum = 0.0;
      // The probabilities keep the ratios of the path products.
      std::vector<double> prod(k, 1.0);
      for (int r = 0; r < k; ++r) {
        const HsmCode e = EncodeHsmLabel(k, r);
        for (size_t l = 0; l < e.nodes.size(); ++l) {
          const size_t i = b * width + e.nodes[l];
          const double p = Phi(mu[i] / std::sqrt(1.0 / 9 + var[i]));
          prod[r] *= e.targets[l] > 0 ? p : 1 - p;
        }
        const float pr = probs[b * k + r];
        EXPECT_GE(pr, 0.0f);
        sum += pr;
      }
      EXPECT_NEAR(sum, 1.0, 1e-5) << "K=" << k;
      for (int r = 1; r < k; ++r) {
        EXPECT_NEAR(probs[b * k + r] / probs[b * k], prod[r] / prod[0],
                    1e-4 * prod[r] / prod[0]) << "K=" << k << " class " << r;
      }
    }
  }
}

TEST(HsmClassProbabilities, ArgmaxFollowsTheStrongestNodeEvidence) {
  const HsmTree tree(10);
  for (int label = 0; label < 10; ++label) {
    std::vector<float> mu(11, 0.0f), var(11, 0.1f);
    const HsmCode e = EncodeHsmLabel(10, label);
    for (size_t l = 0; l < e.nodes.size(); ++l) mu[e.nodes[l]] = 3.0f * e.targets[l];
    float probs[10];
    HsmClassProbabilities(tree, {mu.data(), var.data()}, 1, probs);
    EXPECT_EQ(Argmax(probs, 10), label);
    EXPECT_GT(probs[label], 0.9f);
  }
}

TEST(Argmax, ReturnsTheFirstLargestValue) {
  const float v[] = {0.1f, 0.7f, 0.7f, 0.2f};
  EXPECT_EQ(Argmax(v, 4), 1);
  const float neg[] = {-3.0f, -1.0f, -2.0f};
  EXPECT_EQ(Argmax(neg, 3), 1);
  const float one[] = {5.0f};
  EXPECT_EQ(Argmax(one, 1), 0);
  const float last[] = {0.0f, 0.0f, 1.0f};
  EXPECT_EQ(Argmax(last, 3), 2);
}

}  // namespace
}  // namespace tagi::engine
