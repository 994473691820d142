// Test harness for the Coordinator: a FakeClock, a valid job spec, model
// files and snapshots of its network, and short-hands for the worker calls.
// Waits are zero or a few milliseconds; nothing sleeps.
#ifndef TAGI_TESTS_COORDINATOR_COORDINATOR_HARNESS_H_
#define TAGI_TESTS_COORDINATOR_COORDINATOR_HARNESS_H_

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/job_spec.h"
#include "common/snapshot.h"
#include "coordinator/coordinator.h"
#include "gtest/gtest.h"
#include "tagi/v1/cluster.pb.h"
#include "tagi/v1/jobs.pb.h"
#include "tests/testing/scratch_dir.h"
#include "worker/engine/architecture.h"
#include "worker/engine/model_file.h"

namespace tagi::coordinator::test {

inline constexpr char kExampleJob[] = TAGI_SOURCE_DIR "/examples/fmnist_fnn.json";

// The shipped Fashion-MNIST example with the given world size.
inline tagi::v1::JobSpec Spec(uint32_t world) {
  auto spec = LoadJobSpecFile(kExampleJob);
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->set_world_size(world);
  return *spec;
}

// The number of parameters of the example job's network.
inline size_t ExampleParameterCount() {
  auto arch = engine::ArchitectureFromJobSpec(Spec(1));
  EXPECT_TRUE(arch.ok()) << arch.status();
  return arch.ok() ? arch->num_parameters() : 0;
}

// A model file of the example job's network as the engine writes it (the
// coordinator decodes and checks every upload): means drawn from
// `payload`'s bytes, so that different payloads give different models;
// variances 0.01.
inline std::string ModelBytes(const std::string& payload = "TAGI model parameters 0123456789") {
  auto arch = engine::ArchitectureFromJobSpec(Spec(1));
  EXPECT_TRUE(arch.ok()) << arch.status();
  if (!arch.ok()) return "";
  const size_t n = arch->num_parameters();
  std::vector<float> parameters(2 * n, 0.01f);
  for (size_t i = 0; i < n; ++i) {
    parameters[i] = static_cast<float>(static_cast<unsigned char>(payload[i % payload.size()])) /
                    256.0f;
  }
  return engine::EncodeModelFile(*arch, {}, parameters);
}

// A snapshot of the example job's network: every mean `fill`, every
// variance 0.5.
inline std::string ExampleSnapshotBytes(const std::string& job, uint64_t global_step,
                                        uint64_t epoch, uint64_t step, float fill = 0.5f) {
  Snapshot s;
  s.job_id = job;
  s.generation = 1;
  s.epoch = epoch;
  s.step = step;
  s.global_step = global_step;
  s.parameters.assign(2 * ExampleParameterCount(), 0.5f);
  std::fill(s.parameters.begin(), s.parameters.begin() + static_cast<ptrdiff_t>(s.parameters.size() / 2),
            fill);
  s.architecture = "test";
  return EncodeSnapshot(s);
}

// A fresh directory for one test, removed afterwards.
using ::tagi::testing::ScratchDir;

class CoordinatorTest : public ::testing::Test {
 protected:
  static CoordinatorOptions Options(int world) {
    CoordinatorOptions o;
    o.world = world;
    o.membership.worker_timeout = absl::Seconds(3);
    o.max_wait = absl::Seconds(60);
    return o;
  }

  // Creates the coordinator under test; call once per test.
  Coordinator& Start(CoordinatorOptions options) {
    max_wait_ = options.max_wait;
    coord_ = std::make_unique<Coordinator>(std::move(options), clock_);
    return *coord_;
  }
  Coordinator& Start(int world) { return Start(Options(world)); }
  Coordinator& coord() { return *coord_; }

  std::string Register(const std::string& host = "host", const std::string& device = "cpu") {
    tagi::v1::RegisterRequest req;
    req.set_hostname(host);
    req.set_device(device);
    return coord_->Register(req, "ipv4:127.0.0.1:1234").worker_id();
  }
  std::vector<std::string> RegisterN(int n) {
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) ids.push_back(Register());
    return ids;
  }

