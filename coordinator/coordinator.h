// Coordinator: the state of the service (jobs, workers, the job-scoped
// key-value store, final models) behind one mutex.
//
// The gRPC services translate requests into these calls; decisions about
// who runs what are the pure functions of membership.h, called here under
// the lock and published. Blocking calls (Rendezvous, store waits, Watch)
// wait on the lock's condition with a timeout, never forever. Time comes
// from the injected Clock, the Unix timestamps of jobs and workers too
// (the wall time at construction advanced by that clock); Tick() runs the
// periodic decisions (a background thread calls it; tests call it after
// advancing a FakeClock).
//
// Fencing: every call about a job names (job_id, generation); a call for a
// job that is over, or for another generation, is Aborted.
//
// Failures (docs/fault-tolerance.md "When something fails"): a worker whose session
// stream breaks, or who is silent for longer than the heartbeat timeout, is
// gone; a generation that loses a rank (or whose rank reports a retryable
// failure) ends: its survivors get an ABORT directive on their sessions, the
// job goes back to PENDING with a Recovery record, and the next generation
// (survivors keep their ranks; a spare fills the gap) resumes from the
// newest snapshot that decodes. With a state dir, jobs, generations and
// snapshots survive a coordinator restart: running jobs resume from their
// newest snapshot, and workers keep their ids when they reconnect.
//
// The disk (see state_writer.h): every write to the state dir (job records,
// final models, snapshots, removals) is done by a writer thread off the
// lock, in order per job, and retried while it fails. A job reaches a final
// state (SUCCEEDED, FAILED, CANCELLED) for its users only once that state is
// on disk, its model first: until then Get, List and Watch show it as it
// was (RUNNING or PENDING) with a reason saying what it waits for, and a
// coordinator restarted meanwhile resumes it from its newest snapshot. A
// final state once saved is never left, so no job comes back from FAILED or
// CANCELLED. While the state dir cannot be written, StateHealth() says why
// and no new generation is placed (the jobs wait for the disk instead of
// training what could not be saved).
//
// Retention: ended jobs beyond options.retention (count and age) are
// forgotten with their files (record, model, snapshots), at Tick and at
// startup; files of jobs the state dir no longer holds are removed at
// startup.
// Thread-safe.
#ifndef TAGI_COORDINATOR_COORDINATOR_H_
#define TAGI_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/store.h"
#include "common/file_util.h"
#include "common/worker_credentials.h"
#include "coordinator/job_lifecycle.h"
#include "coordinator/job_log.h"
#include "coordinator/membership.h"
#include "coordinator/retention.h"
#include "coordinator/snapshot_store.h"
#include "coordinator/state_writer.h"
#include "tagi/v1/cluster.pb.h"
#include "tagi/v1/jobs.pb.h"

