#include "worker/data/toy.h"

#include <cmath>

#include "gtest/gtest.h"

namespace tagi::data {
namespace {

TEST(MakeCubicToy, HasTheRequestedShape) {
  const TrainTest toy = MakeCubicToy(7, 20, 100);
  EXPECT_EQ(toy.train.num_samples, 20u);
  EXPECT_EQ(toy.test.num_samples, 100u);
  for (const Dataset* d : {&toy.train, &toy.test}) {
    EXPECT_EQ(d->input_dim, 1u);
    EXPECT_EQ(d->output_dim, 1u);
    EXPECT_FALSE(d->is_classification());
    EXPECT_EQ(d->inputs.size(), d->num_samples);
    EXPECT_EQ(d->targets.size(), d->num_samples);
    EXPECT_TRUE(d->labels.empty());
  }
}

TEST(MakeCubicToy, IsDeterministicPerSeed) {
  const TrainTest a = MakeCubicToy(42, 50, 60);
  const TrainTest b = MakeCubicToy(42, 50, 60);
  const TrainTest c = MakeCubicToy(43, 50, 60);
  EXPECT_EQ(a.train.inputs, b.train.inputs);
  EXPECT_EQ(a.train.targets, b.train.targets);
  EXPECT_EQ(a.test.inputs, b.test.inputs);
  EXPECT_NE(a.train.inputs, c.train.inputs);
  EXPECT_NE(a.train.inputs[0], a.test.inputs[0]);  // independent streams
}

TEST(MakeCubicToy, SplitsAreIndependentOfEachOthersSize) {
  const TrainTest small = MakeCubicToy(3, 10, 5);
  const TrainTest large = MakeCubicToy(3, 10, 500);
  EXPECT_EQ(small.train.inputs, large.train.inputs);
  EXPECT_EQ(small.train.targets, large.train.targets);
  for (size_t i = 0; i < 5; ++i)
    EXPECT_EQ(small.test.inputs[i], large.test.inputs[i]);
}

TEST(MakeCubicToy, FollowsTheCubicWithNoiseOfStdThree) {
  const TrainTest toy = MakeCubicToy(11, 20000, 1);
  double sum = 0.0, squares = 0.0;
  for (size_t i = 0; i < toy.train.num_samples; ++i) {
    const double x = toy.train.inputs[i];
    ASSERT_GE(x, -4.0);
    ASSERT_LT(x, 4.0);
    const double e = toy.train.targets[i] - x * x * x;
    sum += e;
    squares += e * e;
  }
  const double n = static_cast<double>(toy.train.num_samples);
  const double mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.1);
  EXPECT_NEAR(std::sqrt(squares / n - mean * mean), 3.0, 0.1);
}

}  // namespace
}  // namespace tagi::data
