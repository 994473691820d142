// Clock: the one seam through which code reads time.
//
// Timeouts, rates and ETAs take a Clock& so that tests drive them with a
// FakeClock instead of sleeping. RealClock reads the monotonic clock (for
// durations) and the wall clock (for timestamps). Both are thread-safe.
#ifndef TAGI_COMMON_CLOCK_H_
#define TAGI_COMMON_CLOCK_H_

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
};

class RealClock final : public Clock {
 public:
  // absl::Now() is the wall clock; durations are measured from a fixed
  // epoch on the steady clock so that wall-clock jumps do not distort them.
  absl::Time Now() override;
};

// Time moves only when a test says so.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch()) : now_(start) {}
  absl::Time Now() override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tagi

#endif  // TAGI_COMMON_CLOCK_H_
