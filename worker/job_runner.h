// JobRunner: one rank's run of one job attempt, from assignment to result.
//
// Run() loads the data, builds and seeds the model, joins the group's
// collective through the coordinator's store (Gloo over TCP), checks that
// every rank holds the same initial parameters, trains its shard with the
// Trainer (one all-reduce of the packed deltas per step), and reports
// progress from a reporter thread; rank 0 uploads the final model. The
// outcome goes back with FinishJob. A CANCEL directive becomes a stop vote
// that every rank honours after the same step; an ABORT directive aborts
// the collective. Every wait is bounded.
// Not thread-safe: one JobRunner per assignment.
#ifndef TAGI_WORKER_JOB_RUNNER_H_
#define TAGI_WORKER_JOB_RUNNER_H_

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "tagi/v1/cluster.pb.h"
#include "worker/coordinator_client.h"

namespace tagi {

class WorkerMetrics;

struct JobRunnerOptions {
  std::string worker_id;
  int threads = 1;
  std::string host = "127.0.0.1";  // address this worker binds and advertises for Gloo
  absl::Duration connect_timeout = absl::Seconds(30);
  absl::Duration collective_timeout = absl::Seconds(60);
  absl::Duration report_interval = absl::Milliseconds(250);
  // Polled once per step: true makes this rank vote to stop (the worker is
  // shutting down); every rank then stops after the same step.
  std::function<bool()> shutting_down;
  // Where step and epoch metrics go (tagi-worker --metrics); may be null.
  // Not owned; outlives the run.
  WorkerMetrics* metrics = nullptr;
};

struct JobOutcome {
  bool ok = false;
  bool cancelled = false;
  std::string reason;
};

// Runs the assignment to its end and reports it with FinishJob.
JobOutcome RunAssignment(CoordinatorClient& client, const JobRunnerOptions& options,
                         const tagi::v1::Assignment& assignment, Clock& clock);

}  // namespace tagi

#endif  // TAGI_WORKER_JOB_RUNNER_H_
