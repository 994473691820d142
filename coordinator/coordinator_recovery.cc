// The fault-tolerance half of Coordinator: worker sessions, failed
// generations and their recovery, snapshots, and the state directory that
// lets a restarted coordinator resume its jobs.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/protocol.h"
#include "coordinator/coordinator.h"

namespace tagi::coordinator {
namespace {

namespace fs = std::filesystem;
using tagi::v1::Job;

constexpr size_t kMaxJobFileBytes = 64 << 20;

// "w-12" -> 12; nullopt for anything else.
std::optional<uint64_t> WorkerNumber(const std::string& id) {
  if (id.size() < 3 || id.size() > 22 || id.compare(0, 2, "w-") != 0) return std::nullopt;
  uint64_t n = 0;
  const char* end = id.data() + id.size();
  auto [p, ec] = std::from_chars(id.data() + 2, end, n);
  if (ec != std::errc() || p != end || n == 0) return std::nullopt;
  return n;
}

std::optional<uint64_t> JobNumber(const std::string& id) {
  if (id.size() < 5 || id.compare(0, 4, "job-") != 0) return std::nullopt;
  uint64_t n = 0;
  const char* end = id.data() + id.size();
  auto [p, ec] = std::from_chars(id.data() + 4, end, n);
  if (ec != std::errc() || p != end || n == 0) return std::nullopt;
  return n;
}

std::string Log(const std::string& line) {
  std::fprintf(stderr, "tagi-coordinator: %s\n", line.c_str());
  return line;
}

}  // namespace

Coordinator::WorkerRecord& Coordinator::AdoptWorkerLocked(const std::string& proposed_id) {
  if (!proposed_id.empty()) {
    auto it = workers_.find(proposed_id);
    if (it != workers_.end()) return it->second;
    // A worker this coordinator does not know names itself (it registered
    // with an earlier incarnation): keep its id, so that its rank in a job
    // being resumed can be given back to it.
    if (const auto n = WorkerNumber(proposed_id); n.has_value()) {
      if (*n >= next_worker_ && *n < UINT64_MAX) {  // the counter never wraps
        next_worker_ = *n + 1;
        PersistWorkerCounterLocked();
      }
      WorkerRecord& w = workers_[proposed_id];
      w.info.set_id(proposed_id);
      w.info.set_state("IDLE");
      return w;
    }
  }
  const std::string id = absl::StrFormat("w-%d", next_worker_);
  if (next_worker_ < UINT64_MAX) ++next_worker_;
  PersistWorkerCounterLocked();
  WorkerRecord& w = workers_[id];
  w.info.set_id(id);
  w.info.set_state("IDLE");
  return w;
}

absl::StatusOr<uint64_t> Coordinator::OpenSession(const tagi::v1::SessionMessage& first,
                                                  const std::string& peer,
                                                  std::function<void()> wake) {
  if (first.worker_id().empty()) {
    return absl::InvalidArgumentError("the first session message must name the worker");
  }
  if (!WorkerNumber(first.worker_id()).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker id \"", first.worker_id().substr(0, 64), "\" is not one this service hands out"));
  }
  Lock lock(this);
  const bool known = workers_.count(first.worker_id()) > 0;
  WorkerRecord& w = AdoptWorkerLocked(first.worker_id());
  if (!known) {
    w.info.set_address(peer);
    w.info.set_hostname(first.hostname());
    w.info.set_device(first.device().empty() ? "cpu" : first.device());
    Log(absl::StrFormat("worker %s (%s) reconnected; this coordinator did not know it",
                        w.info.id(), first.hostname()));
  }
  WakeSessionLocked(w);  // an older asynchronous stream learns it was superseded
  w.session = next_session_++;
  w.wake = std::move(wake);
  w.outbox.clear();
  w.last_directive.clear();
  Touch(w);
  ++epoch_;
  const uint64_t token = w.session;
  if (auto st = OnSessionMessageLocked(token, first); !st.ok()) return st;
  return token;
}

