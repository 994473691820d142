#include "worker/engine/output.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "worker/engine/elementwise.h"
#include "worker/engine/heads.h"

namespace tagi::engine {

using elementwise::Observe;

void RegressionDeltas(ConstGaussianView out, const float* targets, size_t n,
                      float sigma_v, GaussianView delta) {
  const float var_v = sigma_v * sigma_v;
  for (size_t i = 0; i < n; ++i) {
    Observe(out.mu[i], out.var[i], targets[i], var_v, &delta.mu[i], &delta.var[i]);
  }
}

void HsmDeltas(const HsmTree& tree, ConstGaussianView out, size_t batch,
               const int32_t* labels, float sigma_v, GaussianView delta) {
  const float var_v = sigma_v * sigma_v;
  const auto width = static_cast<size_t>(tree.output_width());
  std::memset(delta.mu, 0, batch * width * sizeof(float));
  std::memset(delta.var, 0, batch * width * sizeof(float));
  for (size_t b = 0; b < batch; ++b) {
    const size_t row = b * width;
    for (int l = 0; l < tree.levels(); ++l) {
      const size_t i = row + static_cast<size_t>(tree.node(labels[b], l));
      Observe(out.mu[i], out.var[i], tree.target(labels[b], l), var_v, &delta.mu[i],
              &delta.var[i]);
    }
  }
}

void OneHotDeltas(ConstGaussianView out, size_t batch, size_t width, const int32_t* labels,
                  float sigma_v, GaussianView delta) {
  const float var_v = sigma_v * sigma_v;
  for (size_t b = 0; b < batch; ++b) {
    for (size_t j = 0; j < width; ++j) {
      const size_t i = b * width + j;
      heads::OneHotObserve(out.mu[i], out.var[i], static_cast<size_t>(labels[b]) == j, var_v,
                           &delta.mu[i], &delta.var[i]);
    }
  }
}

void HeteroscedasticDeltas(ConstGaussianView out, const float* jcb, size_t n,
                           const float* targets, GaussianView delta) {
  for (size_t t = 0; t < n; ++t) {
    const size_t mean = 2 * t;
    const size_t noise = mean + 1;
    heads::HeteroscedasticPair(out.mu[mean], out.var[mean], out.mu[noise], out.var[noise],
                               jcb[noise], targets[t], &delta.mu[mean], &delta.var[mean],
                               &delta.mu[noise], &delta.var[noise]);
  }
}

void MeanClassProbabilities(ConstGaussianView out, size_t batch, size_t width, float* probs) {
  for (size_t b = 0; b < batch; ++b) {
    const float* mu = out.mu + b * width;
    float* p = probs + b * width;
    double total = 0.0;
    for (size_t j = 0; j < width; ++j) total += mu[j] > 0.0f ? mu[j] : 0.0f;
    for (size_t j = 0; j < width; ++j) {
      const float m = mu[j] > 0.0f ? mu[j] : 0.0f;
      p[j] = total > 0.0 && std::isfinite(total) ? static_cast<float>(m / total)
                                                 : 1.0f / static_cast<float>(width);
    }
  }
}

void HsmClassProbabilities(const HsmTree& tree, ConstGaussianView out, size_t batch,
                           float* probs, float* node_scratch) {
  const auto width = static_cast<size_t>(tree.output_width());
  const int k = tree.num_classes();
  const float inv_alpha_sq = 1.0f / (kHsmAlpha * kHsmAlpha);
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  std::vector<float> owned;
  if (node_scratch == nullptr) {
    owned.resize(width);
    node_scratch = owned.data();
  }
  float* node_p = node_scratch;
  for (size_t b = 0; b < batch; ++b) {
    const float* mu = out.mu + b * width;
    const float* var = out.var + b * width;
    for (size_t n = 0; n < width; ++n) {
      const float z = mu[n] / std::sqrt(inv_alpha_sq + var[n]);
      node_p[n] = 0.5f * std::erfc(-z * kInvSqrt2);  // Phi(z)
    }
    float* p = probs + b * static_cast<size_t>(k);
    double total = 0.0;
    for (int r = 0; r < k; ++r) {
      double prob = 1.0;
      for (int l = 0; l < tree.levels(); ++l) {
        const float pn = node_p[static_cast<size_t>(tree.node(r, l))];
        prob *= tree.target(r, l) > 0.0f ? pn : 1.0f - pn;
      }
      p[r] = static_cast<float>(prob);
      total += prob;
    }
    for (int r = 0; r < k; ++r) {
      p[r] = total > 0.0 ? static_cast<float>(p[r] / total) : 1.0f / static_cast<float>(k);
    }
  }
}

int Argmax(const float* values, int k) {
  int best = 0;
  for (int i = 1; i < k; ++i) {
    if (values[i] > values[best]) best = i;
  }
  return best;
}

}  // namespace tagi::engine
