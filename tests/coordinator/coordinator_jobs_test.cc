// The user-facing half of the Coordinator: submission, the queue, workers
// joining, rendezvous, job completion and cancellation.
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/coordinator/coordinator_harness.h"

namespace tagi::coordinator::test {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST_F(CoordinatorTest, SubmitRefusesAnInvalidSpecWithTheValidationMessage) {
  Start(2);
  tagi::v1::JobSpec spec = Spec(2);
  spec.set_epochs(0);
  const absl::Status expected = ValidateJobSpec(spec);
  ASSERT_FALSE(expected.ok());
  auto job = coord().Submit(spec);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(), expected.message());
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("epochs"));
  EXPECT_THAT(coord().List(), IsEmpty());
}

TEST_F(CoordinatorTest, SubmitRefusesAWorldLargerThanTheCoordinatorsWorld) {
  Start(2);
  auto job = coord().Submit(Spec(3));
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("--world"));
  EXPECT_THAT(coord().List(), IsEmpty());
}

TEST_F(CoordinatorTest, SubmitTakesWorldZeroAsTheCoordinatorsWorld) {
  Start(4);
  auto job = coord().Submit(Spec(0));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->world_size(), 4u);
  EXPECT_EQ(job->state(), tagi::v1::PENDING);
  EXPECT_EQ(job->generation(), 0u);
  EXPECT_FALSE(job->reason().empty());
}

TEST_F(CoordinatorTest, SubmitRefusesWhenTheQueueIsFull) {
  CoordinatorOptions options = Options(2);
  options.max_queued_jobs = 2;
  Start(options);
  Submit(2);
  Submit(2);
  auto third = coord().Submit(Spec(2));
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(coord().List().size(), 2u);
  // Running jobs do not count against the queue.
  RegisterN(2);
  EXPECT_EQ(State("job-1"), tagi::v1::RUNNING);
  EXPECT_TRUE(coord().Submit(Spec(2)).ok());
}

TEST_F(CoordinatorTest, CudaJobWaitsForACudaWorkerWhileCpuJobsRunOnCpuWorkers) {
  Start(4);
  const std::vector<std::string> cpu = RegisterN(2);
  tagi::v1::JobSpec spec = Spec(1);
  spec.set_device("cuda:0");
  auto gpu_job = coord().Submit(spec);
  ASSERT_TRUE(gpu_job.ok()) << gpu_job.status();
  EXPECT_EQ(State(gpu_job->id()), tagi::v1::PENDING);
  EXPECT_THAT(GetJob(gpu_job->id()).reason(), ::testing::Eq("waiting for 1 idle cuda worker"));
  for (const std::string& w : cpu) EXPECT_EQ(Worker(w).state(), "IDLE");
  // A younger CPU job starts on the CPU workers meanwhile.
  const std::string cpu_job = Submit(2);
  EXPECT_EQ(State(cpu_job), tagi::v1::RUNNING);
  EXPECT_THAT(GetJob(cpu_job).workers(), ElementsAre(cpu[0], cpu[1]));
  // A GPU worker joins: the waiting job starts on it.
  const std::string gpu = Register("gpu-host", "cuda:0");
  EXPECT_EQ(State(gpu_job->id()), tagi::v1::RUNNING);
  EXPECT_THAT(GetJob(gpu_job->id()).workers(), ElementsAre(gpu));
  EXPECT_THAT(GetJob(gpu_job->id()).reason(), HasSubstr("placed on 1 cuda worker: ranks w-3"));
  EXPECT_EQ(AssignmentOf(gpu).job_id(), gpu_job->id());
  EXPECT_EQ(Worker(gpu).device(), "cuda:0");
}

