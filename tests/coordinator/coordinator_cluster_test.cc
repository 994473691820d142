// The worker-facing half of the Coordinator: generation fencing, the
// job-scoped store, progress, model upload, silent workers and watching.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <atomic>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/coordinator_harness.h"

namespace tagi::coordinator::test {
namespace {

using ::testing::HasSubstr;

constexpr auto kAborted = absl::StatusCode::kAborted;
constexpr auto kNotFound = absl::StatusCode::kNotFound;

TEST_F(CoordinatorTest, CallsForAnotherGenerationAreAborted) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  const absl::Duration no_wait = absl::ZeroDuration();
  EXPECT_EQ(coord().StoreSet(job, 2, "k", "v").code(), kAborted);
  EXPECT_EQ(StoreGet(job, 2, "k", no_wait).status().code(), kAborted);
  EXPECT_EQ(StoreWait(job, 0, {"k"}, no_wait).code(), kAborted);
  EXPECT_EQ(coord().StoreAdd(job, 2, "n", 1).status().code(), kAborted);
  EXPECT_EQ(Report(job, w[0], 0, 1, /*gen=*/2).status().code(), kAborted);
  EXPECT_EQ(Upload(job, w[0], ModelBytes(), /*gen=*/2).code(), kAborted);
  EXPECT_EQ(Finish(job, w[1], 1, true, "", /*gen=*/2).code(), kAborted);
  // Nothing stale got through.
  EXPECT_EQ(State(job), tagi::v1::RUNNING);
  EXPECT_EQ(GetJob(job).progress().global_step(), 0u);
  EXPECT_EQ(Worker(w[1]).state(), "BUSY");
}

TEST_F(CoordinatorTest, CallsForAnUnknownJobAreNotFound) {
  Start(1);
  const std::string w = Register();
  const absl::Duration no_wait = absl::ZeroDuration();
  EXPECT_EQ(coord().StoreSet("job-9", 1, "k", "v").code(), kNotFound);
  EXPECT_EQ(StoreGet("job-9", 1, "k", no_wait).status().code(), kNotFound);
  EXPECT_EQ(StoreWait("job-9", 1, {"k"}, no_wait).code(), kNotFound);
  EXPECT_EQ(coord().StoreAdd("job-9", 1, "n", 1).status().code(), kNotFound);
  EXPECT_EQ(Report("job-9", w, 0).status().code(), kNotFound);
  EXPECT_EQ(Upload("job-9", w).code(), kNotFound);
  EXPECT_EQ(Finish("job-9", w, 0).code(), kNotFound);
}

TEST_F(CoordinatorTest, StoreSetGetWaitAndAddWorkWithinAJob) {
  Start(2);
  const std::string job = Submit(2);
  RegisterN(2);
  const absl::Duration no_wait = absl::ZeroDuration();
  ASSERT_TRUE(coord().StoreSet(job, 1, "nccl/unique_id", std::string("\0\1\2", 3)).ok());
  auto got = StoreGet(job, 1, "nccl/unique_id", no_wait);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, std::string("\0\1\2", 3));
  EXPECT_TRUE(StoreWait(job, 1, {"nccl/unique_id"}, no_wait).ok());
  EXPECT_EQ(AfterAdvancing(absl::Milliseconds(2),
                           [&] {
                             return StoreWait(job, 1, {"nccl/unique_id", "missing"},
                                              absl::Milliseconds(2));
                           })
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(StoreGet(job, 1, "missing", no_wait).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(*coord().StoreAdd(job, 1, "barrier", 1), 1);
  EXPECT_EQ(*coord().StoreAdd(job, 1, "barrier", 2), 3);
}

TEST_F(CoordinatorTest, StoreGetWaitsForAKeyAnotherRankSets) {
  Start(2);
  const std::string job = Submit(2);
  RegisterN(2);
  absl::StatusOr<std::string> got;
  std::thread rank1([&] { got = StoreGet(job, 1, "addr/0", absl::Seconds(30)); });
  ASSERT_TRUE(coord().StoreSet(job, 1, "addr/0", "10.0.0.1:4000").ok());
  rank1.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "10.0.0.1:4000");
}

TEST_F(CoordinatorTest, StoreKeysOfOneJobAreInvisibleToAnother) {
  Start(1);
  const std::string a = Submit(1);
  const std::string b = Submit(1);
  RegisterN(2);
  ASSERT_EQ(State(a), tagi::v1::RUNNING);
  ASSERT_EQ(State(b), tagi::v1::RUNNING);
  ASSERT_TRUE(coord().StoreSet(a, 1, "key", "of a").ok());
  EXPECT_EQ(StoreGet(b, 1, "key", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(*coord().StoreAdd(a, 1, "n", 5), 5);
  EXPECT_EQ(*coord().StoreAdd(b, 1, "n", 1), 1);
}

TEST_F(CoordinatorTest, StoreKeysAreDeletedWhenTheJobEnds) {
  Start(1);
  const std::string job = Submit(1);
  Register();
  ASSERT_TRUE(coord().StoreSet(job, 1, "key", "secret").ok());
  ASSERT_TRUE(coord().Cancel(job).ok());
  auto got = StoreGet(job, 1, "key", absl::ZeroDuration());
  EXPECT_FALSE(got.ok()) << "read " << *got << " after the job ended";
}

// coordinator.h: "a call for a job that is over, or for another generation,
// is Aborted". Set honours it; Get, Wait and Add do not (and Add re-creates
// a key under the dead job's prefix that nothing deletes).
TEST_F(CoordinatorTest, StoreCallsForAJobThatIsOverAreAborted) {
  Start(1);
  const std::string job = Submit(1);
  Register();
  ASSERT_TRUE(coord().Cancel(job).ok());
  const absl::Duration no_wait = absl::ZeroDuration();
  EXPECT_EQ(coord().StoreSet(job, 1, "k", "v").code(), kAborted);
  EXPECT_EQ(StoreGet(job, 1, "k", no_wait).status().code(), kAborted);
  EXPECT_EQ(StoreWait(job, 1, {"k"}, no_wait).code(), kAborted);
  EXPECT_EQ(coord().StoreAdd(job, 1, "n", 1).status().code(), kAborted);
}

TEST_F(CoordinatorTest, UploadWithABadChecksumIsDataLossAndTheJobDoesNotSucceed) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  std::string corrupt = ModelBytes();
  corrupt[3] ^= 0x10;
  EXPECT_EQ(Upload(job, w[0], corrupt).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(coord().ModelFile(job).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Finish(job, w[0], 0).ok());
  ASSERT_TRUE(Finish(job, w[1], 1).ok());
  EXPECT_NE(State(job), tagi::v1::SUCCEEDED);
  EXPECT_EQ(coord().ModelFile(job).status().code(), absl::StatusCode::kFailedPrecondition);
}

// Nothing is stored unverified: an upload must be a model file of the
// job's network holding values a training could (finite means, positive
// variances), and its checksum is the coordinator's own.
TEST(VerifyModelUploadTest, RefusesAnythingButAModelOfTheJobsNetworkWithSaneValues) {
  const tagi::v1::JobSpec spec = Spec(1);
  auto arch = engine::ArchitectureFromJobSpec(spec);
  ASSERT_TRUE(arch.ok()) << arch.status();
  const size_t n = arch->num_parameters();
  std::vector<float> params(2 * n, 0.01f);
  const std::string good = engine::EncodeModelFile(*arch, {}, params);
  const std::string sum = FingerprintHex(ModelFingerprint(params.data(), params.size(), nullptr, 0));
  auto ok = VerifyModelUpload(spec, sum, good);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, sum);
  EXPECT_EQ(*VerifyModelUpload(spec, "", good), sum);
  auto refused = [&](const std::string& bytes, const std::string& claimed = "") {
    auto r = VerifyModelUpload(spec, claimed, bytes);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    return std::string(r.status().message());
  };
  EXPECT_THAT(refused(good, "00112233deadbeef"), HasSubstr("claims checksum 00112233deadbeef"));
  // 1,164 bytes of text with a valid CRC (the attack of issue 31).
  std::string text(1160, 'x');
  const uint32_t crc = Crc32(text.data(), text.size());
  for (int i = 0; i < 4; ++i) text.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  EXPECT_THAT(refused(text), HasSubstr("is not a model file"));
  std::vector<float> bad = params;
  bad[0] = std::nanf("");
  EXPECT_THAT(refused(engine::EncodeModelFile(*arch, {}, bad)),
              HasSubstr("the mean of parameter 0"));
  bad = params;
  bad[n + 5] = 0.0f;
  EXPECT_THAT(refused(engine::EncodeModelFile(*arch, {}, bad)),
              HasSubstr("the variance of parameter 5"));
  bad = params;
  bad[n + 6] = -std::numeric_limits<float>::infinity();
  EXPECT_THAT(refused(engine::EncodeModelFile(*arch, {}, bad)),
              HasSubstr("the variance of parameter 6"));
  // Another network: one more hidden unit.
  engine::Architecture other = *arch;
  other.layers[0].out += 1;
  other.layers[2].in += 1;
  ASSERT_TRUE(engine::ValidateArchitecture(other).ok());
  EXPECT_THAT(refused(engine::EncodeModelFile(other, {}, std::vector<float>(
                                                             2 * other.num_parameters(), 0.01f))),
              HasSubstr("is not this job's network"));
}

TEST_F(CoordinatorTest, AModelOfTextOrNaNsIsRefusedCountedAndTheJobDoesNotSucceed) {
  Start(1);
  const std::string job = Submit(1);
  const auto w = RegisterN(1);
  std::string text(1160, 'x');
  const uint32_t crc = Crc32(text.data(), text.size());
  for (int i = 0; i < 4; ++i) text.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  EXPECT_EQ(Upload(job, w[0], text).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coord().Stats().models_rejected, 1u);
  std::vector<float> nan_means(2 * ExampleParameterCount(), 0.01f);
  nan_means[7] = std::nanf("");
  auto arch = engine::ArchitectureFromJobSpec(Spec(1));
  ASSERT_TRUE(arch.ok());
  EXPECT_EQ(Upload(job, w[0], engine::EncodeModelFile(*arch, {}, nan_means)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(coord().Stats().models_rejected, 2u);
  EXPECT_EQ(coord().ModelFile(job).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Finish(job, w[0], 0).ok());
  EXPECT_NE(State(job), tagi::v1::SUCCEEDED);
}

TEST(CheckSnapshotValuesTest, RefusesTheWrongSizeAndValuesNoTrainingMakes) {
  const tagi::v1::JobSpec spec = Spec(1);
  auto snapshot = DecodeSnapshot(ExampleSnapshotBytes("job-1", 10, 0, 10));
  ASSERT_TRUE(snapshot.ok()) << snapshot.status();
  EXPECT_TRUE(CheckSnapshotValues(spec, *snapshot).ok());
  Snapshot s = *snapshot;
  s.parameters[3] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(CheckSnapshotValues(spec, s).message(), HasSubstr("the mean of parameter 3"));
  s = *snapshot;
  s.parameters.back() = 0.0f;
  EXPECT_THAT(CheckSnapshotValues(spec, s).message(), HasSubstr("the variance of parameter"));
  s = *snapshot;
  s.parameters.resize(16);
  EXPECT_THAT(CheckSnapshotValues(spec, s).message(), HasSubstr("16 parameter values"));
}

TEST_F(CoordinatorTest, OnlyRankZeroMayUploadTheModel) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  EXPECT_EQ(Upload(job, w[1]).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Upload(job, "w-77").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(GetJob(job).model_bytes(), 0u);
  EXPECT_EQ(coord().ModelFile(job).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, FinishJobFromAWorkerThatIsNotThatRankIsDenied) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  ASSERT_TRUE(Upload(job, w[0]).ok());
  ASSERT_TRUE(Finish(job, w[1], 1).ok());
  EXPECT_EQ(Finish(job, w[1], 0).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Finish(job, w[0], 5).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Finish(job, w[1], 0, /*ok=*/false, "impostor").code(),
            absl::StatusCode::kPermissionDenied);
  // Rank 0 has not finished: the job still runs and w-1 is still busy.
  EXPECT_EQ(State(job), tagi::v1::RUNNING);
  EXPECT_EQ(Worker(w[0]).state(), "BUSY");
  ASSERT_TRUE(Finish(job, w[0], 0).ok());
  EXPECT_EQ(State(job), tagi::v1::SUCCEEDED);
}

// A flood of registrations that never check in again holds bounded memory:
// once gone, all but membership.keep_gone_workers of them are forgotten;
// one that comes back with its id is adopted again.
TEST_F(CoordinatorTest, GoneWorkersBeyondTheKeepAreForgotten) {
  CoordinatorOptions o = Options(2);
  o.membership.keep_gone_workers = 3;
  Start(std::move(o));
  const auto w = RegisterN(10);
  clock_.Advance(absl::Seconds(4));  // past the 3 s timeout: all gone
  coord().Tick();
  EXPECT_EQ(coord().Stats().workers_by_state["GONE"], 3);
  const auto listed = coord().ListWorkers();
  EXPECT_EQ(listed.size(), 3u);
  for (const auto& info : listed) {
    EXPECT_TRUE(info.id() == w[7] || info.id() == w[8] || info.id() == w[9]) << info.id();
  }
  const std::string again = Register();
  EXPECT_EQ(coord().Stats().workers_by_state["IDLE"], 1);
  EXPECT_NE(again, w[0]);  // a new registration gets a new id
}

TEST_F(CoordinatorTest, SilentWorkerEndsItsGenerationAndTheJobResumesWhenItTalksAgain) {
  Start(2);  // heartbeat timeout 3 s
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(Report(job, w[0], 0).ok());  // rank 0 keeps talking, rank 1 is silent
  coord().Tick();
  EXPECT_EQ(State(job), tagi::v1::RUNNING);  // 2 s of silence is within the timeout

  clock_.Advance(absl::Seconds(2));
  coord().Tick();
  const tagi::v1::Job failed = GetJob(job);
  EXPECT_EQ(failed.state(), tagi::v1::PENDING);
  EXPECT_THAT(failed.reason(), HasSubstr("recovering"));
  EXPECT_THAT(failed.reason(), HasSubstr(w[1]));
  EXPECT_EQ(failed.restarts(), 1u);
  ASSERT_EQ(failed.recoveries_size(), 1);
  EXPECT_THAT(failed.recoveries(0).reason(), HasSubstr("missed heartbeats"));
  EXPECT_EQ(Worker(w[1]).state(), "GONE");
  EXPECT_EQ(Worker(w[0]).state(), "IDLE");
  auto reply = Report(job, w[0], 0);  // the survivor's next report
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->directive(), tagi::v1::ABORT);
  EXPECT_THAT(reply->reason(), HasSubstr(w[1]));

  // Both ask for work again: generation 2 on the same ranks.
  auto back = Rendezvous(w[1], absl::ZeroDuration());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(State(job), tagi::v1::PENDING);  // w-1 has not asked yet
  const tagi::v1::Assignment a0 = AssignmentOf(w[0]);
  EXPECT_EQ(a0.generation(), 2u);
  EXPECT_EQ(a0.rank(), 0u);
  EXPECT_EQ(AssignmentOf(w[1]).rank(), 1u);
  EXPECT_EQ(State(job), tagi::v1::RUNNING);
}

TEST_F(CoordinatorTest, SilentIdleWorkerIsGoneAndNotGivenAJob) {
  Start(1);
  const std::string w = Register();
  clock_.Advance(absl::Seconds(4));
  coord().Tick();
  EXPECT_EQ(Worker(w).state(), "GONE");
  const std::string job = Submit(1);
  EXPECT_EQ(State(job), tagi::v1::PENDING);
  // It registers again under its id: live, idle, and placed.
  tagi::v1::RegisterRequest again;
  again.set_worker_id(w);
  EXPECT_EQ(coord().Register(again, "peer", coord().WorkerSecret(again.worker_id())).worker_id(), w);
  EXPECT_EQ(State(job), tagi::v1::RUNNING);
  EXPECT_EQ(Worker(w).state(), "BUSY");
}

TEST_F(CoordinatorTest, ModelFileIsRefusedBeforeSuccessAndServedAfter) {
  Start(1);
  const std::string job = Submit(1);
  EXPECT_EQ(coord().ModelFile(job).status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string w = Register();
  const std::string bytes = ModelBytes("the final parameters of job-1, in full");
  ASSERT_TRUE(Upload(job, w, bytes).ok());
  EXPECT_EQ(coord().ModelFile(job).status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Finish(job, w, 0).ok());
  ASSERT_EQ(State(job), tagi::v1::SUCCEEDED);
  auto model = coord().ModelFile(job);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(*model, bytes);
}

// coordinator.h: "FailedPrecondition until the job SUCCEEDED". The model of
// an attempt that failed after rank 0 uploaded must not be served.
TEST_F(CoordinatorTest, ModelFileOfAJobThatFailedAfterTheUploadIsRefused) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  ASSERT_TRUE(Upload(job, w[0]).ok());
  ASSERT_TRUE(Finish(job, w[1], 1, /*ok=*/false, "NaN in the deltas").ok());
  ASSERT_EQ(State(job), tagi::v1::FAILED);
  EXPECT_EQ(coord().ModelFile(job).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(CoordinatorTest, ModelIsWrittenUnderTheStateDirectory) {
  ScratchDir dir;
  CoordinatorOptions options = Options(1);
  options.state_dir = dir.path().string();
  Start(options);
  const std::string job = Submit(1);
  const std::string w = Register();
  const std::string bytes = ModelBytes("parameters kept on disk, not in memory");
  ASSERT_TRUE(Upload(job, w, bytes).ok());
  ASSERT_TRUE(Finish(job, w, 0).ok());
  coord().FlushState();  // final once the model and the record are on disk
  ASSERT_EQ(State(job), tagi::v1::SUCCEEDED);

  const std::filesystem::path models = dir.path() / "models";
  ASSERT_TRUE(std::filesystem::is_directory(models));
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(models)) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_THAT(files[0].filename().string(), HasSubstr(job));
  std::ifstream in(files[0], std::ios::binary);
  std::stringstream on_disk;
  on_disk << in.rdbuf();
  EXPECT_EQ(on_disk.str(), bytes);
  auto served = coord().ModelFile(job);
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ(*served, bytes);
}

TEST_F(CoordinatorTest, WaitForChangeReturnsAtOnceWhenTheJobChangedAndWaitsOtherwise) {
  Start(2);
  const std::string job = Submit(2);
  uint64_t seen = 0;
  absl::Time start = absl::Now();
  auto first = coord().WaitForChange(job, seen, absl::Seconds(50));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(25));
  EXPECT_EQ(first->state(), tagi::v1::PENDING);
  EXPECT_GT(seen, 0u);

  const uint64_t before = seen;
  auto unchanged = AfterAdvancing(absl::Milliseconds(5), [&] {
    return coord().WaitForChange(job, seen, absl::Milliseconds(5));
  });
  ASSERT_TRUE(unchanged.ok()) << unchanged.status();
  EXPECT_EQ(seen, before);
  EXPECT_EQ(unchanged->state(), tagi::v1::PENDING);

  RegisterN(2);  // the job starts
  start = absl::Now();
  auto started = coord().WaitForChange(job, seen, absl::Seconds(50));
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(25));
  EXPECT_EQ(started->state(), tagi::v1::RUNNING);
  EXPECT_GT(seen, before);
}

TEST_F(CoordinatorTest, WaitForChangeEndsAtItsDeadlineOnTheCoordinatorsClock) {
  Start(1);
  const std::string job = Submit(1);
  uint64_t seen = 0;
  ASSERT_TRUE(coord().WaitForChange(job, seen, absl::ZeroDuration()).ok());
  std::atomic<bool> returned{false};
  std::thread watcher([&] {
    EXPECT_TRUE(coord().WaitForChange(job, seen, absl::Seconds(10)).ok());
    returned = true;
  });
  ASSERT_TRUE(clock_.AwaitWaiters(1));
  clock_.Advance(absl::Seconds(9));
  absl::SleepFor(absl::Milliseconds(50));  // real time is not the coordinator's
  EXPECT_FALSE(returned.load());
  clock_.Advance(absl::Seconds(1));
  watcher.join();
  EXPECT_TRUE(returned.load());
  // A longer wait than max_wait (60 s here) ends at max_wait.
  const uint64_t before = seen;
  auto capped = AfterAdvancing(absl::Seconds(60), [&] {
    return coord().WaitForChange(job, seen, absl::Hours(1));
  });
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(seen, before);
}

TEST_F(CoordinatorTest, WaitForChangeWakesAWatcherWhenTheJobChanges) {
  Start(1);
  const std::string job = Submit(1);
  uint64_t seen = 0;
  ASSERT_TRUE(coord().WaitForChange(job, seen, absl::ZeroDuration()).ok());
  absl::StatusOr<tagi::v1::Job> got;
  const absl::Time start = absl::Now();
  std::thread watcher([&] { got = coord().WaitForChange(job, seen, absl::Seconds(50)); });
  ASSERT_TRUE(coord().Cancel(job).ok());
  watcher.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->state(), tagi::v1::CANCELLED);
  EXPECT_LT(absl::Now() - start, absl::Seconds(25));
}

TEST_F(CoordinatorTest, ProgressOfRankZeroUpdatesTheJobAndOfOtherRanksDoesNot) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  auto reply = Report(job, w[1], 1, /*global_step=*/7);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->directive(), tagi::v1::CONTINUE);
  EXPECT_EQ(GetJob(job).progress().global_step(), 0u);

  reply = Report(job, w[0], 0, /*global_step=*/5);
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->directive(), tagi::v1::CONTINUE);
  EXPECT_EQ(GetJob(job).progress().global_step(), 5u);
  EXPECT_EQ(GetJob(job).progress().total_steps(), 100u);
}

TEST_F(CoordinatorTest, ProgressReportsKeepAWorkerAlive) {
  Start(1);
  const std::string job = Submit(1);
  const std::string w = Register();
  for (int i = 0; i < 5; ++i) {
    clock_.Advance(absl::Seconds(2));
    ASSERT_TRUE(Report(job, w, 0).ok());
    coord().Tick();
  }
  EXPECT_EQ(State(job), tagi::v1::RUNNING);
  EXPECT_EQ(Worker(w).state(), "BUSY");
}

}  // namespace
}  // namespace tagi::coordinator::test