namespace tagi::coordinator {

// The checksum (hex) of a model upload for a job of `spec`, computed from
// its parameters, when it is a model file of the job's network whose every
// value a training could hold (model_file.h's CheckParameterValues) and
// `claimed_checksum` (empty: none) agrees; InvalidArgument saying what is
// wrong otherwise. Pure.
absl::StatusOr<std::string> VerifyModelUpload(const tagi::v1::JobSpec& spec,
                                              const std::string& claimed_checksum,
                                              const std::string& bytes);

// A read-only snapshot of the coordinator for metrics (coordinator/metrics.h).
struct JobStats {
  std::string id;
  tagi::v1::JobState state = tagi::v1::JOB_STATE_UNSPECIFIED;
  uint64_t generation = 0;
  uint64_t restarts = 0;            // generations that failed and were resumed
  uint32_t world_size = 0;          // ranks of the current (or last) generation
  uint64_t resizes = 0;             // planned re-formations (Job.resizes)
  double samples_per_second = 0.0;  // all ranks together; 0 once the job is over
  double progress_ratio = 0.0;      // global step / total steps; 1 once it succeeded
  double rendezvous_seconds = 0.0;  // of the current generation; 0 until rank 0 stepped
  double snapshot_age_seconds = -1.0;  // -1: no snapshot yet
  uint64_t snapshot_bytes = 0;
  // The last recovery (Recovery of jobs.proto), when there was one.
  bool has_recovery = false;
  double recover_seconds = -1.0;  // detected -> first step of the new generation; -1: not yet
  uint64_t steps_redone = 0;
};
struct WorkerStats {
  std::string id;
  std::string state;     // IDLE, BUSY, EXCLUDED
  absl::Time last_seen;  // on the coordinator's clock
};
struct CoordinatorStats {
  std::map<tagi::v1::JobState, int> jobs_by_state;  // every job ever submitted
  std::map<std::string, int> workers_by_state;      // IDLE, BUSY, GONE, EXCLUDED
  // The running jobs, then the job that ended last (if any): bounded by the
  // number of workers, however long the coordinator runs.
  std::vector<JobStats> jobs;
  std::vector<WorkerStats> workers;  // those not gone
  uint64_t workers_failed = 0;       // sessions broken or heartbeats missed, ever
  uint64_t worker_exclusions = 0;    // workers excluded from placement, ever
  uint64_t progress_rejected = 0;    // progress reports with values no training produces
  uint64_t snapshots_stored = 0;
  uint64_t snapshots_rejected = 0;   // uploads refused, files skipped as corrupt
  uint64_t models_rejected = 0;      // model uploads refused (VerifyModelUpload)
  // Failed attempts to write the state dir, by kind (job, model, snapshot,
  // counter, remove), and whether it can be written now.
  std::map<std::string, uint64_t> state_write_failures;
  bool state_dir_ok = true;
  uint64_t state_writes_pending = 0;
  uint64_t jobs_pruned = 0;  // ended jobs removed by the retention policy
};

struct CoordinatorOptions {
  int world = 1;                 // default and largest world size of a job
  // Jobs (<state_dir>/jobs/), snapshots (<state_dir>/snapshots/) and final
  // models (<state_dir>/models/) when set; otherwise models stay in memory
  // and snapshots go to a private temporary directory removed on exit.
  std::string state_dir;
  MembershipOptions membership;  // worker_timeout is the heartbeat timeout
  absl::Duration heartbeat = absl::Seconds(1);  // how often workers must report
  int max_restarts = 100;        // failed generations before a job FAILS
  size_t keep_snapshots = 3;     // per job
  size_t max_snapshot_bytes = size_t{1} << 31;
  size_t max_model_bytes = size_t{1} << 31;
  size_t max_queued_jobs = 1000;
  absl::Duration max_wait = absl::Seconds(30);  // cap of any long poll
  // Store waits (StoreGetAsync, StoreWaitAsync) pending at once, and keys
  // in one wait: what a flood of waiting calls can make the coordinator
  // hold. Beyond them a call is refused with ResourceExhausted.
  size_t max_store_waits = 65536;
  size_t max_keys_per_wait = 65536;
  RetentionOptions retention;    // of ended jobs
  // How long Submit and Cancel wait for their job record to reach the disk
  // before they answer (with the job as it then stands).
  absl::Duration save_wait = absl::Seconds(5);
  // The file system the state dir is written through; null: the host's.
  // Tests pass a fault-injecting one. Must outlive the coordinator.
  FileSystem* fs = nullptr;
};

class Coordinator {
 public:
  // Reloads jobs from options.state_dir when it holds any (a restart).
  Coordinator(CoordinatorOptions options, Clock& clock);
  ~Coordinator();
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // The clock every wait and timestamp of the coordinator (and its
  // services) reads.
  Clock& clock() const { return clock_; }

  // What the constructor found in the state dir, for the log.
  const std::vector<std::string>& startup_log() const { return startup_log_; }

