#include "worker/job_runner.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <optional>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/checksum.h"
#include "common/group_sync.h"
#include "common/job_spec.h"
#include "common/rng.h"
#include "common/snapshot.h"
#include "common/status.h"
#include "worker/collective/gloo/gloo_collective.h"
#include "worker/collective/nccl/nccl_collective.h"
#include "worker/collective/tcp/ring_collective.h"
#include "worker/data/data_roots.h"
#include "worker/data/loader.h"
#include "worker/engine/model_file.h"
#include "worker/job_rules.h"
#include "worker/metrics.h"
#include "worker/snapshot_uploader.h"
#include "worker/trainer.h"

namespace tagi {
namespace {

using tagi::v1::Assignment;
using tagi::v1::JobProgress;

// Every rank publishes the fingerprint of the data set it loaded and of its
// initial parameters, and compares them with rank 0's (common/group_sync.h:
// O(world) store reads in all; every rank equal to rank 0 means all agree).
// A rank that differs fails the generation, which aborts the others; data
// that differs (two hosts with different copies of a file) is named first,
// with both fingerprints, as a FailedPrecondition: retrying will not help.
absl::Status VerifyReplicas(Store& store, const Assignment& a, uint64_t data_fingerprint,
                            uint64_t fingerprint, absl::Duration timeout) {
  const std::string data = FingerprintHex(data_fingerprint);
  const std::string mine = FingerprintHex(fingerprint);
  TAGI_ASSIGN_OR_RETURN(const std::string rank0_both,
                        PublishAndReadRankZero(store, "replica", static_cast<int>(a.rank()),
                                               absl::StrCat(data, "/", mine), timeout));
  const size_t slash = rank0_both.find('/');
  const std::string rank0_data = rank0_both.substr(0, slash);
  if (rank0_data != data) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "data mismatch before the first step: rank 0 loaded a data set with fingerprint %s but "
        "rank %d loaded %s; the hosts hold different copies of the job's data files (or "
        "different builds read them differently)",
        rank0_data, a.rank(), data));
  }
  const std::string rank0 = slash == std::string::npos ? "" : rank0_both.substr(slash + 1);
  if (rank0 != mine) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "replica mismatch before the first step: rank 0 holds parameters %s but rank %d holds "
        "%s (different builds or data?)",
        rank0, a.rank(), mine));
  }
  return absl::OkStatus();
}

// Every rank says it is done with the collective and waits for the others
// before tearing its connections down: a rank that closed them while a peer
// was still finishing the last all-reduce would fail that peer.
void DepartTogether(Store& store, const Assignment& a, absl::Duration timeout) {
  // Best effort: the work is already done.
  (void)StoreBarrier(store, "done", static_cast<int>(a.rank()), static_cast<int>(a.world_size()),
                     timeout);
}

