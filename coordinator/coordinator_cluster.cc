// The worker-facing half of Coordinator: the fenced store, progress,
// model upload and job completion.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/checksum.h"
#include "common/file_util.h"
#include "common/job_spec.h"
#include "common/status.h"
#include "coordinator/coordinator.h"
#include "coordinator/progress_check.h"
#include "worker/engine/model_file.h"

namespace tagi::coordinator {
namespace {

// The model file ends with a CRC-32 of everything before it (see
// worker/engine/model_file.h); the coordinator checks it without the engine.
absl::Status CheckModelCrc(const std::string& bytes) {
  if (bytes.size() < 24) return absl::InvalidArgumentError("model upload is too short");
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) {
    stored |= static_cast<uint32_t>(static_cast<uint8_t>(bytes[bytes.size() - 4 + i])) << (8 * i);
  }
  if (stored != Crc32(bytes.data(), bytes.size() - 4)) {
    return absl::DataLossError("model upload is corrupt (checksum mismatch)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> VerifyModelUpload(const tagi::v1::JobSpec& spec,
                                              const std::string& claimed_checksum,
                                              const std::string& bytes) {
  auto invalid = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("the model upload ", what));
  };
  absl::StatusOr<engine::Architecture> arch = engine::ArchitectureFromJobSpec(spec);
  if (!arch.ok()) return arch.status();
  absl::StatusOr<engine::ModelFile> model =
      engine::DecodeModelFile(std::span<const char>(bytes.data(), bytes.size()));
  if (!model.ok()) return invalid(absl::StrCat("is not a model file: ", model.status().message()));
  if (auto st = engine::CheckSameArchitecture(*arch, model->architecture); !st.ok()) {
    return invalid(absl::StrCat("is not this job's network: ", st.message()));
  }
  if (auto st = engine::CheckParameterValues(model->parameters, model->state); !st.ok()) {
    return invalid(absl::StrCat("holds values no training makes: ", st.message()));
  }
  const std::string ours = FingerprintHex(ModelFingerprint(
      model->parameters.data(), model->parameters.size(), model->state.data(),
      model->state.size()));
  if (!claimed_checksum.empty() && claimed_checksum != ours) {
    return invalid(absl::StrFormat("claims checksum %s but its parameters' is %s",
                                   claimed_checksum.substr(0, 32), ours));
  }
  return ours;
}

namespace {

// A worker's free text (a failure reason) as the job keeps it: at most
// kMaxWorkerTextBytes, cut at a UTF-8 character boundary.
constexpr size_t kMaxWorkerTextBytes = 1024;
std::string Clip(const std::string& text) {
  if (text.size() <= kMaxWorkerTextBytes) return text;
  size_t n = kMaxWorkerTextBytes;
  while (n > 0 && (static_cast<uint8_t>(text[n]) & 0xC0) == 0x80) --n;
  return absl::StrCat(text.substr(0, n), "... (", text.size() - n, " more bytes)");
}

}  // namespace

// Rank 0's progress with the epochs finished before the snapshot this
// generation resumed from, which are the coordinator's: ranks report only
// their own.
tagi::v1::JobProgress Coordinator::MergedProgress(const JobRecord& rec,
                                                  const tagi::v1::JobProgress& p) {
  tagi::v1::JobProgress merged = p;
  merged.clear_epochs();
  const uint64_t before = rec.epochs_before.empty() ? 0 : rec.epochs_before.back().epoch();
  for (const auto& e : rec.epochs_before) *merged.add_epochs() = e;
  for (const auto& e : p.epochs()) {
    if (e.epoch() > before) *merged.add_epochs() = e;
  }
  if (merged.epochs_size() > kMaxEpochHistory) {
    merged.mutable_epochs()->DeleteSubrange(0, merged.epochs_size() - kMaxEpochHistory);
  }
  return merged;
}

absl::StatusOr<Coordinator::JobRecord*> Coordinator::RunningJobLocked(const std::string& job,
                                                                      uint64_t gen) {
  auto r = FencedJob(job, gen);
  if (!r.ok()) return r.status();
  if ((*r)->job.state() != tagi::v1::RUNNING) {
    return absl::AbortedError(
        absl::StrFormat("job %s is %s", job, JobStateName((*r)->job.state())));
  }
  return r;
}

absl::Status Coordinator::RunningJob(const std::string& job, uint64_t gen) {
  Lock lock(this);
  return RunningJobLocked(job, gen).status();
}

absl::Status Coordinator::StoreSet(const std::string& job, uint64_t gen, const std::string& key,
                                   const std::string& value) {
  if (auto st = RunningJob(job, gen); !st.ok()) return st;
  const std::string full = JobStorePrefix(job, gen) + key;
  TAGI_RETURN_IF_ERROR(store_.Set(full, value));
  Lock lock(this);
  AnswerStoreWaitsLocked(full);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Coordinator::StoreAdd(const std::string& job, uint64_t gen,
                                              const std::string& key, int64_t delta) {
  if (auto st = RunningJob(job, gen); !st.ok()) return st;
  const std::string full = JobStorePrefix(job, gen) + key;
  TAGI_ASSIGN_OR_RETURN(const int64_t value, store_.Add(full, delta));
  Lock lock(this);
  AnswerStoreWaitsLocked(full);
  return value;
}

absl::StatusOr<tagi::v1::ProgressReply> Coordinator::ReportProgress(
    const tagi::v1::ProgressReport& report) {
  Lock lock(this);
  auto w = workers_.find(report.worker_id());
  if (w != workers_.end()) Touch(w->second);
  return ReportProgressLocked(report);
}

void Coordinator::NoteLateProgressLocked(JobRecord& rec, const tagi::v1::ProgressReport& report) {
  // The ranks of a generation that failed while this coordinator was not
  // watching (it restarted) report how far they got when they reconnect:
  // those steps count as done, so the recovery's steps_redone is the truth.
  // (A failure this coordinator saw has its step already: max_reported_step.)
  if (rec.job.state() != tagi::v1::PENDING || rec.job.recoveries_size() == 0) return;
  tagi::v1::Recovery& last = *rec.job.mutable_recoveries()->rbegin();
  if (last.reason() != kCoordinatorRestarted || last.failed_generation() != report.generation() ||
      last.new_generation() != 0) {
    return;
  }
  if (report.progress().global_step() > last.failed_at_step()) {
    last.set_failed_at_step(report.progress().global_step());
    Changed(rec);
  }
}

absl::StatusOr<tagi::v1::ProgressReply> Coordinator::ReportProgressLocked(
    const tagi::v1::ProgressReport& report) {
  auto r = FencedJob(report.job_id(), report.generation());
  if (!r.ok()) return r.status();
  JobRecord& rec = **r;
  if (report.rank() >= static_cast<uint32_t>(rec.job.workers_size()) ||
      rec.job.workers(static_cast<int>(report.rank())) != report.worker_id()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "worker %s is not rank %d of job %s", report.worker_id(), report.rank(), report.job_id()));
  }
  if (const std::string wrong = ProgressProblem(report.progress(), rec.job.spec().epochs());
      !wrong.empty()) {
    // Its own doing: the generation ends, blamed on it.
    ++progress_rejected_;
    const std::string why = absl::StrFormat(
        "rank %d (worker %s) reported progress no training produces: %s", report.rank(),
        report.worker_id(), wrong);
    if (rec.job.state() == tagi::v1::RUNNING && ApplyLocked(rec, RankFailed{why}).ok()) {
      if (auto w = workers_.find(report.worker_id()); w != workers_.end()) {
        StrikeLocked(w->second, rec, report.generation(), why);
      }
    }
    return absl::InvalidArgumentError(why);
  }
  tagi::v1::ProgressReply reply;
  switch (rec.job.state()) {
    case tagi::v1::CANCELLED:
      reply.set_directive(tagi::v1::CANCEL);
      reply.set_reason(rec.job.reason());
      return reply;
    case tagi::v1::RUNNING:
      reply.set_directive(tagi::v1::CONTINUE);
      break;
    default:  // FAILED, SUCCEEDED, or PENDING again after a failure
      NoteLateProgressLocked(rec, report);
      reply.set_directive(tagi::v1::ABORT);
      reply.set_reason(rec.job.reason());
      return reply;
  }
  const tagi::v1::JobProgress& p = report.progress();
  rec.max_reported_step = std::max<uint64_t>(rec.max_reported_step, p.global_step());
  if (report.rank() == 0) {
    tagi::v1::JobProgress merged = MergedProgress(rec, p);
    const bool new_epoch = LastEpoch(merged) != LastEpoch(rec.job.progress());
    *rec.job.mutable_progress() = std::move(merged);
    if (p.rendezvous_seconds() > 0) rec.job.set_rendezvous_seconds(p.rendezvous_seconds());
    if (rec.grew_ms > 0 && p.first_step_ms() > 0) {
      std::fprintf(stderr,
                   "tagi-coordinator: job %s generation %d (world %d): first step %d ms after "
                   "the growth was decided\n",
                   rec.job.id().c_str(), static_cast<int>(rec.job.generation()),
                   static_cast<int>(rec.job.world_size()),
                   static_cast<int>(p.first_step_ms() - rec.grew_ms));
      rec.grew_ms = 0;
    }
    if (rec.job.recoveries_size() > 0 && p.first_step_ms() > 0) {
      tagi::v1::Recovery& last = *rec.job.mutable_recoveries()->rbegin();
      if (last.new_generation() == rec.job.generation() && last.first_step_ms() == 0) {
        last.set_first_step_ms(p.first_step_ms());
        last.set_steps_redone(last.failed_at_step() > last.resumed_from_step()
                                  ? last.failed_at_step() - last.resumed_from_step()
                                  : 0);
        std::fprintf(stderr,
                     "tagi-coordinator: job %s generation %d: first step %d ms after the "
                     "failure was detected (%d steps redone)\n",
                     rec.job.id().c_str(), static_cast<int>(rec.job.generation()),
                     static_cast<int>(last.first_step_ms() - last.detected_ms()),
                     static_cast<int>(last.steps_redone()));
        PersistLocked(rec);
      }
    }
    Changed(rec);
    if (new_epoch) PersistLocked(rec);
    if (rec.awaiting != nullptr &&
        LastEpoch(rec.job.progress()) >= rec.awaiting_epoch) {
      // Its epochs' metrics are in the record (queued before it): it can be
      // resumed from.
      AcceptSnapshotLocked(rec, rec.awaiting_step, rec.awaiting_epoch, std::move(rec.awaiting));
      rec.awaiting.reset();
      MaybeGrowLocked(rec);
      if (rec.job.state() != tagi::v1::RUNNING || rec.job.generation() != report.generation()) {
        reply.set_directive(tagi::v1::ABORT);  // it grew: this generation is over
        reply.set_reason(absl::StrFormat("generation %d ended to grow at the snapshot of step %d",
                                         report.generation(), rec.newest_step));
      }
    }
  }
  return reply;
}

