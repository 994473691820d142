#include "common/json_depth.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

using ::testing::HasSubstr;

std::string Nested(int depth, char open, char close) {
  return absl::StrCat(std::string(depth, open), std::string(depth, close));
}

TEST(CheckJsonDepth, AcceptsUpToTheLimitAndNamesItBeyond) {
  EXPECT_TRUE(CheckJsonDepth(Nested(4, '[', ']'), 4).ok());
  EXPECT_TRUE(CheckJsonDepth(R"({"a": [{"b": []}]})", 4).ok());
  const absl::Status st = CheckJsonDepth(Nested(5, '[', ']'), 4);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_THAT(st.message(), HasSubstr("more than 4 deep (at byte 4)"));
  EXPECT_FALSE(CheckJsonDepth(R"({"a": {"b": {"c": {"d": {}}}}})", 4).ok());
}

TEST(CheckJsonDepth, BracketsInsideStringsDoNotCount) {
  EXPECT_TRUE(CheckJsonDepth(R"(["[[[[[[[[", "\"[[[[[[", "\\"])", 2).ok());
  // An escaped quote does not end the string; the brackets after it are text.
  EXPECT_TRUE(CheckJsonDepth(R"(["\"[[[[[[[[[[["])", 1).ok());
  EXPECT_FALSE(CheckJsonDepth(R"(["\\", [[]]])", 2).ok());  // the string ended at \\"
}

TEST(CheckJsonDepth, SiblingsDoNotAddUp) {
  std::string wide = "[";
  for (int i = 0; i < 1000; ++i) absl::StrAppend(&wide, i ? "," : "", "[[1]]");
  wide += "]";
  EXPECT_TRUE(CheckJsonDepth(wide, 3).ok());
}

TEST(ParseJobSpecJson, RefusesDeepNestingBeforeParsing) {
  const auto spec = ParseJobSpecJson(absl::StrCat(R"({"layers": )", std::string(60000, '[')));
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr("more than 128 deep"));
}

// An empty object key is refused wherever it stands (protobuf would take
// {"": {}} in a message and print something else); an empty string as a
// value, or "" inside a string, is not a key.
TEST(CheckJsonDepth, RefusesAnEmptyObjectKey) {
  for (const char* bad : {R"({"": 1})", R"({"layers": [{"": {}}]})", R"({"a": {"" : {}}})",
                          "{\"x\": 1, \"\"\n\t :2}"}) {
    const absl::Status st = CheckJsonDepth(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("empty"), std::string_view::npos) << st;
  }
  for (const char* good : {R"({"name": ""})", R"({"a": ["", ""]})", R"({"q\"": "\"\""})",
                           R"({"a": "\"\": 1"})"}) {
    EXPECT_TRUE(CheckJsonDepth(good).ok()) << good << ": " << CheckJsonDepth(good);
  }
}

}  // namespace
}  // namespace tagi
