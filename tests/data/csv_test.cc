#include "worker/data/csv.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_dir.h"

namespace tagi::data {
namespace {

using ::tagi::testing::ScratchDir;
using ::testing::HasSubstr;
using ::testing::Not;

std::string ErrorOf(const std::string& path, size_t targets = 1,
                    bool header = false) {
  return std::string(
      LoadCsvRegression(path, targets, header, 0).status().message());
}

TEST(LoadCsvRegression, SplitsInputsAndTargets) {
  ScratchDir dir;
  const std::string path =
      dir.Write("d.csv", "1,2,3\n4, 5 ,\t6\n-7.5,8e1,+9\n");
  absl::StatusOr<Dataset> data = LoadCsvRegression(path, 1, false, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_FALSE(data->is_classification());
  EXPECT_EQ(data->num_samples, 3u);
  EXPECT_EQ(data->input_dim, 2u);
  EXPECT_EQ(data->output_dim, 1u);
  EXPECT_EQ(data->inputs, (std::vector<float>{1, 2, 4, 5, -7.5f, 80}));
  EXPECT_EQ(data->targets, (std::vector<float>{3, 6, 9}));
}

TEST(LoadCsvRegression, SeveralTargetColumns) {
  ScratchDir dir;
  const std::string path = dir.Write("d.csv", "1,2,3\n4,5,6\n");
  absl::StatusOr<Dataset> data = LoadCsvRegression(path, 2, false, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->input_dim, 1u);
  EXPECT_EQ(data->output_dim, 2u);
  EXPECT_EQ(data->inputs, (std::vector<float>{1, 4}));
  EXPECT_EQ(data->targets, (std::vector<float>{2, 3, 5, 6}));
}

TEST(LoadCsvRegression, SkipsHeaderAndHandlesCrlfAndTrailingBlankLines) {
  ScratchDir dir;
  const std::string path =
      dir.Write("d.csv", "x,y\r\n1.5,2\r\n3,4\r\n\r\n\n  \n");
  absl::StatusOr<Dataset> data = LoadCsvRegression(path, 1, true, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_samples, 2u);
  EXPECT_EQ(data->inputs, (std::vector<float>{1.5f, 3}));
  EXPECT_EQ(data->targets, (std::vector<float>{2, 4}));
}

TEST(LoadCsvRegression, HeaderIsParsedAsDataWhenNotDeclared) {
  ScratchDir dir;
  const std::string path = dir.Write("d.csv", "x,y\n1,2\n");
  EXPECT_THAT(ErrorOf(path), HasSubstr("line 1, column 1"));
}

TEST(LoadCsvRegression, EmptyOrNanTargetIsMissing) {
  ScratchDir dir;
  const std::string path = dir.Write("d.csv", "1,\n2,nan\n3,NaN\n4, 7\n");
  absl::StatusOr<Dataset> data = LoadCsvRegression(path, 1, false, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->targets.size(), 4u);
  EXPECT_TRUE(std::isnan(data->targets[0]));
  EXPECT_TRUE(std::isnan(data->targets[1]));
  EXPECT_TRUE(std::isnan(data->targets[2]));
  EXPECT_EQ(data->targets[3], 7.0f);
}

TEST(LoadCsvRegression, LimitKeepsTheFirstRowsAndIgnoresTheRest) {
  ScratchDir dir;
  const std::string path = dir.Write("d.csv", "1,2\n3,4\nbad,row\n");
  absl::StatusOr<Dataset> data = LoadCsvRegression(path, 1, false, 2);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_samples, 2u);
  EXPECT_EQ(data->targets, (std::vector<float>{2, 4}));
}

TEST(LoadCsvRegression, BadNumberNamesPathLineAndColumnButNotTheText) {
  ScratchDir dir;
  const std::string path = dir.Write("d.csv", "1,2,3\n4,5x,6\n");
  const std::string error = ErrorOf(path);
  EXPECT_THAT(error, HasSubstr(path));
  EXPECT_THAT(error, HasSubstr("line 2, column 2: expected a number, found a field that is not one"));
  EXPECT_THAT(error, Not(HasSubstr("5x")));
  // Nor its length: a field's size is a fact about the file's content.
  EXPECT_THAT(error, Not(HasSubstr("2 characters")));
}

TEST(LoadCsvRegression, WrongColumnCountNamesLineAndCounts) {
  ScratchDir dir;
  const std::string path = dir.Write("d.csv", "h1,h2,h3\n1,2,3\n4,5\n");
  const std::string error = ErrorOf(path, 1, true);
  EXPECT_THAT(error, HasSubstr("line 3"));
  EXPECT_THAT(error, HasSubstr("expected 3 columns"));
  EXPECT_THAT(error, HasSubstr("found 2"));
}

TEST(LoadCsvRegression, ErrorsNameTheLineAndColumnButShowNoContent) {
  ScratchDir dir;
  const std::string error = ErrorOf(dir.Write("s.csv", "1,2\ndb_password=hunter2,3\n"));
  EXPECT_THAT(error, HasSubstr("line 2, column 1: expected a number"));
  EXPECT_THAT(error, Not(HasSubstr("hunter2")));
  EXPECT_THAT(error, Not(HasSubstr("password")));
  EXPECT_THAT(ErrorOf(dir.Write("n.csv", "1,2\nnan,3\n")), Not(HasSubstr("\"nan\"")));
}

TEST(LoadCsvRegression, RefusesNanAndInfiniteInputs) {
  ScratchDir dir;
  EXPECT_THAT(ErrorOf(dir.Write("a.csv", "1,2\nnan,3\n")),
              HasSubstr("line 2, column 1: NaN input"));
  EXPECT_THAT(ErrorOf(dir.Write("b.csv", "1,2\ninf,3\n")),
              HasSubstr("infinite input"));
  EXPECT_THAT(ErrorOf(dir.Write("c.csv", "1,2\n,3\n")),
              HasSubstr("empty input field"));
  EXPECT_THAT(ErrorOf(dir.Write("d.csv", "1,2\n1e99,3\n")),
              HasSubstr("out of float range"));
}

TEST(LoadCsvRegression, NeedsAnInputColumn) {
  ScratchDir dir;
  EXPECT_THAT(ErrorOf(dir.Write("a.csv", "1,2\n"), 2),
              HasSubstr("at least 1 input column"));
}

TEST(LoadCsvRegression, RejectsBlankLineInTheMiddleAndEmptyFile) {
  ScratchDir dir;
  EXPECT_THAT(ErrorOf(dir.Write("a.csv", "1,2\n\n3,4\n")),
              HasSubstr("line 2: blank line"));
  EXPECT_THAT(ErrorOf(dir.Write("b.csv", "x,y\n"), 1, true),
              HasSubstr("no data rows"));
}

TEST(LoadCsvRegression, MissingFileIsNotFound) {
  ScratchDir dir;
  EXPECT_EQ(
      LoadCsvRegression(dir.Path("nope.csv"), 1, false, 0).status().code(),
      absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace tagi::data