  // --- Jobs (users) ---
  // InvalidArgument with the validation message for a bad spec;
  // ResourceExhausted when the queue is full; Unavailable (nothing
  // changed) while the state dir cannot be written.
  absl::StatusOr<tagi::v1::Job> Submit(const tagi::v1::JobSpec& spec);
  absl::StatusOr<tagi::v1::Job> Get(const std::string& id);
  // Every job in submission order, each with only its latest epoch metrics
  // and recovery (Get returns them all), so that a listing stays small.
  std::vector<tagi::v1::Job> List();
  absl::StatusOr<tagi::v1::Job> Cancel(const std::string& id);
  // Returns the job once its version exceeds `seen` (or at the timeout,
  // unchanged); `seen` is updated. Watchers start with seen = 0.
  absl::StatusOr<tagi::v1::Job> WaitForChange(const std::string& id, uint64_t& seen,
                                              absl::Duration timeout);
  // The final model file; FailedPrecondition until the job SUCCEEDED.
  absl::StatusOr<std::string> ModelFile(const std::string& id);
  // The job's newest stored snapshot as a model file (a CANCELLED or FAILED
  // job's, or a running one's): with a state dir the newest on disk or
  // received, without one the newest received while the job runs.
  // FailedPrecondition when there is none, or it was taken by a worker
  // that did not record its model's form (snapshot format < 4).
  absl::StatusOr<std::string> SnapshotModelFile(const std::string& id);
  // The job's log lines after seq `after` (job_log.h), with its state.
  absl::StatusOr<tagi::v1::JobLogs> Logs(const std::string& id, uint64_t after,
                                         size_t max_lines);
  std::vector<tagi::v1::WorkerInfo> ListWorkers();
  // A consistent snapshot for metrics; changes nothing.
  CoordinatorStats Stats();

  // --- Cluster (workers) ---
  // `secret`: the credential the caller presented for req.worker_id (empty
  // when none): with a valid one the id is kept, otherwise a new one is
  // given. A Register repeating an earlier one's nonce gets its id.
  // `certificate`: the name of the caller's client certificate under
  // mutual TLS (empty without one): the secret given is bound to it
  // (WorkerKey::SecretFor).
  tagi::v1::RegisterResponse Register(const tagi::v1::RegisterRequest& req,
                                      const std::string& peer, std::string_view secret,
                                      std::string_view certificate = "");
  tagi::v1::RegisterResponse Register(const tagi::v1::RegisterRequest& req,
                                      const std::string& peer) {
    return Register(req, peer, "");
  }
  // True when `secret` is the credential Register gave worker `id` over a
  // connection with client certificate `certificate` (this coordinator or,
  // with a state dir, an earlier one). Thread-safe.
  bool VerifyWorker(std::string_view id, std::string_view secret,
                    std::string_view certificate = "") const;
  // The credential of worker `id` (tests and tools that speak as a worker).
  std::string WorkerSecret(std::string_view id, std::string_view certificate = "") const;
  // OK when `worker` holds a rank in generation `gen` of running job `job`;
  // PermissionDenied (or the job's own error) otherwise.
  absl::Status CheckMember(const std::string& worker, const std::string& job, uint64_t gen);
  absl::Status StoreSet(const std::string& job, uint64_t gen, const std::string& key,
                        const std::string& value);
  absl::StatusOr<int64_t> StoreAdd(const std::string& job, uint64_t gen, const std::string& key,
                                   int64_t delta);
  absl::StatusOr<tagi::v1::ProgressReply> ReportProgress(const tagi::v1::ProgressReport& report);
  absl::Status UploadModel(const std::string& worker_id, const std::string& job, uint64_t gen,
                           const std::string& checksum, std::string bytes);
  absl::Status FinishJob(const tagi::v1::FinishJobRequest& req);

  // --- Sessions (one stream per worker) ---
  // Every message: a heartbeat, with the attempt's progress. A message about
  // an attempt that is over queues an ABORT directive for it.
  absl::Status OnSessionMessage(uint64_t token, const tagi::v1::SessionMessage& m);
  // The stream ended: if it is still the worker's session, the worker failed.
  void CloseSession(const std::string& worker_id, uint64_t token, const std::string& reason);

