// Output updates and predictions (docs/maths.md sections 4 and 5).
//
// The deltas written here are the innovations of the network's output
// units a (the last boundary): delta_mu = (y - mu_a) / (var_a + V) and
// delta_var = -1 / (var_a + V), with V = sigma_v^2. When the last layer is an
// activation, its Backward multiplies by jcb and jcb^2, which yields exactly
// the gain form k = J / (var_a + V), delta_mu = k (y - mu_a), delta_var = -k J for
// the pre-activation. An output whose target is NaN, or whose gain is not
// finite, gets zero deltas. Pure functions over caller-owned buffers.
#ifndef TAGI_WORKER_ENGINE_OUTPUT_H_
#define TAGI_WORKER_ENGINE_OUTPUT_H_

#include <cstddef>
#include <cstdint>

#include "spec/hsm_tree.h"
#include "worker/engine/gaussian.h"

namespace tagi::engine {

// The alpha of P_n = Phi(mu / sqrt(1/alpha^2 + var)) (docs/maths.md section 5.1).
inline constexpr float kHsmAlpha = 3.0f;

// Gaussian regression: every output observed. n = batch * width.
void RegressionDeltas(ConstGaussianView out, const float* targets, size_t n,
                      float sigma_v, GaussianView delta);

// Hierarchical softmax: only each label's L nodes are observed (+1 / -1);
// every other output gets zero deltas. REQUIRES: labels in [0, K).
void HsmDeltas(const HsmTree& tree, ConstGaussianView out, size_t batch,
               const int32_t* labels, float sigma_v, GaussianView delta);

// One-hot classification (docs/heads.md): every one of the K = width
// outputs of a sample observed, 1 for its label and 0 for the others.
// REQUIRES: labels in [0, width).
void OneHotDeltas(ConstGaussianView out, size_t batch, size_t width, const int32_t* labels,
                  float sigma_v, GaussianView delta);

// Heteroscedastic regression (docs/heads.md): `targets` [n] against the n
// [mean, noise] pairs of the output (2n units) and the output's jcb (its
// EVEN_EXP's); no sigma_v. A target that is not finite gives zeros.
void HeteroscedasticDeltas(ConstGaussianView out, const float* jcb, size_t n,
                           const float* targets, GaussianView delta);

// Class probabilities [batch][K] of a one-hot head: the output means (a
// REMAX's or CLOSED_FORM_SOFTMAX's, all positive) normalised to sum 1.
void MeanClassProbabilities(ConstGaussianView out, size_t batch, size_t width, float* probs);

// Class probabilities [batch][K]: the product of the node probabilities on
// each class's path, normalised over the K classes (for K not a power of
// two the tree's unused leaves would otherwise keep some mass).
// `node_scratch` holds output_width floats for the node probabilities; when
// null, the function allocates them (callers in a step loop pass one).
void HsmClassProbabilities(const HsmTree& tree, ConstGaussianView out, size_t batch,
                           float* probs, float* node_scratch = nullptr);

// Index of the largest of k values.
int Argmax(const float* values, int k);

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_OUTPUT_H_