absl::Status Coordinator::OnSessionMessage(uint64_t token, const tagi::v1::SessionMessage& m) {
  Lock lock(this);
  return OnSessionMessageLocked(token, m);
}

absl::Status Coordinator::OnSessionMessageLocked(uint64_t token,
                                                 const tagi::v1::SessionMessage& m) {
  auto it = workers_.find(m.worker_id());
  if (it == workers_.end() || it->second.session != token) {
    return absl::CancelledError("this session was superseded by a newer stream of the worker");
  }
  WorkerRecord& w = it->second;
  Touch(w);
  if (m.logs_size() > 0 || m.logs_dropped() > 0) IngestLogsLocked(w, m);
  if (m.job_id().empty()) return absl::OkStatus();
  tagi::v1::ProgressReport report;
  report.set_worker_id(m.worker_id());
  report.set_job_id(m.job_id());
  report.set_generation(m.generation());
  report.set_rank(m.rank());
  *report.mutable_progress() = m.progress();
  auto reply = ReportProgressLocked(report);
  if (reply.ok() && reply->directive() == tagi::v1::CONTINUE) return absl::OkStatus();
  // The attempt is over for it: a stale generation, a job this coordinator
  // no longer runs, a rank the worker does not hold, or an ABORT or CANCEL.
  // A worker this coordinator does not hold in a job that is recovering
  // (the ranks of a job a restarted coordinator reloaded, reconnecting
  // still in their old generation) is still ending the attempt until it
  // asks for work again (a rank 0 holding a snapshot uploads it first), so
  // it is not placed meanwhile: the next generation then resumes from that
  // snapshot. A worker already waiting in Rendezvous has ended it: this is
  // a message sent before, and it stays placeable (else it would sit out a
  // whole poll after every job).
  const auto job = jobs_.find(m.job_id());
  const bool recovering = job != jobs_.end() && job->second.job.state() == tagi::v1::PENDING;
  if (!polls_.contains(w.info.id()) &&
      (!reply.ok() || (w.job_id != m.job_id() && recovering))) {
    w.checked_in = false;
  }
  DirectLocked(w, reply.ok() ? reply->directive() : tagi::v1::ABORT, m.job_id(), m.generation(),
               reply.ok() ? reply->reason() : std::string(reply.status().message()));
  return absl::OkStatus();
}

namespace {

// The most lines of one session message kept (a worker sends at most
// kLogLinesPerMessage); the rest are counted as dropped.
constexpr int kMaxLogLinesPerMessage = 256;
// A line stamped further than this from the coordinator's clock gets the
// coordinator's time (a worker with a wrong clock, or a forged stamp).
constexpr int64_t kMaxLogClockSkewMs = int64_t{24} * 3600 * 1000;

}  // namespace

void Coordinator::IngestLogsLocked(const WorkerRecord& w, const tagi::v1::SessionMessage& m) {
  const std::string& id = w.info.id();
  // Only the jobs this worker ranks in, now or in the generation before.
  auto ranks_in = [&id](const JobRecord& r) {
    return std::find(r.job.workers().begin(), r.job.workers().end(), id) !=
               r.job.workers().end() ||
           std::find(r.previous_workers.begin(), r.previous_workers.end(), id) !=
               r.previous_workers.end();
  };
  const int64_t now_ms = NowMs();
  JobRecord* last = nullptr;
  int taken = 0;
  for (const tagi::v1::WorkerLogLine& line : m.logs()) {
    auto j = jobs_.find(line.job_id());
    if (j == jobs_.end() || !ranks_in(j->second)) continue;
    JobRecord& r = j->second;
    last = &r;
    r.log_dirty = true;
    if (++taken > kMaxLogLinesPerMessage) {
      r.log.AddDropped(1);
      continue;
    }
    const int64_t t =
        std::abs(line.time_ms() - now_ms) > kMaxLogClockSkewMs ? now_ms : line.time_ms();
    r.log.Append(t, line.rank(), line.generation(), id, line.text());
  }
  if (m.logs_dropped() > 0) {
    if (last == nullptr) {
      auto j = jobs_.find(m.job_id());
      if (j != jobs_.end() && ranks_in(j->second)) last = &j->second;
    }
    if (last != nullptr) {
      last->log.AddDropped(m.logs_dropped());
      last->log_dirty = true;
    }
  }
}

