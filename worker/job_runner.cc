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
#include "worker/coordinator_client.h"
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

// An epoch's line in the job log; at most one this often (and the last).
constexpr absl::Duration kEpochLineEvery = absl::Seconds(1);

// An epoch's line in the job log.
std::string EpochLine(const EpochMetrics& m, bool classification) {
  const std::string metric =
      classification
          ? absl::StrFormat("train accuracy %.2f%%, test accuracy %.2f%%",
                            100 * m.train_accuracy, 100 * m.test.accuracy)
          : absl::StrFormat("test rmse %.4g, log-likelihood %.4g", m.test.rmse,
                            m.test.log_likelihood);
  return absl::StrFormat("epoch %d: %s; %d steps in %.1fs", m.epoch + 1, metric, m.steps,
                         m.seconds);
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

// `model_header`: EncodeModelHeader of the model and its preprocessing.
// `so_far`: the epoch before `at` (zero at an epoch's start).
absl::StatusOr<Snapshot> TakeSnapshot(const Assignment& a, engine::Engine& model,
                                      const Cursor& at, const EpochSoFar& so_far,
                                      const std::string& model_header) {
  Snapshot s = SnapshotHeader(a, model, at);
  s.model_header = model_header;
  s.epoch_micros =
      static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Microseconds(so_far.time)));
  s.epoch_correct = so_far.correct;
  s.epoch_samples = so_far.samples;
  s.parameters.resize(2 * model.num_parameters());  // the arena [mu N][var N]
  TAGI_RETURN_IF_ERROR(model.ReadParameters(s.parameters));
  s.state.resize(model.num_state());  // e.g. running statistics
  TAGI_RETURN_IF_ERROR(model.ReadState(s.state));
  return s;
}

