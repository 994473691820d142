#include "coordinator/coordinator.h"

#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/progress_bar.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/checksum.h"
#include "common/file_util.h"
#include "common/job_spec.h"
#include "common/snapshot.h"
#include "common/status.h"
#include "worker/engine/model_file.h"

namespace tagi::coordinator {

using tagi::v1::Job;
using tagi::v1::JobState;

namespace {

// The reason of a pending job while the state dir cannot be written.
constexpr char kWaitingForDisk[] = "waiting for the state dir to be writable: ";
constexpr size_t kMaxNonceBytes = 64;
constexpr size_t kMaxRegistrationNonces = 16384;

// The worker key from `path`, or a new one written there (mode 0600;
// WriteFileAtomic: a crash leaves no half key).
absl::StatusOr<WorkerKey> LoadOrCreateWorkerKey(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path, 1024);
  if (text.ok()) return WorkerKey::FromHex(*text);
  if (!absl::IsNotFound(text.status())) return text.status();
  TAGI_ASSIGN_OR_RETURN(WorkerKey key, WorkerKey::Generate());
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  TAGI_RETURN_IF_ERROR(WriteFileAtomic(path, key.ToFileText(), 0600));
  return key;
}

}  // namespace

std::string JobStateName(JobState state) { return tagi::v1::JobState_Name(state); }

std::string JobWaitingReason(const Job& job) {
  return WaitingReason(static_cast<int>(MostWorld(job)), IsCudaDevice(job.spec().device()),
                       static_cast<int>(job.min_world_size()));
}

uint64_t LastEpoch(const tagi::v1::JobProgress& p) {
  return p.epochs().empty() ? 0 : p.epochs(p.epochs_size() - 1).epoch();
}

uint32_t MostWorld(const Job& job) {
  return job.max_world_size() > 0 ? job.max_world_size() : job.world_size();
}

uint32_t LeastWorld(const Job& job) {
  return job.min_world_size() > 0 ? job.min_world_size() : job.world_size();
}

bool IsTerminal(JobState s) {
  return s == tagi::v1::SUCCEEDED || s == tagi::v1::FAILED || s == tagi::v1::CANCELLED;
}

Coordinator::Coordinator(CoordinatorOptions options, Clock& clock)
    : options_(std::move(options)),
      lifecycle_{options_.max_restarts},
      clock_(clock),
      wall_offset_(clock.WallNow() - clock.Now()),
      fs_(options_.fs != nullptr ? *options_.fs : real_fs_) {
  if (!options_.state_dir.empty()) {
    snapshot_dir_ = (std::filesystem::path(options_.state_dir) / "snapshots").string();
  } else {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "tagi-coordinator-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) {
      snapshot_dir_ = pattern;
      snapshot_dir_is_temporary_ = true;
    } else {
      snapshot_dir_ = pattern;  // Put fails with the reason; jobs resume from the seed
      startup_log_.push_back("cannot create a temporary snapshot directory; jobs will resume "
                             "from their seed after a failure");
    }
  }
  snapshots_ = std::make_unique<SnapshotStore>(snapshot_dir_, options_.keep_snapshots, &fs_);
  writer_ = std::make_unique<StateWriter>(clock_);
  if (!options_.state_dir.empty()) {
    auto key = LoadOrCreateWorkerKey((std::filesystem::path(options_.state_dir) / "worker-key").string());
    if (key.ok()) {
      worker_key_ = std::move(*key);
    } else {
      startup_log_.push_back(absl::StrCat(
          "cannot keep the worker key in the state dir (", key.status().message(),
          "): worker credentials will not outlive this process"));
    }
  }
  if (!worker_key_.has_value()) {
    auto key = WorkerKey::Generate();
    if (key.ok()) {
      worker_key_ = std::move(*key);
    } else {
      startup_log_.push_back(absl::StrCat("no worker key (", key.status().message(),
                                          "): every worker-scoped call will be refused"));
    }
  }
  if (!options_.state_dir.empty()) {
    LoadState();
    LoadSnapshots();
  }
}

Coordinator::~Coordinator() {
  writer_.reset();  // one last attempt at what is queued; its callbacks still find the jobs
  if (snapshot_dir_is_temporary_) {
    std::error_code ec;
    std::filesystem::remove_all(snapshot_dir_, ec);
  }
}