void Coordinator::CloseSession(const std::string& worker_id, uint64_t token,
                               const std::string& reason) {
  Lock lock(this);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.session != token) return;
  it->second.session = 0;
  WakeSessionLocked(it->second);
  it->second.wake = nullptr;
  WorkerFailedLocked(it->second, reason);  // a worker that left on purpose is gone too
  ScheduleLocked();
}

void Coordinator::DirectLocked(WorkerRecord& w, tagi::v1::Directive d, const std::string& job,
                               uint64_t gen, const std::string& reason) {
  const std::string key = absl::StrCat(job, "/", gen, "/", static_cast<int>(d));
  if (w.last_directive == key) return;  // already said
  w.last_directive = key;
  if (w.session == 0) return;  // it learns at its next call
  tagi::v1::SessionDirective& out = w.outbox.emplace_back();
  out.set_directive(d);
  out.set_job_id(job);
  out.set_generation(gen);
  out.set_reason(reason);
  ++epoch_;
  WakeSessionLocked(w);
}

void Coordinator::WakeSessionLocked(const WorkerRecord& w) {
  if (w.wake) deferred_.push_back(w.wake);
}

absl::StatusOr<std::optional<tagi::v1::SessionDirective>> Coordinator::TakeDirective(
    const std::string& worker_id, uint64_t token) {
  Lock lock(this);
  auto it = workers_.find(worker_id);
  if (it == workers_.end() || it->second.session != token) {
    return absl::CancelledError("the session ended");
  }
  WorkerRecord& w = it->second;
  if (w.outbox.empty()) return std::optional<tagi::v1::SessionDirective>();
  tagi::v1::SessionDirective d = std::move(w.outbox.front());
  w.outbox.pop_front();
  return std::optional<tagi::v1::SessionDirective>(std::move(d));
}

void Coordinator::WorkerFailedLocked(WorkerRecord& w, const std::string& reason) {
  if (w.gone) return;
  w.gone = true;
  w.checked_in = false;
  w.info.set_state("GONE");
  ++workers_failed_;
  ++epoch_;
  Log(absl::StrFormat("worker %s is gone: %s", w.info.id(), reason));
  if (w.job_id.empty()) return;
  auto job = jobs_.find(w.job_id);
  if (job == jobs_.end()) {  // forgotten by retention
    ReleaseWorkerLocked(w.info.id());
    return;
  }
  JobRecord& r = job->second;
  const std::string why =
      absl::StrFormat("worker %s (rank %d) failed: %s", w.info.id(), w.assignment.rank(), reason);
  const uint64_t gen = w.assignment.generation();
  // Not running (recovering, or ending): the worker just leaves it.
  if (!ApplyLocked(r, RankFailed{why}).ok()) {
    ReleaseWorkerLocked(w.info.id());
    return;
  }
  StrikeLocked(w, r, gen, why);
}

void Coordinator::StrikeLocked(WorkerRecord& w, JobRecord& r, uint64_t gen,
                               const std::string& why) {
  const absl::Time now = clock_.Now();
  const bool was = Excluded(w.strikes, now);
  w.strikes = AfterStrike(w.strikes, absl::StrCat(r.job.id(), "/", gen), now);
  if (was || !Excluded(w.strikes, now)) return;
  ++worker_exclusions_;
  ++epoch_;
  const std::string text = absl::StrFormat(
      "worker %s is not placed for %s: %d failed generations in a row were blamed on it (the "
      "last: %s)",
      w.info.id(), absl::FormatDuration(w.strikes.excluded_until - now), kStrikesBeforeExclusion,
      why);
  Log(text);
  if (r.job.state() == tagi::v1::PENDING) {
    r.job.set_reason(absl::StrCat(r.job.reason(), "; ", text));
    Changed(r);
  }
}

