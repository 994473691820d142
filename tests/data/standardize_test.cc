#include "worker/data/standardize.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace tagi::data {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

// Mean and population std of column c of row-major data, skipping NaNs.
void ColumnStats(const std::vector<float>& rows, size_t dim, size_t c,
                 double& mean, double& stddev) {
  double sum = 0.0, squares = 0.0;
  int n = 0;
  for (size_t i = c; i < rows.size(); i += dim) {
    if (std::isnan(rows[i])) continue;
    sum += rows[i];
    squares += static_cast<double>(rows[i]) * rows[i];
    ++n;
  }
  mean = sum / n;
  stddev = std::sqrt(squares / n - mean * mean);
}

TEST(Standardizer, ColumnsHaveMeanZeroStdOneAfterApply) {
  std::vector<float> rows = {1, 100, 2, 300, 3, 200, 10, 500};
  const Standardizer s = FitColumns(rows, 2);
  EXPECT_FLOAT_EQ(s.mean[0], 4.0f);
  EXPECT_FLOAT_EQ(s.mean[1], 275.0f);
  Apply(s, rows, 2);
  for (size_t c = 0; c < 2; ++c) {
    double mean, stddev;
    ColumnStats(rows, 2, c, mean, stddev);
    EXPECT_NEAR(mean, 0.0, 1e-6);
    EXPECT_NEAR(stddev, 1.0, 1e-5);
  }
}

TEST(Standardizer, FitColumnsIgnoresAndKeepsNans) {
  std::vector<float> rows = {1, kNan, 3, 5};
  const Standardizer s = FitColumns(rows, 1);
  EXPECT_FLOAT_EQ(s.mean[0], 3.0f);
  Apply(s, rows, 1);
  EXPECT_TRUE(std::isnan(rows[1]));
  EXPECT_FLOAT_EQ(rows[3], (5.0f - 3.0f) / s.stddev[0]);
}

TEST(Standardizer, ConstantColumnUsesUnitStd) {
  std::vector<float> rows = {7, 1, 7, 2, 7, 3};
  const Standardizer s = FitColumns(rows, 2);
  EXPECT_EQ(EffectiveStddev(s, 0), 1.0f);
  Apply(s, rows, 2);
  EXPECT_EQ(rows[0], 0.0f);
  EXPECT_EQ(rows[4], 0.0f);
  EXPECT_FALSE(std::isnan(rows[2]));
}

TEST(Standardizer, ScalarAppliesOneMapToEveryColumn) {
  std::vector<float> rows = {0, 2, 4, 6};
  const Standardizer s = FitScalar(rows);
  ASSERT_EQ(s.mean.size(), 1u);
  EXPECT_FLOAT_EQ(s.mean[0], 3.0f);
  Apply(s, rows, 2);
  double mean, stddev;
  ColumnStats(rows, 1, 0, mean, stddev);
  EXPECT_NEAR(mean, 0.0, 1e-6);
  EXPECT_NEAR(stddev, 1.0, 1e-6);
  EXPECT_LT(rows[0], rows[1]);  // not standardised per column
}

TEST(Standardizer, InversionRestoresOriginalUnits) {
  const std::vector<float> original = {1, 10, 4, 30, 9, 80};
  std::vector<float> rows = original;
  const Standardizer s = FitColumns(rows, 2);
  Apply(s, rows, 2);
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_NEAR(InvertMean(s, i % 2, rows[i]), original[i], 1e-4);
  }
  const float sd = s.stddev[1];
  EXPECT_FLOAT_EQ(InvertVariance(s, 1, 2.0f), 2.0f * sd * sd);
  EXPECT_FLOAT_EQ(InvertVariance(s, 1, 0.0f), 0.0f);
}

TEST(Standardizer, EmptyIsIdentity) {
  const Standardizer s;
  std::vector<float> rows = {1, 2, 3};
  Apply(s, rows, 3);
  EXPECT_EQ(rows, (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(InvertMean(s, 0, 5.0f), 5.0f);
  EXPECT_EQ(InvertVariance(s, 0, 5.0f), 5.0f);
}

}  // namespace
}  // namespace tagi::data