// `device`: the engine's (EngineDevice).
absl::StatusOr<std::unique_ptr<Collective>> JoinGroup(Store& store, const Assignment& a,
                                                      const JobRunnerOptions& options,
                                                      int device) {
  const int rank = static_cast<int>(a.rank());
  const int world = static_cast<int>(a.world_size());
  switch (ChooseBackend(a.spec(), device)) {
    case tagi::v1::JobSpec::GLOO:
      return CreateGlooCollective(store, rank, world, {options.host, options.connect_timeout});
    case tagi::v1::JobSpec::NCCL:
      if (device < 0) {
        return absl::FailedPreconditionError(
            "backend NCCL: this job runs the CPU engine; NCCL needs a cuda device");
      }
      return CreateNcclCollective(store, rank, world, {device, options.connect_timeout});
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
  out->set_test_nll(m.test.nll);
  out->set_test_ece(m.test.ece);
  out->set_test_brier(m.test.brier);
  out->set_test_coverage_68(m.test.coverage_68);
  out->set_test_coverage_95(m.test.coverage_95);
  out->set_test_mean_std(m.test.mean_std);
}

// The job's data: the cached copy when the last job loaded the same data
// set with the same seed, else loaded (and cached).
absl::StatusOr<std::shared_ptr<const data::LoadedData>> Data(
    const tagi::v1::JobSpec& spec, DataCache* cache, const std::vector<std::string>& roots) {
  // Before the cache: a spec outside the roots never gets data, cached or not.
  if (!roots.empty()) TAGI_RETURN_IF_ERROR(data::CheckDataRoots(spec.data(), roots));
  const data::LoadOptions load = data::LoadOptionsFor(spec, roots);
  const std::string key =
      absl::StrCat(spec.data().SerializeAsString(), "/", spec.seed(), "/", load.num_classes, "/",
                   load.channels, "x", load.height, "x", load.width);
  if (cache != nullptr && cache->data != nullptr && cache->key == key) return cache->data;
  TAGI_RETURN_IF_ERROR(data::CheckDataFiles(spec.data()));
  TAGI_ASSIGN_OR_RETURN(data::LoadedData loaded,
                        data::LoadData(spec.data(), spec.seed(), load));
  auto shared = std::make_shared<const data::LoadedData>(std::move(loaded));
  if (cache != nullptr) *cache = {key, shared};
  return shared;
}

// What a snapshot must say for the job's model and sampler.
uint64_t SamplerSeed(const tagi::v1::JobSpec& spec) {
  return DeriveSeed(spec.seed(), kSamplerStream);
}

using Cursor = data::SamplerCursor;

// The snapshot's fields at `at`, without the parameters.
Snapshot SnapshotHeader(const Assignment& a, const engine::Engine& model, const Cursor& at) {
  Snapshot s;
  s.job_id = a.job_id();
  s.generation = a.generation();
  s.epoch = at.epoch;
  s.step = at.step;
  s.global_step = at.global_step;
  s.world = a.world_size();
  s.offset = at.offset;
  // The sampler and the initialisation are pure functions of these seeds
  // (and the epoch): they are the whole random state of training.
  s.rng_state = {SamplerSeed(a.spec()), DeriveSeed(a.spec().seed(), kInitStream), 0, 0};
  s.sigma_v = SigmaVAtEpoch(a.spec().noise(), at.epoch);
  s.architecture = model.architecture().ToString();
  return s;
}

absl::StatusOr<Snapshot> TakeSnapshot(const Assignment& a, engine::Engine& model,
                                      const Cursor& at) {
  Snapshot s = SnapshotHeader(a, model, at);
  s.parameters.resize(2 * model.num_parameters());  // the arena [mu N][var N]
  TAGI_RETURN_IF_ERROR(model.ReadParameters(s.parameters));
  s.state.resize(model.num_state());  // e.g. running statistics
  TAGI_RETURN_IF_ERROR(model.ReadState(s.state));
  return s;
}

// Rank 0 offers a snapshot; one that cannot be read from the device is
// skipped with a log line (the next step would fail on that device anyway).
void OfferSnapshot(SnapshotUploader& uploader, const Assignment& a, engine::Engine& model,
                   const Cursor& at) {
  absl::StatusOr<Snapshot> s = TakeSnapshot(a, model, at);
  if (!s.ok()) {
    std::fprintf(stderr, "job %s: snapshot at epoch %d step %d skipped: %s\n",
                 a.job_id().c_str(), static_cast<int>(at.epoch), static_cast<int>(at.step),
                 std::string(s.status().message()).c_str());
    return;
  }
  uploader.Offer(*std::move(s));
}

// Rank 0, right after offering a snapshot: while the session has lost the
// coordinator, training stays at this snapshot point until the snapshot is
// stored or refused (the uploader retries it), so that a coordinator that
// restarts makes the job redo what lies behind its newest stored snapshot,
// not what the ranks trained while it was away. The other ranks wait in the
// next all-reduce. Bounded: after `max_wait` (the collective timeout, which
// the others would hit anyway) the attempt is aborted.
constexpr absl::Duration kHeldSnapshotGrace = absl::Seconds(2);

void HoldWhileCoordinatorLost(SnapshotUploader& uploader, AttemptControl& control,
                              absl::Duration max_wait) {
  if (!control.coordinator_lost.load()) return;
  std::fprintf(stderr, "job %s: the coordinator is unreachable; holding at this snapshot point\n",
               control.job_id().c_str());
  if (!uploader.DrainUnlessAborted(control, max_wait) && !control.aborted()) {
    control.Abort(absl::StrFormat(
        "the coordinator was unreachable for %s at a snapshot point",
        absl::FormatDuration(max_wait)));
  }
  if (control.aborted()) {
    // Aborted while holding: typically the coordinator is back and its
    // session said this generation is over, while the held snapshot waits
    // in the uploader's retry pause. It gets a short, bounded chance to
    // land (the restarted coordinator keeps it, and the next generation
    // resumes from it instead of redoing an interval).
    uploader.Drain(kHeldSnapshotGrace);
  }
  // The coordinator came back and ended this generation (it restarted): the
  // held snapshot, when newer than its own, is where the next one starts.
  if (std::optional<std::string> ended = uploader.GenerationEnded(); ended.has_value()) {
    control.Abort(*ended);
  }
}

// What is wrong with resuming `s` in this generation; empty when nothing is.
std::string ResumeMismatch(const Snapshot& s, const Assignment& a, const engine::Engine& model,
                           const Trainer& trainer, size_t num_samples) {
  if (s.job_id != a.job_id()) return absl::StrCat("it belongs to job ", s.job_id);
  if (s.global_step != a.resume_global_step()) {
    return absl::StrFormat("it is at step %d, the coordinator announced %d", s.global_step,
                           a.resume_global_step());
  }
  if (std::string wrong = CheckResumeCursor(s, a, trainer.steps_per_epoch(),
                                              trainer.global_batch(), num_samples);
      !wrong.empty()) {
    return wrong;
  }
  const Snapshot expected = SnapshotHeader(a, model, {s.epoch, s.step, s.offset, s.global_step});
  if (s.architecture != expected.architecture) {
    return absl::StrCat("its model is ", s.architecture, ", the job's is ", expected.architecture);
  }
  if (s.parameters.size() != 2 * model.num_parameters()) {
    return absl::StrFormat("it holds %d parameters, the model %d", s.parameters.size(),
                           2 * model.num_parameters());
  }
  if (s.state.size() != model.num_state()) {
    return absl::StrFormat("it holds %d state values, the model %d", s.state.size(),
                           model.num_state());
  }
  if (s.rng_state != expected.rng_state || s.sigma_v != expected.sigma_v) {
    return "its random state or sigma_v differs from the job's";
  }
  return "";
}

// Downloads the generation's snapshot and loads it into the model after
// checking that it is the one announced and fits this job exactly.
absl::Status RestoreSnapshot(CoordinatorClient& client, const std::string& worker_id,
                             const Assignment& a, engine::Engine& model, const Trainer& trainer,
                             size_t num_samples, Cursor* at) {
  tagi::v1::DownloadSnapshotRequest req;
  req.set_worker_id(worker_id);
  req.set_job_id(a.job_id());
  req.set_generation(a.generation());
  const size_t limit =
      (4 * model.num_parameters() + 2 * model.num_state()) * sizeof(float) + (size_t{2} << 20);
  TAGI_ASSIGN_OR_RETURN(const std::string bytes, client.DownloadSnapshot(req, limit));
  TAGI_ASSIGN_OR_RETURN(Snapshot s, DecodeSnapshot(bytes));
  if (s.world == 0) {  // version 2, from before elastic jobs: the job's fixed world
    s.world = a.world_size();
    s.offset = s.step * trainer.global_batch();
  }
  if (const std::string wrong = ResumeMismatch(s, a, model, trainer, num_samples);
      !wrong.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("cannot resume from the snapshot: ", wrong));
  }
  TAGI_RETURN_IF_ERROR(model.WriteParameters(s.parameters));
  TAGI_RETURN_IF_ERROR(model.WriteState(s.state));
  *at = {s.epoch, s.step, s.offset, s.global_step};
  return absl::OkStatus();
}

