// Standardizer: affine maps x -> (x - mean) / stddev fitted on the training
// split and applied to both splits, plus the inverse maps for predictions.
//
// Three shapes:
//  - empty (no mean, no stddev): the identity; Apply does nothing and the
//    inverse helpers return their argument;
//  - scalar (one mean, one stddev, from FitScalar): the same map for every
//    column (used for images, whose pixels share one scale);
//  - per column (dim entries, from FitColumns, or from PerChannel for images
//    with a fixed per-channel normalisation).
// A stddev below kMinStddev (a constant column) is treated as 1, so Apply
// never divides by zero; the inverse helpers use the same rule. NaN values
// (missing targets) stay NaN. Plain value type; thread-compatible.
#ifndef TAGI_WORKER_DATA_STANDARDIZE_H_
#define TAGI_WORKER_DATA_STANDARDIZE_H_

#include <cstddef>
#include <span>
#include <vector>

namespace tagi::data {

inline constexpr float kMinStddev = 1e-8f;

struct Standardizer {
  std::vector<float> mean;
  std::vector<float> stddev;  // population standard deviation

  bool empty() const { return mean.empty(); }
};

// One mean and standard deviation over all non-NaN values. With no such
// values the result is mean 0, stddev 1.
Standardizer FitScalar(const std::vector<float>& values);

// Per-column mean and standard deviation of row-major `rows` with `dim`
// columns, ignoring NaNs; a column with no non-NaN values gets mean 0,
// stddev 1.
// REQUIRES: dim > 0 and rows.size() % dim == 0.
Standardizer FitColumns(const std::vector<float>& rows, size_t dim);

// The per-column map of CHW images whose channel c has mean[c] and
// stddev[c]: each channel's values repeated over its `plane` (H * W)
// columns, mean.size() * plane columns in all. Fixed values, not fitted;
// model files store them as any per-column map.
// REQUIRES: mean.size() == stddev.size(); plane > 0.
Standardizer PerChannel(std::span<const float> mean, std::span<const float> stddev,
                        size_t plane);

// Standardises row-major `rows` (dim columns) in place.
// REQUIRES: s is empty, scalar, or has exactly dim entries;
//           rows.size() % dim == 0.
void Apply(const Standardizer& s, std::vector<float>& rows, size_t dim);

// The stddev Apply divides column c by (1 for an empty standardizer or a
// constant column).
float EffectiveStddev(const Standardizer& s, size_t column);

// Maps a predicted mean of column c from standardised to original units:
// mean * stddev_c + mean_c.
float InvertMean(const Standardizer& s, size_t column, float mean);

// Maps a predicted variance of column c to original units:
// variance * stddev_c^2.
float InvertVariance(const Standardizer& s, size_t column, float variance);

}  // namespace tagi::data

#endif  // TAGI_WORKER_DATA_STANDARDIZE_H_