absl::Status Coordinator::UploadModel(const std::string& worker_id, const std::string& job,
                                      uint64_t gen, const std::string& checksum,
                                      std::string bytes) {
  if (bytes.size() > options_.max_model_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model of %d bytes exceeds the limit of %d", bytes.size(), options_.max_model_bytes));
  }
  if (auto st = CheckModelCrc(bytes); !st.ok()) return st;
  tagi::v1::JobSpec spec;
  {
    Lock lock(this);
    auto r = RunningJobLocked(job, gen);
    if (!r.ok()) return r.status();
    if ((*r)->job.workers_size() == 0 || (*r)->job.workers(0) != worker_id) {
      return absl::PermissionDeniedError("only rank 0 uploads the model");
    }
    spec = (*r)->job.spec();
  }
  // Decoded whole and checked outside the lock; the checksum is ours.
  const absl::StatusOr<std::string> verified = VerifyModelUpload(spec, checksum, bytes);
  Lock lock(this);
  if (!verified.ok()) {
    ++models_rejected_;
    std::fprintf(stderr, "tagi-coordinator: job %s: model upload from %s refused: %s\n",
                 job.c_str(), worker_id.c_str(), std::string(verified.status().message()).c_str());
    return verified.status();
  }
  auto r = RunningJobLocked(job, gen);
  if (!r.ok()) return r.status();
  JobRecord& rec = **r;
  rec.job.set_model_checksum(*verified);
  rec.job.set_model_bytes(bytes.size());
  // Kept in memory until it is on disk: a disk that fails now makes the job
  // wait for it instead of failing a generation that trained well.
  rec.model_data = std::make_shared<const std::string>(std::move(bytes));
  rec.model_path.clear();
  rec.model_ready = true;
  QueueModelWriteLocked(rec);
  Changed(rec);
  MaybeSucceedLocked(rec);
  return absl::OkStatus();
}

