#include "worker/snapshot_uploader.h"

#include <algorithm>
#include <cstdio>

namespace tagi {
namespace {

// A failure that says nothing about the snapshot: the coordinator could not
// be reached. The upload is tried again.
bool Unreachable(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st);
}

// How often DrainUnlessAborted looks at the attempt's abort flag.
constexpr absl::Duration kAbortCheck = absl::Milliseconds(100);

}  // namespace

SnapshotUploader::SnapshotUploader(CoordinatorApi& client, const std::string& worker_id,
                                   const tagi::v1::Assignment& a, Clock& clock)
    : client_(client), worker_id_(worker_id), a_(a), clock_(clock), thread_([this] { Loop(); }) {}

SnapshotUploader::~SnapshotUploader() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void SnapshotUploader::Offer(Snapshot s) {
  absl::MutexLock lock(&mu_);
  pending_ = std::move(s);
  retry_ = false;
}

void SnapshotUploader::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return IdleLocked(); };
  clock_.AwaitWithTimeout(mu_, absl::Condition(&idle), timeout);
}

bool SnapshotUploader::DrainUnlessAborted(AttemptControl& control, absl::Duration timeout) {
  const absl::Time until = clock_.Now() + timeout;
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return IdleLocked(); };
  while (!control.aborted()) {
    const absl::Time now = clock_.Now();
    if (now >= until) return false;
    if (clock_.AwaitWithDeadline(mu_, absl::Condition(&idle), std::min(until, now + kAbortCheck))) {
      return true;
    }
  }
  return false;
}

std::optional<std::string> SnapshotUploader::GenerationEnded() {
  absl::MutexLock lock(&mu_);
  return ended_;
}

void SnapshotUploader::Loop() {
  while (true) {
    Snapshot s;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || pending_.has_value();
      };
      mu_.Await(absl::Condition(&ready));  // Offer or the destructor wakes it: no deadline
      if (stop_) return;
      if (retry_) {  // the coordinator was unreachable: pause before trying again
        retry_ = false;
        clock_.AwaitWithTimeout(mu_, absl::Condition(&stop_), kSnapshotRetryPause);
        if (stop_) return;
        if (!pending_.has_value()) continue;
      }
      s = std::move(*pending_);
      pending_.reset();
      busy_ = true;
    }
    tagi::v1::SnapshotChunk header;
    header.set_worker_id(worker_id_);
    header.set_job_id(a_.job_id());
    header.set_generation(a_.generation());
    header.set_global_step(s.global_step);
    const absl::Status st = client_.UploadSnapshot(header, EncodeSnapshot(s));
    if (!st.ok()) {
      std::fprintf(stderr, "tagi-worker %s: job %s: snapshot at step %d not stored: %s\n",
                   worker_id_.c_str(), a_.job_id().c_str(), static_cast<int>(s.global_step),
                   std::string(st.message()).c_str());
    }
    absl::MutexLock lock(&mu_);
    busy_ = false;
    if (absl::IsAborted(st)) ended_ = std::string(st.message());
    if (Unreachable(st) && !pending_.has_value()) {
      pending_ = std::move(s);  // not stored, nothing newer: it is tried again
      retry_ = true;
    }
  }
}

}  // namespace tagi
