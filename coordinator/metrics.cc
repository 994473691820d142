#include "coordinator/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/coordinator.h"

namespace tagi::coordinator {

// Rendezvous takes from milliseconds (data cached, two ranks on one host) to
// a minute (large data sets loaded from network storage).
const prometheus::Histogram::BucketBoundaries kRendezvousBuckets = {
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

// What outlives one scrape: the histogram and which attempts it has seen.
struct MetricsState {
  absl::Mutex mu;
  prometheus::Registry registry ABSL_GUARDED_BY(mu);
  prometheus::Histogram* rendezvous ABSL_GUARDED_BY(mu) = nullptr;
  // (job, generation) already observed; pruned to the jobs of the last
  // snapshot, so it stays as small as the snapshot.
  std::set<std::pair<std::string, uint64_t>> observed ABSL_GUARDED_BY(mu);
};

namespace {

std::string Lower(const std::string& s) { return absl::AsciiStrToLower(s); }

// Observes each attempt's rendezvous time once, when a snapshot first shows
// it (rank 0 reports it with its first progress after the first step).
void ObserveRendezvous(const CoordinatorStats& stats, MetricsState& state)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(state.mu) {
  std::set<std::pair<std::string, uint64_t>> seen_now;
  for (const JobStats& j : stats.jobs) {
    const auto key = std::make_pair(j.id, j.generation);
    if (j.rendezvous_seconds <= 0) continue;
    seen_now.insert(key);
    if (!state.observed.contains(key)) state.rendezvous->Observe(j.rendezvous_seconds);
  }
  state.observed = std::move(seen_now);
}

// The gauges of one snapshot, in a registry built for this scrape: series of
// jobs and workers that left the snapshot simply are not there.
void AddSnapshot(const CoordinatorStats& stats, absl::Time now, prometheus::Registry& reg) {
  auto& workers = prometheus::BuildGauge()
                      .Name("tagi_coordinator_workers")
                      .Help("Registered workers by state (idle, busy, gone, excluded: idle "
                            "but not placed for a while).")
                      .Register(reg);
  for (const char* s : {"IDLE", "BUSY", "GONE", "EXCLUDED"}) {
    auto it = stats.workers_by_state.find(s);
    workers.Add({{"state", Lower(s)}}).Set(it == stats.workers_by_state.end() ? 0 : it->second);
  }
  auto& jobs = prometheus::BuildGauge()
                   .Name("tagi_coordinator_jobs")
                   .Help("Jobs by state (pending, running, succeeded, failed, cancelled).")
                   .Register(reg);
  for (tagi::v1::JobState s : {tagi::v1::PENDING, tagi::v1::RUNNING, tagi::v1::SUCCEEDED,
                               tagi::v1::FAILED, tagi::v1::CANCELLED}) {
    auto it = stats.jobs_by_state.find(s);
    jobs.Add({{"state", Lower(JobStateName(s))}})
        .Set(it == stats.jobs_by_state.end() ? 0 : it->second);
  }

  auto& generation = prometheus::BuildGauge()
                         .Name("tagi_coordinator_job_generation")
                         .Help(
                             "Generation (attempt number) of each running job and the last "
                             "job that ended.")
                         .Register(reg);
  auto& restarts = prometheus::BuildCounter()
                       .Name("tagi_coordinator_job_restarts_total")
                       .Help("Failed generations of each job that were resumed.")
                       .Register(reg);
  auto& world = prometheus::BuildGauge()
                    .Name("tagi_coordinator_job_world_size")
                    .Help("Ranks of each job's current (or last) generation: an elastic job's "
                          "moves with its resizes.")
                    .Register(reg);
  auto& resizes = prometheus::BuildCounter()
                      .Name("tagi_coordinator_job_resizes_total")
                      .Help("Planned re-formations of each elastic job (growth at a snapshot "
                            "point); a shrink after a failure counts as a restart.")
                      .Register(reg);
  auto& rate = prometheus::BuildGauge()
                   .Name("tagi_coordinator_job_samples_per_second")
                   .Help(
                       "Training throughput of each job, all ranks together (rank 0's "
                       "report); 0 once the job is over.")
                   .Register(reg);
  auto& progress = prometheus::BuildGauge()
                       .Name("tagi_coordinator_job_progress_ratio")
                       .Help("Steps done / total steps of each job (1 once it succeeded).")
                       .Register(reg);
  auto& recovery = prometheus::BuildGauge()
                       .Name("tagi_coordinator_job_recovery_seconds")
                       .Help(
                           "Last recovery of each job: failure detected -> first step of the "
                           "new generation.")
                       .Register(reg);
  auto& redone = prometheus::BuildGauge()
                     .Name("tagi_coordinator_job_steps_redone")
                     .Help("Last recovery of each job: steps trained again after resuming.")
                     .Register(reg);
  auto& snapshot_age = prometheus::BuildGauge()
                           .Name("tagi_coordinator_job_snapshot_age_seconds")
                           .Help("Seconds since each job's newest snapshot was stored.")
                           .Register(reg);
  auto& snapshot_bytes = prometheus::BuildGauge()
                             .Name("tagi_coordinator_job_snapshot_bytes")
                             .Help("Size of each job's newest snapshot.")
                             .Register(reg);
  for (const JobStats& j : stats.jobs) {
    const prometheus::Labels labels = {{"job", j.id}};
    generation.Add(labels).Set(static_cast<double>(j.generation));
    restarts.Add(labels).Increment(static_cast<double>(j.restarts));
    world.Add(labels).Set(static_cast<double>(j.world_size));
    resizes.Add(labels).Increment(static_cast<double>(j.resizes));
    rate.Add(labels).Set(j.samples_per_second);
    progress.Add(labels).Set(j.progress_ratio);
    if (j.recover_seconds >= 0) {
      recovery.Add(labels).Set(j.recover_seconds);
      redone.Add(labels).Set(static_cast<double>(j.steps_redone));
    }
    if (j.snapshot_age_seconds >= 0) {
      snapshot_age.Add(labels).Set(j.snapshot_age_seconds);
      snapshot_bytes.Add(labels).Set(static_cast<double>(j.snapshot_bytes));
    }
  }
  prometheus::BuildCounter()
      .Name("tagi_coordinator_workers_failed_total")
      .Help("Workers whose session broke or whose heartbeats stopped.")
      .Register(reg)
      .Add({})
      .Increment(static_cast<double>(stats.workers_failed));
  prometheus::BuildCounter()
      .Name("tagi_coordinator_worker_exclusions_total")
      .Help("Workers excluded from placement for a while after several failed generations in "
            "a row were blamed on them.")
      .Register(reg)
      .Add({})
      .Increment(static_cast<double>(stats.worker_exclusions));
  prometheus::BuildCounter()
      .Name("tagi_coordinator_progress_rejected_total")
      .Help("Progress reports refused (and final progress not kept) for values no training "
            "produces: a NaN, an accuracy above 1, an epoch past the job's last.")
      .Register(reg)
      .Add({})
      .Increment(static_cast<double>(stats.progress_rejected));
  auto& snapshots = prometheus::BuildCounter()
                        .Name("tagi_coordinator_snapshots_total")
                        .Help("Snapshots stored, and refused or skipped as corrupt.")
                        .Register(reg);
  snapshots.Add({{"result", "stored"}}).Increment(static_cast<double>(stats.snapshots_stored));
  snapshots.Add({{"result", "rejected"}})
      .Increment(static_cast<double>(stats.snapshots_rejected));
  prometheus::BuildCounter()
      .Name("tagi_coordinator_models_rejected_total")
      .Help("Model uploads refused: not a model file of the job's network, values no training "
            "makes (a non-finite mean, a variance not positive), or a wrong checksum.")
      .Register(reg)
      .Add({})
      .Increment(static_cast<double>(stats.models_rejected));

  auto& state_failures = prometheus::BuildCounter()
                             .Name("tagi_coordinator_state_write_failures_total")
                             .Help(
                                 "Failed attempts to write the state dir (full, read-only, I/O "
                                 "error), by what was written: job, model, snapshot, counter, "
                                 "remove.")
                             .Register(reg);
  for (const char* kind : {"job", "model", "snapshot", "counter", "remove"}) {
    auto it = stats.state_write_failures.find(kind);
    state_failures.Add({{"kind", kind}})
        .Increment(it == stats.state_write_failures.end() ? 0.0
                                                          : static_cast<double>(it->second));
  }
  prometheus::BuildGauge()
      .Name("tagi_coordinator_state_dir_writable")
      .Help("1 while the state dir can be written and no write to it is failing, else 0.")
      .Register(reg)
      .Add({})
      .Set(stats.state_dir_ok ? 1.0 : 0.0);
  prometheus::BuildGauge()
      .Name("tagi_coordinator_state_writes_pending")
      .Help("Writes to the state dir queued or waiting to be retried.")
      .Register(reg)
      .Add({})
      .Set(static_cast<double>(stats.state_writes_pending));
  prometheus::BuildCounter()
      .Name("tagi_coordinator_jobs_pruned_total")
      .Help("Ended jobs forgotten, with their files, by the retention policy.")
      .Register(reg)
      .Add({})
      .Increment(static_cast<double>(stats.jobs_pruned));

  auto& age = prometheus::BuildGauge()
                  .Name("tagi_coordinator_worker_heartbeat_age_seconds")
                  .Help("Seconds since each live worker was last heard from.")
                  .Register(reg);
  for (const WorkerStats& w : stats.workers) {
    age.Add({{"worker", w.id}}).Set(absl::ToDoubleSeconds(now - w.last_seen));
  }
}

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(Coordinator& coordinator, Clock& clock)
    : coordinator_(coordinator), clock_(clock), state_(std::make_unique<MetricsState>()) {
  absl::MutexLock lock(&state_->mu);
  state_->rendezvous = &prometheus::BuildHistogram()
                            .Name("tagi_coordinator_rendezvous_seconds")
                            .Help(
                                "Time from a job attempt's assignment to its first "
                                "training step (rank 0), one observation per attempt.")
                            .Register(state_->registry)
                            .Add({}, kRendezvousBuckets);
}

CoordinatorMetrics::~CoordinatorMetrics() = default;

std::string CoordinatorMetrics::Scrape() {
  const CoordinatorStats stats = coordinator_.Stats();
  const absl::Time now = clock_.Now();
  prometheus::Registry snapshot;
  AddSnapshot(stats, now, snapshot);
  std::vector<prometheus::MetricFamily> families = snapshot.Collect();
  {
    absl::MutexLock lock(&state_->mu);
    ObserveRendezvous(stats, *state_);
    for (auto& f : state_->registry.Collect()) families.push_back(std::move(f));
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace tagi::coordinator