// Rank 0 offers a snapshot; one that cannot be read from the device is
// skipped with a log line (the next step would fail on that device anyway).
void OfferSnapshot(SnapshotUploader& uploader, const Assignment& a, engine::Engine& model,
                   const Cursor& at, const EpochSoFar& so_far, const std::string& model_header,
                   AttemptControl& control) {
  absl::StatusOr<Snapshot> s = TakeSnapshot(a, model, at, so_far, model_header);
  if (!s.ok()) {
    control.Log(absl::StrFormat("snapshot at epoch %d step %d skipped: %s",
                                static_cast<int>(at.epoch), static_cast<int>(at.step),
                                std::string(s.status().message())));
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
  control.Log("the coordinator is unreachable; holding at this snapshot point");
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
// checking that it is the one announced and fits this job exactly. `before`:
// the epoch's training before the cursor; its counts are rank 0's, so the
// other ranks take its time only.
absl::Status RestoreSnapshot(CoordinatorApi& client, const std::string& worker_id,
                             const Assignment& a, engine::Engine& model, const Trainer& trainer,
                             size_t num_samples, Cursor* at, EpochSoFar* before) {
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
  before->time = absl::Microseconds(static_cast<int64_t>(
      std::min<uint64_t>(s.epoch_micros, uint64_t{1} << 62)));
  if (a.rank() == 0) {
    before->correct = s.epoch_correct;
    before->samples = s.epoch_samples;
  }
  return absl::OkStatus();
}

// One rank's run of one attempt, phase by phase: load the data and build
// the model, join the group and restore the snapshot, train the epochs,
// upload the model. `progress` collects what FinishJob reports.
class AttemptRun {
 public:
  AttemptRun(CoordinatorApi& client, const JobRunnerOptions& options, const Assignment& a,
             Clock& clock, AttemptControl& control, JobProgress& progress)
      : client_(client),
        options_(options),
        a_(a),
        spec_(a.spec()),
        clock_(clock),
        control_(control),
        progress_(progress),
        store_(client, a.job_id(), a.generation()) {}

  // `in_group` turns true once every rank holds the same parameters: a
  // failure after that is the group's, not the job's.
  absl::Status Run(bool* in_group);

 private:
  absl::Status LoadAndBuild();
  TrainerOptions TrainerOptionsFor();
  absl::Status TrainEpochs(Trainer& trainer, const Cursor& start, const EpochSoFar& before);
  // After each step: progress, rank 0's snapshot, metrics.
  void OnStep(const Trainer& trainer, const Cursor& at, size_t done, size_t to_do,
              absl::Duration elapsed);
  absl::Status UploadFinalModel(const Trainer& trainer);

  CoordinatorApi& client_;
  const JobRunnerOptions& options_;
  const Assignment& a_;
  const tagi::v1::JobSpec& spec_;
  Clock& clock_;
  AttemptControl& control_;
  JobProgress& progress_;
  CoordinatorStore store_;
  absl::Time assigned_at_;
  absl::Time last_publish_ = absl::InfinitePast();
  absl::Time last_epoch_line_ = absl::InfinitePast();
  std::shared_ptr<const data::LoadedData> data_;
  int device_ = -1;
  std::unique_ptr<engine::Engine> model_;
  std::unique_ptr<Collective> collective_;
  std::optional<SnapshotUploader> snapshots_;  // rank 0's
  std::string model_header_;  // what its snapshots carry to be served as a model file
};

absl::Status AttemptRun::Run(bool* in_group) {
  assigned_at_ = clock_.Now();
  if (options_.metrics != nullptr) {
    options_.metrics->StartJob(a_.job_id(), a_.rank(), options_.worker_id,
                               spec_.head().has_classification());
  }
  TAGI_RETURN_IF_ERROR(LoadAndBuild());

  const absl::Time group_start = clock_.Now();
  if (NeedsGroup(a_)) {
    TAGI_ASSIGN_OR_RETURN(collective_, JoinGroup(store_, a_, options_, device_));
    if (options_.wrap_collective) collective_ = options_.wrap_collective(std::move(collective_));
  }
  // The session may call Abort() until this scope ends: lend it the
  // collective now and take it back before the collective is destroyed.
  struct Lend {
    AttemptControl& control;
    ~Lend() { control.SetCollective(nullptr); }
  } lend{control_};
  control_.SetCollective(collective_.get());

  Trainer trainer(spec_, *model_, *data_, clock_, TrainerOptionsFor());
  Cursor start;
  EpochSoFar before;  // the first epoch's training before `start`
  if (a_.resume()) {
    TAGI_RETURN_IF_ERROR(RestoreSnapshot(client_, options_.worker_id, a_, *model_, trainer,
                                         data_->data.train.num_samples, &start, &before));
  }
  TAGI_ASSIGN_OR_RETURN(const uint64_t fingerprint, model_->ParameterFingerprint());
  TAGI_RETURN_IF_ERROR(
      VerifyReplicas(store_, a_, data_->fingerprint, fingerprint, options_.connect_timeout));
  *in_group = true;
  progress_.set_group_seconds(absl::ToDoubleSeconds(clock_.Now() - group_start));

  if (a_.rank() == 0) {
    snapshots_.emplace(client_, options_.worker_id, a_, clock_);
    model_header_ = engine::EncodeModelHeader(model_->architecture(), trainer.preprocessing());
  }
  control_.Log(absl::StrFormat(
      "rank %d of %d on worker %s: %s; data %.1fs, model %.1fs, group %.1fs",
      a_.rank(), a_.world_size(), options_.worker_id,
      a_.resume() ? absl::StrCat("resumes at step ", start.global_step) : "starts at step 0",
      progress_.data_seconds(), progress_.model_seconds(), progress_.group_seconds()));
  TAGI_RETURN_IF_ERROR(TrainEpochs(trainer, start, before));
  if (collective_ != nullptr) DepartTogether(store_, a_, options_.connect_timeout);
  if (a_.rank() == 0) return UploadFinalModel(trainer);
  return absl::OkStatus();
}

absl::Status AttemptRun::LoadAndBuild() {
  TAGI_ASSIGN_OR_RETURN(data_, Data(spec_, options_.data_cache, options_.data_roots));
  progress_.set_data_seconds(absl::ToDoubleSeconds(clock_.Now() - assigned_at_));
  TAGI_ASSIGN_OR_RETURN(device_, EngineDevice(spec_, options_.device));
  // The starting model is a file the job names: under the roots, like data.
  if (!spec_.init_from().empty() && !options_.data_roots.empty()) {
    TAGI_RETURN_IF_ERROR(
        data::CheckUnderRoots("init_from", spec_.init_from(), options_.data_roots));
  }
  const absl::Time model_start = clock_.Now();
  TAGI_ASSIGN_OR_RETURN(model_, BuildModel(spec_, *data_, spec_.batch_size(), device_));
  progress_.set_model_seconds(absl::ToDoubleSeconds(clock_.Now() - model_start));
  return absl::OkStatus();
}

TrainerOptions AttemptRun::TrainerOptionsFor() {
  TrainerOptions topt;
  topt.collective = collective_.get();
  topt.collective_timeout = options_.collective_timeout;
  // An aborted attempt stops too: a rank in a group fails its next
  // all-reduce on the aborted collective anyway, a rank alone (no
  // collective) would otherwise train the whole job in a generation that
  // is over.
  topt.stop_requested = [this] {
    return control_.stop_vote.load() || (options_.shutting_down && options_.shutting_down()) ||
           control_.aborted();
  };
  return topt;
}

absl::Status AttemptRun::TrainEpochs(Trainer& trainer, const Cursor& start,
                                     const EpochSoFar& before) {
  const size_t steps = trainer.steps_per_epoch();
  // Under this generation's world: the rest of its first epoch, then whole
  // epochs (for a fixed world, steps * epochs).
  uint64_t total = start.global_step;
  if (start.epoch < spec_.epochs()) {
    total += trainer.StepsFrom(start.offset) + (spec_.epochs() - start.epoch - 1) * steps;
  }
  progress_.set_steps_per_epoch(steps);
  progress_.set_total_steps(total);
  progress_.set_resumed_from_step(start.global_step);
  progress_.set_global_step(start.global_step);
  progress_.set_epoch(start.epoch);
  progress_.set_step(start.step);
  control_.SetProgress(progress_);
  uint64_t global = start.global_step;  // steps done before the epoch below
  for (uint64_t e = start.epoch; e < spec_.epochs(); ++e) {
    const bool first_epoch = e == start.epoch;
    const uint64_t first_offset = first_epoch ? start.offset : 0;
    const uint64_t steps_before = first_epoch ? start.step : 0;  // in this epoch
    auto on_step = [&](uint64_t epoch, size_t done, size_t to_do, absl::Duration elapsed) {
      const Cursor at{epoch, steps_before + done, first_offset + done * trainer.global_batch(),
                      global + done};
      OnStep(trainer, at, done, to_do, elapsed);
    };
    TAGI_ASSIGN_OR_RETURN(const EpochMetrics m,
                          trainer.RunEpoch(e, first_offset, on_step,
                                           first_epoch ? before : EpochSoFar{}));
    global += m.steps;
    FillEpoch(m, progress_.add_epochs());
    // Short epochs would flood the log: a line a second at most, and the last.
    if (e + 1 == spec_.epochs() || clock_.Now() - last_epoch_line_ >= kEpochLineEvery) {
      control_.Log(EpochLine(m, spec_.head().has_classification()));
      last_epoch_line_ = clock_.Now();
    }
    if (progress_.epochs_size() > kMaxEpochHistory) {
      progress_.mutable_epochs()->DeleteSubrange(0, progress_.epochs_size() - kMaxEpochHistory);
    }
    if (options_.metrics != nullptr) options_.metrics->RecordEpoch(m);
    // The epoch's metrics go out first: the coordinator writes a snapshot
    // only once it holds the metrics of the epochs before it.
    control_.SetProgressNow(progress_);
    if (snapshots_.has_value()) {
      OfferSnapshot(*snapshots_, a_, *model_, {e + 1, 0, 0, global}, EpochSoFar{}, model_header_,
                    control_);
      HoldWhileCoordinatorLost(*snapshots_, control_, options_.collective_timeout);
    }
    control_.SetProgress(progress_);
  }
  return absl::OkStatus();
}

void AttemptRun::OnStep(const Trainer& trainer, const Cursor& at, size_t done, size_t to_do,
                        absl::Duration elapsed) {
  const double global_batch = static_cast<double>(spec_.batch_size()) * a_.world_size();
  progress_.set_epoch(at.epoch);
  progress_.set_step(at.step);
  progress_.set_global_step(at.global_step);
  const bool first_step = progress_.first_step_ms() == 0;
  if (first_step) {
    // Wall time: compared with the coordinator's failure timestamps.
    progress_.set_first_step_ms(absl::ToUnixMillis(clock_.WallNow()));
    progress_.set_rendezvous_seconds(absl::ToDoubleSeconds(clock_.Now() - assigned_at_));
  }
  const double sec = absl::ToDoubleSeconds(elapsed);
  const double rate = sec > 0 ? static_cast<double>(done) * global_batch / sec : 0.0;
  progress_.set_samples_per_second(rate);
  const double left = static_cast<double>(progress_.total_steps() - progress_.global_step());
  progress_.set_eta_seconds(rate > 0 ? left * global_batch / rate : 0.0);
  const StepTimings& last = trainer.last_step();
  progress_.set_step_seconds(last.step_seconds);
  progress_.set_allreduce_seconds(last.allreduce_seconds);
  progress_.set_allreduce_bytes(last.allreduce_bytes);
  progress_.set_allreduce_wait_seconds(last.allreduce_wait_seconds);
  progress_.set_allreduce_buckets(static_cast<uint32_t>(last.buckets));
  // The session sends every report_interval: publishing a copy every step
  // would only be overwritten. A few times per interval suffices.
  const absl::Time now = clock_.Now();
  const uint64_t interval = spec_.snapshot_interval();
  const bool snapshot =
      snapshots_.has_value() && interval > 0 && done < to_do && at.global_step % interval == 0;
  // Before a snapshot too: a rank 0 that holds there reports where it is.
  if (first_step || snapshot || now - last_publish_ >= options_.report_interval / 4 ||
      done == to_do) {
    control_.SetProgress(progress_);
    last_publish_ = now;
  }
  if (snapshot) {
    OfferSnapshot(*snapshots_, a_, *model_, at, trainer.so_far(), model_header_, control_);
    HoldWhileCoordinatorLost(*snapshots_, control_, options_.collective_timeout);
  }
  if (options_.metrics != nullptr) {
    const double rank_rate =
        sec > 0 ? static_cast<double>(done) * spec_.batch_size() / sec : 0.0;
    options_.metrics->RecordStep(last, rank_rate);
  }
}

absl::Status AttemptRun::UploadFinalModel(const Trainer& trainer) {
  snapshots_->Drain(options_.connect_timeout);  // the final state is safe first
  tagi::v1::UploadModelRequest header;
  header.set_worker_id(options_.worker_id);
  header.set_job_id(a_.job_id());
  header.set_generation(a_.generation());
  std::vector<float> parameters(2 * model_->num_parameters());
  TAGI_RETURN_IF_ERROR(model_->ReadParameters(parameters));
  std::vector<float> state(model_->num_state());
  TAGI_RETURN_IF_ERROR(model_->ReadState(state));
  header.set_checksum(FingerprintHex(
      ModelFingerprint(parameters.data(), parameters.size(), state.data(), state.size())));
  return client_.UploadModel(header, engine::EncodeModelFile(model_->architecture(),
                                                             trainer.preprocessing(),
                                                             parameters, state));
}

}  // namespace

absl::Status WarmDataCache(const tagi::v1::JobSpec& spec, DataCache& cache,
                           const std::vector<std::string>& data_roots) {
  return Data(spec, &cache, data_roots).status();
}

JobOutcome RunAssignment(CoordinatorApi& client, const JobRunnerOptions& options,
                         const Assignment& a, Clock& clock, AttemptControl& control) {
  JobProgress progress;
  bool in_group = false;
  absl::Status st;
  {
    AttemptRun run(client, options, a, clock, control, progress);
    st = run.Run(&in_group);
  }  // rank 0's snapshot uploader has stopped

  AttemptEnd end;
  end.status = st;
  end.shutting_down = options.shutting_down && options.shutting_down();
  end.told_to_stop = control.stop_vote.load();
  end.aborted = control.aborted(&end.abort_reason);
  end.in_group = in_group;
  end.rank = static_cast<int>(a.rank());
  const JobOutcome out = ClassifyAttemptEnd(end);
  tagi::v1::FinishJobRequest fin;
  fin.set_worker_id(options.worker_id);
  fin.set_job_id(a.job_id());
  fin.set_generation(a.generation());
  fin.set_rank(a.rank());
  fin.set_ok(out.ok);
  fin.set_reason(out.reason);
  fin.set_retryable(out.retryable);
  if (out.suspect_rank.has_value()) fin.set_suspect_rank(static_cast<uint32_t>(*out.suspect_rank));
  *fin.mutable_progress() = progress;
  (void)client.FinishJob(fin);  // a lost reply is covered by the session
  return out;
}

}  // namespace tagi
