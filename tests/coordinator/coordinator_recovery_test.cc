// Failures and recovery in the Coordinator: sessions, failed generations,
// placement of the next one, snapshots and restarts from the state dir.
// FakeClock only; nothing sleeps.
#include <cmath>
#include <filesystem>
#include <optional>
#include <fstream>

#include "absl/strings/str_format.h"
#include "common/file_util.h"
#include "common/snapshot.h"
#include "coordinator_harness.h"
#include "gmock/gmock.h"

namespace tagi::coordinator::test {
namespace {

using ::testing::HasSubstr;

std::string SnapshotBytes(const std::string& job, uint64_t global_step, float fill = 0.5f) {
  return ExampleSnapshotBytes(job, global_step, 0, global_step, fill);
}

class RecoveryTest : public CoordinatorTest {
 protected:
  absl::Status FinishRetryable(const std::string& job, const std::string& worker, uint32_t rank,
                               uint64_t gen, const std::string& reason = "the ring broke",
                               std::optional<uint32_t> suspect = std::nullopt) {
    tagi::v1::FinishJobRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    req.set_generation(gen);
    req.set_rank(rank);
    req.set_ok(false);
    req.set_retryable(true);
    req.set_reason(reason);
    if (suspect.has_value()) req.set_suspect_rank(*suspect);
    return coord().FinishJob(req);
  }
  // Rank `rank` of generation `gen` saw its ring break, naming `suspect`.
  absl::Status FinishNaming(const std::string& job, const std::string& worker, uint32_t rank,
                            uint64_t gen, uint32_t suspect) {
    return FinishRetryable(
        job, worker, rank, gen,
        absl::StrFormat("successor rank %d closed its link in the middle of a call", suspect),
        suspect);
  }
};

TEST_F(RecoveryTest, BrokenSessionEndsTheGenerationAndASpareTakesTheRank) {
  Start(3);
  const std::string job = Submit(2);
  const auto w = RegisterN(3);  // w-1, w-2 run the job; w-3 is the spare
  ASSERT_EQ(State(job), tagi::v1::RUNNING);
  const uint64_t t1 = Open(w[0]);
  const uint64_t t2 = Open(w[1]);
  ASSERT_TRUE(Report(job, w[0], 0, 40).ok());
  ASSERT_TRUE(Report(job, w[1], 1, 42).ok());

  coord().CloseSession(w[1], t2, "connection lost");
  tagi::v1::Job j = GetJob(job);
  EXPECT_EQ(j.state(), tagi::v1::PENDING);
  EXPECT_EQ(Worker(w[1]).state(), "GONE");
  ASSERT_EQ(j.recoveries_size(), 1);
  EXPECT_EQ(j.recoveries(0).failed_generation(), 1u);
  EXPECT_EQ(j.recoveries(0).failed_at_step(), 42u);  // the highest any rank reported
  EXPECT_THAT(j.recoveries(0).reason(), HasSubstr("connection lost"));
  // The survivor is told at once on its session.
  const auto directives = Drain(w[0], t1);
  ASSERT_EQ(directives.size(), 1u);
  EXPECT_EQ(directives[0].directive(), tagi::v1::ABORT);
  EXPECT_EQ(directives[0].generation(), 1u);
  // Generation 1 is over: its store and progress calls are refused.
  EXPECT_TRUE(absl::IsAborted(coord().StoreSet(job, 1, "k", "v")));

  // The spare was idle and checked in; the survivor keeps rank 0 once it asks.
  const tagi::v1::Assignment a0 = AssignmentOf(w[0]);
  const tagi::v1::Assignment a2 = AssignmentOf(w[2]);
  EXPECT_EQ(a0.generation(), 2u);
  EXPECT_EQ(a0.rank(), 0u);
  EXPECT_EQ(a2.rank(), 1u);
  EXPECT_FALSE(a0.resume());  // no snapshot was stored: from the seed
  j = GetJob(job);
  EXPECT_EQ(j.state(), tagi::v1::RUNNING);
  EXPECT_EQ(j.recoveries(0).new_generation(), 2u);
  EXPECT_EQ(j.recoveries(0).resumed_from_step(), 0u);
  EXPECT_THAT(j.recoveries(0).snapshot(), HasSubstr("from the job seed"));
  EXPECT_TRUE(absl::IsAborted(Report(job, w[0], 0, 1, /*gen=*/1).status()));

  // The first step of the new generation completes the record.
  tagi::v1::ProgressReport report;
  report.set_worker_id(w[0]);
  report.set_job_id(job);
  report.set_generation(2);
  report.mutable_progress()->set_global_step(1);
  report.mutable_progress()->set_first_step_ms(j.recoveries(0).detected_ms() + 700);
  ASSERT_TRUE(coord().ReportProgress(report).ok());
  j = GetJob(job);
  EXPECT_EQ(j.recoveries(0).first_step_ms() - j.recoveries(0).detected_ms(), 700);
  EXPECT_EQ(j.recoveries(0).steps_redone(), 42u);
  const CoordinatorStats stats = coord().Stats();
  ASSERT_FALSE(stats.jobs.empty());
  EXPECT_EQ(stats.jobs[0].restarts, 1u);
  EXPECT_NEAR(stats.jobs[0].recover_seconds, 0.7, 1e-9);
  EXPECT_EQ(stats.workers_failed, 1u);
}

TEST_F(RecoveryTest, AWorkerThatFailedWithItsGroupIsNotPlacedBeforeItAsksAgain) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  ASSERT_TRUE(FinishRetryable(job, w[0], 0, 1).ok());  // rank 0 saw the ring break
  EXPECT_EQ(State(job), tagi::v1::PENDING);
  EXPECT_EQ(GetJob(job).restarts(), 1u);
  ASSERT_TRUE(Rendezvous(w[0], absl::ZeroDuration()).ok());
  coord().Tick();
  EXPECT_EQ(State(job), tagi::v1::PENDING);  // w-2 (maybe dead) has not asked
  ASSERT_TRUE(Rendezvous(w[1], absl::ZeroDuration()).ok());
  EXPECT_EQ(State(job), tagi::v1::RUNNING);
  EXPECT_EQ(GetJob(job).generation(), 2u);
}

TEST_F(RecoveryTest, JobFailsAfterMaxRestarts) {
  CoordinatorOptions o = Options(1);
  o.max_restarts = 2;
  Start(o);
  const std::string job = Submit(1);
  const std::string w = Register();
  for (uint64_t gen = 1; gen <= 2; ++gen) {
    ASSERT_EQ(AssignmentOf(w).generation(), gen);
    ASSERT_TRUE(FinishRetryable(job, w, 0, gen).ok());
  }
  ASSERT_EQ(AssignmentOf(w).generation(), 3u);
  ASSERT_TRUE(FinishRetryable(job, w, 0, 3).ok());
  const tagi::v1::Job j = GetJob(job);
  EXPECT_EQ(j.state(), tagi::v1::FAILED);
  EXPECT_THAT(j.reason(), HasSubstr("gave up after 2 restarts"));
  EXPECT_EQ(Worker(w).state(), "IDLE");
}

// A step whose all-reduced values held NaN or Inf ends the generation (it
// was never applied); after a snapshot came it may happen once more, but
// twice from the same snapshot is no passing fault: the job fails, saying so.
TEST_F(RecoveryTest, ANonFiniteStepTwiceFromTheSameSnapshotFailsTheJob) {
  Start(1);
  const std::string job = Submit(1);
  const std::string w = Register();
  const std::string nan = "non-finite reduced step: value 7 of 100 of the all-reduced deltas is nan";
  ASSERT_TRUE(FinishRetryable(job, w, 0, 1, nan).ok());
  ASSERT_EQ(AssignmentOf(w).generation(), 2u);
  ASSERT_TRUE(coord().UploadSnapshot(w, job, 2, 10, SnapshotBytes(job, 10)).ok());
  ASSERT_TRUE(FinishRetryable(job, w, 0, 2, nan).ok());  // the snapshot moved on: once more
  ASSERT_EQ(AssignmentOf(w).generation(), 3u);
  EXPECT_EQ(AssignmentOf(w).resume_global_step(), 10u);
  ASSERT_TRUE(FinishRetryable(job, w, 0, 3, nan).ok());
  const tagi::v1::Job j = GetJob(job);
  EXPECT_EQ(j.state(), tagi::v1::FAILED);
  EXPECT_THAT(j.reason(), HasSubstr("non-finite reduced step"));
  EXPECT_THAT(j.reason(), HasSubstr("again after resuming from step 10"));
}

// Rank 0 of a generation that has just ended (another rank failed) may
// still upload a snapshot it took before: newer than the stored one, it is
// kept (ABORTED tells rank 0 its generation is over) and the next
// generation resumes from it; an older one, or one from another rank or
// after the next generation formed, is refused.
TEST_F(RecoveryTest, ANewerSnapshotOfTheGenerationThatJustEndedIsKept) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 1, 10, SnapshotBytes(job, 10)).ok());
  ASSERT_TRUE(FinishRetryable(job, w[1], 1, 1).ok());  // rank 1 fails the generation
  ASSERT_EQ(State(job), tagi::v1::PENDING);
  EXPECT_TRUE(absl::IsAborted(coord().UploadSnapshot(w[0], job, 1, 5, SnapshotBytes(job, 5))));
  EXPECT_TRUE(absl::IsAborted(coord().UploadSnapshot(w[1], job, 1, 30, SnapshotBytes(job, 30))));
  const absl::Status kept = coord().UploadSnapshot(w[0], job, 1, 20, SnapshotBytes(job, 20));
  EXPECT_TRUE(absl::IsAborted(kept)) << kept;
  EXPECT_THAT(kept.message(), HasSubstr("is kept"));
  EXPECT_EQ(GetJob(job).snapshot_step(), 20u);
  ASSERT_TRUE(Rendezvous(w[1], absl::ZeroDuration()).ok());  // both ask for work again
  ASSERT_EQ(AssignmentOf(w[0]).generation(), 2u);
  EXPECT_EQ(AssignmentOf(w[0]).resume_global_step(), 20u);
  EXPECT_TRUE(absl::IsAborted(coord().UploadSnapshot(w[0], job, 1, 30, SnapshotBytes(job, 30))));
  EXPECT_EQ(GetJob(job).snapshot_step(), 20u);
}

