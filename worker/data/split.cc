#include "worker/data/split.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "common/rng.h"

namespace tagi::data {

Dataset Select(const Dataset& d, const std::vector<size_t>& indices) {
  Dataset out = d;
  out.num_samples = indices.size();
  out.inputs.clear();
  out.targets.clear();
  out.labels.clear();
  out.inputs.reserve(indices.size() * d.input_dim);
  for (size_t i : indices) {
    const auto x = d.inputs.begin() + static_cast<ptrdiff_t>(i * d.input_dim);
    out.inputs.insert(out.inputs.end(), x, x + static_cast<ptrdiff_t>(d.input_dim));
    if (d.is_classification()) {
      out.labels.push_back(d.labels[i]);
    } else {
      const auto y = d.targets.begin() + static_cast<ptrdiff_t>(i * d.output_dim);
      out.targets.insert(out.targets.end(), y, y + static_cast<ptrdiff_t>(d.output_dim));
    }
  }
  return out;
}

absl::StatusOr<TrainTest> HoldOut(const Dataset& all, double fraction, uint64_t seed) {
  if (fraction == 0.0) {
    return absl::InvalidArgumentError(
        "data.holdout_fraction: the data has no test set; give one, or a fraction in (0, 1) "
        "of the training samples to hold out");
  }
  if (!(fraction > 0.0 && fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.holdout_fraction: ", fraction,
                     "; expected a fraction in (0, 1) of the training "
                     "samples to hold out as the test set"));
  }
  const size_t n = all.num_samples;
  if (n < 2) {
    return absl::InvalidArgumentError(absl::StrCat("data.holdout_fraction: the training set has ",
                                                   n,
                                                   " sample; holding some out needs at least 2"));
  }
  const size_t n_test = std::clamp<size_t>(
      static_cast<size_t>(std::llround(fraction * static_cast<double>(n))), 1, n - 1);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  Rng rng(seed);
  for (size_t i = n - 1; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);
  std::vector<size_t> test(order.begin(), order.begin() + static_cast<ptrdiff_t>(n_test));
  std::vector<size_t> train(order.begin() + static_cast<ptrdiff_t>(n_test), order.end());
  std::sort(test.begin(), test.end());
  std::sort(train.begin(), train.end());
  return TrainTest{Select(all, train), Select(all, test)};
}

Dataset TakeEvenly(Dataset d, size_t limit) {
  if (limit == 0 || limit >= d.num_samples) return d;
  std::vector<size_t> indices(limit);
  for (size_t i = 0; i < limit; ++i) indices[i] = i * d.num_samples / limit;
  return Select(d, indices);
}

uint64_t DatasetFingerprint(const Dataset& d) {
  const uint64_t shape[] = {
      d.num_samples, d.input_dim, d.output_dim, static_cast<uint64_t>(d.num_classes),
      d.channels,    d.height,    d.width};
  uint64_t h = Fingerprint64(shape, sizeof(shape));
  h = Mix64(h ^ Fingerprint64(d.inputs.data(), d.inputs.size() * sizeof(float)));
  h = Mix64(h ^ Fingerprint64(d.targets.data(), d.targets.size() * sizeof(float)));
  h = Mix64(h ^ Fingerprint64(d.labels.data(), d.labels.size() * sizeof(int32_t)));
  for (const std::string& name : d.class_names) {
    h = Mix64(h ^ Fingerprint64(name.data(), name.size()));
  }
  return h;
}

}  // namespace tagi::data
