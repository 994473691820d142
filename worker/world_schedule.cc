#include "worker/world_schedule.h"

#include <memory>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/group_sync.h"
#include "common/job_spec.h"
#include "common/status.h"
#include "common/store.h"
#include "worker/collective/gloo/gloo_collective.h"
#include "worker/collective/tcp/ring_collective.h"

namespace tagi {
namespace {

using Position = data::SamplerCursor;

// What passes from one world to the next: rank 0's parameters and state.
struct Carry {
  std::vector<float> parameters;
  std::vector<float> state;
};

struct RankResult {
  absl::Status status;
  Position end;
  std::optional<EvalMetrics> last_test;
  Carry carry;  // rank 0 only
  engine::Architecture architecture;
  engine::Preprocessing preprocessing;
};

absl::StatusOr<std::unique_ptr<Collective>> Join(const tagi::v1::JobSpec& spec, Store& store,
                                                int rank, int world, absl::Duration timeout) {
  const GroupOptions group{"127.0.0.1", timeout};
  if (spec.backend() == tagi::v1::JobSpec::GLOO) {
    return CreateGlooCollective(store, rank, world, group);
  }
  return CreateRingCollective(store, rank, world, group);
}

// One rank of one stretch: from `start` until global step `end_step` or the
// job's last epoch, as a worker of that generation would train it.
void RunRank(const tagi::v1::JobSpec& spec, const data::LoadedData& data, int rank, int world,
             Store& store, const Carry* carry, Position start, uint64_t end_step, Clock& clock,
             absl::Duration timeout, RankResult& out) {
  auto run = [&]() -> absl::Status {
    TAGI_ASSIGN_OR_RETURN(auto model, BuildModel(spec, data, spec.batch_size(), -1));
    if (carry != nullptr) {
      TAGI_RETURN_IF_ERROR(model->WriteParameters(carry->parameters));
      TAGI_RETURN_IF_ERROR(model->WriteState(carry->state));
    }
    std::unique_ptr<Collective> collective;
    if (world > 1) {
      TAGI_ASSIGN_OR_RETURN(collective, Join(spec, store, rank, world, timeout));
    }
    TrainerOptions topt;
    topt.collective = collective.get();
    topt.collective_timeout = timeout;
    Trainer trainer(spec, *model, data, clock, std::move(topt));
    const size_t n = data.data.train.num_samples;
    Position at = start;
    while (at.epoch < spec.epochs() && at.global_step < end_step) {
      TAGI_RETURN_IF_ERROR(trainer.StepAt(at.epoch, at.offset));
      at.offset += trainer.global_batch();
      ++at.step;
      ++at.global_step;
      if (at.offset >= n) {  // the epoch's end: the workers evaluate here
        TAGI_ASSIGN_OR_RETURN(out.last_test, trainer.Evaluate());
        ++at.epoch;
        at.step = 0;
        at.offset = 0;
      }
    }
    if (collective != nullptr) {
      // Nobody closes its connections while a peer still finishes the last
      // all-reduce (the workers' DepartTogether).
      TAGI_RETURN_IF_ERROR(StoreBarrier(store, "done", rank, world, timeout));
    }
    out.end = at;
    if (rank == 0) {
      out.carry.parameters.resize(2 * model->num_parameters());
      TAGI_RETURN_IF_ERROR(model->ReadParameters(out.carry.parameters));
      out.carry.state.resize(model->num_state());
      TAGI_RETURN_IF_ERROR(model->ReadState(out.carry.state));
      out.architecture = model->architecture();
      out.preprocessing = trainer.preprocessing();
    }
    return absl::OkStatus();
  };
  out.status = run();
}

}  // namespace

absl::StatusOr<std::vector<WorldStretch>> ParseWorldSchedule(const std::string& text) {
  std::vector<WorldStretch> out;
  for (const absl::string_view entry : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    WorldStretch s;
    if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &s.from_step) ||
        !absl::SimpleAtoi(parts[1], &s.world)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "world schedule entry \"%s\": expected FROM_STEP:WORLD", entry.substr(0, 64)));
    }
    if (s.world < 1 || s.world > kMaxScheduleWorld) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "world schedule entry \"%s\": the world must be in 1..%d", entry, kMaxScheduleWorld));
    }
    if (out.empty() ? s.from_step != 0 : s.from_step <= out.back().from_step) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "world schedule entry \"%s\": %s", entry,
          out.empty() ? "the first world must start at step 0"
                      : "steps must increase from one entry to the next"));
    }
    out.push_back(s);
  }
  return out;
}

absl::StatusOr<ScheduleResult> RunWorldSchedule(const tagi::v1::JobSpec& spec,
                                                const data::LoadedData& data,
                                                const std::vector<WorldStretch>& schedule,
                                                Clock& clock, absl::Duration timeout) {
  if (schedule.empty() || schedule.front().from_step != 0) {
    return absl::InvalidArgumentError("a world schedule starts at step 0");
  }
  TAGI_ASSIGN_OR_RETURN(const int device, ParseDevice(spec.device()));
  if (device >= 0 || spec.backend() == tagi::v1::JobSpec::NCCL) {
    return absl::InvalidArgumentError(
        "a world schedule runs its ranks on the CPU (TCP ring or Gloo), not on cuda or NCCL");
  }
  ScheduleResult result;
  Position at;
  std::optional<Carry> carry;
  for (size_t i = 0; i < schedule.size() && at.epoch < spec.epochs(); ++i) {
    const int world = schedule[i].world;
    const uint64_t end = i + 1 < schedule.size() ? schedule[i + 1].from_step : UINT64_MAX;
    InMemoryStore store;
    std::vector<RankResult> ranks(static_cast<size_t>(world));
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        RunRank(spec, data, r, world, store, carry ? &*carry : nullptr, at, end, clock, timeout,
                ranks[static_cast<size_t>(r)]);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < world; ++r) {
      const absl::Status& st = ranks[static_cast<size_t>(r)].status;
      if (!st.ok()) {
        return absl::Status(st.code(), absl::StrFormat("world %d from step %d, rank %d: %s",
                                                       world, schedule[i].from_step, r,
                                                       st.message()));
      }
    }
    RankResult& zero = ranks[0];
    if (zero.last_test.has_value()) result.last_epoch.test = *zero.last_test;
    result.last_epoch.epoch = zero.end.epoch == 0 ? 0 : zero.end.epoch - 1;
    result.architecture = zero.architecture;
    result.preprocessing = zero.preprocessing;
    at = zero.end;
    carry = std::move(zero.carry);
  }
  if (!carry.has_value()) return absl::InvalidArgumentError("the job has no epoch to train");
  result.parameters = std::move(carry->parameters);
  result.state = std::move(carry->state);
  result.steps = at.global_step;
  return result;
}

}  // namespace tagi
