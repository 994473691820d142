// The job's lifecycle as pure functions, in the shape of membership.h.
//
//   state      event                          next state
//   PENDING    Placed                         RUNNING (a new generation)
//   PENDING    CancelRequested                CANCELLED
//   PENDING    CoordinatorRestarted           PENDING (keeps its previous ranks)
//   RUNNING    RanksFinished (all, model)     SUCCEEDED
//   RUNNING    RanksFinished (all, no model)  FAILED
//   RUNNING    RankGaveUp                     FAILED
//   RUNNING    RankFailed                     PENDING (recovering), or FAILED once it
//                                             failed too often or twice on a NaN step
//   RUNNING    Grow                           PENDING (re-forming larger)
//   RUNNING    CancelRequested                CANCELLED
//   RUNNING    CoordinatorRestarted           PENDING (recovering)
//   Any other pair is refused (CoordinatorRestarted and an unfinished
//   RanksFinished change nothing). SUCCEEDED, FAILED and CANCELLED are final.
//
// DecideJobEvent takes what the lifecycle knows of a job (JobLife), one
// event and the time, and returns the job's next JobLife, its reason, what
// its ranks are told, a log line, and the effects the Coordinator must
// apply, in order (directives, releasing workers, the store, snapshots, the
// disk). An event that does not apply to the job's state is refused with a
// status and changes nothing. The Coordinator locks, calls it, and applies
// the transition; the policy (restart limits, the restart back-off, when a
// non-finite step stops a job, which transitions exist) is tested here
// without threads, clocks or a Coordinator.
#ifndef TAGI_COORDINATOR_JOB_LIFECYCLE_H_
#define TAGI_COORDINATOR_JOB_LIFECYCLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tagi/v1/jobs.pb.h"

namespace tagi::coordinator {

// What the lifecycle reads and decides of a job. The Coordinator keeps it
// in the job's record (Job and JobRecord fields of the same names).
struct JobLife {
  std::string id;
  tagi::v1::JobState state = tagi::v1::PENDING;
  uint64_t generation = 0;  // generations formed so far (the current one, if running)
  uint64_t restarts = 0;    // generations that failed and were resumed
  uint64_t resizes = 0;     // planned re-formations (an elastic job growing)
  // The restart back-off (RestartDelay): when the current generation
  // started, how many in a row failed quickly, and no generation before
  // `not_before`.
  absl::Time generation_started = absl::InfinitePast();
  int quick_failures = 0;
  absl::Time not_before = absl::InfinitePast();
  // The snapshot step that a generation which ended on a non-finite step
  // (or impossible evaluation sums) had resumed from: the same again stops
  // the job.
  std::optional<uint64_t> nonfinite_from;

  // Read only.
  uint64_t snapshot_step = 0;  // of the newest snapshot (Job.snapshot_step)
  bool final_saved = true;     // a final state is on disk (Coordinator::FinalSavedLocked)
  std::string waiting;         // what it waits for once pending (JobWaitingReason)
};

struct LifecycleOptions {
  int max_restarts = 100;  // failed generations before a job FAILS
};

// DecidePlacements chose the job's ranks.
struct Placed {
  std::vector<std::string> workers;  // workers[r] gets rank r
  std::string reason;
};
// A rank of the running generation is lost (its session broke, it missed
// heartbeats) or reported a retryable failure: the generation ends and the
// job resumes from its newest snapshot, unless it has failed too often.
struct RankFailed {
  std::string reason;
};
// A rank reported a failure that no retry mends (a bad job): the job FAILS.
struct RankGaveUp {
  std::string reason;
};
// DecideGrowth: the running elastic job re-forms larger at its snapshot.
struct Grow {
  std::string reason;
};
// A rank finished: `all` when every rank has.
struct RanksFinished {
  bool all = false;
  bool model_ready = false;  // rank 0 uploaded the final model
  uint64_t epochs = 0;       // of the spec, for the reason
  uint32_t world = 0;
};
// The user cancels the job.
struct CancelRequested {};
// A restarted coordinator reloaded the job from its state dir.
struct CoordinatorRestarted {};
// The reason of the recovery a restarted coordinator records for each job
// that was running.
inline constexpr char kCoordinatorRestarted[] = "the coordinator restarted";

using JobEvent =
    std::variant<Placed, RankFailed, RankGaveUp, Grow, RanksFinished, CancelRequested,
                 CoordinatorRestarted>;

// What the Coordinator does to apply a transition, in the order given.
enum class JobEffect {
  kStartGeneration,     // assign the placed ranks; pick the snapshot to resume from
  kAddRecovery,         // record a Recovery of the failed generation (JobTransition::rank_reason)
  kKeepAwaitingSnapshot,  // a snapshot held for its epoch's metrics is resumed from anyway
  kRememberRanks,       // the ranks of the ending generation keep their ranks if free again
  kAbortRanks,          // an ABORT directive to the ranks (rank_reason)
  kCancelRanks,         // a CANCEL directive to the ranks (rank_reason)
  kReleaseRanks,        // the ranks become idle
  kRanksCheckInAgain,   // ... and are placed again only once they ask for work
  kMarkGrowth,          // the growth's time, for the log line at the first step
  kEndStore,            // the job's store keys go; its pending store waits are answered
  kDropResume,          // the ending generation's resume snapshot
  kDropSnapshots,       // every snapshot held in memory (the job is over; the disk keeps them)
  kPendingSince,        // an elastic job's settle time counts from now
  kMarkEnded,           // the end time; retention counts from now
  kChanged,             // a new version for watchers
  kMarkFinalVersion,    // the version at which it ended (its final state awaits the disk)
  kPersist,             // queue the job's record for the state dir
  kSchedule,            // place pending jobs
};

struct JobTransition {
  // Not OK: the event does not apply to the job's state; nothing changes.
  absl::Status status;
  // False (with an OK status): the event changes nothing (a rank finished
  // but others have not).
  bool changed = false;
  JobLife next;
  std::string reason;       // the job's reason from now on; empty: unchanged
  std::string rank_reason;  // what the ranks are told, and a recovery's reason
  std::string log;          // a line for the coordinator's log; empty: none
  std::vector<JobEffect> effects;
};

// The transition `event` makes at `now`. Pure.
JobTransition DecideJobEvent(const JobLife& job, const JobEvent& event, absl::Time now,
                             const LifecycleOptions& options);

// The event's name, for messages and tests ("RankFailed").
std::string JobEventName(const JobEvent& event);

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_JOB_LIFECYCLE_H_