TEST(RestartDelayTest, FreeAtFirstThenDoublingToAMinute) {
  EXPECT_EQ(RestartDelay(0), absl::ZeroDuration());
  EXPECT_EQ(RestartDelay(kFreeQuickRestarts), absl::ZeroDuration());
  EXPECT_EQ(RestartDelay(kFreeQuickRestarts + 1), absl::Milliseconds(500));
  EXPECT_EQ(RestartDelay(kFreeQuickRestarts + 2), absl::Seconds(1));
  EXPECT_EQ(RestartDelay(kFreeQuickRestarts + 3), absl::Seconds(2));
  EXPECT_EQ(RestartDelay(100), absl::Seconds(60));
}

// Generations that fail right after they start (a bad worker placed again
// and again) wait before the next one, so 100 restarts take hours, not
// seconds; one that ran a while resets the count.
TEST_F(RecoveryTest, QuickFailuresInARowWaitBeforeTheNextGeneration) {
  Start(1);
  const std::string job = Submit(1);
  const std::string w = Register();
  const int64_t started = GetJob(job).start_time_ms();
  EXPECT_GT(started, 0);
  for (uint64_t gen = 1; gen <= 3; ++gen) {
    ASSERT_EQ(AssignmentOf(w).generation(), gen);
    ASSERT_TRUE(FinishRetryable(job, w, 0, gen).ok());
    clock_.Advance(absl::Milliseconds(10));
  }
  ASSERT_EQ(AssignmentOf(w).generation(), 4u);
  ASSERT_TRUE(FinishRetryable(job, w, 0, 4).ok());  // the fourth quick failure
  ASSERT_TRUE(Rendezvous(w, absl::ZeroDuration()).ok());
  EXPECT_EQ(State(job), tagi::v1::PENDING);
  EXPECT_THAT(GetJob(job).reason(), HasSubstr("recovering after 500ms (4 generations in a row"));
  clock_.Advance(absl::Milliseconds(499));
  coord().Tick();
  EXPECT_EQ(State(job), tagi::v1::PENDING);
  clock_.Advance(absl::Milliseconds(2));
  coord().Tick();
  ASSERT_EQ(State(job), tagi::v1::RUNNING);
  EXPECT_EQ(AssignmentOf(w).generation(), 5u);
  // This one runs a while before it fails: the next starts at once.
  clock_.Advance(absl::Seconds(11));
  ASSERT_TRUE(Report(job, w, 0, 50, 5).ok());
  ASSERT_TRUE(FinishRetryable(job, w, 0, 5).ok());
  EXPECT_EQ(AssignmentOf(w).generation(), 6u);
  // `started` is the first generation's, whatever came after.
  EXPECT_EQ(GetJob(job).start_time_ms(), started);
}

