#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_dir.h"
#include "worker/data/csv.h"
#include "worker/data/loader.h"

namespace tagi::data {
namespace {

using ::tagi::testing::ScratchDir;
using ::tagi::v1::DataSpec;
using ::testing::HasSubstr;

TEST(CsvClassification, LabelColumnByNameOrIndexWithOrWithoutHeader) {
  const std::string text = "a, \"kind\" ,b\n1.5,2,3\n4,0,-6\n\n";
  absl::StatusOr<Dataset> d = ParseCsvClassification(text, "t.csv", {"kind", {}}, true, 3);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->num_samples, 2u);
  EXPECT_EQ(d->input_dim, 2u);
  EXPECT_EQ(d->inputs, (std::vector<float>{1.5f, 3, 4, -6}));
  EXPECT_EQ(d->labels, (std::vector<int32_t>{2, 0}));
  absl::StatusOr<Dataset> e =
      ParseCsvClassification("1,0.5\n0,0.25\n", "u.csv", {"", size_t{0}}, false, 2);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->labels, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(e->inputs, (std::vector<float>{0.5f, 0.25f}));
}

TEST(CsvClassification, EveryFaultNamesTheFileLineAndColumnButNoField) {
  const struct {
    std::string text;
    const char* name;
    int index;  // -1: by name
    bool header;
    std::string fault;
  } cases[] = {
      {"x,y\n1,5\n", "y", -1, true, "t.csv: line 2, column 2: label 5 is out of range"},
      {"x,y\n1,-1\n", "y", -1, true, "label -1 is out of range"},
      {"x,y\n1,SECRET\n", "y", -1, true, "line 2, column 2: the label is not an integer"},
      {"x,y\nSECRET,1\n", "y", -1, true, "line 2, column 1: expected a number"},
      {"x,y\nnan,1\n", "y", -1, true, "NaN input"},
      {"x,y\n1,1\n1,1,1\n", "y", -1, true, "line 3: expected 2 columns, found 3"},
      {"x,y\n", "y", -1, true, "no data rows"},
      {"x,y\n1,1\n", "z", -1, true, "the header has no column named \"z\""},
      {"1,1\n", "y", -1, false, "has no header"},
      {"1,1\n", "", 2, false, "index 2 is past the last column"},
      {"1\n", "", 0, false, "a label and at least one feature"},
  };
  for (const auto& c : cases) {
    CsvLabel label{c.name, std::nullopt};
    if (c.index >= 0) label.index = static_cast<size_t>(c.index);
    absl::StatusOr<Dataset> d = ParseCsvClassification(c.text, "t.csv", label, c.header, 3);
    ASSERT_FALSE(d.ok()) << c.fault;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(d.status().message()), HasSubstr(c.fault));
    EXPECT_THAT(std::string(d.status().message()), ::testing::Not(HasSubstr("SECRET")));
  }
}

TEST(CsvClassification, LoadsThroughTheLoaderWithAHoldOutAndAFingerprint) {
  ScratchDir dir;
  std::string text = "f1,f2,label\n";
  for (int i = 0; i < 10; ++i)
    text += std::to_string(i) + "," + std::to_string(-i) + "," + std::to_string(i % 2) + "\n";
  DataSpec spec;
  spec.set_kind(DataSpec::CSV_CLASSIFICATION);
  spec.set_train_csv(dir.Write("train.csv", text));
  spec.set_csv_has_header(true);
  spec.set_label_column("label");
  spec.set_holdout_fraction(0.2f);
  LoadOptions options;
  options.num_classes = 2;
  absl::StatusOr<LoadedData> d = LoadData(spec, 5, options);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->data.train.num_samples, 8u);
  EXPECT_EQ(d->data.test.num_samples, 2u);
  EXPECT_EQ(d->input.mean.size(), 2u);  // per-column map
  // One changed value changes the fingerprint the workers compare.
  const uint64_t before = d->fingerprint;
  text[text.find("\n3,") + 1] = '7';
  spec.set_train_csv(dir.Write("train.csv", text));
  absl::StatusOr<LoadedData> changed = LoadData(spec, 5, options);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_NE(changed->fingerprint, before);
  // A regression head cannot read labels.
  EXPECT_THAT(std::string(LoadData(spec, 5).status().message()),
              HasSubstr("needs a classification head"));
}

}  // namespace
}  // namespace tagi::data
