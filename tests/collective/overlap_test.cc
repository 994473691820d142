// OverlappedReduce on a recording collective: released buckets are reduced
// before Finish (while the backward would still run), in launch order,
// mu half then var half, the tail last; a failed call ends the step with
// its status; a call that hangs past every deadline is aborted; Abandon
// ends a call in flight.
#include "worker/overlap.h"

#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

// Rank 0 of 2: records each all-reduce as (offset in the buffer, size) and
// doubles the values (as a peer with the same values would). Can fail a
// given call (1-based) or hold every call until Abort.
class Recording final : public Collective {
 public:
  Recording(const float* base, int fail_on_call, bool hang)
      : base_(base), fail_on_call_(fail_on_call), hang_(hang) {}
  int rank() const override { return 0; }
  int world() const override { return 2; }
  absl::Status AllReduceSum(std::span<float> data, absl::Duration /*timeout*/) override {
    absl::MutexLock lock(&mu_);
    calls_.push_back({static_cast<size_t>(data.data() - base_), data.size()});
    if (static_cast<int>(calls_.size()) == fail_on_call_) {
      return absl::UnavailableError("link lost");
    }
    if (hang_) mu_.Await(absl::Condition(&aborted_));
    if (aborted_) return absl::AbortedError("aborted");
    for (float& v : data) v *= 2.0f;
    return absl::OkStatus();
  }
  absl::Status Broadcast(std::span<float>, int, absl::Duration) override {
    return absl::UnimplementedError("not used");
  }
  absl::Status Barrier(absl::Duration) override { return absl::UnimplementedError("not used"); }
  void Abort() override {
    absl::MutexLock lock(&mu_);
    aborted_ = true;
  }

  std::vector<std::pair<size_t, size_t>> calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  bool aborted() {
    absl::MutexLock lock(&mu_);
    return aborted_;
  }
  // Waits up to 10 s for `n` calls to have started.
  bool WaitForCalls(size_t n) {
    absl::MutexLock lock(&mu_);
    const auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return calls_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), absl::Seconds(10));
  }

 private:
  const float* base_;
  const int fail_on_call_;
  const bool hang_;
  absl::Mutex mu_;
  std::vector<std::pair<size_t, size_t>> calls_ ABSL_GUARDED_BY(mu_);
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
};

// Ten parameters in two buckets, [6, 10) and [0, 6); a tail of three
// floats.
constexpr size_t kParams = 10;
constexpr size_t kTail = 3;
std::vector<spec::Bucket> TwoBuckets() { return {{6, 10}, {0, 6}}; }

struct Fixture {
  explicit Fixture(int fail_on_call = 0, bool hang = false,
                   absl::Duration timeout = absl::Seconds(30))
      : buffer(2 * kParams + kTail, 1.0f),
        collective(buffer.data(), fail_on_call, hang),
        reduce(collective, timeout, clock, buffer, kParams, TwoBuckets()) {}
  std::vector<float> buffer;
  RealClock clock;
  Recording collective;
  OverlappedReduce reduce;
};

TEST(OverlappedReduce, ReleasedBucketsGoBeforeFinishInLaunchOrderAndTheTailLast) {
  Fixture f;
  for (int step = 0; step < 2; ++step) {
    const size_t first = f.collective.calls().size();
    f.reduce.BeginStep();
    f.reduce.Ready(10);  // nothing final yet
    f.reduce.Ready(7);   // part of [6, 10): not yet
    ASSERT_EQ(f.collective.calls().size(), first);
    f.reduce.Ready(6);  // [6, 10) is final
    // The thread reduces it while the caller has not finished its backward.
    ASSERT_TRUE(f.collective.WaitForCalls(first + 2));
    f.reduce.Ready(0);
    ASSERT_TRUE(f.reduce.Finish().ok());
    const auto calls = f.collective.calls();
    const std::vector<std::pair<size_t, size_t>> expected = {
        {6, 4}, {16, 4}, {0, 6}, {10, 6}, {20, 3}};
    ASSERT_EQ(calls.size(), first + expected.size());
    EXPECT_EQ(std::vector(calls.begin() + static_cast<long>(first), calls.end()), expected);
    EXPECT_EQ(f.reduce.num_buckets(), 2u);
  }
  // Every value was reduced once per step.
  for (float v : f.buffer) EXPECT_EQ(v, 4.0f);
}

TEST(OverlappedReduce, AFailedCallEndsTheStepWithItsStatusAndNoLaterCall) {
  Fixture f(/*fail_on_call=*/3);
  f.reduce.BeginStep();
  f.reduce.Ready(0);
  const absl::Status st = f.reduce.Finish();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_EQ(f.collective.calls().size(), 3u);
}

TEST(OverlappedReduce, FinishAbortsACallThatOutlivesEveryDeadline) {
  Fixture f(0, /*hang=*/true, absl::Milliseconds(20));
  f.reduce.BeginStep();
  const absl::Time start = absl::Now();
  const absl::Status st = f.reduce.Finish();
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_TRUE(f.collective.aborted());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(OverlappedReduce, AbandonEndsACallInFlightAndIsANoOpWhenSettled) {
  Fixture f(0, /*hang=*/true);
  f.reduce.Abandon();  // nothing released: nothing to do
  EXPECT_FALSE(f.collective.aborted());
  f.reduce.BeginStep();
  f.reduce.Ready(6);
  ASSERT_TRUE(f.collective.WaitForCalls(1));
  const absl::Time start = absl::Now();
  f.reduce.Abandon();
  EXPECT_TRUE(f.collective.aborted());
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace tagi
