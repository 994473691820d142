// World schedules: an uninterrupted training run forced through a sequence
// of worlds, the reference an elastic job is checked against.
//
// An elastic job (JobSpec.min_world_size / max_world_size) trains under the
// world of each generation; its Job.worlds lists them as (from global step,
// world). Exact resume for such a job means: its model is bit-identical to
// the model of one uninterrupted run that trained steps [0, s1) under world
// w0, [s1, s2) under w1, and so on (the steps a failed generation ran past
// its snapshot are redone under the next world and count only there).
// RunWorldSchedule is that run: every rank of each world is a thread of this
// process with its own engine and the job's collective (the TCP ring, or
// Gloo when the job names it) over loopback; at a world change the
// parameters and running statistics pass from rank 0 to the next world's
// ranks as a snapshot would carry them, and the epoch goes on from its
// sample offset (worker/data/sampler.h "Elastic jobs"). Each epoch ends
// with the sharded evaluation the workers run.
//
// tagi-train --world-schedule 0:3,40:2,80:3 runs it.
#ifndef TAGI_WORKER_WORLD_SCHEDULE_H_
#define TAGI_WORKER_WORLD_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "tagi/v1/job.pb.h"
#include "worker/data/loader.h"
#include "worker/trainer.h"

namespace tagi {

struct WorldStretch {
  uint64_t from_step = 0;  // global step at which this world takes over
  int world = 1;
};

// The most ranks one stretch may run as threads of one process.
inline constexpr int kMaxScheduleWorld = 64;

// Parses "FROM:WORLD,FROM:WORLD,...": the first FROM is 0, FROMs strictly
// increase, worlds are 1..kMaxScheduleWorld. InvalidArgument naming the
// entry otherwise.
absl::StatusOr<std::vector<WorldStretch>> ParseWorldSchedule(const std::string& text);

struct ScheduleResult {
  std::vector<float> parameters;  // rank 0's arena [mu N][var N] at the end
  std::vector<float> state;
  engine::Architecture architecture;
  engine::Preprocessing preprocessing;
  EpochMetrics last_epoch;  // test metrics of the last epoch (steps: of its last stretch)
  uint64_t steps = 0;       // global steps run
};

// Trains `spec` on `data` through `schedule` (see above). The job's device
// must be the CPU and its backend TCP_RING, GLOO or unset.
absl::StatusOr<ScheduleResult> RunWorldSchedule(const tagi::v1::JobSpec& spec,
                                                const data::LoadedData& data,
                                                const std::vector<WorldStretch>& schedule,
                                                Clock& clock,
                                                absl::Duration timeout = absl::Seconds(60));

}  // namespace tagi

#endif  // TAGI_WORKER_WORLD_SCHEDULE_H_
