// Gaussian tensors: a mean kept together with its variance.
//
// GaussianView is a non-owning pair of pointers to equally sized float
// buffers (means, variances) in host or device memory, laid out by the plan
// (spec/plan.h), used by layers and kernels. Not thread-safe.
#ifndef TAGI_WORKER_ENGINE_GAUSSIAN_H_
#define TAGI_WORKER_ENGINE_GAUSSIAN_H_

#include <cstddef>

namespace tagi::engine {

struct GaussianView {
  float* mu = nullptr;
  float* var = nullptr;
};

struct ConstGaussianView {
  const float* mu = nullptr;
  const float* var = nullptr;
};

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_GAUSSIAN_H_
