// Trainer: the step loop of one rank, and evaluation.
//
// A step takes this rank's share of the global batch from the distributed
// sampler (training images cropped and flipped as data.augment asks, by
// data/augment.h, from the job seed, the epoch and each sample's index, so
// that the global batch is the same whatever the world size; evaluation
// never augments), runs forward / output update / backward, all-reduces the
// packed delta arena over the Collective (none for a single process), and
// applies the capped step. The all-reduce goes in buckets (JobSpec.bucket_kib,
// spec/buckets.h) that a communication thread reduces while the backward pass
// is still running (worker/overlap.h), or in one call after it when the
// bucket covers the model or the engine cannot hand out its deltas early. In SUM reduction the cap factor is
// that of the global batch (world x batch); in AVERAGE the summed deltas are
// divided by the world size and the cap factor is that of the local batch.
//
// Stopping: stop_requested is polled once per step and its vote travels in
// the control word of the same all-reduce, so every rank stops after the
// same step (none is left waiting in a collective); Step then returns
// Cancelled without applying that step.
//
// Time: every duration it reports (StepTimings, EpochMetrics.seconds, the
// elapsed time given to ProgressFn) is read from the injected Clock.
//
// Evaluation is sharded: each rank scores a disjoint slice of the test split
// and the sums are all-reduced, so every rank gets the whole-split metrics.
//
// tagi-train drives it without a collective; the worker with its group.
// The model runs on an engine::Engine (CPU or CUDA): the reduce buffer is
// in device memory when the engine and the collective both can, else in
// host memory.
// Not thread-safe; one thread runs a Trainer.
#ifndef TAGI_WORKER_TRAINER_H_
#define TAGI_WORKER_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "tagi/v1/job.pb.h"
#include "worker/collective/collective.h"
#include "worker/data/augment.h"
#include "worker/data/loader.h"
#include "worker/data/sampler.h"
#include "worker/engine/engine.h"
#include "worker/engine/model_file.h"
#include "worker/overlap.h"

namespace tagi {

// Seeds of the job's random streams (derived from JobSpec.seed).
inline constexpr uint64_t kInitStream = 101;
inline constexpr uint64_t kSamplerStream = 102;
inline constexpr uint64_t kAugmentStream = 103;

// Calibration (docs/heads.md "Calibration"): the bins of the expected
// calibration error, and the central predictive intervals of regression.
inline constexpr int kCalibrationBins = 15;
inline constexpr double kZ68 = 0.99445788320975;  // P(|Z| <= z) = 0.68
inline constexpr double kZ95 = 1.95996398454005;  // P(|Z| <= z) = 0.95

struct EvalMetrics {
  size_t samples = 0;
  double accuracy = 0.0;        // classification
  double rmse = 0.0;            // regression, in the data's original units
  double log_likelihood = 0.0;  // average predictive log-likelihood per sample
  double nll = 0.0;             // -log_likelihood
  // Classification: expected calibration error (kCalibrationBins equal
  // bins of the top probability) and Brier score (per sample).
  double ece = 0.0;
  double brier = 0.0;
  // Regression: shares of observed targets inside the central 68 % and
  // 95 % predictive intervals, and the mean predictive standard deviation
  // (original units).
  double coverage_68 = 0.0;
  double coverage_95 = 0.0;
  double mean_std = 0.0;
};

// An epoch's training before a resume point, as a snapshot carries it:
// its time (summed over the generations that ran it) and this rank's
// correct training predictions out of the samples it counted.
struct EpochSoFar {
  absl::Duration time;
  uint64_t correct = 0;
  uint64_t samples = 0;
};

// Of one RunEpoch. `steps` are the steps this call ran; `samples`,
// `seconds` and `train_accuracy` cover the whole epoch, the EpochSoFar it
// resumed after included.
struct EpochMetrics {
  uint64_t epoch = 0;     // 0-based
  size_t steps = 0;
  size_t samples = 0;     // processed by this rank
  double seconds = 0.0;
  double samples_per_second = 0.0;  // this rank
  float sigma_v = 0.0f;
  double train_accuracy = 0.0;  // classification, on the training batches seen
  EvalMetrics test;
};

// Called after every step of RunEpoch: (epoch, steps run so far in this
// call, steps this call runs, elapsed). From offset 0 these are (epoch,
// step + 1, steps_per_epoch, elapsed).
using ProgressFn = std::function<void(uint64_t, size_t, size_t, absl::Duration)>;

struct TrainerOptions {
  Collective* collective = nullptr;  // null: a single process (rank 0 of 1)
  absl::Duration collective_timeout = absl::Seconds(60);
  // The largest evaluation batch (EvalBatchFor may take the training batch).
  size_t eval_batch = 256;
  std::function<bool()> stop_requested;  // polled once per step; may be empty
};

// Timings of the last step (for progress reports and metrics), on the
// trainer's Clock.
struct StepTimings {
  double step_seconds = 0.0;
  // The time spent in the collective: with overlap, on the communication
  // thread (partly hidden behind the backward pass).
  double allreduce_seconds = 0.0;
  // The part of the all-reduce the step waited for after its backward pass
  // (equal to allreduce_seconds without overlap).
  double allreduce_wait_seconds = 0.0;
  size_t allreduce_bytes = 0;
  size_t buckets = 0;  // all-reduce buckets of the step (1: no overlap)
};

// The batch the test split is evaluated in: `eval_batch`, unless planning
// the network for it (spec/plan.h) takes more than kEvalArenaSlackBytes
// beyond what a training step at `train_batch` takes; then the training
// batch. Evaluation so never makes a large network's arena larger than its
// training step's (ResNet18 at B 64: 1.3 GiB instead of 5.3 for B 256),
// while a small one keeps its wide evaluation products.
inline constexpr size_t kEvalArenaSlackBytes = size_t{64} << 20;
size_t EvalBatchFor(const spec::Architecture& arch, size_t train_batch, size_t eval_batch);

class Trainer {
 public:
  // REQUIRES: the model was built from spec and data was loaded for it; all
  // three and the clock outlive the trainer.
  Trainer(const tagi::v1::JobSpec& spec, engine::Engine& model,
          const data::LoadedData& data, Clock& clock, TrainerOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  size_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }

