// Linear: the fully connected TAGI layer (shared/TAGI.md sections 3, 6, 7).
//
// Its parameters (mu_w, var_w [out][in] row-major; mu_b, var_b [out]) and
// their four delta buffers are views into the model's arenas, so a whole
// model's deltas form one contiguous buffer. The layer owns only derived
// and scratch buffers: mu_w^2 and mu_w^2 + var_w (refreshed whenever the
// parameters change) and the squared input means of the current batch.
// Every product is one cblas_sgemm call; nothing allocates after Reserve().
#ifndef TAGI_WORKER_ENGINE_LINEAR_H_
#define TAGI_WORKER_ENGINE_LINEAR_H_

#include <vector>

#include "common/rng.h"
#include "worker/engine/layer.h"

namespace tagi::engine {

// Views of one LINEAR layer's slice of a model arena.
struct LinearParams {
  GaussianView w;  // [out][in]
  GaussianView b;  // [out]
};

enum class InitMethod { kHe, kXavier };

class Linear final : public Layer {
 public:
  Linear(size_t in, size_t out) : in_(in), out_(out) {}

  LayerKind kind() const override { return LayerKind::kLinear; }
  size_t OutputWidth(size_t) const override { return out_; }
  bool ProducesJcb() const override { return false; }
  void Reserve(size_t max_batch) override;

  size_t in() const { return in_; }
  size_t out() const { return out_; }
  size_t num_weights() const { return in_ * out_; }

  // Binds the arena slices. REQUIRES: called once before use; the arenas
  // outlive the layer.
  void Bind(LinearParams params, LinearParams deltas);
  // When the input units carry no variance (the data), one product is skipped.
  void set_input_variance_zero(bool zero) { input_variance_zero_ = zero; }

  // Draws the means, sets the variances (TAGI.md section 1).
  void Initialize(Rng& rng, InitMethod method, float gain_w, float gain_b);
  // Recomputes the derived buffers after the parameters changed outside
  // ApplyStep (initialisation, loading).
  void RefreshDerived();

  void Forward(const HiddenState& in, HiddenState& out, size_t batch) override;
  void Backward(const HiddenState& in, const HiddenState& out,
                ConstGaussianView delta_out, GaussianView delta_in, size_t batch,
                bool need_input_delta) override;

  // The capped update with the variance floor (TAGI.md section 7), fused
  // with the refresh of the derived buffers.
  void ApplyStep(float cap_factor, float variance_floor);

 private:
  size_t in_;
  size_t out_;
  bool input_variance_zero_ = false;
  LinearParams p_;
  LinearParams d_;
  std::vector<float> mu_w_sq_;    // mu_w^2
  std::vector<float> w_second_;   // mu_w^2 + var_w
  std::vector<float> in_mu_sq_;   // [max_batch][in]: mu_a^2 of the batch
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_LINEAR_H_
