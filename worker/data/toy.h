// The 1-D cubic toy regression problem of the TAGI paper (Goulet et al.
// 2021, section 5.1): x ~ U(-4, 4), y = x^3 + e, e ~ N(0, 3^2).
//
// Deterministic: the same seed gives the same data on every machine and
// build (tagi::Rng, not <random>). Thread-compatible.
#ifndef TAGI_WORKER_DATA_TOY_H_
#define TAGI_WORKER_DATA_TOY_H_

#include <cstddef>
#include <cstdint>

#include "worker/data/dataset.h"

namespace tagi::data {

// The training split is drawn from Rng(DeriveSeed(seed, 1)), the test split
// from Rng(DeriveSeed(seed, 2)); for each sample x is drawn before its
// noise. So the first k samples of a split do not depend on its size.
// Both splits have input_dim 1 and output_dim 1.
TrainTest MakeCubicToy(uint64_t seed, size_t n_train, size_t n_test);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_TOY_H_
