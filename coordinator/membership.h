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
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tagi::coordinator {

struct MembershipOptions {
  // A worker not heard from for this long is gone.
  absl::Duration worker_timeout = absl::Seconds(10);
};

struct WorkerView {
  std::string id;
  bool idle = false;        // registered and not in a job
  absl::Time last_seen;
  bool gpu = false;         // started with --device cuda:N
};

struct PendingJobView {
  std::string id;
  int world = 1;            // resolved world size
  // Worker of each rank in the job's failed generation (empty for a job
  // that never ran): those still free keep their ranks.
  std::vector<std::string> previous;
  bool gpu = false;         // the job's device is cuda
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
std::vector<Placement> DecidePlacements(absl::Time now,
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

// Worker ids compare by their numeric suffix ("w-2" < "w-10").
bool WorkerIdLess(const std::string& a, const std::string& b);

// "waiting for N idle workers" / "... idle cuda workers".
std::string WaitingReason(int world, bool gpu);

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
