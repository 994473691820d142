// GlooStoreAdapter: Gloo's Store calls over a tagi::Store, bounded by the
// adapter's deadline, with store errors kept as absl::Status.
#include "worker/collective/gloo/store_adapter.h"

#include <chrono>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

std::vector<char> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

TEST(GlooStoreAdapter, SetThenGetRoundTripsBytes) {
  InMemoryStore base;
  PrefixStore store("job/x/gen/1/", base);
  GlooStoreAdapter adapter(store, absl::Now() + absl::Seconds(10));
  const std::string binary("a\0b\xff", 4);
  adapter.set("k", Bytes(binary));
  EXPECT_EQ(adapter.get("k"), Bytes(binary));
  adapter.wait({"k"});
  adapter.wait({"k"}, std::chrono::milliseconds(10));
  // The prefix applies: the key lives under the job's scope.
  EXPECT_TRUE(base.Get("job/x/gen/1/k", absl::ZeroDuration()).ok());
  EXPECT_TRUE(adapter.first_error().ok());
}

TEST(GlooStoreAdapter, MissingKeyThrowsStoreErrorAtTheDeadline) {
  InMemoryStore store;
  const absl::Time start = absl::Now();
  GlooStoreAdapter adapter(store, start + absl::Milliseconds(100));
  absl::Status caught;
  try {
    adapter.get("missing");
  } catch (const StoreError& e) {
    caught = e.status();
  }
  const absl::Duration took = absl::Now() - start;
  EXPECT_TRUE(absl::IsDeadlineExceeded(caught)) << caught;
  EXPECT_TRUE(absl::IsDeadlineExceeded(adapter.first_error()));
  EXPECT_GE(took, absl::Milliseconds(90));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(GlooStoreAdapter, WaitHonoursTheShorterOfTimeoutAndDeadline) {
  InMemoryStore store;
  GlooStoreAdapter adapter(store, absl::Now() + absl::Seconds(60));
  const absl::Time start = absl::Now();
  EXPECT_THROW(adapter.wait({"a", "b"}, std::chrono::milliseconds(50)), ::gloo::IoException);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));

  // Gloo's "no timeout" (zero) still stops at the deadline.
  GlooStoreAdapter short_lived(store, absl::Now() + absl::Milliseconds(50));
  EXPECT_THROW(short_lived.wait({"a"}, std::chrono::milliseconds(0)), StoreError);
  EXPECT_THROW(short_lived.wait({"a"}), StoreError);
}

TEST(GlooStoreAdapter, StoreRefusalKeepsItsCode) {
  InMemoryStore store(/*max_value_bytes=*/4);
  GlooStoreAdapter adapter(store, absl::Now() + absl::Seconds(1));
  EXPECT_THROW(adapter.set("k", Bytes("too long")), StoreError);
  EXPECT_TRUE(absl::IsInvalidArgument(adapter.first_error())) << adapter.first_error();
}

}  // namespace
}  // namespace tagi