absl::Status Train(CoordinatorClient& client, const JobRunnerOptions& options,
                   const Assignment& a, Clock& clock, AttemptControl& control,
                   JobProgress& progress, bool* in_group) {
  const absl::Time assigned_at = clock.Now();
  const tagi::v1::JobSpec& spec = a.spec();
  if (options.metrics != nullptr) {
    options.metrics->StartJob(a.job_id(), a.rank(), options.worker_id,
                              spec.head().has_classification());
  }
  TAGI_ASSIGN_OR_RETURN(const auto data_ptr, Data(spec, options.data_cache, options.data_roots));
  const data::LoadedData& data = *data_ptr;
  progress.set_data_seconds(absl::ToDoubleSeconds(clock.Now() - assigned_at));
  TAGI_ASSIGN_OR_RETURN(const int device, EngineDevice(spec, options.device));
  // The starting model is a file the job names: under the roots, like data.
  if (!spec.init_from().empty() && !options.data_roots.empty()) {
    TAGI_RETURN_IF_ERROR(data::CheckUnderRoots("init_from", spec.init_from(), options.data_roots));
  }
  const absl::Time model_start = clock.Now();
  TAGI_ASSIGN_OR_RETURN(auto model, BuildModel(spec, data, spec.batch_size(), device));
  progress.set_model_seconds(absl::ToDoubleSeconds(clock.Now() - model_start));

  const absl::Time group_start = clock.Now();
  CoordinatorStore store(client, a.job_id(), a.generation());
  std::unique_ptr<Collective> collective;
  if (NeedsGroup(a)) {
    TAGI_ASSIGN_OR_RETURN(collective, JoinGroup(store, a, options, device));
  }
  // The session may call Abort() until this scope ends: lend it the
  // collective now and take it back before the collective is destroyed.
  struct Lend {
    AttemptControl& control;
    ~Lend() { control.SetCollective(nullptr); }
  } lend{control};
  control.SetCollective(collective.get());

  TrainerOptions topt;
  topt.collective = collective.get();
  topt.collective_timeout = options.collective_timeout;
  topt.stop_requested = [&control, &options] {
    return control.stop_vote.load() || (options.shutting_down && options.shutting_down());
  };
  Trainer trainer(spec, *model, data, clock, std::move(topt));
  const size_t steps = trainer.steps_per_epoch();
  Cursor start;
  if (a.resume()) {
    TAGI_RETURN_IF_ERROR(RestoreSnapshot(client, options.worker_id, a, *model, trainer,
                                         data.data.train.num_samples, &start));
  }
  TAGI_ASSIGN_OR_RETURN(const uint64_t fingerprint, model->ParameterFingerprint());
  TAGI_RETURN_IF_ERROR(
      VerifyReplicas(store, a, data.fingerprint, fingerprint, options.connect_timeout));
  *in_group = true;  // from here on a failure is the group's, not the job's
  progress.set_group_seconds(absl::ToDoubleSeconds(clock.Now() - group_start));

  std::optional<SnapshotUploader> snapshots;
  if (a.rank() == 0) snapshots.emplace(client, options.worker_id, a, clock);
  const uint64_t interval = spec.snapshot_interval();
  const double global_batch = static_cast<double>(spec.batch_size()) * a.world_size();
  // Under this generation's world: the rest of its first epoch, then whole
  // epochs (for a fixed world, steps * epochs).
  uint64_t total = start.global_step;
  if (start.epoch < spec.epochs()) {
    total += trainer.StepsFrom(start.offset) + (spec.epochs() - start.epoch - 1) * steps;
  }
  progress.set_steps_per_epoch(steps);
  progress.set_total_steps(total);
  progress.set_resumed_from_step(start.global_step);
  progress.set_global_step(start.global_step);
  progress.set_epoch(start.epoch);
  progress.set_step(start.step);
  control.SetProgress(progress);
  absl::Time last_publish = absl::InfinitePast();
  uint64_t global = start.global_step;  // steps done before the epoch below
  for (uint64_t e = start.epoch; e < spec.epochs(); ++e) {
    const bool first_epoch = e == start.epoch;
    const uint64_t first_offset = first_epoch ? start.offset : 0;
    const uint64_t steps_before = first_epoch ? start.step : 0;  // in this epoch
    auto on_step = [&](uint64_t epoch, size_t done, size_t to_do, absl::Duration elapsed) {
      const Cursor at{epoch, steps_before + done, first_offset + done * trainer.global_batch(),
                      global + done};
      progress.set_epoch(epoch);
      progress.set_step(at.step);
      progress.set_global_step(at.global_step);
      const bool first_step = progress.first_step_ms() == 0;
      if (first_step) {
        // Wall time: compared with the coordinator's failure timestamps.
        progress.set_first_step_ms(absl::ToUnixMillis(clock.WallNow()));
        progress.set_rendezvous_seconds(absl::ToDoubleSeconds(clock.Now() - assigned_at));
      }
      const double sec = absl::ToDoubleSeconds(elapsed);
      const double rate = sec > 0 ? static_cast<double>(done) * global_batch / sec : 0.0;
      progress.set_samples_per_second(rate);
      const double left = static_cast<double>(progress.total_steps() - progress.global_step());
      progress.set_eta_seconds(rate > 0 ? left * global_batch / rate : 0.0);
      progress.set_step_seconds(trainer.last_step().step_seconds);
      progress.set_allreduce_seconds(trainer.last_step().allreduce_seconds);
      progress.set_allreduce_bytes(trainer.last_step().allreduce_bytes);
      progress.set_allreduce_wait_seconds(trainer.last_step().allreduce_wait_seconds);
      progress.set_allreduce_buckets(static_cast<uint32_t>(trainer.last_step().buckets));
      if (snapshots.has_value() && interval > 0 && done < to_do &&
          at.global_step % interval == 0) {
        OfferSnapshot(*snapshots, a, *model, at);
        HoldWhileCoordinatorLost(*snapshots, control, options.collective_timeout);
      }
      // The session sends every report_interval: publishing a copy every
      // step would only be overwritten. A few times per interval suffices.
      const absl::Time now = clock.Now();
      if (first_step || now - last_publish >= options.report_interval / 4 || done == to_do) {
        control.SetProgress(progress);
        last_publish = now;
      }
      if (options.metrics != nullptr) {
        const double rank_rate = sec > 0 ? static_cast<double>(done) * spec.batch_size() / sec
                                         : 0.0;
        options.metrics->RecordStep(trainer.last_step(), rank_rate);
      }
    };
    TAGI_ASSIGN_OR_RETURN(const EpochMetrics m, trainer.RunEpoch(e, first_offset, on_step));
    global += m.steps;
    FillEpoch(m, progress.add_epochs());
    if (progress.epochs_size() > kMaxEpochHistory) {
      progress.mutable_epochs()->DeleteSubrange(0, progress.epochs_size() - kMaxEpochHistory);
    }
    if (options.metrics != nullptr) options.metrics->RecordEpoch(m);
    // The epoch's metrics go out first: the coordinator writes a snapshot
    // only once it holds the metrics of the epochs before it.
    control.SetProgressNow(progress);
    if (snapshots.has_value()) {
      OfferSnapshot(*snapshots, a, *model, {e + 1, 0, 0, global});
      HoldWhileCoordinatorLost(*snapshots, control, options.collective_timeout);
    }
    control.SetProgress(progress);
  }
  if (collective != nullptr) DepartTogether(store, a, options.connect_timeout);
  if (a.rank() == 0) {
    snapshots->Drain(options.connect_timeout);  // the final state is safe first
    tagi::v1::UploadModelRequest header;
    header.set_worker_id(options.worker_id);
    header.set_job_id(a.job_id());
    header.set_generation(a.generation());
    std::vector<float> parameters(2 * model->num_parameters());
    TAGI_RETURN_IF_ERROR(model->ReadParameters(parameters));
    std::vector<float> state(model->num_state());
    TAGI_RETURN_IF_ERROR(model->ReadState(state));
    header.set_checksum(
        FingerprintHex(
        ModelFingerprint(parameters.data(), parameters.size(), state.data(), state.size())));
    TAGI_RETURN_IF_ERROR(client.UploadModel(
        header,
        engine::EncodeModelFile(model->architecture(), trainer.preprocessing(), parameters, state)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WarmDataCache(const tagi::v1::JobSpec& spec, DataCache& cache,
                           const std::vector<std::string>& data_roots) {
  return Data(spec, &cache, data_roots).status();
}

JobOutcome RunAssignment(CoordinatorClient& client, const JobRunnerOptions& options,
                         const Assignment& a, Clock& clock, AttemptControl& control) {
  JobProgress progress;
  bool in_group = false;
  const absl::Status st = Train(client, options, a, clock, control, progress, &in_group);

  AttemptEnd end;
  end.status = st;
  end.shutting_down = options.shutting_down && options.shutting_down();
  end.told_to_stop = control.stop_vote.load();
  end.aborted = control.aborted(&end.abort_reason);
  end.in_group = in_group;
  const JobOutcome out = ClassifyAttemptEnd(end);
  tagi::v1::FinishJobRequest fin;
  fin.set_worker_id(options.worker_id);
  fin.set_job_id(a.job_id());
  fin.set_generation(a.generation());
  fin.set_rank(a.rank());
  fin.set_ok(out.ok);
  fin.set_reason(out.reason);
  fin.set_retryable(out.retryable);
  *fin.mutable_progress() = progress;
  (void)client.FinishJob(fin);  // a lost reply is covered by the session
  return out;
}

}  // namespace tagi