void Coordinator::ChooseResumeLocked(JobRecord& r) {
  r.resume.reset();
  r.resume_step = 0;
  r.epochs_before.clear();
  Job& job = r.job;
  if (job.restarts() == 0 && job.resizes() == 0) return;  // a fresh job: nothing to resume
  std::string source;
  uint64_t epoch = 0;
  if (r.newest != nullptr) {
    // Received and checked by this coordinator; the disk holds it or an
    // older one, so there is nothing to read back.
    r.resume = r.newest;
    r.resume_step = r.newest_step;
    epoch = r.newest_epoch;
    source = absl::StrFormat("step %d as received", r.resume_step);
  } else if (r.loaded != nullptr) {
    // Read from the state dir by LoadState, outside the lock.
    r.resume = r.loaded;
    r.resume_step = r.loaded_step;
    epoch = r.loaded_epoch;
    source = r.loaded_source;
  } else {
    source = absl::StrCat("from the job seed: ",
                          r.loaded_source.empty() ? "no snapshot was received" : r.loaded_source);
  }
  if (r.resume != nullptr) {
    for (const auto& e : job.progress().epochs()) {
      if (e.epoch() <= epoch) r.epochs_before.push_back(e);
    }
  }
  Log(absl::StrFormat("job %s generation %d resumes at global step %d (%s)", job.id(),
                      job.generation(), r.resume_step, source));
  tagi::v1::JobProgress* p = job.mutable_progress();
  p->set_global_step(r.resume_step);
  p->set_resumed_from_step(r.resume_step);
  p->set_first_step_ms(0);
  p->clear_epochs();
  for (const auto& e : r.epochs_before) *p->add_epochs() = e;
  if (job.recoveries_size() > 0) {
    tagi::v1::Recovery& rec = *job.mutable_recoveries()->rbegin();
    if (rec.new_generation() == 0) {
      rec.set_new_generation(job.generation());
      rec.set_formed_ms(NowMs());
      rec.set_resumed_from_step(r.resume_step);
      rec.set_snapshot(source);
    }
  }
}

absl::Status Coordinator::UploadSnapshot(const std::string& worker_id, const std::string& job,
                                         uint64_t gen, uint64_t global_step, std::string bytes) {
  if (bytes.size() > options_.max_snapshot_bytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "snapshot of %d bytes exceeds the limit of %d", bytes.size(), options_.max_snapshot_bytes));
  }
  tagi::v1::JobSpec spec;
  bool ended = false;  // from rank 0 of the generation that just ended
  {
    Lock lock(this);
    auto r = RunningJobLocked(job, gen);
    if (!r.ok()) {
      auto f = FencedJob(job, gen);
      if (!f.ok() || !EndedGenerationSnapshotLocked(**f, gen, worker_id, global_step)) {
        return r.status();
      }
      ended = true;
      r = f;
    }
    if ((*r)->job.workers_size() == 0 || (*r)->job.workers(0) != worker_id) {
      return absl::PermissionDeniedError("only rank 0 uploads snapshots");
    }
    spec = (*r)->job.spec();
  }
  // Checked (CRC, job, step, the network's size, every value) once, outside
  // the lock; written by the writer thread.
  absl::StatusOr<Snapshot> decoded = CheckSnapshotUpload(job, global_step, bytes);
  if (decoded.ok()) {
    if (auto st = CheckSnapshotValues(spec, *decoded); !st.ok()) decoded = st;
  }
  Lock lock(this);
  if (!decoded.ok()) {
    ++snapshots_rejected_;
    Log(absl::StrFormat("job %s: snapshot at step %d refused: %s", job, global_step,
                        decoded.status().message()));
    return decoded.status();
  }
  auto r = FindJob(job);
  if (!r.ok()) return r.status();
  JobRecord& rec = **r;
  if (ended) {
    if (!EndedGenerationSnapshotLocked(rec, gen, worker_id, global_step)) {
      return absl::AbortedError(absl::StrFormat("job %s generation %d is over", job, gen));
    }
    // Consistent (every rank applied the same steps up to it) and newer than
    // the stored one: the next generation resumes from it. The metrics of
    // an epoch it finished are lost if rank 0 never sent them.
    AcceptSnapshotLocked(rec, global_step, decoded->epoch,
                         std::make_shared<const std::string>(std::move(bytes)));
    rec.awaiting.reset();
    Log(absl::StrFormat("job %s: kept the snapshot at step %d of generation %d, which had ended",
                        job, global_step, gen));
    return absl::AbortedError(absl::StrFormat(
        "job %s generation %d is over (%s); its snapshot at step %d is kept and the next "
        "generation resumes from it",
        job, gen, rec.job.reason(), global_step));
  }
  if (rec.job.state() != tagi::v1::RUNNING || rec.job.generation() != gen) {
    return absl::AbortedError(absl::StrFormat("job %s generation %d is over", job, gen));
  }
  if (rec.newest != nullptr && rec.newest_step > global_step) return absl::OkStatus();  // late
  if (rec.awaiting != nullptr && rec.awaiting_step > global_step) return absl::OkStatus();
  auto shared = std::make_shared<const std::string>(std::move(bytes));
  if (decoded->epoch > LastEpoch(rec.job.progress())) {
    // Rank 0 has not reported the metrics of the epochs this snapshot
    // finished: resuming from it would lose them. It waits for them.
    rec.awaiting = std::move(shared);
    rec.awaiting_step = global_step;
    rec.awaiting_epoch = decoded->epoch;
    return absl::OkStatus();
  }
  rec.awaiting.reset();
  AcceptSnapshotLocked(rec, global_step, decoded->epoch, std::move(shared));
  MaybeGrowLocked(rec);  // a snapshot point: an elastic job may grow here
  return absl::OkStatus();
}