TEST_F(RecoveryTest, SnapshotsComeFromRankZeroAndTheNextGenerationResumesFromTheNewest) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  EXPECT_TRUE(absl::IsPermissionDenied(
      coord().UploadSnapshot(w[1], job, 1, 10, SnapshotBytes(job, 10))));
  std::string corrupt = SnapshotBytes(job, 10);
  corrupt[corrupt.size() / 2] ^= 1;
  EXPECT_TRUE(absl::IsDataLoss(coord().UploadSnapshot(w[0], job, 1, 10, corrupt)));
  EXPECT_TRUE(absl::IsInvalidArgument(
      coord().UploadSnapshot(w[0], job, 1, 11, SnapshotBytes(job, 10))));  // step mismatch
  EXPECT_TRUE(absl::IsAborted(coord().UploadSnapshot(w[0], job, 7, 10, SnapshotBytes(job, 10))));
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 1, 10, SnapshotBytes(job, 10, 0.1f)).ok());
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 1, 20, SnapshotBytes(job, 20, 0.2f)).ok());
  EXPECT_EQ(GetJob(job).snapshot_step(), 20u);
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 1, 15, SnapshotBytes(job, 15, 0.15f)).ok());
  EXPECT_EQ(GetJob(job).snapshot_step(), 20u);  // a late, older upload does not replace it
  EXPECT_TRUE(absl::IsNotFound(coord().ResumeSnapshot(w[0], job, 1).status()));  // gen 1: seed

  ASSERT_TRUE(FinishRetryable(job, w[1], 1, 1).ok());
  ASSERT_TRUE(Rendezvous(w[0], absl::ZeroDuration()).ok());
  const tagi::v1::Assignment a = AssignmentOf(w[1]);
  EXPECT_TRUE(a.resume());
  EXPECT_EQ(a.resume_global_step(), 20u);
  auto bytes = coord().ResumeSnapshot(w[1], job, 2);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto decoded = DecodeSnapshot(**bytes);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(decoded->global_step, 20u);
  EXPECT_EQ(decoded->parameters[0], 0.2f);
  EXPECT_TRUE(absl::IsPermissionDenied(coord().ResumeSnapshot("w-99", job, 2).status()));
  EXPECT_TRUE(absl::IsAborted(coord().ResumeSnapshot(w[1], job, 1).status()));
}

