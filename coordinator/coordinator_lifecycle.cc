// Coordinator's half of the job lifecycle: it reads a job's JobLife, asks
// DecideJobEvent (job_lifecycle.h, pure) what an event does, and applies
// the transition's effects in their order. Every change of a job's state
// goes through ApplyLocked.
#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/coordinator.h"

namespace tagi::coordinator {
namespace {

constexpr int kMaxRecoveries = 100;  // kept per job

}  // namespace

JobLife Coordinator::LifeLocked(const JobRecord& r) const {
  const tagi::v1::Job& job = r.job;
  JobLife life;
  life.id = job.id();
  life.state = job.state();
  life.generation = job.generation();
  life.restarts = job.restarts();
  life.resizes = job.resizes();
  life.generation_started = r.generation_started;
  life.quick_failures = r.quick_failures;
  life.not_before = r.not_before;
  life.nonfinite_from = r.nonfinite_from;
  life.snapshot_step = job.snapshot_step();
  life.final_saved = FinalSavedLocked(r);
  life.waiting = JobWaitingReason(job);
  return life;
}

absl::Status Coordinator::ApplyLocked(JobRecord& r, const JobEvent& event) {
  const absl::Time now = clock_.Now();
  const JobTransition t = DecideJobEvent(LifeLocked(r), event, now, lifecycle_);
  if (!t.status.ok() || !t.changed) return t.status;
  tagi::v1::Job& job = r.job;
  // The ranks that still hold the job: directives and releases are theirs
  // (a worker that already left it, or was forgotten, is not told again).
  std::vector<std::string> holders;
  for (const std::string& id : job.workers()) {
    auto w = workers_.find(id);
    if (w != workers_.end() && w->second.job_id == job.id()) holders.push_back(id);
  }
  const uint64_t ended_generation = job.generation();
  job.set_state(t.next.state);
  job.set_generation(t.next.generation);
  job.set_restarts(t.next.restarts);
  job.set_resizes(t.next.resizes);
  r.generation_started = t.next.generation_started;
  r.quick_failures = t.next.quick_failures;
  r.not_before = t.next.not_before;
  r.nonfinite_from = t.next.nonfinite_from;
  if (!t.reason.empty()) job.set_reason(t.reason);
  if (!t.log.empty()) std::fprintf(stderr, "tagi-coordinator: %s\n", t.log.c_str());
  auto direct = [&](tagi::v1::Directive d) {
    for (const std::string& id : holders) {
      DirectLocked(workers_.at(id), d, job.id(), ended_generation, t.rank_reason);
    }
  };
  for (const JobEffect effect : t.effects) {
    switch (effect) {
      case JobEffect::kStartGeneration:
        StartGenerationLocked(r, std::get<Placed>(event).workers);
        break;
      case JobEffect::kAddRecovery: {
        tagi::v1::Recovery& rec = *job.add_recoveries();
        rec.set_failed_generation(ended_generation);
        rec.set_reason(t.rank_reason);
        rec.set_detected_ms(NowMs());
        rec.set_failed_at_step(
            std::max<uint64_t>(r.max_reported_step, job.progress().global_step()));
        if (job.recoveries_size() > kMaxRecoveries) job.mutable_recoveries()->DeleteSubrange(0, 1);
        r.grew_ms = 0;  // a growth's timing is moot once its generation failed
        break;
      }
      case JobEffect::kKeepAwaitingSnapshot:
        if (r.awaiting != nullptr) {
          // Resuming from it keeps "at most one snapshot interval redone";
          // the metrics of the epochs it finished are lost if rank 0 never
          // reports them (it died within a heartbeat of the epoch's end).
          std::fprintf(stderr,
                       "tagi-coordinator: job %s: resuming from step %d although rank 0 had not "
                       "reported the metrics of its epoch %d yet\n",
                       job.id().c_str(), static_cast<int>(r.awaiting_step),
                       static_cast<int>(r.awaiting_epoch));
          AcceptSnapshotLocked(r, r.awaiting_step, r.awaiting_epoch, std::move(r.awaiting));
          r.awaiting.reset();
        }
        break;
      case JobEffect::kRememberRanks:
        r.previous_workers.assign(job.workers().begin(), job.workers().end());
        break;
      case JobEffect::kAbortRanks:
        direct(tagi::v1::ABORT);
        break;
      case JobEffect::kCancelRanks:
        direct(tagi::v1::CANCEL);
        break;
      case JobEffect::kReleaseRanks:
        for (const std::string& id : holders) ReleaseWorkerLocked(id);
        break;
      case JobEffect::kRanksCheckInAgain:
        for (const std::string& id : holders) workers_.at(id).checked_in = false;
        break;
      case JobEffect::kMarkGrowth:
        r.grew_ms = NowMs();
        break;
      case JobEffect::kEndStore:
        store_.DeletePrefix(absl::StrCat("job/", job.id(), "/"));
        // A rank waiting for a key its peers can no longer set hears now, as
        // the store calls after this one do (RunningJob), and reports back.
        EndStoreWaitsLocked(
            job.id(), absl::AbortedError(
                          IsTerminal(job.state())
                              ? absl::StrFormat("job %s is %s", job.id(),
                                                JobStateName(job.state()))
                              : absl::StrFormat("job %s generation %d is over: %s", job.id(),
                                                ended_generation, t.rank_reason)));
        break;
      case JobEffect::kDropResume:
        r.resume.reset();
        break;
      case JobEffect::kDropSnapshots:  // what is on disk stays until retention removes the job
        r.resume.reset();
        r.newest.reset();
        r.awaiting.reset();
        r.loaded.reset();
        break;
      case JobEffect::kPendingSince:
        r.pending_since = now;
        break;
      case JobEffect::kMarkEnded:
        job.set_end_time_ms(NowMs());
        r.ended_at = now;
        break;
      case JobEffect::kChanged:
        Changed(r);
        break;
      case JobEffect::kMarkFinalVersion:
        r.end_version = r.version;
        break;
      case JobEffect::kPersist:
        PersistLocked(r);
        break;
      case JobEffect::kSchedule:
        ScheduleLocked();
        break;
    }
  }
  return absl::OkStatus();
}

void Coordinator::StartGenerationLocked(JobRecord& r, const std::vector<std::string>& workers) {
  tagi::v1::Job& job = r.job;
  // When the job first started: a later generation (a recovery, a resize)
  // does not move it.
  if (job.start_time_ms() == 0) job.set_start_time_ms(NowMs());
  job.clear_workers();
  job.set_world_size(static_cast<uint32_t>(workers.size()));  // elastic: as placed
  r.finished.assign(workers.size(), false);
  r.max_reported_step = 0;
  ++jobs_started_;
  ChooseResumeLocked(r);
  RecordWorldLocked(r);
  for (size_t rank = 0; rank < workers.size(); ++rank) {
    job.add_workers(workers[rank]);
    WorkerRecord& w = workers_.at(workers[rank]);
    w.job_id = job.id();
    w.info.set_state("BUSY");
    w.info.set_job_id(job.id());
    w.info.set_rank(static_cast<uint32_t>(rank));
    w.assignment.set_job_id(job.id());
    w.assignment.set_generation(job.generation());
    w.assignment.set_rank(static_cast<uint32_t>(rank));
    w.assignment.set_world_size(job.world_size());
    *w.assignment.mutable_spec() = job.spec();
    w.assignment.set_resume(r.resume != nullptr);
    w.assignment.set_resume_global_step(r.resume_step);
  }
}

void Coordinator::MaybeSucceedLocked(JobRecord& r) {
  if (r.job.state() != tagi::v1::RUNNING) return;
  RanksFinished finished;
  finished.all = std::all_of(r.finished.begin(), r.finished.end(), [](bool f) { return f; });
  finished.model_ready = r.model_ready;
  finished.epochs = r.job.spec().epochs();
  finished.world = r.job.world_size();
  ApplyLocked(r, finished).IgnoreError();  // RUNNING: it applies
}

}  // namespace tagi::coordinator
