#include "worker/data/standardize.h"

#include <cmath>

#include "absl/base/internal/raw_logging.h"

namespace tagi::data {
namespace {

// Mean and population stddev of the non-NaN values at offset, offset +
// stride, ...; accumulated in double so that 47M pixels do not lose digits.
void MeanStd(const std::vector<float>& values, size_t offset, size_t stride,
             float& mean, float& stddev) {
  double sum = 0.0;
  size_t count = 0;
  for (size_t i = offset; i < values.size(); i += stride) {
    if (std::isnan(values[i])) continue;
    sum += values[i];
    ++count;
  }
  if (count == 0) {
    mean = 0.0f;
    stddev = 1.0f;
    return;
  }
  const double m = sum / static_cast<double>(count);
  double squares = 0.0;
  for (size_t i = offset; i < values.size(); i += stride) {
    if (std::isnan(values[i])) continue;
    const double d = values[i] - m;
    squares += d * d;
  }
  mean = static_cast<float>(m);
  stddev = static_cast<float>(std::sqrt(squares / static_cast<double>(count)));
}

void CheckColumn(const Standardizer& s, size_t column) {
  ABSL_RAW_CHECK(s.mean.size() == s.stddev.size(),
                 "Standardizer: mean and stddev sizes differ");
  ABSL_RAW_CHECK(s.mean.size() <= 1 || column < s.mean.size(),
                 "Standardizer: column out of range");
}

float MeanOf(const Standardizer& s, size_t column) {
  if (s.empty()) return 0.0f;
  CheckColumn(s, column);
  return s.mean.size() == 1 ? s.mean[0] : s.mean[column];
}

}  // namespace

Standardizer FitScalar(const std::vector<float>& values) {
  Standardizer s;
  s.mean.resize(1);
  s.stddev.resize(1);
  MeanStd(values, 0, 1, s.mean[0], s.stddev[0]);
  return s;
}

Standardizer FitColumns(const std::vector<float>& rows, size_t dim) {
  ABSL_RAW_CHECK(dim > 0 && rows.size() % dim == 0,
                 "FitColumns: rows.size() must be a multiple of dim > 0");
  Standardizer s;
  s.mean.resize(dim);
  s.stddev.resize(dim);
  for (size_t c = 0; c < dim; ++c)
    MeanStd(rows, c, dim, s.mean[c], s.stddev[c]);
  return s;
}

Standardizer PerChannel(std::span<const float> mean, std::span<const float> stddev,
                        size_t plane) {
  ABSL_RAW_CHECK(mean.size() == stddev.size() && plane > 0,
                 "PerChannel: one stddev per mean and a non-empty plane");
  Standardizer s;
  for (size_t c = 0; c < mean.size(); ++c) {
    s.mean.insert(s.mean.end(), plane, mean[c]);
    s.stddev.insert(s.stddev.end(), plane, stddev[c]);
  }
  return s;
}

float EffectiveStddev(const Standardizer& s, size_t column) {
  if (s.empty()) return 1.0f;
  CheckColumn(s, column);
  const float sd = s.stddev.size() == 1 ? s.stddev[0] : s.stddev[column];
  return sd < kMinStddev ? 1.0f : sd;
}

void Apply(const Standardizer& s, std::vector<float>& rows, size_t dim) {
  if (s.empty()) return;
  ABSL_RAW_CHECK(dim > 0 && rows.size() % dim == 0,
                 "Apply: rows.size() must be a multiple of dim > 0");
  ABSL_RAW_CHECK(s.mean.size() == 1 || s.mean.size() == dim,
                 "Apply: standardizer width differs from dim");
  std::vector<float> mean(dim);
  std::vector<float> stddev(dim);
  for (size_t c = 0; c < dim; ++c) {
    mean[c] = MeanOf(s, c);
    stddev[c] = EffectiveStddev(s, c);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t c = i % dim;
    rows[i] = (rows[i] - mean[c]) / stddev[c];
  }
}

float InvertMean(const Standardizer& s, size_t column, float mean) {
  return mean * EffectiveStddev(s, column) + MeanOf(s, column);
}

float InvertVariance(const Standardizer& s, size_t column, float variance) {
  const float sd = EffectiveStddev(s, column);
  return variance * sd * sd;
}

}  // namespace tagi::data