absl::Status Coordinator::FinishJob(const tagi::v1::FinishJobRequest& req) {
  Lock lock(this);
  auto w = workers_.find(req.worker_id());
  if (w != workers_.end()) Touch(w->second);
  auto r = FencedJob(req.job_id(), req.generation());
  if (!r.ok()) {
    NoteFailedAttemptLocked(req);
    return r.status();
  }
  JobRecord& rec = **r;
  if (rec.job.state() == tagi::v1::PENDING) {  // this generation failed; the job recovers
    NoteFailedAttemptLocked(req);
    if (!req.ok() && req.retryable()) BlameSuspectLocked(rec, req, rec.previous_workers);
    return absl::AbortedError(absl::StrFormat("job %s generation %d is over: %s", req.job_id(),
                                              req.generation(), rec.job.reason()));
  }
  if (req.rank() >= rec.finished.size() ||
      rec.job.workers(static_cast<int>(req.rank())) != req.worker_id()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "worker %s is not rank %d of job %s", req.worker_id(), req.rank(), req.job_id()));
  }
  if (rec.job.state() == tagi::v1::RUNNING && !req.ok() && req.retryable()) {
    rec.max_reported_step = std::max<uint64_t>(rec.max_reported_step, req.progress().global_step());
    const std::vector<std::string> ranks(rec.job.workers().begin(), rec.job.workers().end());
    TAGI_RETURN_IF_ERROR(ApplyLocked(rec, RankFailed{absl::StrFormat(
                                              "rank %d (worker %s): %s", req.rank(),
                                              req.worker_id(), Clip(req.reason()))}));
    BlameSuspectLocked(rec, req, ranks);
    return absl::OkStatus();
  }
  rec.finished[req.rank()] = true;
  if (req.ok() && w != workers_.end()) w->second.strikes = AfterGoodGeneration(w->second.strikes);
  ReleaseWorkerLocked(req.worker_id());
  if (rec.job.state() == tagi::v1::RUNNING) {
    if (!req.ok()) {
      ApplyLocked(rec, RankGaveUp{absl::StrFormat("rank %d (worker %s): %s", req.rank(),
                                                  req.worker_id(), Clip(req.reason()))})
          .IgnoreError();  // RUNNING: it applies
    } else {
      if (req.rank() == 0) {
        const std::string wrong = ProgressProblem(req.progress(), rec.job.spec().epochs());
        if (wrong.empty()) {
          *rec.job.mutable_progress() = MergedProgress(rec, req.progress());
        } else {
          ++progress_rejected_;  // the job keeps what it had
          std::fprintf(stderr,
                       "tagi-coordinator: job %s: the final progress of rank 0 (worker %s) is "
                       "not kept: %s\n",
                       req.job_id().c_str(), req.worker_id().c_str(), wrong.c_str());
        }
      }
      Changed(rec);
      MaybeSucceedLocked(rec);
    }
  }
  ScheduleLocked();
  return absl::OkStatus();
}