TEST_F(RecoveryTest, CorruptNewestSnapshotOnDiskIsSkippedAndThePreviousOneUsed) {
  ScratchDir dir;
  CoordinatorOptions o = Options(1);
  o.state_dir = dir.path().string();
  Start(o);
  const std::string job = Submit(1);
  const std::string w = Register();
  ASSERT_TRUE(coord().UploadSnapshot(w, job, 1, 10, SnapshotBytes(job, 10, 0.1f)).ok());
  coord().FlushSnapshots();  // (a newer upload replaces one still waiting for the disk)
  ASSERT_TRUE(coord().UploadSnapshot(w, job, 1, 20, SnapshotBytes(job, 20, 0.2f)).ok());
  coord().FlushSnapshots();
  EXPECT_EQ(coord().Stats().snapshots_stored, 2u);
  const auto newest = dir.path() / "snapshots" / job /
                      "snapshot-000000000020.tagisnap";
  auto bytes = ReadFile(newest.string(), 1 << 20);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  (*bytes)[bytes->size() / 2] ^= 0x40;  // one flipped bit on disk
  std::ofstream(newest, std::ios::binary | std::ios::trunc) << *bytes;

  // A worker failure resumes from the copy the coordinator received...
  ASSERT_TRUE(FinishRetryable(job, w, 0, 1).ok());
  EXPECT_EQ(AssignmentOf(w).resume_global_step(), 20u);
  // ...a restarted coordinator from the disk, where the newest file is bad.
  coord_.reset();
  Start(o);
  tagi::v1::RegisterRequest again;
  again.set_worker_id(w);
  ASSERT_EQ(coord().Register(again, "peer", coord().WorkerSecret(again.worker_id())).worker_id(), w);
  const tagi::v1::Assignment a = AssignmentOf(w);
  EXPECT_EQ(a.resume_global_step(), 10u);
  const tagi::v1::Job j = GetJob(job);
  ASSERT_EQ(j.recoveries_size(), 2);
  EXPECT_THAT(j.recoveries(0).snapshot(), HasSubstr("step 20 as received"));
  EXPECT_EQ(j.recoveries(1).reason(), "the coordinator restarted");
  EXPECT_THAT(j.recoveries(1).snapshot(), HasSubstr("snapshot-000000000010.tagisnap"));
  EXPECT_THAT(j.recoveries(1).snapshot(), HasSubstr("skipped snapshot-000000000020.tagisnap"));
  EXPECT_THAT(j.recoveries(1).snapshot(), HasSubstr("checksum"));
  EXPECT_EQ(coord().Stats().snapshots_rejected, 1u);
}

TEST_F(RecoveryTest, RestartedCoordinatorReloadsJobsAndResumesRunningOnes) {
  ScratchDir dir;
  CoordinatorOptions o = Options(2);
  o.state_dir = dir.path().string();
  Start(o);
  const std::string done = Submit(1);
  const std::string running = Submit(2);
  const std::string queued = Submit(2);
  const auto w = RegisterN(3);
  ASSERT_EQ(State(done), tagi::v1::RUNNING);
  ASSERT_EQ(State(running), tagi::v1::RUNNING);
  Complete(done);
  coord().FlushState();
  ASSERT_EQ(State(done), tagi::v1::SUCCEEDED);
  const std::string w_done = GetJob(done).workers(0);
  const tagi::v1::Job before = GetJob(running);
  ASSERT_TRUE(coord()
                  .UploadSnapshot(before.workers(0), running, before.generation(), 30,
                                  SnapshotBytes(running, 30))
                  .ok());

  // The "crash": a new coordinator on the same state dir.
  coord_.reset();
  Start(o);
  EXPECT_EQ(State(done), tagi::v1::SUCCEEDED);
  EXPECT_TRUE(coord().ModelFile(done).ok());
  EXPECT_EQ(State(queued), tagi::v1::PENDING);
  tagi::v1::Job j = GetJob(running);
  EXPECT_EQ(j.state(), tagi::v1::PENDING);
  EXPECT_EQ(j.restarts(), 1u);
  EXPECT_EQ(j.generation(), before.generation());
  ASSERT_EQ(j.recoveries_size(), 1);
  EXPECT_EQ(j.recoveries(0).reason(), "the coordinator restarted");
  // A worker of the old generation is refused; the new one gets its old rank.
  EXPECT_TRUE(absl::IsAborted(coord().StoreSet(running, before.generation(), "k", "v")));
  for (int r = 1; r >= 0; --r) (void)Open(before.workers(r));  // reconnect, ids adopted
  const tagi::v1::Assignment a = AssignmentOf(before.workers(1));
  ASSERT_TRUE(Rendezvous(before.workers(0), absl::ZeroDuration()).ok());
  EXPECT_EQ(a.rank(), 1u);
  EXPECT_EQ(a.generation(), before.generation() + 1);
  EXPECT_TRUE(a.resume());
  EXPECT_EQ(a.resume_global_step(), 30u);
  // Job and worker ids continue where they were.
  EXPECT_EQ(Submit(1), "job-4");
  EXPECT_EQ(Register(), "w-4");
  (void)w_done;
}

