// Clock: the one seam through which code reads time and waits.
//
// Timeouts, rates, ETAs and every wait with a deadline take a Clock& so
// that tests drive them with a FakeClock instead of sleeping. RealClock
// reads the monotonic clock (for durations and deadlines) and the wall
// clock (for timestamps). Both are thread-safe.
//
// Waiting: code that waits for a condition under an absl::Mutex calls
// clock.AwaitWithDeadline(mu, condition, deadline) instead of
// mu.AwaitWithTimeout, and code that pauses calls clock.SleepFor; on a
// FakeClock both return when the test has advanced the clock far enough
// (or the condition holds), never because real time passed.
#ifndef TAGI_COMMON_CLOCK_H_
#define TAGI_COMMON_CLOCK_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tagi {

class Clock {
 public:
  virtual ~Clock() = default;
  // Monotonic time, for measuring durations and deadlines.
  virtual absl::Time Now() = 0;
  // Wall time (Unix), for timestamps people read.
  virtual absl::Time WallNow() = 0;
  // Returns once the clock has advanced by `d`.
  virtual void SleepFor(absl::Duration d) = 0;
  // With `mu` held: waits, releasing it meanwhile, until `cond` holds or
  // Now() reaches `deadline` (InfiniteFuture: no deadline). Returns whether
  // `cond` holds; `mu` is held again on return.
  virtual bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond,
                                 absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;
  bool AwaitWithTimeout(absl::Mutex& mu, const absl::Condition& cond, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return AwaitWithDeadline(mu, cond, Now() + timeout);
  }
};

class RealClock final : public Clock {
 public:
  // Durations are measured from a fixed epoch on the steady clock so that
  // wall-clock jumps do not distort them.
  absl::Time Now() override;
  absl::Time WallNow() override { return absl::Now(); }
  void SleepFor(absl::Duration d) override { absl::SleepFor(d); }
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline)
      override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

// Time moves only when a test says so (Advance). Waits on it return when
// the advanced time reaches their deadline; AwaitWaiters lets a test know
// that a thread is waiting before it advances.
class FakeClock final : public Clock {
 public:
  // The wall time starts at `wall` (by default the host's, so that
  // timestamps look like real ones) and moves with Now().
  explicit FakeClock(absl::Time start = absl::UnixEpoch(), absl::Time wall = absl::Now())
      : now_(start), wall_offset_(wall - start) {}
  absl::Time Now() override;
  absl::Time WallNow() override { return Now() + wall_offset_; }
  void SleepFor(absl::Duration d) override;
  bool AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond, absl::Time deadline)
      override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Advance(absl::Duration d);
  // Blocks (in real time) until at least `n` threads are in SleepFor or
  // AwaitWithDeadline on this clock; false when that took `real_limit`.
  bool AwaitWaiters(int n, absl::Duration real_limit = absl::Seconds(30));
  int waiters();
  // Waits begun on this clock so far (SleepFor and AwaitWithDeadline).
  int64_t waits_begun();

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  int waiters_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t waits_begun_ ABSL_GUARDED_BY(mu_) = 0;
  const absl::Duration wall_offset_;
};

}  // namespace tagi

#endif  // TAGI_COMMON_CLOCK_H_