int64_t Coordinator::NowMs() { return absl::ToUnixMillis(clock_.Now() + wall_offset_); }

void Coordinator::Touch(WorkerRecord& w) {
  w.last_seen = clock_.Now();
  w.info.set_last_seen_ms(NowMs());
  if (w.gone) {
    w.gone = false;
    w.info.set_state("IDLE");
  }
}

void Coordinator::Changed(JobRecord& r) {
  ++r.version;
  ++epoch_;
}

absl::StatusOr<Coordinator::JobRecord*> Coordinator::FindJob(const std::string& id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job with id \"", id, "\""));
  return &it->second;
}

absl::StatusOr<Coordinator::JobRecord*> Coordinator::FencedJob(const std::string& job,
                                                               uint64_t gen) {
  auto r = FindJob(job);
  if (!r.ok()) return r.status();
  if ((*r)->job.generation() != gen) {
    return absl::AbortedError(absl::StrFormat(
        "job %s generation %d is stale; the current generation is %d", job, gen,
        (*r)->job.generation()));
  }
  return r;
}

absl::StatusOr<Job> Coordinator::Submit(const tagi::v1::JobSpec& spec) {
  if (auto st = ValidateJobSpec(spec); !st.ok()) return st;
  if (auto st = CheckModelUploadable(
          spec, std::min<uint64_t>(options_.max_model_bytes, options_.max_snapshot_bytes));
      !st.ok()) {
    return absl::InvalidArgumentError(
        JobFileFieldNames(absl::StrCat("invalid job: ", st.message())));
  }
  const bool elastic = IsElastic(spec);
  int world = spec.world_size() > 0 ? static_cast<int>(spec.world_size()) : options_.world;
  int min_world = 0;
  if (elastic) {
    world = spec.max_world_size() > 0 ? static_cast<int>(spec.max_world_size()) : options_.world;
    min_world = spec.min_world_size() > 0 ? static_cast<int>(spec.min_world_size()) : 1;
    if (world > options_.world) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "invalid job: maxWorldSize: %d exceeds the coordinator's --world %d", world,
          options_.world));
    }
    if (min_world > world) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "invalid job: minWorldSize: %d exceeds the maximum world %d (the coordinator's "
          "--world)",
          min_world, world));
    }
  }
  if (world > options_.world) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "invalid job: worldSize: %d exceeds the coordinator's --world %d", world,
        options_.world));
  }
  if (auto st = StateHealth(); !st.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the job was not accepted: ", st.message(), "; try again once it can"));
  }
  Lock lock(this);
  size_t queued = 0;
  for (const auto& [id, r] : jobs_) queued += r.job.state() == tagi::v1::PENDING;
  if (queued >= options_.max_queued_jobs) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "the queue holds %d pending jobs, the limit; try again later", queued));
  }
  const std::string id = absl::StrFormat("job-%d", next_job_);
  JobRecord& r = jobs_[id];
  r.seq = next_job_++;
  r.job.set_id(id);
  *r.job.mutable_spec() = spec;
  r.job.set_state(tagi::v1::PENDING);
  r.job.set_world_size(static_cast<uint32_t>(world));
  if (elastic) {
    r.job.set_min_world_size(static_cast<uint32_t>(min_world));
    r.job.set_max_world_size(static_cast<uint32_t>(world));
  }
  r.job.set_submit_time_ms(NowMs());
  r.pending_since = clock_.Now();
  r.job.set_reason(JobWaitingReason(r.job));
  Changed(r);
  PersistLocked(r);
  ScheduleLocked();
  AwaitSavedLocked(id);
  auto saved = FindJob(id);
  if (!saved.ok()) return saved.status();
  return ViewLocked(**saved);
}

absl::StatusOr<Job> Coordinator::Get(const std::string& id) {
  Lock lock(this);
  auto r = FindJob(id);
  if (!r.ok()) return r.status();
  return ViewLocked(**r);
}