  int rank() const { return rank_; }
  int world() const { return world_; }
  const StepTimings& last_step() const { return timings_; }

  // Runs the steps of `epoch` from sample offset `first_offset` (0: the
  // epoch's start; a resumed generation's snapshot says where, possibly
  // reached under another world: data/sampler.h "Elastic jobs") to the
  // epoch's end, then evaluates on the test split. A failing collective or
  // an agreed stop ends the epoch with that status (Cancelled for a stop).
  // `before`: the epoch's training before first_offset (a resumed
  // generation's snapshot says what it was).
  absl::StatusOr<EpochMetrics> RunEpoch(uint64_t epoch, size_t first_offset,
                                        const ProgressFn& progress,
                                        const EpochSoFar& before = {});
  // The running epoch so far, `before` included: read from RunEpoch's
  // progress callback (a snapshot taken there carries it).
  const EpochSoFar& so_far() const { return so_far_; }
  // One step: exposed for tests and benchmarks. Step(e, s) is
  // StepAt(e, s * global_batch()).
  absl::Status Step(uint64_t epoch, size_t step);
  absl::Status StepAt(uint64_t epoch, size_t offset);
  // Samples of the epoch's sequence one step consumes: world * batch.
  size_t global_batch() const { return sampler_.global_batch(); }
  // Steps left in an epoch from `offset`.
  size_t StepsFrom(size_t offset) const { return sampler_.StepsFrom(offset); }

  // Whole-test-split metrics (sharded over the ranks when there are several).
  absl::StatusOr<EvalMetrics> Evaluate();

  // The model file contents of the current parameters.
  engine::Preprocessing preprocessing() const;

 private:
  void GatherBatch(uint64_t epoch, size_t offset);
  absl::Status Reduce(bool stop_vote, bool* stop_agreed);
  // The step's all-reduce in one go, after the backward (no overlap).
  absl::Status ReduceAfterBackward(std::span<float> buffer);
  // Buckets of the job's bucket_kib when there are several (or the wire is
  // 16-bit), the world has more than one rank and the engine hands out its
  // deltas during the backward; else none (the all-reduce after the
  // backward).
  void SetUpOverlap();

