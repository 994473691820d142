// InMemoryStore / PrefixStore: regression tests for hostile keys, values and
// deltas (the coordinator serves workers' store calls from one InMemoryStore).
#include "common/store.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// Found by tests/fuzz/store_fuzz: Add summed the stored value and the
// client's delta with signed overflow (undefined behaviour; in practice the
// counter wrapped around). The fuzzer got there through a PrefixStore, with
// an Add to a key already holding a value near the end of int64.
TEST(InMemoryStore, AddThatWouldOverflowInt64IsOutOfRangeAndKeepsTheValue) {
  InMemoryStore store;
  PrefixStore scoped(JobStorePrefix("job-1", 0), store);
  ASSERT_EQ(*scoped.Add("counter", kMax), kMax);
  const size_t bytes = store.bytes();

  auto up = scoped.Add("counter", 1);
  EXPECT_EQ(up.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(up.status().message(), HasSubstr("job/job-1/gen/0/counter"));
  EXPECT_THAT(up.status().message(), HasSubstr("overflows"));
  EXPECT_EQ(*scoped.Get("counter", absl::ZeroDuration()), std::to_string(kMax));
  EXPECT_EQ(store.bytes(), bytes);

  ASSERT_EQ(*scoped.Add("low", kMin), kMin);
  EXPECT_EQ(scoped.Add("low", -1).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(*scoped.Get("low", absl::ZeroDuration()), std::to_string(kMin));
}

TEST(InMemoryStore, AddReachesBothEndsOfInt64) {
  InMemoryStore store;
  ASSERT_TRUE(store.Set("k", std::to_string(kMax - 1)).ok());
  EXPECT_EQ(*store.Add("k", 1), kMax);
  EXPECT_EQ(*store.Add("k", kMin), -1);
  EXPECT_EQ(*store.Add("k", kMin + 1), kMin);
  EXPECT_EQ(*store.Get("k", absl::ZeroDuration()), std::to_string(kMin));
}

}  // namespace
}  // namespace tagi