TEST_F(CoordinatorTest, IdleSparesWarmARunningJobOnlyWhenTheyCouldRunIt) {
  Start(4);
  const std::string g1 = Register("gpu-1", "cuda:0");
  const std::string g2 = Register("gpu-2", "cuda:0");
  tagi::v1::JobSpec spec = Spec(2);
  spec.set_device("cuda:0");
  auto job = coord().Submit(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_EQ(State(job->id()), tagi::v1::RUNNING);
  const std::string cpu_spare = Register("cpu-3");
  const std::string gpu_spare = Register("gpu-4", "cuda:0");
  auto cpu = Rendezvous(cpu_spare, absl::ZeroDuration());
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  EXPECT_FALSE(cpu->assigned());
  EXPECT_FALSE(cpu->has_warm()) << "a CPU worker can never take a rank of a GPU job";
  auto gpu = Rendezvous(gpu_spare, absl::ZeroDuration());
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_FALSE(gpu->assigned());
  ASSERT_TRUE(gpu->has_warm());
  EXPECT_EQ(gpu->warm().device(), "cuda:0");
}

TEST_F(CoordinatorTest, ListsJobsInSubmissionOrder) {
  Start(1);
  std::vector<std::string> submitted;
  for (int i = 0; i < 12; ++i) submitted.push_back(Submit(1));  // job-10 < job-2 as strings
  std::vector<std::string> listed;
  for (const auto& job : coord().List()) listed.push_back(job.id());
  EXPECT_EQ(listed, submitted);
  EXPECT_EQ(listed.front(), "job-1");
  EXPECT_EQ(listed.back(), "job-12");
}

TEST_F(CoordinatorTest, UnknownJobIsNotFound) {
  Start(1);
  EXPECT_EQ(coord().Get("job-7").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(coord().Cancel("job-7").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(coord().ModelFile("job-7").status().code(), absl::StatusCode::kNotFound);
  uint64_t seen = 0;
  EXPECT_EQ(coord().WaitForChange("job-7", seen, absl::ZeroDuration()).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, RegisterAssignsSequentialWorkerIds) {
  Start(1);
  EXPECT_THAT(RegisterN(3), ElementsAre("w-1", "w-2", "w-3"));
  const auto workers = coord().ListWorkers();
  ASSERT_EQ(workers.size(), 3u);
  for (const auto& w : workers) {
    EXPECT_EQ(w.state(), "IDLE");
    EXPECT_EQ(w.hostname(), "host");
    EXPECT_EQ(w.address(), "ipv4:127.0.0.1:1234");
  }
  // A worker that re-registers with its id and its secret keeps it.
  tagi::v1::RegisterRequest again;
  again.set_worker_id("w-2");
  EXPECT_EQ(coord().Register(again, "peer", coord().WorkerSecret(again.worker_id())).worker_id(), "w-2");
  EXPECT_EQ(Register(), "w-4");
}

// Ids are the coordinator's: naming one without its secret (or with
// another worker's) gets a new id, never the named one; secrets are bound to
// their id; a retried Register (same nonce) gets the first one's id.
TEST_F(CoordinatorTest, RegisterKeepsAnIdOnlyWithItsSecretAndIsIdempotentByNonce) {
  Start(1);
  const tagi::v1::RegisterResponse first = coord().Register(tagi::v1::RegisterRequest(), "peer");
  EXPECT_EQ(first.worker_id(), "w-1");
  EXPECT_EQ(first.secret().size(), 64u);
  EXPECT_TRUE(coord().VerifyWorker("w-1", first.secret()));
  EXPECT_FALSE(coord().VerifyWorker("w-2", first.secret()));
  EXPECT_FALSE(coord().VerifyWorker("w-1", ""));
  tagi::v1::RegisterRequest claim;
  claim.set_worker_id("w-1");
  EXPECT_EQ(coord().Register(claim, "attacker").worker_id(), "w-2");
  EXPECT_EQ(coord().Register(claim, "attacker", "00").worker_id(), "w-3");
  EXPECT_EQ(coord().Register(claim, "attacker", coord().WorkerSecret("w-2")).worker_id(), "w-4");
  // An id past the counter, even the largest, is not adopted: the counter
  // goes on from where it was.
  claim.set_worker_id("w-18446744073709551615");
  EXPECT_EQ(coord().Register(claim, "attacker").worker_id(), "w-5");
  tagi::v1::RegisterRequest retried;
  retried.set_nonce("nonce-of-one-registration");
  const std::string id = coord().Register(retried, "peer").worker_id();
  EXPECT_EQ(id, "w-6");
  EXPECT_EQ(coord().Register(retried, "peer").worker_id(), id);
  EXPECT_EQ(coord().Register(retried, "peer").secret(), coord().WorkerSecret(id));
  EXPECT_EQ(coord().ListWorkers().size(), 6u);  // no orphan
}

// A finished job's workers are idle and hold neither its id nor a rank
// (REST showed the last job's rank on idle workers).
TEST_F(CoordinatorTest, WorkersReleasedByAFinishedJobHoldNoRank) {
  Start(2);
  const std::vector<std::string> workers = RegisterN(2);
  const std::string job = Submit(2);
  ASSERT_EQ(State(job), tagi::v1::RUNNING);
  EXPECT_EQ(Worker(workers[1]).rank(), 1u);
  EXPECT_EQ(Worker(workers[1]).job_id(), job);
  Complete(job);
  ASSERT_EQ(State(job), tagi::v1::SUCCEEDED);
  for (const std::string& w : workers) {
    EXPECT_EQ(Worker(w).state(), "IDLE");
    EXPECT_EQ(Worker(w).job_id(), "");
    EXPECT_EQ(Worker(w).rank(), 0u);
  }
  EXPECT_THAT(GetJob(job).reason(), HasSubstr("epochs on 2 workers"));
}

TEST_F(CoordinatorTest, RendezvousAssignsRanksOnceEnoughWorkersRegistered) {
  Start(2);
  const tagi::v1::JobSpec spec = Spec(2);
  const std::string job = coord().Submit(spec)->id();
  const std::string first = Register();
  auto waiting = AfterAdvancing(absl::Milliseconds(10),
                                [&] { return Rendezvous(first, absl::Milliseconds(10)); });
  ASSERT_TRUE(waiting.ok()) << waiting.status();
  EXPECT_FALSE(waiting->assigned());
  EXPECT_EQ(State(job), tagi::v1::PENDING);

  const std::string second = Register();
  for (uint32_t rank = 0; rank < 2; ++rank) {
    const tagi::v1::Assignment a = AssignmentOf(rank == 0 ? first : second);
    EXPECT_EQ(a.job_id(), job);
    EXPECT_EQ(a.rank(), rank);
    EXPECT_EQ(a.world_size(), 2u);
    EXPECT_EQ(a.generation(), 1u);
    EXPECT_TRUE(MessageDifferencer::Equals(a.spec(), spec));
  }
  const tagi::v1::Job running = GetJob(job);
  EXPECT_EQ(running.state(), tagi::v1::RUNNING);
  EXPECT_EQ(running.generation(), 1u);
  EXPECT_THAT(running.workers(), ElementsAre(first, second));
  EXPECT_EQ(Worker(second).state(), "BUSY");
  EXPECT_EQ(Worker(second).job_id(), job);
  EXPECT_EQ(Worker(second).rank(), 1u);
}

TEST_F(CoordinatorTest, RendezvousTimesOutUnassignedWithoutAJob) {
  Start(2);
  const std::string w = Register();
  auto resp = AfterAdvancing(absl::Milliseconds(5),
                             [&] { return Rendezvous(w, absl::Milliseconds(5)); });
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_FALSE(resp->assigned());
  EXPECT_EQ(Worker(w).state(), "IDLE");
}

TEST_F(CoordinatorTest, RendezvousWakesAWaitingWorkerWhenItsGroupForms) {
  Start(2);
  Submit(2);
  const std::string first = Register();
  absl::StatusOr<tagi::v1::RendezvousResponse> resp;
  std::thread waiter([&] { resp = Rendezvous(first, absl::Seconds(30)); });
  const absl::Time start = absl::Now();
  Register();
  waiter.join();
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_TRUE(resp->assigned());
  EXPECT_EQ(resp->assignment().rank(), 0u);
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST_F(CoordinatorTest, RendezvousOfAnUnknownWorkerIsNotFound) {
  Start(1);
  auto resp = Rendezvous("w-42", absl::ZeroDuration());
  EXPECT_EQ(resp.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, SecondJobWaitsUntilTheFirstJobsWorkersFinish) {
  Start(3);
  const auto workers = RegisterN(3);
  const std::string big = Submit(3);
  const std::string small = Submit(2);
  EXPECT_EQ(State(big), tagi::v1::RUNNING);
  EXPECT_EQ(State(small), tagi::v1::PENDING);
  EXPECT_EQ(AssignmentOf(workers[2]).job_id(), big);

  Complete(big);
  EXPECT_EQ(State(big), tagi::v1::SUCCEEDED);
  const tagi::v1::Job next = GetJob(small);
  EXPECT_EQ(next.state(), tagi::v1::RUNNING);
  EXPECT_THAT(next.workers(), ElementsAre(workers[0], workers[1]));
  const tagi::v1::Assignment a = AssignmentOf(workers[1]);
  EXPECT_EQ(a.job_id(), small);
  EXPECT_EQ(a.rank(), 1u);
  EXPECT_EQ(a.generation(), 1u);
  EXPECT_EQ(Worker(workers[2]).state(), "IDLE");
}

TEST_F(CoordinatorTest, JobSucceedsWhenTheModelIsUploadedBeforeTheRanksFinish) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  ASSERT_TRUE(Upload(job, w[0]).ok());
  EXPECT_EQ(State(job), tagi::v1::RUNNING);
  ASSERT_TRUE(Finish(job, w[0], 0).ok());
  EXPECT_EQ(State(job), tagi::v1::RUNNING);
  ASSERT_TRUE(Finish(job, w[1], 1).ok());
  const tagi::v1::Job done = GetJob(job);
  EXPECT_EQ(done.state(), tagi::v1::SUCCEEDED);
  auto model = engine::DecodeModelFile(ModelBytes());
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(done.model_checksum(),  // computed by the coordinator
            FingerprintHex(ModelFingerprint(model->parameters.data(), model->parameters.size(),
                                            nullptr, 0)));
  EXPECT_EQ(done.model_bytes(), ModelBytes().size());
}

TEST_F(CoordinatorTest, JobSucceedsWhenTheModelIsUploadedAfterTheOtherRanksFinish) {
  Start(3);
  const std::string job = Submit(3);
  const auto w = RegisterN(3);
  ASSERT_TRUE(Finish(job, w[2], 2).ok());
  ASSERT_TRUE(Finish(job, w[1], 1).ok());
  EXPECT_EQ(State(job), tagi::v1::RUNNING);
  ASSERT_TRUE(Upload(job, w[0]).ok());
  EXPECT_EQ(State(job), tagi::v1::RUNNING);  // rank 0 has not finished
  ASSERT_TRUE(Finish(job, w[0], 0).ok());
  EXPECT_EQ(State(job), tagi::v1::SUCCEEDED);
}

TEST_F(CoordinatorTest, TimestampsFollowTheInjectedClockFromTheWallTimeAtStart) {
  const int64_t wall_before_ms = absl::ToUnixMillis(absl::Now());
  Start(1);
  const std::string job = Submit(1);
  const int64_t submitted_ms = GetJob(job).submit_time_ms();
  // Unix wall time, not the fake clock's own reading.
  EXPECT_GE(submitted_ms, wall_before_ms);
  EXPECT_LE(submitted_ms, absl::ToUnixMillis(absl::Now()));

  clock_.Advance(absl::Seconds(7));
  const std::string w = Register();
  EXPECT_EQ(GetJob(job).start_time_ms() - submitted_ms, 7'000);
  const int64_t registered_ms = Worker(w).last_seen_ms();
  EXPECT_EQ(registered_ms - submitted_ms, 7'000);

  clock_.Advance(absl::Seconds(30));
  Complete(job);
  const tagi::v1::Job done = GetJob(job);
  EXPECT_EQ(done.state(), tagi::v1::SUCCEEDED);
  EXPECT_EQ(done.end_time_ms() - done.start_time_ms(), 30'000);
  EXPECT_EQ(Worker(w).last_seen_ms() - registered_ms, 30'000);
}

TEST_F(CoordinatorTest, JobDoesNotSucceedWhenEveryRankFinishedWithoutAModel) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  ASSERT_TRUE(Finish(job, w[0], 0).ok());
  ASSERT_TRUE(Finish(job, w[1], 1).ok());
  const tagi::v1::Job j = GetJob(job);
  EXPECT_NE(j.state(), tagi::v1::SUCCEEDED);
  EXPECT_EQ(j.state(), tagi::v1::FAILED);
  EXPECT_THAT(j.reason(), HasSubstr("model"));
  EXPECT_EQ(coord().ModelFile(job).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, FailedRankFailsTheJobAndAbortsTheOtherRanks) {
  Start(3);
  const std::string job = Submit(3);
  const auto w = RegisterN(3);
  ASSERT_TRUE(Finish(job, w[1], 1, /*ok=*/false, "CUDA out of memory").ok());
  const tagi::v1::Job failed = GetJob(job);
  EXPECT_EQ(failed.state(), tagi::v1::FAILED);
  EXPECT_THAT(failed.reason(), HasSubstr("CUDA out of memory"));
  EXPECT_THAT(failed.reason(), HasSubstr("rank 1"));
  for (uint32_t rank : {0u, 2u}) {
    auto reply = Report(job, w[rank], rank);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->directive(), tagi::v1::ABORT);
    EXPECT_THAT(reply->reason(), HasSubstr("CUDA out of memory"));
  }
  EXPECT_EQ(Worker(w[1]).state(), "IDLE");
  // The survivors are released when they report their end.
  ASSERT_TRUE(Finish(job, w[0], 0, false, "aborted").ok());
  EXPECT_EQ(Worker(w[0]).state(), "IDLE");
  EXPECT_EQ(State(job), tagi::v1::FAILED);
}

TEST_F(CoordinatorTest, CancelOfAPendingJobCancelsItForGood) {
  Start(2);
  const std::string job = Submit(2);
  auto cancelled = coord().Cancel(job);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), tagi::v1::CANCELLED);
  RegisterN(2);
  EXPECT_EQ(State(job), tagi::v1::CANCELLED);
  EXPECT_EQ(Worker("w-1").state(), "IDLE");
}

TEST_F(CoordinatorTest, CancelOfARunningJobTellsEveryRankToCancel) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  auto before = Report(job, w[0], 0);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->directive(), tagi::v1::CONTINUE);

  auto cancelled = coord().Cancel(job);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), tagi::v1::CANCELLED);
  for (uint32_t rank = 0; rank < 2; ++rank) {
    auto reply = Report(job, w[rank], rank);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->directive(), tagi::v1::CANCEL);
    ASSERT_TRUE(Finish(job, w[rank], rank, false, "cancelled").ok());
    EXPECT_EQ(Worker(w[rank]).state(), "IDLE");
  }
  EXPECT_EQ(State(job), tagi::v1::CANCELLED);
}

TEST_F(CoordinatorTest, CancelOfAFinishedJobIsAFailedPrecondition) {
  Start(1);
  const std::string done = Submit(1);
  Register();
  Complete(done);
  ASSERT_EQ(State(done), tagi::v1::SUCCEEDED);
  EXPECT_EQ(coord().Cancel(done).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(State(done), tagi::v1::SUCCEEDED);

  const std::string cancelled = Submit(1);
  ASSERT_TRUE(coord().Cancel(cancelled).ok());
  EXPECT_EQ(coord().Cancel(cancelled).status().code(), absl::StatusCode::kFailedPrecondition);
}

// A worker whose job ended without its FinishJob arriving (the worker sends
// FinishJob once and ignores a lost reply) comes back to Rendezvous for new
// work: it must not be handed the ended job again, or it re-runs a dead
// attempt and stays BUSY for ever.
TEST_F(CoordinatorTest, RendezvousDoesNotHandOutTheAssignmentOfAnEndedJob) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  ASSERT_TRUE(Finish(job, w[1], 1, /*ok=*/false, "disk full").ok());
  ASSERT_EQ(State(job), tagi::v1::FAILED);
  // Rank 0's FinishJob was lost; it asks for work.
  auto resp = Rendezvous(w[0], absl::ZeroDuration());
  ASSERT_TRUE(resp.ok()) << resp.status();
  EXPECT_FALSE(resp->assigned() && resp->assignment().job_id() == job)
      << "handed out the assignment of " << job << ", which is FAILED";
  // And the next job can use both workers.
  const std::string next = Submit(2);
  auto again = Rendezvous(w[0], absl::ZeroDuration());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(State(next), tagi::v1::RUNNING);
}

}  // namespace
}  // namespace tagi::coordinator::test
