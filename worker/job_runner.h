// JobRunner: one rank's run of one job attempt (a generation), from
// assignment to result.
//
// RunAssignment loads the data (or reuses the worker's cached copy of the
// same data set), builds and seeds the model, joins the group's collective
// through the coordinator's store, restores the generation's snapshot when
// it resumes one, checks that every rank holds the same parameters, trains
// its shard with the Trainer (one all-reduce of the packed deltas per step)
// and publishes progress on its AttemptControl, which the worker's session
// sends. Rank 0 streams a snapshot to the coordinator every
// JobSpec.snapshot_interval steps and at every epoch end (from a background
// thread, so training does not wait for the upload) and uploads the final
// model. The outcome goes back with FinishJob; a failure of the group (a
// peer died, the attempt was aborted, the worker is shutting down) is
// marked retryable, so the job resumes in a new generation. Every wait is
// bounded. Not thread-safe: one RunAssignment at a time per cache.
#ifndef TAGI_WORKER_JOB_RUNNER_H_
#define TAGI_WORKER_JOB_RUNNER_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "tagi/v1/cluster.pb.h"
#include "worker/attempt.h"
#include "worker/collective/collective.h"
#include "worker/coordinator_api.h"
#include "worker/data/loader.h"
#include "worker/job_rules.h"

namespace tagi {

class WorkerMetrics;

// The data set of the worker's last job, kept for the next attempt of the
// same job (a new generation then starts without reading the files again).
struct DataCache {
  std::string key;  // the DataSpec and seed it was loaded for
  std::shared_ptr<const data::LoadedData> data;
};

// Loads the job's data into the cache unless it already holds it (files
// only under `data_roots`, when not empty). OK when it does afterwards.
absl::Status WarmDataCache(const tagi::v1::JobSpec& spec, DataCache& cache,
                           const std::vector<std::string>& data_roots);

struct JobRunnerOptions {
  std::string worker_id;
  // The worker's GPU (-1: none). Jobs whose device is "cuda:N" run the
  // CUDA engine on it; "cpu" jobs run the CPU engine.
  int device = -1;
  // Reported to the coordinator. The BLAS thread count itself is process-wide
  // and set once by main() (see engine/blas.h), not per job.
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
  DataCache* data_cache = nullptr;  // may be null: load every time
  // Job data is read only under these directories (tagi-worker
  // --data-root; data/data_roots.h); empty: anywhere (in-process tests).
  std::vector<std::string> data_roots;
  // Wraps the group's collective once it formed; empty in the binaries.
  // Hostile tests make a rogue rank with it (tests/hostile/rogue_worker.cc).
  std::function<std::unique_ptr<Collective>(std::unique_ptr<Collective>)> wrap_collective;
};

// Runs the assignment to its end and reports it with FinishJob.
JobOutcome RunAssignment(CoordinatorApi& client, const JobRunnerOptions& options,
                         const tagi::v1::Assignment& assignment, Clock& clock,
                         AttemptControl& control);

}  // namespace tagi

#endif  // TAGI_WORKER_JOB_RUNNER_H_
