#include "common/rng.h"

#include <cmath>

namespace tagi {

double Rng::Normal() {
  // 1 - Uniform() lies in (0, 1], so the logarithm is finite.
  const double u1 = 1.0 - Uniform();
  const double u2 = Uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace tagi