std::vector<Job> Coordinator::List() {
  Lock lock(this);
  std::vector<const JobRecord*> records;
  for (const auto& [id, r] : jobs_) records.push_back(&r);
  std::sort(records.begin(), records.end(),
            [](const JobRecord* a, const JobRecord* b) { return a->seq < b->seq; });
  std::vector<Job> out;
  for (const JobRecord* r : records) {
    Job& job = out.emplace_back(ViewLocked(*r));
    // The history is Get's: a listing stays small however long jobs ran.
    auto* epochs = job.mutable_progress()->mutable_epochs();
    if (epochs->size() > 1) epochs->DeleteSubrange(0, epochs->size() - 1);
    auto* recoveries = job.mutable_recoveries();
    if (recoveries->size() > 1) recoveries->DeleteSubrange(0, recoveries->size() - 1);
  }
  return out;
}

absl::StatusOr<Job> Coordinator::Cancel(const std::string& id) {
  Lock lock(this);
  auto r = FindJob(id);
  if (!r.ok()) return r.status();
  if (auto st = ApplyLocked(**r, CancelRequested{}); !st.ok()) return st;
  AwaitSavedLocked(id);
  auto after = FindJob(id);
  if (!after.ok()) return after.status();
  return ViewLocked(**after);
}

absl::StatusOr<Job> Coordinator::WaitForChange(const std::string& id, uint64_t& seen,
                                               absl::Duration timeout) {
  Lock lock(this);
  auto r = FindJob(id);
  if (!r.ok()) return r.status();
  // Looked up again after the wait: retention may forget an ended job.
  auto changed = [this, &id, &seen]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(id);
    return it == jobs_.end() || it->second.version > seen;
  };
  clock_.AwaitWithTimeout(mu_, absl::Condition(&changed), std::min(timeout, options_.max_wait));
  r = FindJob(id);
  if (!r.ok()) return r.status();
  seen = (*r)->version;
  return ViewLocked(**r);
}

absl::StatusOr<std::string> Coordinator::ModelFile(const std::string& id) {
  std::string path;
  {
    Lock lock(this);
    auto r = FindJob(id);
    if (!r.ok()) return r.status();
    if (!(*r)->model_ready || (*r)->job.state() != tagi::v1::SUCCEEDED ||
        !FinalSavedLocked(**r)) {
      const tagi::v1::Job view = ViewLocked(**r);
      return absl::FailedPreconditionError(absl::StrFormat(
          "job %s has no model: it is %s%s", id, JobStateName(view.state()),
          view.snapshot_step() > 0
              ? absl::StrFormat("; its newest snapshot (step %d) can be downloaded as one "
                                "(tagictl download --snapshot; REST ?snapshot=true)",
                                view.snapshot_step())
              : ""));
    }
    if ((*r)->model_path.empty()) return *(*r)->model_data;
    path = (*r)->model_path;
  }
  return ReadFile(path, options_.max_model_bytes);
}

absl::StatusOr<std::string> Coordinator::SnapshotModelFile(const std::string& id) {
  std::shared_ptr<const std::string> received;
  {
    Lock lock(this);
    auto r = FindJob(id);
    if (!r.ok()) return r.status();
    received = (*r)->newest;
  }
  // Decoded outside the lock: a snapshot is as large as the model.
  absl::StatusOr<Snapshot> snapshot = absl::NotFoundError("none");
  if (received != nullptr) {
    snapshot = DecodeSnapshot(*received);
  } else if (!options_.state_dir.empty()) {
    absl::StatusOr<LatestSnapshot> latest = snapshots_->Latest(id);
    if (latest.ok()) snapshot = std::move(latest->snapshot);
  }
  if (!snapshot.ok()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "job %s has no stored snapshot%s", id,
        options_.state_dir.empty()
            ? " (this coordinator has no --state-dir: it keeps snapshots only while a job runs)"
            : ""));
  }
  if (snapshot->model_header.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "job %s's newest snapshot (step %d) does not record its model's form (a worker of an "
        "earlier version took it): it can resume the job but not be served as a model file",
        id, snapshot->global_step));
  }
  absl::StatusOr<std::string> file =
      engine::ModelFileFromHeader(snapshot->model_header, snapshot->parameters, snapshot->state);
  if (!file.ok()) {
    return absl::DataLossError(absl::StrFormat("job %s's newest snapshot (step %d): %s", id,
                                               snapshot->global_step, file.status().message()));
  }
  return file;
}

