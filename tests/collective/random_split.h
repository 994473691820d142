// A learnable random classification split for the data-parallel tests:
// inputs uniform in [-1, 1], the label the index of the largest of the
// first `classes` inputs.
#ifndef TAGI_TESTS_COLLECTIVE_RANDOM_SPLIT_H_
#define TAGI_TESTS_COLLECTIVE_RANDOM_SPLIT_H_

#include <algorithm>
#include <cstdint>

#include "common/rng.h"
#include "worker/data/dataset.h"

namespace tagi::testing_data {

inline data::Dataset RandomSplit(size_t n, uint32_t inputs, uint32_t classes, uint64_t seed) {
  data::Dataset d;
  d.num_samples = n;
  d.input_dim = inputs;
  d.num_classes = static_cast<int>(classes);
  Rng rng(seed);
  d.inputs.resize(n * inputs);
  for (float& x : d.inputs) x = static_cast<float>(2.0 * rng.Uniform() - 1.0);
  for (size_t i = 0; i < n; ++i) {
    const float* row = d.inputs.data() + i * inputs;
    d.labels.push_back(static_cast<int32_t>(std::max_element(row, row + classes) - row));
  }
  return d;
}

}  // namespace tagi::testing_data

#endif  // TAGI_TESTS_COLLECTIVE_RANDOM_SPLIT_H_