bool Coordinator::EndedGenerationSnapshotLocked(const JobRecord& rec, uint64_t gen,
                                                const std::string& worker_id,
                                                uint64_t global_step) const {
  const Job& j = rec.job;
  return j.state() == tagi::v1::PENDING && j.generation() == gen && gen > 0 &&
         j.workers_size() > 0 && j.workers(0) == worker_id &&
         (rec.newest == nullptr ? global_step > j.snapshot_step() : global_step > rec.newest_step);
}

void Coordinator::AcceptSnapshotLocked(JobRecord& rec, uint64_t step, uint64_t epoch,
                                       std::shared_ptr<const std::string> bytes) {
  rec.loaded.reset();  // newer
  rec.newest = bytes;
  rec.newest_step = step;
  rec.newest_epoch = epoch;
  rec.job.set_snapshot_step(step);
  rec.job.set_snapshot_time_ms(NowMs());
  rec.job.set_snapshot_bytes(bytes->size());
  if (rec.job.state() == tagi::v1::RUNNING) {
    // The generation trained: what was blamed on its workers is forgiven.
    for (const std::string& id : rec.job.workers()) {
      if (auto w = workers_.find(id); w != workers_.end()) {
        w->second.strikes = AfterGoodGeneration(w->second.strikes);
      }
    }
  }
  Changed(rec);
  QueueSnapshotWriteLocked(rec, step, std::move(bytes));
}

absl::StatusOr<std::shared_ptr<const std::string>> Coordinator::ResumeSnapshot(
    const std::string& worker_id, const std::string& job, uint64_t gen) {
  Lock lock(this);
  auto r = RunningMemberLocked(worker_id, job, gen);
  if (!r.ok()) return r.status();
  if ((*r)->resume == nullptr) {
    return absl::NotFoundError(
        absl::StrFormat("job %s generation %d starts from its seed, not a snapshot", job, gen));
  }
  return (*r)->resume;
}