absl::StatusOr<tagi::v1::JobLogs> Coordinator::Logs(const std::string& id, uint64_t after,
                                                     size_t max_lines) {
  Lock lock(this);
  auto r = FindJob(id);
  if (!r.ok()) return r.status();
  tagi::v1::JobLogs out = (*r)->log.Since(after, max_lines);
  out.set_state(ViewLocked(**r).state());
  return out;
}

std::vector<tagi::v1::WorkerInfo> Coordinator::ListWorkers() {
  Lock lock(this);
  std::vector<tagi::v1::WorkerInfo> out;
  for (const auto& [id, w] : workers_) {
    out.push_back(w.info);
    out.back().set_state(WorkerStateLocked(w));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return WorkerIdLess(a.id(), b.id());
  });
  return out;
}

CoordinatorStats Coordinator::Stats() {
  Lock lock(this);
  CoordinatorStats out;
  const int64_t now_ms = NowMs();
  out.workers_failed = workers_failed_;
  out.worker_exclusions = worker_exclusions_;
  out.progress_rejected = progress_rejected_;
  out.snapshots_stored = snapshots_stored_;
  out.snapshots_rejected = snapshots_rejected_;
  out.models_rejected = models_rejected_;
  out.jobs_pruned = jobs_pruned_;
  out.state_write_failures = writer_->Failures();
  out.state_dir_ok = disk_.ok();
  out.state_writes_pending = writer_->Pending();
  const JobRecord* last_ended = nullptr;
  for (const auto& [id, r] : jobs_) {
    ++out.jobs_by_state[FinalSavedLocked(r) ? r.job.state() : ViewLocked(r).state()];
    if (IsTerminal(r.job.state()) && r.job.generation() > 0 &&
        (last_ended == nullptr ||
         std::make_pair(r.job.end_time_ms(), r.seq) >
             std::make_pair(last_ended->job.end_time_ms(), last_ended->seq))) {
      last_ended = &r;
    }
  }
  auto add = [&out, now_ms](const JobRecord& r) {
    const tagi::v1::JobProgress& p = r.job.progress();
    JobStats& j = out.jobs.emplace_back();
    j.id = r.job.id();
    j.state = r.job.state();
    j.generation = r.job.generation();
    j.samples_per_second = IsTerminal(j.state) ? 0.0 : p.samples_per_second();
    j.progress_ratio = j.state == tagi::v1::SUCCEEDED ? 1.0
                       : p.total_steps() > 0
                           ? static_cast<double>(p.global_step()) / p.total_steps()
                           : 0.0;
    // A job shorter than one progress interval reports it only with rank 0's
    // FinishJob, in the final progress.
    j.rendezvous_seconds = r.job.rendezvous_seconds() > 0 ? r.job.rendezvous_seconds()
                                                          : p.rendezvous_seconds();
    j.restarts = r.job.restarts();
    j.world_size = r.job.world_size();
    j.resizes = r.job.resizes();
    if (r.job.snapshot_time_ms() > 0) {
      j.snapshot_age_seconds = std::max(0.0, (now_ms - r.job.snapshot_time_ms()) / 1000.0);
      j.snapshot_bytes = r.job.snapshot_bytes();
    }
    if (r.job.recoveries_size() > 0) {
      const tagi::v1::Recovery& rec = *r.job.recoveries().rbegin();
      j.has_recovery = true;
      if (rec.first_step_ms() > 0) {
        j.recover_seconds = (rec.first_step_ms() - rec.detected_ms()) / 1000.0;
        j.steps_redone = rec.steps_redone();
      }
    }
  };
  for (const auto& [id, r] : jobs_) {
    // A job recovering from a failure is PENDING with a generation.
    if (r.job.state() == tagi::v1::RUNNING ||
        (r.job.state() == tagi::v1::PENDING && r.job.generation() > 0)) {
      add(r);
    }
  }
  if (last_ended != nullptr) add(*last_ended);
  for (const auto& [id, w] : workers_) {
    const std::string state = WorkerStateLocked(w);
    ++out.workers_by_state[state];
    if (!w.gone) out.workers.push_back({id, state, w.last_seen});
  }
  return out;
}

