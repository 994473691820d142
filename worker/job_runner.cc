#include "worker/job_runner.h"

#include <atomic>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/checksum.h"
#include "common/job_spec.h"
#include "common/status.h"
#include "worker/collective/gloo/gloo_collective.h"
#include "worker/collective/tcp/ring_collective.h"
#include "worker/data/loader.h"
#include "worker/engine/blas.h"
#include "worker/engine/model_file.h"
#include "worker/metrics.h"
#include "worker/trainer.h"

namespace tagi {
namespace {

using tagi::v1::Assignment;
using tagi::v1::JobProgress;

// State shared by the training thread and the reporter thread.
class Board {
 public:
  void SetProgress(const JobProgress& p) {
    absl::MutexLock lock(&mu_);
    progress_ = p;
  }
  JobProgress progress() {
    absl::MutexLock lock(&mu_);
    return progress_;
  }
  void SetCollective(Collective* c) {
    absl::MutexLock lock(&mu_);
    collective_ = c;
    if (aborted_ && c != nullptr) c->Abort();
  }
  void Abort(const std::string& reason) {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = reason;
    if (collective_ != nullptr) collective_->Abort();
  }
  bool aborted(std::string* reason) {
    absl::MutexLock lock(&mu_);
    if (aborted_) *reason = abort_reason_;
    return aborted_;
  }
  // Returns after `d` or as soon as Finish() is called; true when finished.
  bool WaitFinished(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&finished_), d);
    return finished_;
  }
  void Finish() {
    absl::MutexLock lock(&mu_);
    finished_ = true;
  }

  std::atomic<bool> stop_vote{false};

 private:
  absl::Mutex mu_;
  JobProgress progress_ ABSL_GUARDED_BY(mu_);
  Collective* collective_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

// Sends progress every interval and turns directives into actions.
void ReportLoop(CoordinatorClient& client, const JobRunnerOptions& options,
                const Assignment& a, Board& board) {
  while (!board.WaitFinished(options.report_interval)) {
    tagi::v1::ProgressReport report;
    report.set_worker_id(options.worker_id);
    report.set_job_id(a.job_id());
    report.set_generation(a.generation());
    report.set_rank(a.rank());
    *report.mutable_progress() = board.progress();
    auto reply = client.ReportProgress(report);
    if (!reply.ok()) {
      // A stale generation or a forgotten job: this attempt is over.
      if (absl::IsAborted(reply.status()) || absl::IsNotFound(reply.status())) {
        board.Abort(std::string(reply.status().message()));
      }
      continue;  // Unavailable and the like: try again at the next interval
    }
    if (reply->directive() == tagi::v1::CANCEL) board.stop_vote = true;
    if (reply->directive() == tagi::v1::ABORT) board.Abort(reply->reason());
  }
}

// Every rank publishes its initial parameter fingerprint; all must agree.
absl::Status VerifyReplicas(Store& store, const Assignment& a, uint64_t fingerprint,
                            absl::Duration timeout) {
  const std::string mine = FingerprintHex(fingerprint);
  TAGI_RETURN_IF_ERROR(store.Set(absl::StrCat("replica/", a.rank()), mine));
  for (uint32_t r = 0; r < a.world_size(); ++r) {
    TAGI_ASSIGN_OR_RETURN(const std::string theirs,
                          store.Get(absl::StrCat("replica/", r), timeout));
    if (theirs != mine) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "replica mismatch before the first step: rank %d holds parameters %s but rank %d "
          "holds %s (different builds or data?)",
          r, theirs, a.rank(), mine));
    }
  }
  return absl::OkStatus();
}

// Every rank says it is done with the collective and waits for the others
// before tearing its connections down: a rank that closed them while a peer
// was still finishing the last all-reduce would fail that peer.
void DepartTogether(Store& store, const Assignment& a, absl::Duration timeout) {
  if (!store.Set(absl::StrCat("done/", a.rank()), "1").ok()) return;
  std::vector<std::string> keys;
  for (uint32_t r = 0; r < a.world_size(); ++r) keys.push_back(absl::StrCat("done/", r));
  (void)store.Wait(keys, timeout);  // best effort: the work is already done
}

