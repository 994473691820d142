// Parameter and state initialisation from a plan (docs/maths.md section 1),
// shared by every engine: one generator seeded with the job's seed draws
// every block in plan order, so the same seed gives the same bits on every
// rank, device and run. Pure functions over caller-owned arenas.
#ifndef TAGI_WORKER_ENGINE_INITIALIZE_H_
#define TAGI_WORKER_ENGINE_INITIALIZE_H_

#include <cstdint>
#include <span>

#include "spec/plan.h"

namespace tagi::engine {

enum class InitMethod { kHe, kXavier };

struct InitOptions {
  InitMethod method = InitMethod::kHe;
  float gain_w = 1.0f;
  float gain_b = 1.0f;
};

// REQUIRES: arena holds 2 * plan.num_parameters floats ([mu N][var N]).
void InitializeParameters(const spec::Plan& plan, uint64_t seed, const InitOptions& options,
                          std::span<float> arena);
// REQUIRES: state holds plan.num_state floats.
void InitializeState(const spec::Plan& plan, std::span<float> state);

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_INITIALIZE_H_
