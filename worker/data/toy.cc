#include "worker/data/toy.h"

#include "common/rng.h"

namespace tagi::data {
namespace {

constexpr double kXMin = -4.0;
constexpr double kXMax = 4.0;
constexpr double kNoiseStd = 3.0;

Dataset MakeSplit(uint64_t stream_seed, size_t n) {
  Rng rng(stream_seed);
  Dataset out;
  out.num_samples = n;
  out.input_dim = 1;
  out.output_dim = 1;
  out.inputs.resize(n);
  out.targets.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const double x = kXMin + (kXMax - kXMin) * rng.Uniform();
    const double noise = kNoiseStd * rng.Normal();
    out.inputs[i] = static_cast<float>(x);
    out.targets[i] = static_cast<float>(x * x * x + noise);
  }
  return out;
}

}  // namespace

TrainTest MakeCubicToy(uint64_t seed, size_t n_train, size_t n_test) {
  return TrainTest{MakeSplit(DeriveSeed(seed, 1), n_train),
                   MakeSplit(DeriveSeed(seed, 2), n_test)};
}

}  // namespace tagi::data
