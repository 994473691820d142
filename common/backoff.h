// Retry delays: 100 ms doubling up to a cap, with +-50 % jitter so that the
// workers of a restarted coordinator do not all come back at once. A pure
// function of (attempt, cap, seed); callers seed it from the clock.
#ifndef TAGI_COMMON_BACKOFF_H_
#define TAGI_COMMON_BACKOFF_H_

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"
#include "common/rng.h"

namespace tagi {

inline absl::Duration BackoffDelay(int attempt, absl::Duration cap, uint64_t seed) {
  const double base =
      std::min(0.1 * static_cast<double>(1 << std::clamp(attempt, 0, 10)),
               absl::ToDoubleSeconds(cap));
  Rng rng(DeriveSeed(seed, static_cast<uint64_t>(attempt)));
  return absl::Seconds(base * (0.5 + rng.Uniform()));
}

}  // namespace tagi

#endif  // TAGI_COMMON_BACKOFF_H_
