#include "common/clock.h"

#include <chrono>

namespace tagi {

absl::Time RealClock::Now() {
  const auto since_boot = std::chrono::steady_clock::now().time_since_epoch();
  return absl::UnixEpoch() + absl::FromChrono(
      std::chrono::duration_cast<std::chrono::nanoseconds>(since_boot));
}

}  // namespace tagi