tagi::v1::RegisterResponse Coordinator::Register(const tagi::v1::RegisterRequest& req,
                                                 const std::string& peer, std::string_view secret,
                                                 std::string_view certificate) {
  Lock lock(this);
  // The id: a retried registration's, the caller's own (with its secret), or a new one.
  std::string proposed;
  const std::string nonce = req.nonce().substr(0, kMaxNonceBytes);
  if (auto it = registration_ids_.find(nonce); !nonce.empty() && it != registration_ids_.end()) {
    proposed = it->second;
  } else if (!req.worker_id().empty() && VerifyWorker(req.worker_id(), secret, certificate)) {
    proposed = req.worker_id();
  }
  WorkerRecord& w = AdoptWorkerLocked(proposed);
  const std::string id = w.info.id();
  if (!nonce.empty() && registration_ids_.emplace(nonce, id).second) {
    registration_order_.push_back(nonce);
    if (registration_order_.size() > kMaxRegistrationNonces) {
      registration_ids_.erase(registration_order_.front());
      registration_order_.pop_front();
    }
  }
  w.checked_in = true;  // it asks for work
  w.info.set_address(peer);
  w.info.set_hostname(req.hostname());
  w.info.set_device(req.device().empty() ? "cpu" : req.device());
  Touch(w);
  ++epoch_;
  ScheduleLocked();
  tagi::v1::RegisterResponse resp;
  resp.set_worker_id(id);
  resp.set_heartbeat_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(options_.heartbeat)));
  resp.set_secret(WorkerSecret(id, certificate));
  return resp;
}

bool Coordinator::VerifyWorker(std::string_view id, std::string_view secret,
                               std::string_view certificate) const {
  return worker_key_.has_value() && !secret.empty() &&
         worker_key_->Verify(id, secret, certificate);
}

std::string Coordinator::WorkerSecret(std::string_view id, std::string_view certificate) const {
  return worker_key_.has_value() ? worker_key_->SecretFor(id, certificate) : std::string();
}

absl::Status Coordinator::CheckMember(const std::string& worker, const std::string& job,
                                      uint64_t gen) {
  Lock lock(this);
  return RunningMemberLocked(worker, job, gen).status();
}

absl::StatusOr<Coordinator::JobRecord*> Coordinator::RunningMemberLocked(
    const std::string& worker, const std::string& job, uint64_t gen) {
  auto r = RunningJobLocked(job, gen);
  if (!r.ok()) return r.status();
  const auto& ws = (*r)->job.workers();
  if (std::find(ws.begin(), ws.end(), worker) == ws.end()) {
    return absl::PermissionDeniedError(
        absl::StrFormat("worker %s is not in job %s generation %d", worker, job, gen));
  }
  return r;
}

absl::StatusOr<Coordinator::WorkerRecord*> Coordinator::CheckInLocked(
    const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) {
    return absl::NotFoundError(absl::StrCat("unknown worker \"", worker_id, "\"; register again"));
  }
  WorkerRecord* w = &it->second;  // records are never erased
  Touch(*w);
  w->checked_in = true;
  // A worker asking again while assigned to a job that is over (its
  // FinishJob was lost) is idle: free it instead of handing the dead
  // attempt back.
  if (auto j = jobs_.find(w->job_id);
      !w->job_id.empty() && (j == jobs_.end() || j->second.job.state() != tagi::v1::RUNNING)) {
    ReleaseWorkerLocked(worker_id);
  }
  ScheduleLocked();
  return w;
}

tagi::v1::RendezvousResponse Coordinator::RendezvousReplyLocked(const WorkerRecord& wr) {
  const WorkerRecord* w = &wr;
  // No Touch here: a worker killed during the long poll must not look alive
  // when the poll ends (its session, or its next call, says it is).
  tagi::v1::RendezvousResponse resp;
  if (!w->job_id.empty()) {
    resp.set_assigned(true);
    *resp.mutable_assignment() = w->assignment;
    return resp;
  }
  // A spare: the oldest running (or recovering) job of several ranks that
  // this worker could be placed in (a CPU worker never runs a GPU job).
  const JobRecord* warm = nullptr;
  const bool gpu_worker = IsCudaDevice(w->info.device());
  for (const auto& [id, r] : jobs_) {
    const bool active = r.job.state() == tagi::v1::RUNNING ||
                        (r.job.state() == tagi::v1::PENDING && r.job.generation() > 0);
    const bool fits = gpu_worker || !IsCudaDevice(r.job.spec().device());
    const bool several = MostWorld(r.job) > 1;  // runs, or may grow to, several ranks
    if (active && fits && several && (warm == nullptr || r.seq < warm->seq)) {
      warm = &r;
    }
  }
  if (warm != nullptr) *resp.mutable_warm() = warm->job.spec();
  return resp;
}

