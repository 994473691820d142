// Gaussian tensors: a mean kept together with its variance.
//
// GaussianTensor owns two equally sized float buffers (means, variances);
// GaussianView is a non-owning pair of pointers into such buffers, used by
// kernels. HiddenState is one layer boundary of a batch: the Gaussian units
// and the jcb (cov(a, z) / var(z)) of the activation that produced them.
// Buffers are sized once for the largest batch (Reserve) and reused, so no
// step allocates. Not thread-safe.
#ifndef TAGI_WORKER_ENGINE_GAUSSIAN_H_
#define TAGI_WORKER_ENGINE_GAUSSIAN_H_

#include <cstddef>
#include <vector>

namespace tagi::engine {

struct GaussianView {
  float* mu = nullptr;
  float* var = nullptr;
};

struct ConstGaussianView {
  const float* mu = nullptr;
  const float* var = nullptr;
};

class GaussianTensor {
 public:
  GaussianTensor() = default;
  explicit GaussianTensor(size_t size) { Resize(size); }

  void Resize(size_t size) {
    mu_.assign(size, 0.0f);
    var_.assign(size, 0.0f);
  }
  size_t size() const { return mu_.size(); }
  float* mu() { return mu_.data(); }
  float* var() { return var_.data(); }
  const float* mu() const { return mu_.data(); }
  const float* var() const { return var_.data(); }
  GaussianView view() { return {mu_.data(), var_.data()}; }
  ConstGaussianView view() const { return {mu_.data(), var_.data()}; }

 private:
  std::vector<float> mu_;
  std::vector<float> var_;
};

// One layer boundary: [batch][width] units plus the producing activation's
// jcb. `has_jcb` is false where the producer is a LINEAR layer or the input
// (jcb = 1 everywhere, not stored).
struct HiddenState {
  size_t width = 0;
  GaussianTensor units;
  std::vector<float> jcb;
  bool has_jcb = false;

  void Reserve(size_t max_batch) {
    units.Resize(max_batch * width);
    if (has_jcb) jcb.assign(max_batch * width, 1.0f);
  }
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_GAUSSIAN_H_