TEST_F(RecoveryTest, SessionsAdoptKnownIdFormsRefuseOthersAndAreSuperseded) {
  Start(1);
  EXPECT_TRUE(absl::IsInvalidArgument(coord().OpenSession(Hello(""), "p", nullptr).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(coord().OpenSession(Hello("../etc"), "p", nullptr).status()));
  const uint64_t first = Open("w-7");  // a worker of an earlier coordinator
  EXPECT_EQ(Worker("w-7").state(), "IDLE");
  EXPECT_EQ(Register(), "w-8");
  const uint64_t second = Open("w-7");
  auto old = coord().TakeDirective("w-7", first);
  EXPECT_TRUE(absl::IsCancelled(old.status()));
  coord().CloseSession("w-7", first, "late close of the old stream");
  EXPECT_EQ(Worker("w-7").state(), "IDLE");  // the old stream's end changes nothing
  coord().CloseSession("w-7", second, "connection lost");
  EXPECT_EQ(Worker("w-7").state(), "GONE");
}

TEST_F(RecoveryTest, StaleSessionMessageGetsAnAbortAndCancelIsPushed) {
  Start(1);
  const std::string job = Submit(1);
  const std::string w = Register();
  const uint64_t t = Open(w);
  tagi::v1::SessionMessage m = Hello(w);
  m.set_job_id(job);
  m.set_generation(9);  // not the current one
  ASSERT_TRUE(coord().OnSessionMessage(t, m).ok());
  auto d = Drain(w, t);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].directive(), tagi::v1::ABORT);
  EXPECT_EQ(d[0].generation(), 9u);
  EXPECT_THAT(d[0].reason(), HasSubstr("stale"));
  ASSERT_TRUE(coord().OnSessionMessage(t, m).ok());
  EXPECT_TRUE(Drain(w, t).empty());  // said once

  ASSERT_TRUE(coord().Cancel(job).ok());
  d = Drain(w, t);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].directive(), tagi::v1::CANCEL);
  EXPECT_EQ(d[0].generation(), 1u);
}

// A session message with log lines of `job` (from rank `rank`).
tagi::v1::SessionMessage WithLogs(const std::string& worker, const std::string& job, int lines,
                                  uint32_t rank = 0, int64_t time_ms = 0) {
  tagi::v1::SessionMessage m;
  m.set_worker_id(worker);
  for (int i = 0; i < lines; ++i) {
    tagi::v1::WorkerLogLine* l = m.add_logs();
    l->set_job_id(job);
    l->set_generation(1);
    l->set_rank(rank);
    l->set_time_ms(time_ms);
    l->set_text(absl::StrCat("line ", i));
  }
  return m;
}