void Coordinator::ScheduleLocked() {
  std::vector<JobRecord*> pending;
  for (auto& [id, r] : jobs_) {
    if (r.job.state() == tagi::v1::PENDING) pending.push_back(&r);
  }
  if (pending.empty()) return;
  if (!disk_.ok()) {
    // Training what cannot be saved would be lost: the jobs wait for the disk.
    const std::string why = absl::StrCat(kWaitingForDisk, disk_.message());
    for (JobRecord* r : pending) {
      if (r->job.reason() != why) {
        r->job.set_reason(why);
        Changed(*r);
      }
    }
    return;
  }
  // A job in its restart back-off waits (Tick schedules again).
  const absl::Time now = clock_.Now();
  pending.erase(std::remove_if(pending.begin(), pending.end(),
                               [now](const JobRecord* r) { return r->not_before > now; }),
                pending.end());
  if (pending.empty()) return;
  std::sort(pending.begin(), pending.end(),
            [](const JobRecord* a, const JobRecord* b) { return a->seq < b->seq; });
  for (JobRecord* r : pending) {
    if (absl::StartsWith(r->job.reason(), kWaitingForDisk)) {
      r->job.set_reason(JobWaitingReason(r->job));
      Changed(*r);
    }
  }
  // Nothing can be placed while fewer workers are idle than the smallest
  // pending job needs: skip the full decision (which copies every worker),
  // so that a storm of polls (a large job re-forming after a failure)
  // costs O(workers) each and no allocation, not a placement each.
  uint32_t min_cpu_world = UINT32_MAX, min_gpu_world = UINT32_MAX;
  for (const JobRecord* r : pending) {
    uint32_t& m = IsCudaDevice(r->job.spec().device()) ? min_gpu_world : min_cpu_world;
    m = std::min(m, LeastWorld(r->job));
  }
  size_t idle_cpu = 0, idle_gpu = 0;
  for (const auto& [id, w] : workers_) {
    if (!PlaceableLocked(w)) continue;
    ++(IsCudaDevice(w.info.device()) ? idle_gpu : idle_cpu);
  }
  if (idle_cpu + idle_gpu < min_cpu_world && idle_gpu < min_gpu_world) return;
  std::vector<PendingJobView> queue;
  for (const JobRecord* r : pending) {
    queue.push_back(PendingViewLocked(*r));
  }
  bool started = false;
  for (const Placement& p :
       DecidePlacements(clock_.Now(), queue, WorkerViewsLocked(), options_.membership)) {
    // Chosen among the pending jobs whose back-off is over: it applies.
    started |= ApplyLocked(jobs_.at(p.job_id), Placed{p.workers, p.reason}).ok();
  }
  if (started) AnswerPollsLocked();
}

void Coordinator::RecordWorldLocked(JobRecord& r) {
  // Spans from the resume point on were run by generations whose steps past
  // it are redone now: this generation's world replaces them.
  Job& job = r.job;
  auto* spans = job.mutable_worlds();
  while (!spans->empty() && spans->rbegin()->from_step() >= r.resume_step) spans->RemoveLast();
  if (!spans->empty() && spans->rbegin()->world() == job.world_size()) return;
  tagi::v1::WorldSpan& span = *spans->Add();
  span.set_from_step(r.resume_step);
  span.set_world(job.world_size());
  span.set_generation(job.generation());
  if (spans->size() > static_cast<int>(kMaxWorldSpans)) spans->DeleteSubrange(0, 1);
}

PendingJobView Coordinator::PendingViewLocked(const JobRecord& r) {
  const Job& job = r.job;
  PendingJobView v;
  v.id = job.id();
  v.world = static_cast<int>(MostWorld(job));
  v.previous = r.previous_workers;
  v.gpu = IsCudaDevice(job.spec().device());
  v.min_world = static_cast<int>(job.min_world_size());
  v.since = r.pending_since;
  return v;
}

