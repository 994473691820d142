#include "common/status.h"

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status CheckEven(int x, int* calls) {
  ++*calls;
  return x % 2 == 0 ? absl::OkStatus() : absl::InvalidArgumentError("odd");
}

absl::Status TwoChecks(int a, int b, int* reached_end) {
  int calls = 0;
  TAGI_RETURN_IF_ERROR(CheckEven(a, &calls));
  TAGI_RETURN_IF_ERROR(CheckEven(b, &calls));
  *reached_end = calls;
  return absl::OkStatus();
}

// Two assignments in one function: the macro's temporaries must not clash.
absl::StatusOr<int> Quarter(int x) {
  TAGI_ASSIGN_OR_RETURN(int half, Half(x));
  TAGI_ASSIGN_OR_RETURN(const int quarter, Half(half));
  return quarter;
}

TEST(StatusMacros, ReturnIfErrorPassesOkThrough) {
  int reached = 0;
  EXPECT_TRUE(TwoChecks(2, 4, &reached).ok());
  EXPECT_EQ(reached, 2);
}

TEST(StatusMacros, ReturnIfErrorReturnsTheFirstError) {
  int reached = -1;
  const absl::Status s = TwoChecks(2, 3, &reached);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd");
  EXPECT_EQ(reached, -1);
}

TEST(StatusMacros, AssignOrReturnAssignsTheValue) {
  auto q = Quarter(12);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(*q, 3);
}

TEST(StatusMacros, AssignOrReturnPropagatesTheError) {
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);  // 3 is odd
  EXPECT_EQ(Quarter(5).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tagi
