#include "worker/overlap.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tagi {

OverlappedReduce::OverlappedReduce(Collective& collective, absl::Duration timeout, Clock& clock,
                                   std::span<float> buffer, size_t var_offset,
                                   std::vector<spec::Bucket> buckets, WirePrecision wire)
    : collective_(collective),
      timeout_(timeout),
      clock_(clock),
      buffer_(buffer),
      n_(var_offset),
      buckets_(std::move(buckets)),
      units_(buckets_.size() + 1),
      wire_(wire),
      unit_event_(units_, nullptr) {
  thread_ = std::thread([this] { Run(); });
}

OverlappedReduce::~OverlappedReduce() {
  Abandon();
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void OverlappedReduce::BeginStep() {
  absl::MutexLock lock(&mu_);
  released_ = 0;
  done_ = 0;
  busy_accumulated_ = 0.0;
  status_ = absl::OkStatus();
  released_here_ = 0;
}

void OverlappedReduce::Release(size_t units, void* device_event) {
  if (units <= released_here_) return;
  for (size_t u = released_here_; u < units; ++u) unit_event_[u] = device_event;
  released_here_ = units;
  absl::MutexLock lock(&mu_);
  released_ = units;
}

void OverlappedReduce::Ready(size_t ready_from, void* device_event) {
  Release(spec::BucketsReady(buckets_, ready_from), device_event);
}

bool OverlappedReduce::Settled() const {
  return !busy_ && (done_ == released_ || !status_.ok());
}

absl::Status OverlappedReduce::Finish() {
  const absl::Time start = clock_.Now();
  // What is left follows BeginReduce, which waited for the engine's work.
  Release(units_, nullptr);
  absl::MutexLock lock(&mu_);
  // Every call left has the collective's own timeout; one more covers the
  // thread's scheduling.
  const absl::Duration limit = timeout_ * static_cast<double>(2 * (units_ - done_) + 2);
  const auto finished = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return done_ == units_ || !status_.ok();
  };
  if (!clock_.AwaitWithTimeout(mu_, absl::Condition(&finished), limit)) {
    status_ = absl::DeadlineExceededError(absl::StrCat(
        "the bucketed all-reduce did not finish within ", absl::FormatDuration(limit)));
    collective_.Abort();
  }
  busy_seconds_ = busy_accumulated_;
  wait_seconds_ = absl::ToDoubleSeconds(clock_.Now() - start);
  return status_;
}

void OverlappedReduce::Abandon() {
  absl::MutexLock lock(&mu_);
  // Nothing in flight and nothing waiting: the step either finished or
  // failed before any bucket went (the peers then fail on their own
  // deadline, as they would for a single all-reduce).
  if (Settled()) return;
  // A call in flight: this rank cannot finish the step, so the call ends at
  // once (Aborted) and the thread goes idle.
  if (status_.ok()) status_ = absl::AbortedError("the step was abandoned mid-reduction");
  collective_.Abort();
  const auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !busy_; };
  clock_.AwaitWithTimeout(mu_, absl::Condition(&idle), 2 * timeout_);
}

absl::Status OverlappedReduce::ReduceUnit(size_t unit) {
  if (unit == buckets_.size()) {
    // The tail: the state and the control word staged by BeginReduce.
    return collective_.AllReduceSum(buffer_.subspan(2 * n_), timeout_);
  }
  const spec::Bucket& b = buckets_[unit];
  const size_t count = b.end - b.begin;
  const std::span<float> mu = buffer_.subspan(b.begin, count);
  const std::span<float> var = buffer_.subspan(n_ + b.begin, count);
  // A device event (NCCL): the var half follows the mu half on the
  // collective's stream, so only the first waits for it.
  void* event = unit_event_[unit];
  if (auto st = collective_.AllReduceSumAfter(mu, event, wire_, timeout_); !st.ok()) return st;
  return collective_.AllReduceSumOnWire(var, wire_, timeout_);
}

void OverlappedReduce::Run() {
  absl::MutexLock lock(&mu_);
  while (true) {
    const auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stop_ || (status_.ok() && done_ < released_);
    };
    mu_.Await(absl::Condition(&work));
    if (stop_) return;
    const size_t unit = done_;
    busy_ = true;
    mu_.Unlock();
    const absl::Time start = clock_.Now();
    absl::Status st = ReduceUnit(unit);
    const double seconds = absl::ToDoubleSeconds(clock_.Now() - start);
    mu_.Lock();
    busy_ = false;
    busy_accumulated_ += seconds;
    if (!st.ok()) {
      if (status_.ok()) status_ = std::move(st);
      continue;
    }
    ++done_;
  }
}

}  // namespace tagi