TEST_F(RecoveryTest, KeepsTheLogLinesOfItsRanksOnlyBoundedAndAcrossARestart) {
  ScratchDir dir;
  CoordinatorOptions o = Options(1);
  o.state_dir = dir.path().string();
  Start(o);
  const std::string job = Submit(1);
  const std::string other = Submit(1);
  const std::string w = Register();
  const std::string stranger = Register();
  const uint64_t t = Open(w);
  const uint64_t ts = Open(stranger);
  ASSERT_EQ(AssignmentOf(w).job_id(), job);

  const int64_t now_ms = absl::ToUnixMillis(clock_.WallNow());
  ASSERT_TRUE(coord().OnSessionMessage(t, WithLogs(w, job, 2, 0, now_ms - 5)).ok());
  // A line far from the coordinator's clock gets the coordinator's time.
  ASSERT_TRUE(coord().OnSessionMessage(t, WithLogs(w, job, 1, 0, 5)).ok());
  // Not its job / not a rank of it: not kept.
  ASSERT_TRUE(coord().OnSessionMessage(t, WithLogs(w, other, 3)).ok());
  ASSERT_TRUE(coord().OnSessionMessage(ts, WithLogs(stranger, job, 3)).ok());
  auto logs = coord().Logs(job, 0, 0);
  ASSERT_TRUE(logs.ok()) << logs.status();
  ASSERT_EQ(logs->lines_size(), 3);
  EXPECT_EQ(logs->lines(0).worker_id(), w);
  EXPECT_EQ(logs->lines(0).time_ms(), now_ms - 5);
  EXPECT_EQ(logs->lines(2).time_ms(), now_ms);
  EXPECT_EQ(logs->state(), tagi::v1::RUNNING);
  EXPECT_EQ(coord().Logs(other, 0, 0)->lines_size(), 0);
  EXPECT_TRUE(absl::IsNotFound(coord().Logs("job-99", 0, 0).status()));

  // A flood in one message: 256 kept, the rest counted; the worker's own
  // count of lines it dropped is added.
  tagi::v1::SessionMessage flood = WithLogs(w, job, 300);
  flood.set_logs_dropped(5);
  ASSERT_TRUE(coord().OnSessionMessage(t, flood).ok());
  logs = coord().Logs(job, 3, 0);
  EXPECT_EQ(logs->lines_size(), 256);
  EXPECT_EQ(logs->dropped(), 44u + 5u);

  // Written at the next tick past the interval; read back by a restart.
  clock_.Advance(kLogWriteInterval);
  coord().Tick();
  coord().FlushState();
  coord_.reset();
  Start(o);
  logs = coord().Logs(job, 0, 0);
  ASSERT_TRUE(logs.ok()) << logs.status();
  EXPECT_EQ(logs->lines_size(), 259);
  EXPECT_EQ(logs->lines(258).seq(), 259u);
  EXPECT_EQ(logs->dropped(), 49u);
}

// A worker whose session says it is still in an attempt this coordinator
// does not run (a restarted coordinator, a stale generation) is ending that
// attempt: it is not placed until it asks for work again.
TEST_F(RecoveryTest, AWorkerStillInAnEndedAttemptIsPlacedOnlyOnceItAsksForWork) {
  Start(1);
  const std::string w = Register();
  const uint64_t t = Open(w);
  tagi::v1::SessionMessage m = Hello(w);
  m.set_job_id("job-7");  // of an earlier coordinator
  m.set_generation(3);
  ASSERT_TRUE(coord().OnSessionMessage(t, m).ok());
  const std::string job = Submit(1);
  EXPECT_EQ(State(job), tagi::v1::PENDING);
  EXPECT_EQ(AssignmentOf(w).job_id(), job);  // it asks: placed at once
  EXPECT_EQ(State(job), tagi::v1::RUNNING);
}

// The same after a restart, where the job the session names is known again
// (reloaded, recovering): its old ranks reconnect still in the old
// generation and are told to abort. The next generation is placed only once
// they ask for work, so rank 0's held snapshot, uploaded as it ends the old
// attempt, is the one it resumes from.
TEST_F(RecoveryTest, RanksReconnectingToARestartedCoordinatorArePlacedOnlyOnceTheyAskForWork) {
  ScratchDir dir;
  CoordinatorOptions o = Options(2);
  o.state_dir = dir.path().string();
  Start(o);
  const std::string job = Submit(2);
  (void)RegisterN(2);
  const tagi::v1::Job before = GetJob(job);
  ASSERT_EQ(before.state(), tagi::v1::RUNNING);
  ASSERT_TRUE(coord()
                  .UploadSnapshot(before.workers(0), job, before.generation(), 20,
                                  SnapshotBytes(job, 20))
                  .ok());
  coord().FlushState();

  coord_.reset();
  Start(o);
  std::vector<uint64_t> tokens;
  for (uint32_t r = 0; r < 2; ++r) {
    tagi::v1::SessionMessage m = Hello(before.workers(static_cast<int>(r)));
    m.set_job_id(job);
    m.set_generation(before.generation());
    m.set_rank(r);
    auto token = coord().OpenSession(m, "peer", nullptr);
    ASSERT_TRUE(token.ok()) << token.status();
    tokens.push_back(*token);
  }
  for (uint32_t r = 0; r < 2; ++r) {
    const auto ds = Drain(before.workers(static_cast<int>(r)), tokens[r]);
    ASSERT_EQ(ds.size(), 1u);
    EXPECT_EQ(ds[0].directive(), tagi::v1::ABORT);
  }
  // One asks for work; the other, rank 0, is still ending generation 1.
  ASSERT_TRUE(Rendezvous(before.workers(1), absl::ZeroDuration()).ok());
  EXPECT_EQ(State(job), tagi::v1::PENDING);
  const absl::Status up = coord().UploadSnapshot(before.workers(0), job, before.generation(), 40,
                                                 SnapshotBytes(job, 40));
  EXPECT_TRUE(absl::IsAborted(up)) << up;  // that generation is over, but
  EXPECT_THAT(up.message(), HasSubstr("is kept"));  // its snapshot is resumed from
  const tagi::v1::Assignment a = AssignmentOf(before.workers(0));
  EXPECT_EQ(a.generation(), before.generation() + 1);
  EXPECT_TRUE(a.resume());
  EXPECT_EQ(a.resume_global_step(), 40u);
  coord().FlushState();  // before the state dir goes
}