void Coordinator::LoadState() {
  Lock lock(this);
  const fs::path root(options_.state_dir);
  if (auto bytes = ReadFile((root / "next-worker").string(), 64); bytes.ok()) {
    uint64_t n = 0;
    std::from_chars(bytes->data(), bytes->data() + bytes->size(), n);
    next_worker_ = std::max<uint64_t>(next_worker_, n);
  }
  // Written when retention forgets jobs, so that no id is handed out twice.
  if (auto bytes = ReadFile((root / "next-job").string(), 64); bytes.ok()) {
    uint64_t n = 0;
    std::from_chars(bytes->data(), bytes->data() + bytes->size(), n);
    next_job_ = std::max<uint64_t>(next_job_, n);
  }
  std::error_code ec;
  fs::directory_iterator it(root / "jobs", ec);
  if (ec) return;  // a fresh state dir
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const fs::path path = it->path();
    if (path.extension() != ".job") continue;
    auto bytes = ReadFile(path.string(), kMaxJobFileBytes);
    Job job;
    std::optional<uint64_t> number;
    if (bytes.ok() && job.ParseFromString(*bytes)) number = JobNumber(job.id());
    if (!number.has_value() || path.stem().string() != job.id()) {
      startup_log_.push_back(Log(absl::StrFormat(
          "skipping %s: not a job record (%s)", path.string(),
          bytes.ok() ? "cannot parse it" : std::string(bytes.status().message()))));
      continue;
    }
    JobRecord& r = jobs_[job.id()];
    r.seq = *number;
    r.pending_since = clock_.Now();
    next_job_ = std::max(next_job_, *number + 1);
    r.job = std::move(job);
    r.saved_version = r.version;  // as on disk
    if (IsTerminal(r.job.state())) r.end_version = r.version;
    // Its age for retention counts from now: the wall time it ended at says
    // nothing trustworthy after a restart (the host's clock may have jumped).
    r.ended_at = clock_.Now();
    Job& j = r.job;
    if (j.state() == tagi::v1::SUCCEEDED) {
      const fs::path model = root / "models" / (j.id() + ".tagi");
      r.model_ready = fs::exists(model, ec);
      if (r.model_ready) r.model_path = model.string();
    }
    // Its log, when one was written (a missing or unreadable one is empty).
    if (auto log = ReadFile((root / "logs" / (j.id() + ".logs")).string(), kMaxJobLogFileBytes);
        log.ok()) {
      if (auto decoded = JobLog::Decode(*log); decoded.ok()) {
        r.log = *std::move(decoded);
      } else {
        startup_log_.push_back(Log(absl::StrFormat("job %s: its log is not readable (%s); it "
                                                   "starts empty",
                                                   j.id(), decoded.status().message())));
      }
    }
    // A job that was running recovers; one that was recovering keeps its ranks.
    ApplyLocked(r, CoordinatorRestarted{}).IgnoreError();  // applies in every state
    startup_log_.push_back(Log(absl::StrFormat("reloaded job %s: %s, generation %d", j.id(),
                                               JobStateName(j.state()), j.generation())));
  }
  RemoveOrphanFilesLocked();
  PruneEndedLocked();
}

void Coordinator::LoadSnapshots() {
  std::vector<std::string> resuming;
  {
    Lock lock(this);
    for (const auto& [id, r] : jobs_) {
      if (r.job.state() == tagi::v1::PENDING && r.job.generation() > 0) resuming.push_back(id);
    }
  }
  for (const std::string& id : resuming) {
    // The disk is read without the lock: the newest snapshot that decodes.
    absl::StatusOr<LatestSnapshot> latest = snapshots_->Latest(id);
    std::shared_ptr<const std::string> bytes;
    std::string source;
    if (!latest.ok()) {
      source = std::string(latest.status().message());
    } else {
      bytes = std::make_shared<const std::string>(EncodeSnapshot(latest->snapshot));
      source = fs::path(latest->path).filename().string();
      if (!latest->skipped.empty()) {
        source = absl::StrCat(source, "; skipped ", absl::StrJoin(latest->skipped, "; "));
      }
    }
    Lock lock(this);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    JobRecord& r = it->second;
    r.loaded_source = source;
    if (latest.ok()) {
      snapshots_rejected_ += latest->skipped.size();
      r.loaded = std::move(bytes);
      r.loaded_step = latest->snapshot.global_step;
      r.loaded_epoch = latest->snapshot.epoch;
    }
  }
}

}  // namespace tagi::coordinator