  // --- Long polls, answered by callbacks (the asynchronous Cluster
  // service: no thread waits while a worker polls or a session idles) ---
  // Each `done` runs exactly once, on a thread that holds no lock of the
  // coordinator's: the caller's, the one whose call made the event happen,
  // or Tick's at the wait's end (Tick runs every 100 ms in the service).
  using RendezvousDone = std::function<void(absl::StatusOr<tagi::v1::RendezvousResponse>)>;
  void RendezvousAsync(const std::string& worker_id, absl::Duration wait, RendezvousDone done);
  void StoreGetAsync(const std::string& job, uint64_t gen, const std::string& key,
                     absl::Duration wait, std::function<void(absl::StatusOr<std::string>)> done);
  void StoreWaitAsync(const std::string& job, uint64_t gen, const std::vector<std::string>& keys,
                      absl::Duration wait, std::function<void(absl::Status)> done);
  // The first message of a stream: names the worker (re-creating a worker
  // this coordinator does not know, e.g. after a restart) and returns the
  // session token that supersedes any older stream of that worker. The
  // stream is told, by `wake` (called without any coordinator lock held,
  // from any thread; may be empty), when a directive is queued for it or it
  // was superseded or closed; it then takes what there is with
  // TakeDirective.
  absl::StatusOr<uint64_t> OpenSession(const tagi::v1::SessionMessage& first,
                                       const std::string& peer, std::function<void()> wake);
  // The next queued directive without waiting: nullopt when there is none,
  // Cancelled once the session was superseded or closed.
  absl::StatusOr<std::optional<tagi::v1::SessionDirective>> TakeDirective(
      const std::string& worker_id, uint64_t token);
  // Long polls waiting now (for metrics and tests).
  size_t PendingWaits();
  // Answers the long polls whose deadline has passed on the clock (Tick
  // does it too, with the rest of its periodic work).
  void ExpireWaits();
  // Answers every pending long poll now (a Rendezvous with what it has, a
  // store wait with Unavailable "`why`"): before the server shuts down.
  void EndWaits(const std::string& why);

  // --- Snapshots ---
  // Checks a snapshot from rank 0 of the current generation (CRC, job,
  // step), keeps it in memory as the job's newest and queues it for the
  // state dir; returns before the disk write (fsync can take 100s of ms
  // here), so that rank 0's next snapshot is never held up by the disk.
  absl::Status UploadSnapshot(const std::string& worker_id, const std::string& job,
                              uint64_t gen, uint64_t global_step, std::string bytes);
  // The snapshot the caller's generation resumes from (NotFound when it
  // starts from the seed).
  absl::StatusOr<std::shared_ptr<const std::string>> ResumeSnapshot(const std::string& worker_id,
                                                                   const std::string& job,
                                                                   uint64_t gen);

  // Before an upload's bytes are read (the services call it after the
  // first message): OK when `worker_id` is rank 0 of the running
  // generation `gen` of `job` and `bytes` is within that kind's limit
  // (max_snapshot_bytes, max_model_bytes); the upload is checked again when
  // whole. So a stream from anyone else is refused before it costs memory.
  enum class UploadKind { kSnapshot, kModel };
  // A snapshot of the generation that has just ended (`global_step`
  // newer than the stored one, EndedGenerationSnapshotLocked) is admitted
  // too; `global_step` is 0 for a model.
  absl::Status AdmitUpload(const std::string& worker_id, const std::string& job, uint64_t gen,
                           UploadKind kind, uint64_t bytes, uint64_t global_step = 0);

  // Waits until every state-dir write queued so far (snapshots, job
  // records, models, removals) has been attempted once.
  void FlushState();
  void FlushSnapshots() { FlushState(); }

  // OK when the state dir can be written (or there is none): no write is
  // failing and the directory is writable, not read-only, not full.
  // Unavailable naming the problem otherwise. Takes no lock of mu_'s.
  absl::Status StateHealth();

  // Periodic decisions: departures of silent workers, placements, retries
  // of failed disk writes, retention of ended jobs.
  void Tick();

