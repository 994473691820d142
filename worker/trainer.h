// Trainer: the step loop of one rank, and evaluation.
//
// A step takes this rank's share of the global batch from the distributed
// sampler, runs forward / output update / backward, hands the packed delta
// arena to the DeltaReducer (the data-parallel all-reduce; none for a
// single process), and applies the capped step. In SUM reduction the cap
// factor is that of the global batch (world x batch), in AVERAGE that of the
// local batch, whose deltas the reducer averages.
//
// tagi-train drives it with world 1; the worker drives it with its rank.
// Not thread-safe; one thread runs a Trainer.
#ifndef TAGI_WORKER_TRAINER_H_
#define TAGI_WORKER_TRAINER_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "tagi/v1/job.pb.h"
#include "worker/data/loader.h"
#include "worker/data/sampler.h"
#include "worker/engine/model.h"
#include "worker/engine/model_file.h"

namespace tagi {

// Seeds of the job's random streams (derived from JobSpec.seed).
inline constexpr uint64_t kInitStream = 101;
inline constexpr uint64_t kSamplerStream = 102;

// Sums (or averages) the delta arena across ranks in place.
using DeltaReducer = std::function<absl::Status(std::span<float> deltas)>;

struct EvalMetrics {
  size_t samples = 0;
  double accuracy = 0.0;        // classification
  double rmse = 0.0;            // regression, in the data's original units
  double log_likelihood = 0.0;  // average predictive log-likelihood per sample
};

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

// Called after every step: (epoch, step + 1, steps_per_epoch, elapsed).
using ProgressFn = std::function<void(uint64_t, size_t, size_t, absl::Duration)>;

struct TrainerOptions {
  int world = 1;
  int rank = 0;
  DeltaReducer reducer;            // empty: single process
  size_t eval_batch = 256;
};

class Trainer {
 public:
  // REQUIRES: the model was built from spec and data was loaded for it; all
  // three and the clock outlive the trainer.
  Trainer(const tagi::v1::JobSpec& spec, engine::Model& model,
          const data::LoadedData& data, Clock& clock, TrainerOptions options);

  size_t steps_per_epoch() const { return sampler_.steps_per_epoch(); }

  // Runs steps [first_step, steps_per_epoch) of `epoch`, then evaluates on
  // the test split. A failing reducer aborts the epoch with its status.
  absl::StatusOr<EpochMetrics> RunEpoch(uint64_t epoch, size_t first_step,
                                        const ProgressFn& progress);
  // One step: exposed for tests and benchmarks.
  absl::Status Step(uint64_t epoch, size_t step);

  EvalMetrics Evaluate();

  // The model file contents of the current parameters.
  engine::Preprocessing preprocessing() const;

 private:
  void GatherBatch(uint64_t epoch, size_t step);

  const tagi::v1::JobSpec& spec_;
  engine::Model& model_;
  const data::LoadedData& data_;
  Clock& clock_;
  TrainerOptions options_;
  data::DistributedSampler sampler_;
  float cap_factor_;
  float sigma_v_ = 1.0f;
  // Batch staging buffers (sized once).
  std::vector<uint32_t> indices_;
  std::vector<float> x_;
  std::vector<int32_t> labels_;
  std::vector<float> targets_;
  std::vector<float> probs_;
  size_t correct_ = 0;  // training predictions of the running epoch
};

// Evaluates a model on a dataset (used by Trainer and tagi-train --eval).
EvalMetrics EvaluateModel(engine::Model& model, const data::Dataset& test,
                          const data::Standardizer& target, float sigma_v, size_t eval_batch);

}  // namespace tagi

#endif  // TAGI_WORKER_TRAINER_H_
