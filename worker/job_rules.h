// The worker runtime's decisions as pure functions (job_runner.cc and
// agent.cc apply them): which engine and backend an assignment runs on,
// whether it forms a group, whether a snapshot's cursor fits the job, what
// an attempt's end means for the job, and what the agent does after a
// failed call. Tested without a coordinator (tests/worker/).
#ifndef TAGI_WORKER_JOB_RULES_H_
#define TAGI_WORKER_JOB_RULES_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/snapshot.h"
#include "tagi/v1/cluster.pb.h"

namespace tagi {

// The backend of the job (its own, or NCCL on a GPU engine, else our ring:
// the CPU choice). A GPU engine with a CPU backend stages its deltas
// through host memory. `device`: the engine's (EngineDevice), -1 for the CPU.
tagi::v1::JobSpec::Backend ChooseBackend(const tagi::v1::JobSpec& spec, int device);

// Where this worker runs the job: a "cpu" job on the CPU engine (-1), a
// "cuda:N" job on the worker's own GPU (--device; the job's N says only
// that it wants a GPU, the worker owns one). FailedPrecondition when a GPU
// job reaches a CPU worker; InvalidArgument for a device string that does
// not parse.
absl::StatusOr<int> EngineDevice(const tagi::v1::JobSpec& spec, int worker_device);

// A group is formed for several ranks, and for one when the job names NCCL
// (so that a world-1 NCCL job exercises its bootstrap through the store).
bool NeedsGroup(const tagi::v1::Assignment& a);

// What is wrong with resuming from a snapshot at `s`'s cursor in this
// generation (`steps_per_epoch` and `global_batch` of this generation's
// world; `num_samples` in an epoch); empty when nothing is. Under a fixed
// world the cursor must be a step of that world; an elastic job's may come
// from another world (the snapshot's), anywhere in an epoch.
std::string CheckResumeCursor(const Snapshot& s, const tagi::v1::Assignment& a,
                              uint64_t steps_per_epoch, uint64_t global_batch,
                              size_t num_samples);

// How an attempt ended, as the worker tells the coordinator (FinishJob).
struct JobOutcome {
  bool ok = false;
  bool cancelled = false;
  bool retryable = false;  // the group failed, not the job
  std::string reason;
  // A retryable failure that a peer caused, as its collective named it
  // (PeerRankOf): that peer's rank.
  std::optional<int> suspect_rank;
};
struct AttemptEnd {
  absl::Status status;          // what the attempt returned
  bool shutting_down = false;   // this worker is stopping (a signal)
  bool told_to_stop = false;    // the coordinator told this rank to cancel
  bool aborted = false;         // the coordinator (or the rank itself) aborted the attempt
  std::string abort_reason;
  bool in_group = false;        // the group had formed before it ended
  int rank = -1;                // this rank
};
// A cancelled attempt (Cancelled) is the job's end only when this rank was
// told to cancel and is not shutting down; one that stopped only because it
// was aborted (a rank alone stops on its abort) counts as aborted. An
// aborted attempt, and any failure
// after the group formed (a peer died, the coordinator went away), is the
// group's: retryable. Before the group formed only a broken connection is.
// A retryable failure that the collective attributed to a peer (not an
// abort, a cancel, or this rank itself) names that peer.
JobOutcome ClassifyAttemptEnd(const AttemptEnd& end);

// What the agent does after a failed Rendezvous.
enum class RendezvousAction {
  kRegisterAgain,          // the coordinator forgot this worker (NotFound)
  kNewIdentity,            // it refused our credentials: new id, then register
  kStop,                   // a permanent refusal (another protocol version)
  kBackOff,                // anything else: wait (BackoffDelay) and poll again
};
RendezvousAction OnRendezvousFailure(const absl::Status& st);

// Whether a failed Register is worth retrying: not when the coordinator
// refused the join token or speaks another protocol version.
bool RetryRegistration(const absl::Status& st);

}  // namespace tagi

#endif  // TAGI_WORKER_JOB_RULES_H_