std::vector<WorkerView> Coordinator::WorkerViewsLocked() {
  std::vector<WorkerView> views;
  views.reserve(workers_.size());
  for (const auto& [id, w] : workers_) {
    views.push_back({id, PlaceableLocked(w), w.last_seen,
                     IsCudaDevice(w.info.device()),
                     !w.gone && !w.checked_in && w.job_id.empty()});
  }
  return views;
}

bool Coordinator::PlaceableLocked(const WorkerRecord& w) {
  return !w.gone && w.checked_in && w.job_id.empty() && !Excluded(w.strikes, clock_.Now());
}

std::string Coordinator::WorkerStateLocked(const WorkerRecord& w) {
  if (!w.gone && w.job_id.empty() && Excluded(w.strikes, clock_.Now())) return "EXCLUDED";
  return w.info.state();
}

void Coordinator::MaybeGrowLocked(JobRecord& r) {
  const Job& job = r.job;
  if (job.state() != tagi::v1::RUNNING || job.max_world_size() == 0 ||
      job.world_size() >= job.max_world_size() || r.newest_epoch >= job.spec().epochs() ||
      !disk_.ok()) {
    return;
  }
  std::vector<PendingJobView> queue;
  for (const auto& [id, other] : jobs_) {
    if (other.job.state() == tagi::v1::PENDING) queue.push_back(PendingViewLocked(other));
  }
  const RunningJobView view{job.id(), static_cast<int>(job.world_size()),
                            static_cast<int>(job.max_world_size()),
                            IsCudaDevice(job.spec().device())};
  const std::optional<Growth> growth =
      DecideGrowth(clock_.Now(), view, queue, WorkerViewsLocked(), options_.membership);
  if (!growth.has_value()) return;
  ApplyLocked(r, Grow{absl::StrFormat("%s (the snapshot of step %d)", growth->reason,
                                      r.newest_step)})
      .IgnoreError();  // RUNNING: it applies
}

void Coordinator::ReleaseWorkerLocked(const std::string& worker_id) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  it->second.job_id.clear();
  it->second.info.set_job_id("");
  it->second.info.clear_rank();  // an idle worker holds no rank (REST showed the last one)
  it->second.info.set_state(it->second.gone ? "GONE" : "IDLE");
  ++epoch_;
}

void Coordinator::ForgetGoneWorkersLocked() {
  std::vector<GoneWorkerView> gone;
  for (const auto& [id, w] : workers_) {
    if (w.gone) gone.push_back({id, w.last_seen, !w.job_id.empty()});
  }
  for (const std::string& id : GoneWorkersToForget(std::move(gone), options_.membership)) {
    WorkerRecord& w = workers_.at(id);
    // A long poll of the forgotten worker is answered now (nothing to do),
    // and its session stream ends: nothing may name the record after this.
    if (auto poll = polls_.find(id); poll != polls_.end()) {
      AnswerPollLocked(poll->second.done, w);
      polls_.erase(poll);
    }
    WakeSessionLocked(w);
    workers_.erase(id);
  }
}

void Coordinator::Tick() {
  writer_->Kick();
  const absl::Status disk = StateHealth();  // outside the lock: it may touch the disk
  Lock lock(this);
  if (disk.ok() != disk_.ok()) {
    std::fprintf(stderr, "tagi-coordinator: %s\n",
                 disk.ok() ? "the state dir can be written again"
                           : std::string(disk.message()).c_str());
  }
  disk_ = disk;
  PruneEndedLocked();
  PersistLogsLocked();
  std::vector<WorkerView> views;
  for (const auto& [id, w] : workers_) {
    if (!w.gone) views.push_back({id, w.job_id.empty(), w.last_seen});
  }
  for (const Departure& d : DecideDepartures(clock_.Now(), views, options_.membership)) {
    WorkerFailedLocked(workers_.at(d.worker_id), absl::StrCat("missed heartbeats: ", d.reason));
  }
  ForgetGoneWorkersLocked();
  ScheduleLocked();
  ExpireWaitsLocked(clock_.Now());
}

}  // namespace tagi::coordinator
