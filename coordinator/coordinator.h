// Coordinator: the state of the service (jobs, workers, the job-scoped
// key-value store, final models) behind one mutex.
//
// The gRPC services translate requests into these calls; decisions about
// who runs what are the pure functions of membership.h, called here under
// the lock and published. Blocking calls (Rendezvous, store waits, Watch)
// wait on the lock's condition with a timeout, never forever. Time comes
// from the injected Clock; Tick() runs the periodic decisions (a background
// thread calls it; tests call it after advancing a FakeClock).
//
// Fencing: every call about a job names (job_id, generation); a call for a
// job that is over, or for another generation, is Aborted.
// Thread-safe.
#ifndef TAGI_COORDINATOR_COORDINATOR_H_
#define TAGI_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "common/store.h"
#include "coordinator/membership.h"
#include "tagi/v1/cluster.pb.h"
#include "tagi/v1/jobs.pb.h"

namespace tagi::coordinator {

// A read-only snapshot of the coordinator for metrics (coordinator/metrics.h).
struct JobStats {
  std::string id;
  tagi::v1::JobState state = tagi::v1::JOB_STATE_UNSPECIFIED;
  uint64_t generation = 0;
  uint64_t restarts = 0;            // always 0: restarts arrive with fault tolerance
  double samples_per_second = 0.0;  // all ranks together; 0 once the job is over
  double progress_ratio = 0.0;      // global step / total steps; 1 once it succeeded
  double rendezvous_seconds = 0.0;  // of the current generation; 0 until rank 0 stepped
};
struct WorkerStats {
  std::string id;
  std::string state;     // IDLE, BUSY
  absl::Time last_seen;  // on the coordinator's clock
};
struct CoordinatorStats {
  std::map<tagi::v1::JobState, int> jobs_by_state;  // every job ever submitted
  std::map<std::string, int> workers_by_state;      // IDLE, BUSY, GONE
  // The running jobs, then the job that ended last (if any): bounded by the
  // number of workers, however long the coordinator runs.
  std::vector<JobStats> jobs;
  std::vector<WorkerStats> workers;  // those not gone
};

struct CoordinatorOptions {
  int world = 1;                 // default and largest world size of a job
  std::string state_dir;         // final models go to <state_dir>/models/ when set
  MembershipOptions membership;
  absl::Duration heartbeat = absl::Seconds(1);  // how often workers must report
  size_t max_model_bytes = size_t{1} << 31;
  size_t max_queued_jobs = 1000;
  absl::Duration max_wait = absl::Seconds(30);  // cap of any long poll
};

class Coordinator {
 public:
  Coordinator(CoordinatorOptions options, Clock& clock);

  // --- Jobs (users) ---
  // InvalidArgument with the validation message for a bad spec;
  // ResourceExhausted when the queue is full.
  absl::StatusOr<tagi::v1::Job> Submit(const tagi::v1::JobSpec& spec);
  absl::StatusOr<tagi::v1::Job> Get(const std::string& id);
  std::vector<tagi::v1::Job> List();
  absl::StatusOr<tagi::v1::Job> Cancel(const std::string& id);
  // Returns the job once its version exceeds `seen` (or at the timeout,
  // unchanged); `seen` is updated. Watchers start with seen = 0.
  absl::StatusOr<tagi::v1::Job> WaitForChange(const std::string& id, uint64_t& seen,
                                              absl::Duration timeout);
  // The final model file; FailedPrecondition until the job SUCCEEDED.
  absl::StatusOr<std::string> ModelFile(const std::string& id);
  std::vector<tagi::v1::WorkerInfo> ListWorkers();
  // A consistent snapshot for metrics; changes nothing.
  CoordinatorStats Stats();

  // --- Cluster (workers) ---
  tagi::v1::RegisterResponse Register(const tagi::v1::RegisterRequest& req,
                                      const std::string& peer);
  absl::StatusOr<tagi::v1::RendezvousResponse> Rendezvous(const std::string& worker_id,
                                                          absl::Duration wait);
  absl::Status StoreSet(const std::string& job, uint64_t gen, const std::string& key,
                        const std::string& value);
  absl::StatusOr<std::string> StoreGet(const std::string& job, uint64_t gen,
                                       const std::string& key, absl::Duration wait);
  absl::Status StoreWait(const std::string& job, uint64_t gen,
                         const std::vector<std::string>& keys, absl::Duration wait);
  absl::StatusOr<int64_t> StoreAdd(const std::string& job, uint64_t gen, const std::string& key,
                                   int64_t delta);
  absl::StatusOr<tagi::v1::ProgressReply> ReportProgress(const tagi::v1::ProgressReport& report);
  absl::Status UploadModel(const std::string& worker_id, const std::string& job, uint64_t gen,
                           const std::string& checksum, std::string bytes);
  absl::Status FinishJob(const tagi::v1::FinishJobRequest& req);

  // Periodic decisions: departures of silent workers, placements.
  void Tick();

 private:
  struct JobRecord {
    tagi::v1::Job job;
    uint64_t version = 1;
    uint64_t seq = 0;                 // submission order
    std::vector<bool> finished;       // per rank
    bool model_ready = false;
    std::string model_bytes;          // when there is no state dir
    std::string model_path;           // when there is one
  };
  struct WorkerRecord {
    tagi::v1::WorkerInfo info;
    absl::Time last_seen;
    bool gone = false;
    std::string job_id;               // empty when idle
    tagi::v1::Assignment assignment;
  };

  int64_t NowMs() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Touch(WorkerRecord& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Changed(JobRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartJobLocked(JobRecord& r, const Placement& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndJobLocked(JobRecord& r, tagi::v1::JobState state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseWorkerLocked(const std::string& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<JobRecord*> FencedJob(const std::string& job, uint64_t gen)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<JobRecord*> FindJob(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when (job, gen) is the current attempt and it is running; takes mu_.
  absl::Status RunningJob(const std::string& job, uint64_t gen) ABSL_LOCKS_EXCLUDED(mu_);
  void MaybeSucceedLocked(JobRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CoordinatorOptions options_;
  Clock& clock_;
  InMemoryStore store_;  // thread-safe on its own; keys under job/<id>/gen/<n>/

  absl::Mutex mu_;
  uint64_t next_job_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_worker_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;  // bumped on every change, for waiters
  std::map<std::string, JobRecord> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, WorkerRecord> workers_ ABSL_GUARDED_BY(mu_);
};

// Maps between absl and gRPC-style job ids etc. are elsewhere; this returns
// the protocol-neutral name of a state ("RUNNING").
std::string JobStateName(tagi::v1::JobState state);
bool IsTerminal(tagi::v1::JobState state);

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_COORDINATOR_H_
