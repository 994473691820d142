// Membership decisions of the coordinator, as pure functions.
//
// Given the time, the queue and the workers, they say which jobs start on
// which workers (and with which ranks) and which workers are gone, each with
// a human-readable reason. The Coordinator only locks, calls them and
// publishes the result, so the policies are tested without threads or
// sleeps.
#ifndef TAGI_COORDINATOR_MEMBERSHIP_H_
#define TAGI_COORDINATOR_MEMBERSHIP_H_

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tagi::coordinator {

struct MembershipOptions {
  // A worker not heard from for this long is gone.
  absl::Duration worker_timeout = absl::Seconds(10);
  // An elastic job that could start (or resume) with fewer ranks than its
  // maximum waits this long after it became pending for more workers to be
  // idle (the survivors of a failed generation check in again within a
  // heartbeat or two), holding the ones it will take.
  absl::Duration elastic_settle = absl::Seconds(2);
  // Records of gone workers kept (for `tagictl workers`, metrics and a
  // worker that comes back); beyond this the longest gone are forgotten, so
  // a flood of registrations that never check in holds bounded memory.
  size_t keep_gone_workers = 4096;
};

struct WorkerView {
  std::string id;
  bool idle = false;        // registered and not in a job
  absl::Time last_seen;
  bool gpu = false;         // started with --device cuda:N
  // Told to leave its failed or re-forming generation and not heard from
  // since (it asks for work again within a poll): expected back soon.
  bool returning = false;
};

struct PendingJobView {
  std::string id;
  int world = 1;            // resolved world size; an elastic job's maximum
  // Worker of each rank in the job's failed generation (empty for a job
  // that never ran): those still free keep their ranks.
  std::vector<std::string> previous;
  bool gpu = false;         // the job's device is cuda
  // An elastic job's minimum world (0: a fixed job of `world` ranks), and
  // when it became pending (submitted, or its generation ended).
  int min_world = 0;
  absl::Time since;
};

struct Placement {
  std::string job_id;
  std::vector<std::string> workers;  // workers[r] gets rank r
  std::string reason;
};

// Starts jobs oldest first: each pending job (in queue order) whose world
// fits the idle, live workers still free gets the lowest worker ids (ranks
// in id order, so placements are reproducible). A younger job may start
// while an older, larger one waits (backfill); the older one keeps its
// place and starts as soon as enough workers are idle. A job resuming after
// a failure gives each of its previous workers that is free its old rank
// and fills the other ranks with the lowest free ids.
//
// Devices: a GPU job runs on GPU workers only and waits for them (however
// many CPU workers are idle); a CPU job runs on CPU workers first and
// spills onto GPU workers (they run the CPU engine) only when the CPU
// workers alone are too few, so GPU hosts stay free for GPU jobs.
//
// Elastic jobs (min_world > 0): a job starts with its maximum when that
// many workers are eligible; with fewer (at least min_world) once
// options.elastic_settle has passed since it became pending; until then
// it holds the workers it would take, so that a younger job does not take
// them meanwhile. A job resuming does not wait out the settle time once
// none of its previous workers is still returning (the survivors of its
// last generation are all back, the others are gone or busy). Resuming with fewer or more ranks than before, the
// previous workers that are free come first, in their old rank order
// (ranks stay 0..world-1).
// How long a job waits before its next generation, after `quick_failures`
// generations in a row failed within kQuickGeneration of their start: the
// first kFreeQuickRestarts restart at once (a killed worker, a lost link),
// then the wait doubles from kRestartBackoffBase up to kMaxRestartBackoff,
// so that a bad worker or bad data cannot burn the job's restarts in
// seconds. A generation that runs longer resets the count.
inline constexpr absl::Duration kQuickGeneration = absl::Seconds(10);
inline constexpr int kFreeQuickRestarts = 3;
inline constexpr absl::Duration kRestartBackoffBase = absl::Milliseconds(500);
inline constexpr absl::Duration kMaxRestartBackoff = absl::Seconds(60);
absl::Duration RestartDelay(int quick_failures);

// Workers that keep ending generations. A failed generation is blamed on
// a worker when it is gone while holding a rank (its session broke, its
// heartbeats stopped) or when the collectives of two of its peers named its
// rank (FinishJobRequest.suspect_rank: its link broke mid-call, its call
// was out of step; one rank's word is not enough, or a rogue rank could
// have honest peers excluded); at most once per generation. After
// kStrikesBeforeExclusion such generations in a row (a generation it was in
// that took a snapshot or finished clears the count) it is not placed for
// kExclusionBase, doubling with each exclusion in a row up to
// kMaxExclusion: a broken host cannot burn a job's restarts, nor keep
// re-forming its peers' generations. Exclusion contains a broken worker, not
// an attacker who can register new identities (the join token and client
// certificates decide who may).
inline constexpr int kStrikesBeforeExclusion = 3;
inline constexpr absl::Duration kExclusionBase = absl::Seconds(30);
inline constexpr absl::Duration kMaxExclusion = absl::Minutes(10);
struct WorkerStrikes {
  int in_a_row = 0;    // failed generations blamed on it since its last good one
  int exclusions = 0;  // exclusions since its last good generation
  absl::Time excluded_until = absl::InfinitePast();
  std::string last;    // the generation ("job/gen") of the last strike
};
// The worker's strikes after generation `generation` ("job/gen") failed
// blamed on it; `now` starts an exclusion when this strike completes one.
WorkerStrikes AfterStrike(const WorkerStrikes& s, const std::string& generation,
                          absl::Time now);
// After a generation it was in took a snapshot or finished.
WorkerStrikes AfterGoodGeneration(const WorkerStrikes& s);
inline bool Excluded(const WorkerStrikes& s, absl::Time now) { return now < s.excluded_until; }

std::vector<Placement> DecidePlacements(absl::Time now,
                                        const std::vector<PendingJobView>& queue,
                                        const std::vector<WorkerView>& workers,
                                        const MembershipOptions& options);

// A running elastic job, at one of its snapshot points.
struct RunningJobView {
  std::string id;
  int world = 1;
  int max_world = 1;
  bool gpu = false;
};

struct Growth {
  std::string job_id;
  int from = 0;
  int to = 0;
  std::vector<std::string> joining;  // idle workers it will take
  std::string reason;
};

// Whether a running elastic job re-forms larger at this snapshot point:
// when it runs below its maximum and live idle workers are eligible for it
// (the same device rules as placements) that no pending job could use:
// waiting jobs come first, so a job in the queue is never kept waiting by
// a running one growing. It grows by as many as are free, up to its
// maximum.
std::optional<Growth> DecideGrowth(absl::Time now, const RunningJobView& job,
                                   const std::vector<PendingJobView>& queue,
                                   const std::vector<WorkerView>& workers,
                                   const MembershipOptions& options);

struct Departure {
  std::string worker_id;
  std::string reason;
};

// Workers whose last contact is older than the timeout.
std::vector<Departure> DecideDepartures(absl::Time now, const std::vector<WorkerView>& workers,
                                        const MembershipOptions& options);

struct GoneWorkerView {
  std::string id;
  absl::Time last_seen;
  bool holds_rank = false;  // still named by a job's generation
};

// The gone workers to forget so that at most options.keep_gone_workers
// remain: the longest gone first (ties: the lower id), never one that still
// holds a rank (its record closes that rank's story when the job ends).
std::vector<std::string> GoneWorkersToForget(std::vector<GoneWorkerView> gone,
                                             const MembershipOptions& options);

// Worker ids compare by their numeric suffix ("w-2" < "w-10").
bool WorkerIdLess(const std::string& a, const std::string& b);

// "waiting for N idle workers" / "... idle cuda workers"; for an elastic
// job "waiting for MIN to MAX idle workers" (min_world > 0, < world).
std::string WaitingReason(int world, bool gpu, int min_world = 0);

// Whether a worker's or a job's device string ("cpu", "cuda:N") names a GPU.
bool IsCudaDevice(const std::string& device);

// The workers of a placement for its reason: all of them up to
// kRanksNamed, else the first kRanksNamed and how many more (the job's own
// `workers` list names every rank; a reason copied into every view and
// watch update must not grow with the world: 40 KB at 4,096 ranks).
inline constexpr size_t kRanksNamed = 16;
std::string RankList(const std::vector<std::string>& workers);

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_MEMBERSHIP_H_