// A worker that keeps ending generations (two peers name it each time) is
// not placed for a while; the job goes on with a spare and says why.
TEST_F(RecoveryTest, AWorkerBlamedForThreeFailedGenerationsInARowIsNotPlacedForAWhile) {
  CoordinatorOptions o = Options(3);
  o.membership.worker_timeout = absl::Hours(1);  // the clock jumps past the exclusion
  Start(o);
  const std::string job = Submit(3);
  auto w = RegisterN(3);
  for (uint64_t gen = 1; gen <= 3; ++gen) {
    const tagi::v1::Job j = GetJob(job);
    ASSERT_EQ(j.state(), tagi::v1::RUNNING);
    ASSERT_EQ(j.generation(), gen);
    ASSERT_EQ(j.workers(1), w[1]);  // the suspect keeps its rank while it may be placed
    ASSERT_TRUE(FinishNaming(job, w[0], 0, gen, 1).ok());
    EXPECT_EQ(Worker(w[1]).state(), "IDLE");  // one rank's word: no strike yet
    EXPECT_TRUE(absl::IsAborted(FinishNaming(job, w[2], 2, gen, 1)));  // the second: a strike
    EXPECT_TRUE(absl::IsAborted(FinishNaming(job, w[0], 0, gen, 1)));  // again: no other
    EXPECT_EQ(Worker(w[1]).state(), gen < 3 ? "IDLE" : "EXCLUDED");
    for (const std::string& id : w) ASSERT_TRUE(Rendezvous(id, absl::ZeroDuration()).ok());
  }
  EXPECT_EQ(State(job), tagi::v1::PENDING);  // w-2 is not placed
  // A spare arrives and takes rank 1; the others keep theirs.
  w.push_back(Register());
  tagi::v1::Job j = GetJob(job);
  ASSERT_EQ(j.state(), tagi::v1::RUNNING);
  EXPECT_EQ(j.generation(), 4u);
  EXPECT_THAT(std::vector<std::string>(j.workers().begin(), j.workers().end()),
              ::testing::ElementsAre(w[0], w[3], w[2]));
  EXPECT_EQ(Worker(w[0]).state(), "BUSY");  // the ones that named it are not blamed
  EXPECT_EQ(Worker(w[1]).state(), "EXCLUDED");
  ASSERT_EQ(j.recoveries_size(), 3);
  const CoordinatorStats stats = coord().Stats();
  EXPECT_EQ(stats.worker_exclusions, 1u);
  EXPECT_EQ(stats.workers_by_state.at("EXCLUDED"), 1);

  // While excluded it is not placed, even for a job that waits for it.
  const std::string other = Submit(1);
  coord().Tick();
  EXPECT_EQ(State(other), tagi::v1::PENDING);
  clock_.Advance(kExclusionBase);
  coord().Tick();
  EXPECT_EQ(State(other), tagi::v1::RUNNING);
  EXPECT_EQ(GetJob(other).workers(0), w[1]);
}

TEST_F(RecoveryTest, TheJobSaysWhichWorkerItNoLongerPlaces) {
  Start(3);
  const std::string job = Submit(3);
  const auto w = RegisterN(3);
  for (uint64_t gen = 1; gen <= 3; ++gen) {
    ASSERT_EQ(GetJob(job).generation(), gen);
    ASSERT_TRUE(FinishNaming(job, w[0], 0, gen, 1).ok());
    (void)FinishNaming(job, w[2], 2, gen, 1);
    for (const std::string& id : w) ASSERT_TRUE(Rendezvous(id, absl::ZeroDuration()).ok());
  }
  const tagi::v1::Job j = GetJob(job);
  EXPECT_EQ(j.state(), tagi::v1::PENDING);  // no spare: it waits
  EXPECT_THAT(j.reason(), HasSubstr("worker w-2 is not placed for 30s: 3 failed generations in "
                                    "a row were blamed on it (the last: named by workers w-1 "
                                    "and w-3 as the rank that broke the group (successor rank 1 "
                                    "closed its link"));
}

// One rank naming the same peer generation after generation (a rogue rank
// framing an honest one) strikes nobody: the peer is placed again.
TEST_F(RecoveryTest, OneRanksWordAloneNeverExcludesItsPeer) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  for (uint64_t gen = 1; gen <= 3; ++gen) {
    ASSERT_EQ(GetJob(job).generation(), gen);
    ASSERT_TRUE(FinishNaming(job, w[0], 0, gen, 1).ok());
    for (const std::string& id : w) ASSERT_TRUE(Rendezvous(id, absl::ZeroDuration()).ok());
  }
  EXPECT_EQ(State(job), tagi::v1::RUNNING);
  EXPECT_EQ(GetJob(job).workers(1), w[1]);
  EXPECT_EQ(coord().Stats().worker_exclusions, 0u);
}