  std::string Submit(uint32_t world) {
    auto job = coord_->Submit(Spec(world));
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  // A worker's first session message.
  static tagi::v1::SessionMessage Hello(const std::string& worker) {
    tagi::v1::SessionMessage m;
    m.set_worker_id(worker);
    m.set_hostname("host");
    return m;
  }
  // Opens a session for `worker` and returns its token.
  uint64_t Open(const std::string& worker) {
    auto token = coord_->OpenSession(Hello(worker), "peer", nullptr);
    EXPECT_TRUE(token.ok()) << token.status();
    return token.ok() ? *token : 0;
  }
  // The directives queued for the session (without waiting).
  std::vector<tagi::v1::SessionDirective> Drain(const std::string& worker, uint64_t token) {
    std::vector<tagi::v1::SessionDirective> out;
    while (true) {
      auto d = coord_->TakeDirective(worker, token);
      if (!d.ok() || !d->has_value()) return out;
      out.push_back(**d);
    }
  }

  tagi::v1::Job GetJob(const std::string& id) {
    auto job = coord_->Get(id);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : tagi::v1::Job();
  }
  tagi::v1::JobState State(const std::string& id) { return GetJob(id).state(); }

  // The worker's assignment, without waiting; a failure if it has none.
  tagi::v1::Assignment AssignmentOf(const std::string& worker) {
    auto resp = Rendezvous(worker, absl::ZeroDuration());
    EXPECT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(resp.ok() && resp->assigned()) << worker << " has no assignment";
    return resp.ok() ? resp->assignment() : tagi::v1::Assignment();
  }

  absl::Status Finish(const std::string& job, const std::string& worker, uint32_t rank,
                      bool ok = true, const std::string& reason = "", uint64_t gen = 1) {
    tagi::v1::FinishJobRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    req.set_generation(gen);
    req.set_rank(rank);
    req.set_ok(ok);
    req.set_reason(reason);
    return coord_->FinishJob(req);
  }

  absl::Status Upload(const std::string& job, const std::string& worker,
                      std::string bytes = ModelBytes(), uint64_t gen = 1) {
    return coord_->UploadModel(worker, job, gen, "", std::move(bytes));
  }

  absl::StatusOr<tagi::v1::ProgressReply> Report(const std::string& job, const std::string& worker,
                                                 uint32_t rank, uint64_t global_step = 1,
                                                 uint64_t gen = 1) {
    tagi::v1::ProgressReport report;
    report.set_worker_id(worker);
    report.set_job_id(job);
    report.set_generation(gen);
    report.set_rank(rank);
    report.mutable_progress()->set_global_step(global_step);
    report.mutable_progress()->set_total_steps(100);
    return coord_->ReportProgress(report);
  }

  // Uploads the model from rank 0 and finishes every rank ok.
  void Complete(const std::string& job) {
    const tagi::v1::Job j = GetJob(job);
    ASSERT_GT(j.workers_size(), 0);
    ASSERT_TRUE(Upload(job, j.workers(0)).ok());
    for (int r = 0; r < j.workers_size(); ++r) {
      ASSERT_TRUE(Finish(job, j.workers(r), static_cast<uint32_t>(r)).ok());
    }
  }

  tagi::v1::WorkerInfo Worker(const std::string& id) {
    for (const auto& w : coord_->ListWorkers()) {
      if (w.id() == id) return w;
    }
    ADD_FAILURE() << "no worker " << id;
    return {};
  }

  // The blocking long polls the tests make, over the coordinator's
  // asynchronous calls (the ones the Cluster service makes): the caller
  // waits on the coordinator's clock for the answer; at the wait's deadline
  // ExpireWaits answers it, as the service's Tick would.
  absl::StatusOr<tagi::v1::RendezvousResponse> Rendezvous(const std::string& worker,
                                                          absl::Duration wait) {
    return Blocking<absl::StatusOr<tagi::v1::RendezvousResponse>>(wait, [&](auto done) {
      coord_->RendezvousAsync(worker, wait, std::move(done));
    });
  }
  absl::StatusOr<std::string> StoreGet(const std::string& job, uint64_t gen,
                                       const std::string& key, absl::Duration wait) {
    return Blocking<absl::StatusOr<std::string>>(wait, [&](auto done) {
      coord_->StoreGetAsync(job, gen, key, wait, std::move(done));
    });
  }
  absl::Status StoreWait(const std::string& job, uint64_t gen,
                         const std::vector<std::string>& keys, absl::Duration wait) {
    return Blocking<absl::Status>(
        wait, [&](auto done) { coord_->StoreWaitAsync(job, gen, keys, wait, std::move(done)); });
  }
  template <typename Result, typename Call>
  Result Blocking(absl::Duration wait, Call call) {
    struct Answer {
      absl::Mutex mu;
      std::optional<Result> result ABSL_GUARDED_BY(mu);
    };
    auto answer = std::make_shared<Answer>();
    call([answer](Result r) {
      absl::MutexLock lock(&answer->mu);
      answer->result.emplace(std::move(r));
    });
    auto answered = [&answer]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(answer->mu) {
      return answer->result.has_value();
    };
    answer->mu.Lock();
    const bool in_time =
        clock_.AwaitWithTimeout(answer->mu, absl::Condition(&answered), std::min(wait, max_wait_));
    answer->mu.Unlock();
    if (!in_time) coord_->ExpireWaits();  // its deadline passed on the clock
    absl::MutexLock lock(&answer->mu);
    EXPECT_TRUE(answer->mu.AwaitWithTimeout(absl::Condition(&answered), absl::Seconds(30)))
        << "the coordinator never answered";
    return answered() ? *std::move(answer->result) : Result(absl::DeadlineExceededError("none"));
  }

  // Runs `call` (a blocking long poll) on another thread, advances the
  // fake clock by `d` once the call waits, and returns what it returned:
  // the wait ends at its deadline on the coordinator's clock.
  template <typename F>
  auto AfterAdvancing(absl::Duration d, F call) -> decltype(call()) {
    std::optional<decltype(call())> out;
    std::thread t([&] { out.emplace(call()); });
    EXPECT_TRUE(clock_.AwaitWaiters(1)) << "the call never waited";
    clock_.Advance(d);
    t.join();
    return *std::move(out);
  }

  FakeClock clock_{absl::FromUnixSeconds(1'700'000'000)};
  absl::Duration max_wait_ = absl::Seconds(30);
  std::unique_ptr<Coordinator> coord_;
};

}  // namespace tagi::coordinator::test

#endif  // TAGI_TESTS_COORDINATOR_COORDINATOR_HARNESS_H_
