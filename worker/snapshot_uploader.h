// SnapshotUploader: rank 0's snapshots on their way to the coordinator.
//
// Offer() copies the state at a step boundary and returns at once; a
// background thread encodes and uploads the newest one offered (an older
// one still waiting is replaced: only the newest counts). An upload that
// fails because the coordinator cannot be reached is tried again every
// kSnapshotRetryPause until it is stored or refused, or a newer one is
// offered. One answered ABORTED (the coordinator ended this generation, e.g.
// it restarted meanwhile, keeping the snapshot when it was its newest) is
// remembered: a rank 0 holding for the coordinator then aborts the attempt
// instead of training on in a generation that is over. Every wait is on the
// injected Clock. Thread-safe.
#ifndef TAGI_WORKER_SNAPSHOT_UPLOADER_H_
#define TAGI_WORKER_SNAPSHOT_UPLOADER_H_

#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/snapshot.h"
#include "tagi/v1/cluster.pb.h"
#include "worker/attempt.h"
#include "worker/coordinator_api.h"

namespace tagi {

inline constexpr absl::Duration kSnapshotRetryPause = absl::Milliseconds(250);

class SnapshotUploader {
 public:
  // `client` and `clock` outlive the uploader.
  SnapshotUploader(CoordinatorApi& client, const std::string& worker_id,
                   const tagi::v1::Assignment& a, Clock& clock);
  ~SnapshotUploader();  // stops the thread; an upload in flight finishes first
  SnapshotUploader(const SnapshotUploader&) = delete;
  SnapshotUploader& operator=(const SnapshotUploader&) = delete;

  void Offer(Snapshot s);
  // Waits (bounded) until the newest offer has been uploaded or refused.
  void Drain(absl::Duration timeout);
  // Waits until the newest offer has been uploaded or refused (while the
  // coordinator cannot be reached the uploader retries it), for at most
  // `timeout`, giving up early once `control` is aborted. False when it is
  // still pending.
  bool DrainUnlessAborted(AttemptControl& control, absl::Duration timeout);
  // What the coordinator answered when it ended this generation, if it did.
  std::optional<std::string> GenerationEnded();

 private:
  void Loop();
  bool IdleLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !pending_.has_value() && !busy_; }

  CoordinatorApi& client_;
  const std::string worker_id_;
  const tagi::v1::Assignment a_;
  Clock& clock_;
  absl::Mutex mu_;
  std::optional<Snapshot> pending_ ABSL_GUARDED_BY(mu_);
  // Why the coordinator said this generation is over (an upload answered
  // ABORTED); empty until it did.
  std::optional<std::string> ended_ ABSL_GUARDED_BY(mu_);
  bool busy_ ABSL_GUARDED_BY(mu_) = false;
  bool retry_ ABSL_GUARDED_BY(mu_) = false;  // pending_ failed for want of the coordinator
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace tagi

#endif  // TAGI_WORKER_SNAPSHOT_UPLOADER_H_