// The job's backend: Gloo when asked for, our TCP ring otherwise (the CPU
// default; see README "Collectives" for the figures behind the choice).
absl::StatusOr<std::unique_ptr<Collective>> JoinGroup(Store& store, const Assignment& a,
                                                      const JobRunnerOptions& options) {
  const int rank = static_cast<int>(a.rank());
  const int world = static_cast<int>(a.world_size());
  switch (a.spec().backend()) {
    case tagi::v1::JobSpec::GLOO:
      return CreateGlooCollective(store, rank, world, {options.host, options.connect_timeout});
    case tagi::v1::JobSpec::NCCL:
      return absl::FailedPreconditionError(
          "backend NCCL: this worker runs the CPU engine; NCCL needs a CUDA worker");
    default:
      return CreateRingCollective(store, rank, world, {options.host, options.connect_timeout});
  }
}

void FillEpoch(const EpochMetrics& m, tagi::v1::EpochMetrics* out) {
  out->set_epoch(m.epoch + 1);
  out->set_train_accuracy(m.train_accuracy);
  out->set_test_accuracy(m.test.accuracy);
  out->set_test_rmse(m.test.rmse);
  out->set_test_log_likelihood(m.test.log_likelihood);
  out->set_sigma_v(m.sigma_v);
  out->set_seconds(m.seconds);
}

