// The worker runtime's pure decisions (worker/job_rules.h).
#include "worker/job_rules.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/job_spec.h"
#include "worker/collective/collective.h"
#include "worker/engine/architecture.h"
#include "worker/trainer.h"

namespace tagi {
namespace {

using ::testing::HasSubstr;
using tagi::v1::JobSpec;

TEST(ChooseBackend, TheJobsOwnElseNcclOnAGpuElseTheRing) {
  JobSpec spec;
  EXPECT_EQ(ChooseBackend(spec, -1), JobSpec::TCP_RING);
  EXPECT_EQ(ChooseBackend(spec, 0), JobSpec::NCCL);
  spec.set_backend(JobSpec::GLOO);
  EXPECT_EQ(ChooseBackend(spec, 0), JobSpec::GLOO);
  EXPECT_EQ(ChooseBackend(spec, -1), JobSpec::GLOO);
}

TEST(EngineDevice, CpuJobsOnTheCpuGpuJobsOnTheWorkersOwnGpu) {
  JobSpec spec;
  spec.set_device("cpu");
  EXPECT_EQ(*EngineDevice(spec, -1), -1);
  EXPECT_EQ(*EngineDevice(spec, 3), -1);  // a GPU worker runs CPU jobs on its CPU
  spec.set_device("cuda:0");
  EXPECT_EQ(*EngineDevice(spec, 3), 3);   // the worker's GPU, whatever N the job names
  auto on_cpu = EngineDevice(spec, -1);
  EXPECT_EQ(on_cpu.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(on_cpu.status().message()), HasSubstr("--device cuda:N"));
  spec.set_device("tpu:1");
  EXPECT_FALSE(EngineDevice(spec, 0).ok());
}

TEST(NeedsGroup, SeveralRanksOrNccl) {
  tagi::v1::Assignment a;
  a.set_world_size(1);
  EXPECT_FALSE(NeedsGroup(a));
  a.mutable_spec()->set_backend(JobSpec::NCCL);
  EXPECT_TRUE(NeedsGroup(a));
  a.mutable_spec()->set_backend(JobSpec::TCP_RING);
  a.set_world_size(2);
  EXPECT_TRUE(NeedsGroup(a));
}

tagi::v1::Assignment FixedJob(uint32_t world, uint32_t epochs) {
  tagi::v1::Assignment a;
  a.set_world_size(world);
  a.mutable_spec()->set_epochs(epochs);
  return a;
}

Snapshot At(uint64_t epoch, uint64_t step, uint64_t offset, uint64_t global_step, uint32_t world) {
  Snapshot s;
  s.epoch = epoch;
  s.step = step;
  s.offset = offset;
  s.global_step = global_step;
  s.world = world;
  return s;
}

TEST(CheckResumeCursor, AFixedWorldNeedsOneOfItsOwnSteps) {
  const auto a = FixedJob(2, 3);
  // 10 steps per epoch of a global batch of 16.
  EXPECT_EQ(CheckResumeCursor(At(1, 4, 64, 14, 2), a, 10, 16, 160), "");
  EXPECT_EQ(CheckResumeCursor(At(3, 0, 0, 30, 2), a, 10, 16, 160), "");  // the end
  EXPECT_THAT(CheckResumeCursor(At(1, 4, 64, 14, 3), a, 10, 16, 160),
              HasSubstr("taken at world 3; this job's world is fixed at 2"));
  EXPECT_THAT(CheckResumeCursor(At(1, 4, 65, 14, 2), a, 10, 16, 160),
              HasSubstr("is not a step of this job"));
  EXPECT_THAT(CheckResumeCursor(At(1, 4, 64, 15, 2), a, 10, 16, 160),
              HasSubstr("is not a step of this job"));
  EXPECT_THAT(CheckResumeCursor(At(1, 10, 160, 20, 2), a, 10, 16, 160),
              HasSubstr("is not a step of this job"));
  EXPECT_THAT(CheckResumeCursor(At(4, 0, 0, 40, 2), a, 10, 16, 160),
              HasSubstr("past the job's 3 epochs"));
  EXPECT_THAT(CheckResumeCursor(At(3, 1, 16, 31, 2), a, 10, 16, 160),
              HasSubstr("past the job's 3 epochs"));
}

TEST(CheckResumeCursor, AnElasticJobResumesAnywhereInAnEpoch) {
  auto a = FixedJob(3, 3);
  a.mutable_spec()->set_min_world_size(1);
  a.mutable_spec()->set_max_world_size(4);
  // Taken at world 2 (global batch 16), resumed at world 3 (global batch 24).
  EXPECT_EQ(CheckResumeCursor(At(1, 4, 64, 14, 2), a, 7, 24, 160), "");
  EXPECT_EQ(CheckResumeCursor(At(1, 0, 0, 10, 2), a, 7, 24, 160), "");
  EXPECT_THAT(CheckResumeCursor(At(1, 4, 160, 14, 2), a, 7, 24, 160),
              HasSubstr("offset 160 is past the epoch's 160 samples"));
}

TEST(ClassifyAttemptEnd, SuccessAndTheJobsOwnFailure) {
  EXPECT_TRUE(ClassifyAttemptEnd({absl::OkStatus()}).ok);
  // Before the group formed, a bad job (bad data, a wrong device) is the job's.
  const JobOutcome bad = ClassifyAttemptEnd({absl::InvalidArgumentError("bad CSV")});
  EXPECT_FALSE(bad.ok);
  EXPECT_FALSE(bad.retryable);
  EXPECT_EQ(bad.reason, "bad CSV");
  // ... but a broken connection is not.
  EXPECT_TRUE(ClassifyAttemptEnd({absl::UnavailableError("no route")}).retryable);
  EXPECT_TRUE(ClassifyAttemptEnd({absl::DeadlineExceededError("slow")}).retryable);
  EXPECT_TRUE(ClassifyAttemptEnd({absl::AbortedError("over")}).retryable);
  // After it formed, every failure is the group's.
  AttemptEnd in_group{absl::InvalidArgumentError("peer sent garbage")};
  in_group.in_group = true;
  EXPECT_TRUE(ClassifyAttemptEnd(in_group).retryable);
}

TEST(ClassifyAttemptEnd, CancellationsAndAborts) {
  AttemptEnd told{absl::CancelledError("stop")};
  told.told_to_stop = true;
  JobOutcome out = ClassifyAttemptEnd(told);
  EXPECT_TRUE(out.cancelled);
  EXPECT_FALSE(out.retryable);  // the user cancelled the job
  EXPECT_EQ(out.reason, "cancelled");
  AttemptEnd peer{absl::CancelledError("stop")};
  out = ClassifyAttemptEnd(peer);
  EXPECT_TRUE(out.retryable);  // a peer voted: the coordinator knows why
  EXPECT_THAT(out.reason, HasSubstr("a peer rank stopped the group"));
  AttemptEnd leaving{absl::CancelledError("stop")};
  leaving.shutting_down = true;
  leaving.told_to_stop = true;
  out = ClassifyAttemptEnd(leaving);
  EXPECT_TRUE(out.retryable);  // the job goes on without this worker
  EXPECT_THAT(out.reason, HasSubstr("shutting down"));
  AttemptEnd aborted{absl::InternalError("all-reduce failed")};
  aborted.aborted = true;
  aborted.abort_reason = "generation 3 is over";
  out = ClassifyAttemptEnd(aborted);
  EXPECT_TRUE(out.retryable);
  EXPECT_EQ(out.reason, "aborted: generation 3 is over (all-reduce failed)");
  // A rank alone stops on its abort through the stop vote: still an abort.
  AttemptEnd alone{absl::CancelledError("training stopped on request")};
  alone.aborted = true;
  alone.abort_reason = "generation 4 is over";
  out = ClassifyAttemptEnd(alone);
  EXPECT_FALSE(out.cancelled);
  EXPECT_TRUE(out.retryable);
  EXPECT_EQ(out.reason, "aborted: generation 4 is over (training stopped on request)");
  // Told to cancel and then aborted: the cancel is what the job asked for.
  alone.told_to_stop = true;
  EXPECT_EQ(ClassifyAttemptEnd(alone).reason, "cancelled");
}

// A failure the collective attributed to a peer names it for the
// coordinator; nothing else does.
TEST(ClassifyAttemptEnd, APeerTheCollectiveNamedIsTheSuspect) {
  const absl::Status lost = WithContext(
      WithPeerRank(absl::AbortedError("predecessor rank 2 closed its link in the middle of a call"),
                   2),
      "ring rank 0 of 3, AllReduceSum");
  ASSERT_EQ(PeerRankOf(lost), 2);  // the context keeps the payload
  AttemptEnd end{lost};
  end.in_group = true;
  end.rank = 0;
  JobOutcome out = ClassifyAttemptEnd(end);
  EXPECT_TRUE(out.retryable);
  EXPECT_EQ(out.suspect_rank, 2);
  EXPECT_THAT(out.reason, HasSubstr("ring rank 0 of 3, AllReduceSum: predecessor rank 2"));
  end.aborted = true;  // the coordinator ended the generation: nobody is named
  EXPECT_FALSE(ClassifyAttemptEnd(end).suspect_rank.has_value());
  end.aborted = false;
  end.rank = 2;  // a rank never names itself
  EXPECT_FALSE(ClassifyAttemptEnd(end).suspect_rank.has_value());
  AttemptEnd slow{absl::DeadlineExceededError("timed out")};
  slow.in_group = true;
  EXPECT_FALSE(ClassifyAttemptEnd(slow).suspect_rank.has_value());
  EXPECT_FALSE(PeerRankOf(absl::OkStatus()).has_value());
  EXPECT_TRUE(WithPeerRank(absl::OkStatus(), 1).ok());
}

// The evaluation batch: the job's (up to 256) for small networks, the
// training batch for one whose arena would grow by more than 64 MiB.
TEST(EvalBatchFor, LargeNetworksEvaluateInTheirTrainingBatch) {
  auto arch = [](const char* name) {
    auto job = LoadJobSpecFile(std::string(TAGI_SOURCE_DIR) + "/examples/" + name);
    EXPECT_TRUE(job.ok()) << job.status();
    auto a = engine::ArchitectureFromJobSpec(*job);
    EXPECT_TRUE(a.ok()) << a.status();
    return *a;
  };
  const spec::Architecture mlp = arch("fmnist_fnn.json");
  EXPECT_EQ(EvalBatchFor(mlp, 16, 256), 256u);
  EXPECT_EQ(EvalBatchFor(mlp, 512, 256), 256u);  // never above the evaluation batch asked
  const spec::Architecture resnet = arch("cifar10_resnet18.json");
  EXPECT_EQ(EvalBatchFor(resnet, 64, 256), 64u);
  EXPECT_EQ(EvalBatchFor(resnet, 1, 2), 2u);  // 1 more sample: within the slack
  EXPECT_EQ(EvalBatchFor(resnet, 0, 0), 1u);
}

TEST(AgentRules, WhatARefusalMeans) {
  EXPECT_EQ(OnRendezvousFailure(absl::NotFoundError("unknown worker")),
            RendezvousAction::kRegisterAgain);
  EXPECT_EQ(OnRendezvousFailure(absl::UnauthenticatedError("bad secret")),
            RendezvousAction::kNewIdentity);
  EXPECT_EQ(OnRendezvousFailure(absl::FailedPreconditionError("protocol 2")),
            RendezvousAction::kStop);
  EXPECT_EQ(OnRendezvousFailure(absl::UnavailableError("down")), RendezvousAction::kBackOff);
  EXPECT_EQ(OnRendezvousFailure(absl::DeadlineExceededError("slow")), RendezvousAction::kBackOff);
  EXPECT_TRUE(RetryRegistration(absl::UnavailableError("down")));
  EXPECT_FALSE(RetryRegistration(absl::UnauthenticatedError("join token")));
  EXPECT_FALSE(RetryRegistration(absl::FailedPreconditionError("protocol 2")));
}

}  // namespace
}  // namespace tagi
