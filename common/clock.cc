#include "common/clock.h"

#include <chrono>

namespace tagi {

absl::Time RealClock::Now() {
  const auto since_boot = std::chrono::steady_clock::now().time_since_epoch();
  return absl::UnixEpoch() + absl::FromChrono(
      std::chrono::duration_cast<std::chrono::nanoseconds>(since_boot));
}

bool RealClock::AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond,
                                  absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) {
    mu.Await(cond);
    return true;
  }
  return mu.AwaitWithTimeout(cond, deadline - Now());
}

absl::Time FakeClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

void FakeClock::SleepFor(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  const absl::Time until = now_ + d;
  ++waiters_;
  ++waits_begun_;
  auto reached = [this, until]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return now_ >= until; };
  mu_.Await(absl::Condition(&reached));
  --waiters_;
}

bool FakeClock::AwaitWithDeadline(absl::Mutex& mu, const absl::Condition& cond,
                                  absl::Time deadline) {
  // `mu` is the caller's; ours is taken only briefly under it (the order is
  // always theirs, then ours). A change of `cond` wakes the wait at once
  // (absl re-evaluates it when `mu` is released); a change of the fake time
  // is seen within a millisecond of real time.
  {
    absl::MutexLock lock(&mu_);
    ++waiters_;
    ++waits_begun_;
  }
  bool held = false;
  for (;;) {
    if (cond.Eval()) {
      held = true;
      break;
    }
    if (Now() >= deadline) break;
    mu.AwaitWithTimeout(cond, absl::Milliseconds(1));
  }
  absl::MutexLock lock(&mu_);
  --waiters_;
  return held;
}

bool FakeClock::AwaitWaiters(int n, absl::Duration real_limit) {
  absl::MutexLock lock(&mu_);
  auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return waiters_ >= n; };
  return mu_.AwaitWithTimeout(absl::Condition(&enough), real_limit);
}

int64_t FakeClock::waits_begun() {
  absl::MutexLock lock(&mu_);
  return waits_begun_;
}

int FakeClock::waiters() {
  absl::MutexLock lock(&mu_);
  return waiters_;
}

}  // namespace tagi