absl::Status Train(CoordinatorClient& client, const JobRunnerOptions& options,
                   const Assignment& a, Clock& clock, Board& board, JobProgress& progress) {
  const absl::Time assigned_at = clock.Now();
  const tagi::v1::JobSpec& spec = a.spec();
  if (options.metrics != nullptr) {
    options.metrics->StartJob(a.job_id(), a.rank(), options.worker_id,
                              spec.head().has_classification());
  }
  TAGI_RETURN_IF_ERROR(data::CheckDataFiles(spec.data()));
  TAGI_ASSIGN_OR_RETURN(const data::LoadedData data, data::LoadData(spec.data(), spec.seed()));
  progress.set_data_seconds(absl::ToDoubleSeconds(clock.Now() - assigned_at));
  TAGI_ASSIGN_OR_RETURN(auto model, BuildModel(spec, data, spec.batch_size()));

  const absl::Time group_start = clock.Now();
  CoordinatorStore store(client, a.job_id(), a.generation());
  std::unique_ptr<Collective> collective;
  if (a.world_size() > 1) {
    TAGI_ASSIGN_OR_RETURN(collective, JoinGroup(store, a, options));
  }
  // The reporter may call Abort() until this scope ends: hand it the
  // collective now and take it back before the collective is destroyed.
  struct Lend {
    Board& board;
    ~Lend() { board.SetCollective(nullptr); }
  } lend{board};
  board.SetCollective(collective.get());
  TAGI_RETURN_IF_ERROR(
      VerifyReplicas(store, a, model->ParameterFingerprint(), options.connect_timeout));
  progress.set_group_seconds(absl::ToDoubleSeconds(clock.Now() - group_start));

  TrainerOptions topt;
  topt.collective = collective.get();
  topt.collective_timeout = options.collective_timeout;
  topt.stop_requested = [&board, &options] {
    return board.stop_vote.load() || (options.shutting_down && options.shutting_down());
  };
  Trainer trainer(spec, *model, data, clock, std::move(topt));
  const size_t steps = trainer.steps_per_epoch();
  const double global_batch = static_cast<double>(spec.batch_size()) * a.world_size();
  progress.set_steps_per_epoch(steps);
  progress.set_total_steps(steps * spec.epochs());
  absl::Time last_publish = absl::InfinitePast();
  for (uint32_t e = 0; e < spec.epochs(); ++e) {
    auto on_step = [&](uint64_t epoch, size_t step, size_t epoch_steps, absl::Duration elapsed) {
      progress.set_epoch(epoch);
      progress.set_step(step);
      progress.set_global_step(epoch * steps + step);
      if (progress.rendezvous_seconds() == 0) {
        progress.set_rendezvous_seconds(absl::ToDoubleSeconds(clock.Now() - assigned_at));
      }
      const double sec = absl::ToDoubleSeconds(elapsed);
      const double rate = sec > 0 ? step * global_batch / sec : 0.0;
      progress.set_samples_per_second(rate);
      const double left = static_cast<double>(progress.total_steps() - progress.global_step());
      progress.set_eta_seconds(rate > 0 ? left * global_batch / rate : 0.0);
      progress.set_step_seconds(trainer.last_step().step_seconds);
      progress.set_allreduce_seconds(trainer.last_step().allreduce_seconds);
      progress.set_allreduce_bytes(trainer.last_step().allreduce_bytes);
      // The reporter sends every report_interval: publishing a copy every
      // step would only be overwritten. A few times per interval suffices.
      const absl::Time now = clock.Now();
      if (now - last_publish >= options.report_interval / 4 || step == epoch_steps) {
        board.SetProgress(progress);
        last_publish = now;
      }
      if (options.metrics != nullptr) {
        const double rank_rate =
            sec > 0 ? static_cast<double>(step) * spec.batch_size() / sec : 0.0;
        options.metrics->RecordStep(trainer.last_step(), rank_rate);
      }
    };
    TAGI_ASSIGN_OR_RETURN(const EpochMetrics m, trainer.RunEpoch(e, 0, on_step));
    FillEpoch(m, progress.add_epochs());
    if (options.metrics != nullptr) options.metrics->RecordEpoch(m);
    board.SetProgress(progress);
  }
  if (collective != nullptr) DepartTogether(store, a, options.connect_timeout);
  if (a.rank() == 0) {
    tagi::v1::UploadModelRequest header;
    header.set_worker_id(options.worker_id);
    header.set_job_id(a.job_id());
    header.set_generation(a.generation());
    header.set_checksum(FingerprintHex(model->ParameterFingerprint()));
    TAGI_RETURN_IF_ERROR(client.UploadModel(
        header, engine::EncodeModelFile(model->architecture(), trainer.preprocessing(),
                                        model->parameters())));
  }
  return absl::OkStatus();
}

}  // namespace

JobOutcome RunAssignment(CoordinatorClient& client, const JobRunnerOptions& options,
                         const Assignment& a, Clock& clock) {
  engine::SetBlasThreads(options.threads);
  Board board;
  JobProgress progress;
  std::thread reporter([&] { ReportLoop(client, options, a, board); });
  const absl::Status st = Train(client, options, a, clock, board, progress);
  board.Finish();
  reporter.join();

  JobOutcome out;
  std::string abort_reason;
  if (st.ok()) {
    out.ok = true;
  } else if (absl::IsCancelled(st)) {
    out.cancelled = true;
    out.reason = options.shutting_down && options.shutting_down()
                     ? "the worker is shutting down (signal)"
                     : "cancelled";
  } else if (board.aborted(&abort_reason)) {
    out.reason = absl::StrCat("aborted: ", abort_reason, " (", st.message(), ")");
  } else {
    out.reason = std::string(st.message());
  }
  tagi::v1::FinishJobRequest fin;
  fin.set_worker_id(options.worker_id);
  fin.set_job_id(a.job_id());
  fin.set_generation(a.generation());
  fin.set_rank(a.rank());
  fin.set_ok(out.ok);
  fin.set_reason(out.reason);
  *fin.mutable_progress() = progress;
  (void)client.FinishJob(fin);  // a lost reply is covered by the worker timeout
  return out;
}

}  // namespace tagi