  const tagi::v1::JobSpec& spec_;
  engine::Engine& model_;
  absl::Status reserve_status_;  // of the constructor's Reserve; Step returns it
  const data::LoadedData& data_;
  Clock& clock_;
  TrainerOptions options_;
  int rank_;
  int world_;
  data::DistributedSampler sampler_;
  StepTimings timings_;
  float cap_factor_;
  float sigma_v_ = 1.0f;  // of the epoch of the last Step
  // Training-image augmentation: whether any, and the model's input shape.
  bool augmenting_ = false;
  data::ImageShape image_;
  // Batch staging buffers (sized once).
  std::vector<uint32_t> indices_;
  std::vector<float> x_;
  std::vector<int32_t> labels_;
  std::vector<float> targets_;
  std::vector<float> probs_;
  size_t eval_batch_;   // EvalBatchFor the model and the job's batch
  size_t correct_ = 0;  // training predictions of the running epoch
  EpochSoFar so_far_;
  const WirePrecision wire_;
  std::unique_ptr<OverlappedReduce> overlap_;
};

// The job's wire precision for the deltas (FP32 when unset).
WirePrecision WireFromSpec(const tagi::v1::JobSpec& spec);

// The model's initialisation options from the job (method and gains).
engine::InitOptions InitOptionsFromSpec(const tagi::v1::JobSpec& spec);

// Builds the job's model on `device` (-1: the CPU, N: cuda:N), initialised
// from the job seed (identical on every rank and device), or from the job's
// init_from model file, after checking that the loaded data fits its first
// and last layers.
absl::StatusOr<std::unique_ptr<engine::Engine>> BuildModel(const tagi::v1::JobSpec& spec,
                                                           const data::LoadedData& data,
                                                           size_t max_batch, int device = -1);

// Loads the parameters (and running statistics, when the file has them) of
// the model file at `path` into `model`: FailedPrecondition naming both
// networks when the file's is not the model's; the file's own error
// (prefixed with "init_from: ") when it cannot be read.
absl::Status InitFrom(const std::string& path, engine::Engine& model);

// Sums of a (possibly partial) evaluation, to be combined across ranks:
// every field adds (Pack / Unpack give the floats one all-reduce sums).
struct EvalSums {
  double correct = 0.0;
  double log_likelihood = 0.0;
  double squared_error = 0.0;
  double observed = 0.0;  // samples (classification) or observed targets
  double samples = 0.0;
  double brier = 0.0;
  // Per bin of the top class probability: samples, their summed top
  // probability and how many of them were right.
  double bin_count[kCalibrationBins] = {};
  double bin_confidence[kCalibrationBins] = {};
  double bin_correct[kCalibrationBins] = {};
  double within_68 = 0.0;  // observed targets inside the interval
  double within_95 = 0.0;
  double predictive_std = 0.0;  // summed over observed targets

  static constexpr size_t kFloats = 9 + 3 * kCalibrationBins;
  void Pack(float* out) const;
  static EvalSums Unpack(const float* in);
};

// The bin of a top class probability p in [0, 1] (1 goes to the last).
int CalibrationBin(double p);

// OK when all-reduced sums could come from honest ranks scoring `samples`
// test samples of `outputs` outputs each: every sum finite, exactly
// `samples` samples, counts within their bounds (correct <= observed,
// each bin's correct <= its count, ...). DataLoss naming the first that is
// not (a broken or rogue rank sent wrong sums); the metrics are then not
// reported. It cannot catch a rank that moves counts within the bounds.
absl::Status CheckEvalSums(const EvalSums& sums, size_t samples, size_t outputs);

// Scores samples [first, last) of `test` (used by Trainer and --eval).
absl::StatusOr<EvalSums> ScoreModel(engine::Engine& model, const data::Dataset& test,
                                    const data::Standardizer& target, float sigma_v,
                                    size_t eval_batch, size_t first, size_t last);
EvalMetrics MetricsFromSums(const EvalSums& sums, bool classification);

}  // namespace tagi

#endif  // TAGI_WORKER_TRAINER_H_
