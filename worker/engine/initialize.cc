#include "worker/engine/initialize.h"

#include <algorithm>
#include <cmath>

#include "common/rng.h"

namespace tagi::engine {

void InitializeParameters(const spec::Plan& plan, uint64_t seed, const InitOptions& options,
                          std::span<float> arena) {
  Rng rng(seed);
  const size_t n = plan.num_parameters;
  for (const spec::PlannedBlock& block : plan.blocks) {
    const spec::BlockSpec& b = block.spec;
    const double fan_in = static_cast<double>(b.fan_in);
    const double fan_out = static_cast<double>(b.fan_out);
    // He: s = sqrt(1 / fan_in) (1, not 2); Xavier: s = sqrt(2 / (fan_in + fan_out)).
    const double scale = options.method == InitMethod::kHe ? std::sqrt(1.0 / fan_in)
                                                           : std::sqrt(2.0 / (fan_in + fan_out));
    float* mu = arena.data() + block.offset;
    float* v = arena.data() + n + block.offset;
    if (b.init == spec::InitRule::kOne || b.init == spec::InitRule::kZero) {
      // A normalisation's scale and shift (docs/maths.md section 1): no draw.
      std::fill_n(mu, b.count, b.init == spec::InitRule::kOne ? 1.0f : 0.0f);
      std::fill_n(v, b.count, static_cast<float>(1.0 / fan_in));
      continue;
    }
    const double gain = b.init == spec::InitRule::kWeight ? options.gain_w : options.gain_b;
    const auto var = static_cast<float>((gain * scale) * (gain * scale));
    for (size_t i = 0; i < b.count; ++i) {
      mu[i] = static_cast<float>(scale * rng.Normal());
      v[i] = var;
    }
  }
}

void InitializeState(const spec::Plan& plan, std::span<float> state) {
  for (const spec::PlannedState& s : plan.states) {
    for (size_t i = 0; i < s.spec.count; ++i) state[s.offset + i] = s.spec.initial;
  }
}

}  // namespace tagi::engine