void Coordinator::BlameSuspectLocked(JobRecord& r, const tagi::v1::FinishJobRequest& req,
                                     const std::vector<std::string>& ranks) {
  if (!req.has_suspect_rank() || req.suspect_rank() == req.rank() ||
      req.suspect_rank() >= ranks.size() || req.rank() >= ranks.size() ||
      ranks[req.rank()] != req.worker_id()) {
    return;
  }
  auto w = workers_.find(ranks[req.suspect_rank()]);
  if (w == workers_.end()) return;
  if (r.accused_generation != req.generation()) {
    r.accused_generation = req.generation();
    r.accusers.clear();
  }
  // One rank's word is not enough: a rogue rank could name an honest peer
  // every generation. Two ranks naming the same one (its two ring
  // neighbours, when it broke) are.
  std::set<std::string>& by = r.accusers[w->first];
  // Bounded: the accused and the accusers hold ranks of the generation.
  if (!by.insert(req.worker_id()).second || by.size() < 2) return;
  StrikeLocked(w->second, r, req.generation(),
               absl::StrFormat("named by workers %s as the rank that broke the group (%s)",
                               absl::StrJoin(by, " and "), Clip(req.reason())));
}

void Coordinator::NoteFailedAttemptLocked(const tagi::v1::FinishJobRequest& req) {
  // A survivor of a failed generation reports where it stopped: more exact
  // than the last progress report (sent every 250 ms) for steps redone.
  auto r = FindJob(req.job_id());
  if (!r.ok()) return;
  for (tagi::v1::Recovery& rec : *(*r)->job.mutable_recoveries()) {
    if (rec.failed_generation() != req.generation()) continue;
    if (req.progress().global_step() <= rec.failed_at_step()) return;
    rec.set_failed_at_step(req.progress().global_step());
    std::fprintf(stderr, "tagi-coordinator: job %s generation %d: rank %d had reached step %d\n",
                 req.job_id().c_str(), static_cast<int>(req.generation()), req.rank(),
                 static_cast<int>(req.progress().global_step()));
    if (rec.first_step_ms() > 0) {
      rec.set_steps_redone(rec.failed_at_step() > rec.resumed_from_step()
                               ? rec.failed_at_step() - rec.resumed_from_step()
                               : 0);
    }
    Changed(**r);
    return;
  }
}

}  // namespace tagi::coordinator
