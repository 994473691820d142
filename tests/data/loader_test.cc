#include "worker/data/loader.h"

#include <cmath>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_dir.h"
#include "worker/data/toy.h"

namespace tagi::data {
namespace {

using ::tagi::testing::ScratchDir;
using ::tagi::v1::DataSpec;
using ::testing::HasSubstr;

DataSpec CsvSpec(const std::string& train, const std::string& test) {
  DataSpec spec;
  spec.set_kind(DataSpec::CSV);
  spec.set_train_csv(train);
  spec.set_test_csv(test);
  spec.set_csv_has_header(true);
  return spec;
}

TEST(LoadData, CsvIsStandardisedWithTrainingStatistics) {
  ScratchDir dir;
  const std::string train =
      dir.Write("train.csv", "x,y\n1,10\n2,20\n3,\n4,40\n");
  const std::string test = dir.Write("test.csv", "x,y\n5,50\n");
  absl::StatusOr<LoadedData> loaded = LoadData(CsvSpec(train, test), 1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Dataset& tr = loaded->data.train;
  ASSERT_EQ(tr.num_samples, 4u);
  ASSERT_EQ(loaded->input.mean.size(), 1u);
  EXPECT_FLOAT_EQ(loaded->input.mean[0], 2.5f);
  EXPECT_NEAR(tr.inputs[0] + tr.inputs[1] + tr.inputs[2] + tr.inputs[3], 0.0,
              1e-6);
  EXPECT_TRUE(std::isnan(tr.targets[2]));  // missing target survives
  // The test split uses the training maps, not its own statistics.
  const float x_test = loaded->data.test.inputs[0];
  EXPECT_FLOAT_EQ(x_test, (5.0f - 2.5f) / loaded->input.stddev[0]);
  EXPECT_NEAR(InvertMean(loaded->target, 0, loaded->data.test.targets[0]), 50.0,
              1e-4);
  EXPECT_NEAR(InvertMean(loaded->target, 0, tr.targets[3]), 40.0, 1e-4);
}

TEST(LoadData, StandardizeFalseKeepsRawValues) {
  ScratchDir dir;
  DataSpec spec = CsvSpec(dir.Write("a.csv", "x,y\n1,10\n2,20\n"),
                          dir.Write("b.csv", "x,y\n5,50\n"));
  spec.set_standardize(false);
  absl::StatusOr<LoadedData> loaded = LoadData(spec, 1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->input.empty());
  EXPECT_TRUE(loaded->target.empty());
  EXPECT_EQ(loaded->data.train.inputs, (std::vector<float>{1, 2}));
  EXPECT_EQ(loaded->data.test.targets, (std::vector<float>{50}));
}

TEST(LoadData, CsvSplitsMustHaveTheSameShape) {
  ScratchDir dir;
  const DataSpec spec = CsvSpec(dir.Write("a.csv", "x,y\n1,10\n"),
                                dir.Write("b.csv", "x,z,y\n5,6,50\n"));
  EXPECT_THAT(std::string(LoadData(spec, 1).status().message()),
              HasSubstr("differ in shape"));
}

TEST(LoadData, ToyUsesDefaultSizesLimitsAndTheJobSeed) {
  DataSpec spec;
  spec.set_kind(DataSpec::TOY_CUBIC);
  absl::StatusOr<LoadedData> a = LoadData(spec, 99);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->data.train.num_samples, 20u);
  EXPECT_EQ(a->data.test.num_samples, 100u);
  ASSERT_EQ(a->target.mean.size(), 1u);

  spec.set_standardize(false);
  absl::StatusOr<LoadedData> raw = LoadData(spec, 99);
  ASSERT_TRUE(raw.ok()) << raw.status();
  EXPECT_EQ(raw->data.train.inputs, MakeCubicToy(99, 20, 100).train.inputs);

  spec.set_toy_train_size(50);
  spec.set_test_limit(7);
  absl::StatusOr<LoadedData> b = LoadData(spec, 98);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->data.train.num_samples, 50u);
  EXPECT_EQ(b->data.test.num_samples, 7u);
  EXPECT_NE(b->data.train.inputs[0], raw->data.train.inputs[0]);
}

TEST(CheckDataFiles, NamesEveryMissingFileInOneStatus) {
  ScratchDir dir;
  DataSpec spec;
  spec.set_kind(DataSpec::MNIST);
  spec.set_train_images(dir.Path("no-images"));
  spec.set_train_labels(dir.Write("labels", "x"));
  spec.set_test_images(dir.Path(""));  // the directory itself
  const absl::Status status = CheckDataFiles(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  const std::string message(status.message());
  EXPECT_THAT(message, HasSubstr("data.train_images: file " +
                                 dir.Path("no-images") + " does not exist; "));
  EXPECT_THAT(message, HasSubstr("data.test_images: "));
  EXPECT_THAT(message, HasSubstr("is not a regular file"));
  EXPECT_THAT(message, HasSubstr("data.test_labels: no path given"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("data.train_labels")));
  // LoadData reports the same problems before reading anything.
  EXPECT_EQ(LoadData(spec, 0).status(), status);
}

TEST(CheckDataFiles, CsvAndToyAndUnspecified) {
  ScratchDir dir;
  const DataSpec csv =
      CsvSpec(dir.Write("a.csv", "1,2\n"), dir.Path("missing.csv"));
  EXPECT_THAT(std::string(CheckDataFiles(csv).message()),
              HasSubstr("data.test_csv: file "));
  DataSpec toy;
  toy.set_kind(DataSpec::TOY_CUBIC);
  EXPECT_TRUE(CheckDataFiles(toy).ok());
  EXPECT_THAT(std::string(CheckDataFiles(DataSpec()).message()),
              HasSubstr("data.kind"));
}

TEST(LoadData, FashionMnistDefaultsToTheDebianFiles) {
  DataSpec spec;
  spec.set_kind(DataSpec::FASHION_MNIST);
  if (!CheckDataFiles(spec).ok()) {
    GTEST_SKIP() << "Fashion-MNIST not installed: " << CheckDataFiles(spec);
  }
  spec.set_train_limit(500);
  spec.set_test_limit(200);
  absl::StatusOr<LoadedData> loaded = LoadData(spec, 0);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->data.train.num_samples, 500u);
  EXPECT_EQ(loaded->data.test.num_samples, 200u);
  EXPECT_EQ(loaded->data.train.num_classes, 10);
  EXPECT_EQ(loaded->input.mean.size(), 1u);  // one scalar map for images
  EXPECT_TRUE(loaded->target.empty());
  double sum = 0.0;
  for (float v : loaded->data.train.inputs) sum += v;
  EXPECT_NEAR(sum / loaded->data.train.inputs.size(), 0.0, 1e-4);
}

}  // namespace
}  // namespace tagi::data