 private:
  // Holds mu_ like absl::MutexLock; when released, runs the callbacks
  // queued meanwhile in deferred_ (completions of long polls, wake-ups of
  // session streams), outside the lock, in order. Every method takes mu_
  // through it, so that no callback ever runs under the lock.
  class ABSL_SCOPED_LOCKABLE Lock {
   public:
    explicit Lock(Coordinator* c) ABSL_EXCLUSIVE_LOCK_FUNCTION(c->mu_) : c_(c) { c_->mu_.Lock(); }
    ~Lock() ABSL_UNLOCK_FUNCTION() {
      std::vector<std::function<void()>> run;
      run.swap(c_->deferred_);
      c_->mu_.Unlock();
      for (auto& f : run) f();
    }
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    Coordinator* const c_;
  };

  struct JobRecord {
    tagi::v1::Job job;
    uint64_t version = 1;
    uint64_t seq = 0;                 // submission order
    std::vector<bool> finished;       // per rank
    bool model_ready = false;
    // The final model: in memory until it is on disk (always, without a
    // state dir), then at model_path.
    std::shared_ptr<const std::string> model_data;
    std::string model_path;
    // Fault tolerance.
    std::vector<std::string> previous_workers;   // ranks of the failed generation
    // Peers named by the ranks' failure reports (FinishJobRequest.suspect_rank)
    // in generation accused_generation: accused worker -> the workers that
    // named it (membership.h: two accusers make a strike).
    uint64_t accused_generation = 0;
    std::map<std::string, std::set<std::string>> accusers;
    // Restart back-off (RestartDelay): when the current generation started,
    // how many in a row failed quickly, and no generation before `not_before`.
    absl::Time generation_started;
    int quick_failures = 0;
    absl::Time not_before = absl::InfinitePast();
    // When it ended, or was loaded ended, on clock_ (monotonic): retention
    // ages count from here.
    absl::Time ended_at;
    // The snapshot step the last generation that ended on a non-finite
    // reduced step had resumed from; the same again fails the job.
    std::optional<uint64_t> nonfinite_from;
    std::shared_ptr<const std::string> resume;   // snapshot of this generation
    uint64_t resume_step = 0;
    uint64_t max_reported_step = 0;              // by any rank, this generation
    std::vector<tagi::v1::EpochMetrics> epochs_before;  // finished before `resume`
    // The newest snapshot received (verified), also while it is being written.
    std::shared_ptr<const std::string> newest;
    uint64_t newest_step = 0;
    uint64_t newest_epoch = 0;
    // The newest snapshot in the state dir of a job reloaded recovering
    // (LoadSnapshots), until a newer one arrives; `loaded_source` says which
    // file, or why there is none.
    std::shared_ptr<const std::string> loaded;
    uint64_t loaded_step = 0;
    uint64_t loaded_epoch = 0;
    std::string loaded_source;
    // A verified snapshot past the last epoch whose metrics rank 0 has
    // reported: it becomes `newest` (and is written) once they arrive, so
    // that a restart never resumes past metrics the state dir lacks; a
    // failed generation resumes from it anyway (the redo bound wins).
    std::shared_ptr<const std::string> awaiting;
    uint64_t awaiting_step = 0;
    uint64_t awaiting_epoch = 0;
    // The disk: the newest version of the record known to be saved, and the
    // version at which the job ended (0: it has not).
    uint64_t saved_version = 0;
    uint64_t end_version = 0;
    // When it last became pending (submitted, or a generation ended): an
    // elastic job's settle time counts from here (MembershipOptions).
    absl::Time pending_since;
    // Unix ms when it was last told to grow (0: not since its last first
    // step): the log says how long the re-formation took.
    int64_t grew_ms = 0;
    // The lines its ranks logged (bounded), written to the state dir at
    // most every kLogWriteInterval while new lines come.
    JobLog log;
    bool log_dirty = false;
    absl::Time log_written = absl::InfinitePast();
  };
  struct WorkerRecord {
    tagi::v1::WorkerInfo info;
    absl::Time last_seen;
    bool gone = false;
    std::string job_id;               // empty when idle
    tagi::v1::Assignment assignment;
    uint64_t session = 0;             // token of the live stream; 0: none
    std::deque<tagi::v1::SessionDirective> outbox;
    std::string last_directive;       // "job/gen/kind" of the last one queued
    // False after its generation failed, until it asks for work again: a
    // worker that died with its group is not placed before it is heard.
    bool checked_in = true;
    // Failed generations blamed on it; excluded from placement while
    // Excluded(strikes, now) (membership.h).
    WorkerStrikes strikes;
    // The asynchronous session's wake-up (OpenSession with `wake`); empty
    // for a blocking one.
    std::function<void()> wake;
  };
  // A Rendezvous long poll answered by callback.
  struct PollWaiter {
    absl::Time deadline;
    uint64_t jobs_started = 0;  // at the poll: a job that starts since answers it
    RendezvousDone done;
  };
  // A StoreGet (one key, its value wanted) or StoreWait answered by callback.
  struct StoreWaiter {
    std::vector<std::string> keys;  // full keys
    std::string indexed;            // the missing key it is indexed under
    bool want_value = false;
    absl::Time deadline;
    absl::Duration wait;
    std::function<void(absl::StatusOr<std::string>)> done;
  };

