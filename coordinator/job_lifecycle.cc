#include "coordinator/job_lifecycle.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/progress_bar.h"
#include "common/protocol.h"
#include "coordinator/membership.h"

namespace tagi::coordinator {
namespace {

using tagi::v1::JobState;
using E = JobEffect;

std::string StateName(JobState s) { return tagi::v1::JobState_Name(s); }

bool Terminal(JobState s) {
  return s == tagi::v1::SUCCEEDED || s == tagi::v1::FAILED || s == tagi::v1::CANCELLED;
}

JobTransition Refuse(const JobLife& job, const JobEvent& event) {
  JobTransition t;
  t.next = job;
  t.status = absl::FailedPreconditionError(absl::StrFormat(
      "job %s is %s: %s does not apply", job.id, StateName(job.state), JobEventName(event)));
  return t;
}

JobTransition Changing(const JobLife& job) {
  JobTransition t;
  t.changed = true;
  t.next = job;
  return t;
}

// The job ends in `state` (FAILED, CANCELLED, SUCCEEDED). Ranks still
// training are told at once (rather than at their next progress report),
// unless it succeeded: they have all finished.
JobTransition End(const JobLife& job, JobState state, const std::string& reason) {
  JobTransition t = Changing(job);
  t.next.state = state;
  t.reason = reason;
  t.rank_reason = reason;
  t.effects = {E::kMarkEnded, E::kEndStore, E::kDropSnapshots};
  if (job.state == tagi::v1::RUNNING && state != tagi::v1::SUCCEEDED) {
    t.effects.push_back(state == tagi::v1::CANCELLED ? E::kCancelRanks : E::kAbortRanks);
  }
  t.effects.insert(t.effects.end(), {E::kChanged, E::kMarkFinalVersion, E::kPersist, E::kSchedule});
  return t;
}

// The running generation ends and the job waits for its next one. After a
// failure its ranks are placed again only once they ask for work (they may
// be dead); a planned re-formation keeps them ready, so that the next
// generation is formed with them.
void EndGeneration(JobTransition& t, const std::string& state_reason, bool planned) {
  t.next.state = tagi::v1::PENDING;
  t.reason = absl::StrCat(state_reason, "; ", t.next.waiting);
  t.effects.insert(t.effects.end(), {E::kRememberRanks, E::kAbortRanks, E::kReleaseRanks});
  if (!planned) t.effects.push_back(E::kRanksCheckInAgain);
  t.effects.insert(t.effects.end(), {E::kEndStore, E::kDropResume, E::kPendingSince, E::kChanged,
                                     E::kPersist, E::kSchedule});
}

JobTransition OnPlaced(const JobLife& job, const Placed& e, absl::Time now) {
  if (job.state != tagi::v1::PENDING || e.workers.empty()) return Refuse(job, e);
  if (now < job.not_before) {
    JobTransition t = Refuse(job, e);
    t.status = absl::FailedPreconditionError(absl::StrFormat(
        "job %s waits %s more before its next generation (restart back-off)", job.id,
        absl::FormatDuration(job.not_before - now)));
    return t;
  }
  JobTransition t = Changing(job);
  t.next.state = tagi::v1::RUNNING;
  t.next.generation = job.generation + 1;
  t.next.generation_started = now;
  t.reason = e.reason;
  t.effects = {E::kStartGeneration, E::kChanged, E::kPersist};
  return t;
}

JobTransition OnRankFailed(const JobLife& job, const RankFailed& e, absl::Time now,
                           const LifecycleOptions& options) {
  if (job.state != tagi::v1::RUNNING) return Refuse(job, e);
  JobTransition t = Changing(job);
  // A step that held NaN or Inf is never applied (nor are impossible
  // evaluation sums reported), and the generation resumes from the last
  // snapshot; the same again from the same snapshot is no passing fault (a
  // rank's data, hardware or code gives it).
  std::string fatal;
  if (absl::StrContains(e.reason, kNonFiniteStepReason) ||
      absl::StrContains(e.reason, kImpossibleEvalReason)) {
    if (job.nonfinite_from == job.snapshot_step) {
      fatal = absl::StrFormat("%s; again after resuming from step %d, so the job stops", e.reason,
                              job.snapshot_step);
    }
    t.next.nonfinite_from = job.snapshot_step;
  }
  if (fatal.empty() && static_cast<int64_t>(job.restarts) >= options.max_restarts) {
    fatal = absl::StrFormat("%s (gave up after %d restarts)", e.reason, job.restarts);
  }
  if (!fatal.empty()) {
    JobTransition end = End(t.next, tagi::v1::FAILED, fatal);
    end.effects.push_back(E::kReleaseRanks);
    end.log = absl::StrFormat("job %s generation %d failed: %s", job.id, job.generation, fatal);
    return end;
  }
  // Quick failures in a row wait before the next generation.
  t.next.quick_failures =
      now - job.generation_started < kQuickGeneration ? job.quick_failures + 1 : 0;
  const absl::Duration delay = RestartDelay(t.next.quick_failures);
  t.next.not_before = now + delay;
  t.next.restarts = job.restarts + 1;
  t.rank_reason = e.reason;
  t.log = absl::StrFormat("job %s generation %d ended: %s (restart %d)", job.id, job.generation,
                          e.reason, t.next.restarts);
  t.effects = {E::kAddRecovery, E::kKeepAwaitingSnapshot};
  EndGeneration(
      t,
      delay > absl::ZeroDuration()
          ? absl::StrFormat("recovering after %s (%d generations in a row failed within %s of "
                            "their start): %s",
                            absl::FormatDuration(delay), t.next.quick_failures,
                            absl::FormatDuration(kQuickGeneration), e.reason)
          : absl::StrCat("recovering: ", e.reason),
      /*planned=*/false);
  return t;
}

JobTransition OnGrow(const JobLife& job, const Grow& e) {
  if (job.state != tagi::v1::RUNNING) return Refuse(job, e);
  JobTransition t = Changing(job);
  t.next.resizes = job.resizes + 1;
  t.rank_reason = e.reason;
  t.log = absl::StrFormat("job %s generation %d: %s", job.id, job.generation, e.reason);
  t.effects = {E::kMarkGrowth};
  EndGeneration(t, absl::StrCat("growing: ", e.reason), /*planned=*/true);
  return t;
}

JobTransition OnRanksFinished(const JobLife& job, const RanksFinished& e) {
  if (job.state != tagi::v1::RUNNING) return Refuse(job, e);
  if (!e.all) {
    JobTransition t;
    t.next = job;
    return t;  // OK, unchanged: the others are still training
  }
  if (!e.model_ready) {
    return End(job, tagi::v1::FAILED, "every rank finished but rank 0 uploaded no model");
  }
  return End(job, tagi::v1::SUCCEEDED,
             absl::StrCat("trained ", Counted(static_cast<int64_t>(e.epochs), "epoch"), " on ",
                          Counted(e.world, "worker")));
}

JobTransition OnCancel(const JobLife& job, const CancelRequested& e) {
  if (Terminal(job.state)) {
    JobTransition t = Refuse(job, e);
    t.status = job.final_saved
                   ? absl::FailedPreconditionError(absl::StrFormat(
                         "job %s is already %s", job.id, StateName(job.state)))
                   : absl::UnavailableError(absl::StrFormat(
                         "job %s is ending as %s; its state is not saved yet", job.id,
                         StateName(job.state)));
    return t;
  }
  return End(job, tagi::v1::CANCELLED, "cancelled by the user");
}

// A job reloaded RUNNING lost its generation with the old coordinator: it
// recovers like a failed one (at once: no back-off). A job reloaded PENDING
// after a failure keeps its previous ranks for the next generation.
JobTransition OnRestarted(const JobLife& job) {
  if (job.state == tagi::v1::PENDING && job.generation > 0) {
    JobTransition t = Changing(job);  // the reason stays
    t.effects = {E::kRememberRanks};
    return t;
  }
  if (job.state != tagi::v1::RUNNING) {  // nothing to recover
    JobTransition t;
    t.next = job;
    return t;
  }
  JobTransition t = Changing(job);
  t.next.state = tagi::v1::PENDING;
  t.next.restarts = job.restarts + 1;
  t.rank_reason = kCoordinatorRestarted;
  t.reason = absl::StrCat("recovering: ", kCoordinatorRestarted, "; ", job.waiting);
  t.effects = {E::kAddRecovery, E::kRememberRanks, E::kPersist};
  return t;
}

}  // namespace

std::string JobEventName(const JobEvent& event) {
  struct Name {
    std::string operator()(const Placed&) const { return "Placed"; }
    std::string operator()(const RankFailed&) const { return "RankFailed"; }
    std::string operator()(const RankGaveUp&) const { return "RankGaveUp"; }
    std::string operator()(const Grow&) const { return "Grow"; }
    std::string operator()(const RanksFinished&) const { return "RanksFinished"; }
    std::string operator()(const CancelRequested&) const { return "CancelRequested"; }
    std::string operator()(const CoordinatorRestarted&) const { return "CoordinatorRestarted"; }
  };
  return std::visit(Name{}, event);
}

JobTransition DecideJobEvent(const JobLife& job, const JobEvent& event, absl::Time now,
                             const LifecycleOptions& options) {
  if (const auto* e = std::get_if<Placed>(&event)) return OnPlaced(job, *e, now);
  if (const auto* e = std::get_if<RankFailed>(&event)) return OnRankFailed(job, *e, now, options);
  if (const auto* e = std::get_if<RankGaveUp>(&event)) {
    if (job.state != tagi::v1::RUNNING) return Refuse(job, event);
    return End(job, tagi::v1::FAILED, e->reason);
  }
  if (const auto* e = std::get_if<Grow>(&event)) return OnGrow(job, *e);
  if (const auto* e = std::get_if<RanksFinished>(&event)) return OnRanksFinished(job, *e);
  if (const auto* e = std::get_if<CancelRequested>(&event)) return OnCancel(job, *e);
  return OnRestarted(job);
}

}  // namespace tagi::coordinator