TEST_F(RecoveryTest, StrikesComeFromGoneRanksAndPeersNamingThemAndAreClearedByASnapshot) {
  Start(3);
  const std::string job = Submit(3);
  const auto w = RegisterN(3);
  auto ask = [&] {
    for (const std::string& id : w) ASSERT_TRUE(Rendezvous(id, absl::ZeroDuration()).ok());
  };
  // Generation 1: w-2's session breaks (a strike).
  const uint64_t t = Open(w[1]);
  coord().CloseSession(w[1], t, "connection lost");
  ASSERT_EQ(State(job), tagi::v1::PENDING);
  (void)Open(w[1]);  // it comes back
  ask();
  // Generation 2: named by ranks 0 and 2 (a second strike). A report naming
  // itself, a rank past the world, or by a worker not holding the rank is
  // not counted.
  ASSERT_EQ(GetJob(job).generation(), 2u);
  EXPECT_TRUE(absl::IsPermissionDenied(FinishNaming(job, w[1], 0, 2, 1)));
  ASSERT_TRUE(FinishNaming(job, w[0], 0, 2, 1).ok());
  (void)FinishNaming(job, w[1], 1, 2, 1);
  (void)FinishNaming(job, w[1], 1, 2, 7);
  (void)FinishNaming(job, w[2], 2, 2, 1);
  ask();
  // Generation 3 takes a snapshot: the strikes are cleared.
  ASSERT_EQ(GetJob(job).generation(), 3u);
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 3, 10, SnapshotBytes(job, 10)).ok());
  ASSERT_TRUE(FinishNaming(job, w[0], 0, 3, 1).ok());
  (void)FinishNaming(job, w[2], 2, 3, 1);
  ask();
  ASSERT_TRUE(FinishNaming(job, w[0], 0, 4, 1).ok());
  (void)FinishNaming(job, w[2], 2, 4, 1);
  EXPECT_EQ(Worker(w[1]).state(), "IDLE");  // 2 in a row since the snapshot: still placed
  EXPECT_EQ(coord().Stats().worker_exclusions, 0u);
}

// A rank reporting what no training produces (here a test accuracy of
// 1.7 from rank 0) is refused: its generation ends, blamed on it, and the
// job never shows the value. A final progress like it is not kept.
TEST_F(RecoveryTest, ImpossibleProgressIsRefusedAndEndsTheReportersGeneration) {
  Start(2);
  const std::string job = Submit(2);
  const auto w = RegisterN(2);
  tagi::v1::ProgressReport report;
  report.set_worker_id(w[0]);
  report.set_job_id(job);
  report.set_generation(1);
  report.set_rank(0);
  report.mutable_progress()->set_global_step(5);
  tagi::v1::EpochMetrics* e = report.mutable_progress()->add_epochs();
  e->set_epoch(1);
  e->set_test_accuracy(1.7);
  const auto refused = coord().ReportProgress(report);
  EXPECT_TRUE(absl::IsInvalidArgument(refused.status())) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("rank 0 (worker w-1) reported progress no training produces: epoch 1: "
                        "testAccuracy is 1.7 (not in [0, 1])"));
  tagi::v1::Job j = GetJob(job);
  EXPECT_EQ(j.state(), tagi::v1::PENDING);
  EXPECT_EQ(j.progress().epochs_size(), 0);
  EXPECT_EQ(coord().Stats().progress_rejected, 1u);

  // The next generation finishes; rank 0's final progress is impossible.
  ASSERT_TRUE(Rendezvous(w[0], absl::ZeroDuration()).ok());
  ASSERT_TRUE(Rendezvous(w[1], absl::ZeroDuration()).ok());
  ASSERT_EQ(State(job), tagi::v1::RUNNING);
  report.set_generation(2);
  e->set_test_accuracy(0.8);
  ASSERT_TRUE(coord().ReportProgress(report).ok());
  ASSERT_TRUE(Upload(job, w[0], ModelBytes(), 2).ok());
  tagi::v1::FinishJobRequest fin;
  fin.set_worker_id(w[0]);
  fin.set_job_id(job);
  fin.set_generation(2);
  fin.set_ok(true);
  *fin.mutable_progress() = report.progress();
  fin.mutable_progress()->mutable_epochs(0)->set_train_accuracy(NAN);
  ASSERT_TRUE(coord().FinishJob(fin).ok());
  ASSERT_TRUE(Finish(job, w[1], 1, true, "", 2).ok());
  j = GetJob(job);
  EXPECT_EQ(j.state(), tagi::v1::SUCCEEDED);
  ASSERT_EQ(j.progress().epochs_size(), 1);
  EXPECT_EQ(j.progress().epochs(0).test_accuracy(), 0.8);  // as reported before
  EXPECT_EQ(j.progress().epochs(0).train_accuracy(), 0.0);
  EXPECT_EQ(coord().Stats().progress_rejected, 2u);
}

}  // namespace
}  // namespace tagi::coordinator::test