  // Unix milliseconds for the timestamps users see: the wall time at
  // construction advanced by the injected clock (see wall_offset_).
  int64_t NowMs();
  void Touch(WorkerRecord& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The log lines of a session message, into the logs of the jobs the
  // worker ranks in (lines naming any other job are not kept).
  void IngestLogsLocked(const WorkerRecord& w, const tagi::v1::SessionMessage& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the write of every log with lines not written for a while.
  void PersistLogsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Changed(JobRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's lifecycle (job_lifecycle.h): what DecideJobEvent reads of it,
  // and every change of its state: the transition `event` makes, applied
  // (coordinator_lifecycle.cc). Not OK when the event does not apply to the
  // job's state; nothing changed then.
  JobLife LifeLocked(const JobRecord& r) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status ApplyLocked(JobRecord& r, const JobEvent& event) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // JobEffect::kStartGeneration: the placed ranks get their assignments.
  void StartGenerationLocked(JobRecord& r, const std::vector<std::string>& workers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseWorkerLocked(const std::string& worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Generation `gen` of `r` failed, blamed on `w` (`why`): one more strike;
  // an exclusion it starts is logged, counted and named in the job's reason.
  void StrikeLocked(WorkerRecord& w, JobRecord& r, uint64_t gen, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A retryable FinishJob of the generation whose ranks are `ranks`,
  // naming a suspect rank: recorded; the second distinct accuser of the
  // same worker strikes it.
  void BlameSuspectLocked(JobRecord& r, const tagi::v1::FinishJobRequest& req,
                          const std::vector<std::string>& ranks) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the worker can be placed now: live, asked for work, not in a
  // job and not excluded.
  bool PlaceableLocked(const WorkerRecord& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // IDLE, BUSY, GONE, or EXCLUDED (idle but not placed for a while).
  std::string WorkerStateLocked(const WorkerRecord& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // RunningJobLocked, and `worker` must hold a rank in that generation.
  absl::StatusOr<JobRecord*> RunningMemberLocked(const std::string& worker,
                                                 const std::string& job, uint64_t gen)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<JobRecord*> FencedJob(const std::string& job, uint64_t gen)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<JobRecord*> FindJob(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job when (job, gen) is the current attempt and it is running.
  absl::StatusOr<JobRecord*> RunningJobLocked(const std::string& job, uint64_t gen)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when (job, gen) is the current attempt and it is running; takes mu_.
  absl::Status RunningJob(const std::string& job, uint64_t gen) ABSL_LOCKS_EXCLUDED(mu_);
  void MaybeSucceedLocked(JobRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static tagi::v1::JobProgress MergedProgress(const JobRecord& rec,
                                              const tagi::v1::JobProgress& p);
  absl::Status OnSessionMessageLocked(uint64_t token, const tagi::v1::SessionMessage& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<tagi::v1::ProgressReply> ReportProgressLocked(
      const tagi::v1::ProgressReport& report) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A progress report of the job's failed generation, before the next one
  // started: raises the last recovery's failed_at_step to what it reached.
  void NoteLateProgressLocked(JobRecord& rec, const tagi::v1::ProgressReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // At a snapshot point of a running elastic job (its newest snapshot was
  // just accepted): ends the generation when DecideGrowth says it grows;
  // the next one resumes from that snapshot with more ranks.
  void MaybeGrowLocked(JobRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends the generation just started to the job's worlds (Job.worlds).
  void RecordWorldLocked(JobRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  PendingJobView PendingViewLocked(const JobRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<WorkerView> WorkerViewsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteFailedAttemptLocked(const tagi::v1::FinishJobRequest& req)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Erases the records of gone workers beyond membership.keep_gone_workers
  // (GoneWorkersToForget).
  void ForgetGoneWorkersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WorkerFailedLocked(WorkerRecord& w, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void DirectLocked(WorkerRecord& w, tagi::v1::Directive d, const std::string& job, uint64_t gen,
                    const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the worker's session wake-up (asynchronous sessions only).
  void WakeSessionLocked(const WorkerRecord& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a Rendezvous answers once it stops waiting.
  tagi::v1::RendezvousResponse RendezvousReplyLocked(const WorkerRecord& w)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The work a Rendezvous does before it waits; NotFound for an unknown worker.
  absl::StatusOr<WorkerRecord*> CheckInLocked(const std::string& worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the long polls whose worker was placed or since which a job
  // started (the blocking polls' condition), queuing their callbacks.
  void AnswerPollsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK when one more wait of `keys` keys fits the bounds (CoordinatorOptions).
  absl::Status AdmitStoreWaitLocked(size_t keys) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Indexes the wait under its first missing key; false when none is.
  bool IndexStoreWaitLocked(uint64_t id, StoreWaiter& waiter) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues `done`'s answer: the worker's reply as it stands.
  void AnswerPollLocked(RendezvousDone& done, const WorkerRecord& w)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the wait's answer, drops it and its index entry; returns the
  // next wait.
  std::map<uint64_t, StoreWaiter>::iterator FinishStoreWaitLocked(
      std::map<uint64_t, StoreWaiter>::iterator it, absl::StatusOr<std::string> result)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers the store waits that `full_key`'s arrival completes.
  void AnswerStoreWaitsLocked(const std::string& full_key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers every pending store wait of `job_id` (any generation) with
  // `why`: its keys were deleted and can no longer be set, and a rank left
  // waiting until its deadline could not report back (it would stay busy).
  void EndStoreWaitsLocked(const std::string& job_id, const absl::Status& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the waits whose deadline passed.
  void ExpireWaitsLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Picks the snapshot a new generation resumes from and records it.
  void ChooseResumeLocked(JobRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  WorkerRecord& AdoptWorkerLocked(const std::string& proposed_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues the job's record for <state_dir>/jobs/ (no-op without a state dir).
  void PersistLocked(const JobRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistWorkerCounterLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnJobSaved(const std::string& id, uint64_t version, const absl::Status& st)
      ABSL_LOCKS_EXCLUDED(mu_);
  // True when the job's final state is on disk (always without a state dir).
  bool FinalSavedLocked(const JobRecord& r) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // The job as users see it: a final state not yet saved shows as the state
  // before it, with the reason.
  tagi::v1::Job ViewLocked(const JobRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits (up to options_.save_wait) until the job's record at its current
  // version is saved.
  void AwaitSavedLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void QueueSnapshotWriteLocked(const JobRecord& r, uint64_t step,
                                std::shared_ptr<const std::string> bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void QueueModelWriteLocked(JobRecord& r) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when `global_step` of generation `gen` from `worker_id` is a
  // snapshot of the generation that has just ended (the job is PENDING, not
  // yet placed again: a rank failed, or this coordinator restarted), from
  // its rank 0, and newer than the stored one: it is kept.
  bool EndedGenerationSnapshotLocked(const JobRecord& rec, uint64_t gen,
                                     const std::string& worker_id, uint64_t global_step) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes a verified snapshot the job's newest and queues it for the disk.
  void AcceptSnapshotLocked(JobRecord& r, uint64_t step, uint64_t epoch,
                            std::shared_ptr<const std::string> bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets ended jobs beyond the retention policy and removes their files.
  void PruneEndedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveJobFilesLocked(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveOrphanFilesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LoadState();
  // After LoadState: the newest snapshot of every job that resumes, read
  // from the state dir without holding mu_ (ChooseResumeLocked never reads
  // the disk).
  void LoadSnapshots();

  const CoordinatorOptions options_;
  const LifecycleOptions lifecycle_;
  Clock& clock_;
  // Wall time minus clock_.Now(), read once at construction: timestamps
  // are clock_.Now() + wall_offset_, so they follow a FakeClock in tests
  // and never step back when the host's wall clock is adjusted.
  const absl::Duration wall_offset_;
  InMemoryStore store_;  // thread-safe on its own; keys under job/<id>/gen/<n>/
  std::string snapshot_dir_;
  bool snapshot_dir_is_temporary_ = false;
  RealFileSystem real_fs_;
  FileSystem& fs_;
  std::unique_ptr<SnapshotStore> snapshots_;
  std::vector<std::string> startup_log_;

  absl::Mutex mu_;
  uint64_t next_job_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t next_worker_ ABSL_GUARDED_BY(mu_) = 1;
  // Set by EndWaits (shutdown): every long poll or store wait from then on
  // is answered at once, so none holds the server's shutdown.
  std::optional<std::string> waits_ended_ ABSL_GUARDED_BY(mu_);
  // The key of the worker credentials: set by the constructor (from the
  // state dir, or random), then read-only.
  std::optional<WorkerKey> worker_key_;
  // Recent registrations by nonce (oldest first), so that a retried
  // Register gets the same id; at most kMaxRegistrationNonces.
  std::map<std::string, std::string> registration_ids_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> registration_order_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;  // bumped on every change, for waiters
  std::map<std::string, JobRecord> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, WorkerRecord> workers_ ABSL_GUARDED_BY(mu_);
  uint64_t next_session_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t jobs_started_ ABSL_GUARDED_BY(mu_) = 0;  // generations formed, ever
  uint64_t workers_failed_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t worker_exclusions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t progress_rejected_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t snapshots_stored_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t snapshots_rejected_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t models_rejected_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t jobs_pruned_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t saved_failed_ ABSL_GUARDED_BY(mu_) = 0;  // job record writes that failed
  // The state dir's health as Tick last found it: no new generation is
  // placed while it is not OK.
  absl::Status disk_ ABSL_GUARDED_BY(mu_);

  // Callbacks to run once mu_ is released (see Lock).
  std::vector<std::function<void()>> deferred_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, PollWaiter> polls_ ABSL_GUARDED_BY(mu_);  // by worker id
  std::map<uint64_t, StoreWaiter> store_waits_ ABSL_GUARDED_BY(mu_);
  std::multimap<std::string, uint64_t> store_waits_by_key_ ABSL_GUARDED_BY(mu_);
  uint64_t next_store_wait_ ABSL_GUARDED_BY(mu_) = 1;

  // Last: destroyed first, while what its callbacks touch still exists.
  std::unique_ptr<StateWriter> writer_;
};

// Maps between absl and gRPC-style job ids etc. are elsewhere; this returns
// the protocol-neutral name of a state ("RUNNING").
std::string JobStateName(tagi::v1::JobState state);
bool IsTerminal(tagi::v1::JobState state);
// What a pending job waits for ("waiting for 3 idle workers", "... for 1 to
// 3 ...": an elastic job's bounds).
std::string JobWaitingReason(const tagi::v1::Job& job);
// The fewest and the most ranks the job can run with: an elastic job's
// bounds, else its world.
uint32_t LeastWorld(const tagi::v1::Job& job);
uint32_t MostWorld(const tagi::v1::Job& job);
// The number of the newest epoch in the history (epochs count from 1; 0:
// none yet). Not the history's size: it keeps the newest kMaxEpochHistory.
uint64_t LastEpoch(const tagi::v1::JobProgress& p);
// Job.worlds keeps at most this many spans (the newest).
inline constexpr size_t kMaxWorldSpans = 1000;

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_COORDINATOR_H_
