// The coordinator's state dir under disk faults (a fault-injecting
// FileSystem), per-epoch metrics across recoveries and restarts, and the
// retention of ended jobs. FakeClock; nothing sleeps.
#include <atomic>
#include <fstream>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/file_util.h"
#include "common/snapshot.h"
#include "coordinator/retention.h"
#include "coordinator/state_writer.h"
#include "gmock/gmock.h"
#include "tests/coordinator/coordinator_harness.h"

namespace tagi::coordinator::test {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// The host's file system, failing every write with `error` while it is set.
class FaultyFileSystem : public FileSystem {
 public:
  absl::Status WriteFileAtomic(const std::string& path, const std::string& data) override {
    if (broken_.load()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot write ", path, ": No space left on device"));
    }
    return real_.WriteFileAtomic(path, data);
  }
  absl::Status RemoveAll(const std::string& path) override {
    if (broken_.load()) return absl::InternalError("cannot remove: Read-only file system");
    return real_.RemoveAll(path);
  }
  void Break(bool broken) { broken_ = broken; }

 private:
  RealFileSystem real_;
  std::atomic<bool> broken_{false};
};

std::string SnapshotBytes(const std::string& job, uint64_t global_step, uint64_t epoch) {
  return ExampleSnapshotBytes(job, global_step, epoch, 0);
}

tagi::v1::EpochMetrics Epoch(uint64_t n) {
  tagi::v1::EpochMetrics e;
  e.set_epoch(n);
  e.set_test_accuracy(0.5 + 0.01 * static_cast<double>(n % 50));  // an accuracy: <= 1
  return e;
}

class StateTest : public CoordinatorTest {
 protected:
  CoordinatorOptions StateOptions(int world) {
    CoordinatorOptions o = Options(world);
    o.state_dir = dir_.path().string();
    o.fs = &disk_;
    o.save_wait = absl::ZeroDuration();  // tests flush instead
    return o;
  }
  void Restart(const CoordinatorOptions& o) {
    coord_.reset();
    Start(o);
  }
  // A world-1 job long enough for every epoch these tests report (a rank
  // reporting an epoch past its job's last is refused).
  std::string SubmitLong() {
    tagi::v1::JobSpec spec = Spec(1);
    spec.set_epochs(kMaxEpochHistory + 100);
    auto job = coord().Submit(spec);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }
  // Rank 0 reports `epochs` finished epochs of generation `gen`.
  void ReportEpochs(const std::string& job, const std::string& w, uint64_t gen,
                    const std::vector<uint64_t>& epochs, uint64_t step) {
    tagi::v1::ProgressReport report;
    report.set_worker_id(w);
    report.set_job_id(job);
    report.set_generation(gen);
    report.set_rank(0);
    report.mutable_progress()->set_global_step(step);
    for (uint64_t e : epochs) *report.mutable_progress()->add_epochs() = Epoch(e);
    ASSERT_TRUE(coord().ReportProgress(report).ok());
  }
  absl::Status FinishRank0(const std::string& job, const std::string& w, uint64_t gen,
                           std::initializer_list<uint64_t> epochs) {
    tagi::v1::FinishJobRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    req.set_generation(gen);
    req.set_rank(0);
    req.set_ok(true);
    for (uint64_t e : epochs) *req.mutable_progress()->add_epochs() = Epoch(e);
    return coord().FinishJob(req);
  }
  absl::Status FailRetryable(const std::string& job, const std::string& w, uint64_t gen) {
    tagi::v1::FinishJobRequest req;
    req.set_worker_id(w);
    req.set_job_id(job);
    req.set_generation(gen);
    req.set_rank(0);
    req.set_ok(false);
    req.set_retryable(true);
    req.set_reason("peer lost");
    return coord().FinishJob(req);
  }
  // Lets the writer retry what failed (backoff on the fake clock).
  void Retry() {
    clock_.Advance(absl::Seconds(31));
    coord().Tick();
    coord().FlushState();
  }

  ScratchDir dir_;
  FaultyFileSystem disk_;
};

TEST_F(StateTest, FullDiskKeepsASucceededJobUnfinishedUntilItsModelAndStateAreSaved) {
  Start(StateOptions(1));
  const std::string job = Submit(1);
  const std::string w = Register();
  coord().FlushState();
  disk_.Break(true);
  // The model upload is accepted (kept in memory): no generation is burnt.
  ASSERT_TRUE(Upload(job, w).ok());
  ASSERT_TRUE(Finish(job, w, 0).ok());
  coord().FlushState();
  tagi::v1::Job j = GetJob(job);
  EXPECT_EQ(j.state(), tagi::v1::RUNNING);
  EXPECT_THAT(j.reason(), HasSubstr("ending as SUCCEEDED"));
  EXPECT_THAT(j.reason(), HasSubstr("No space left on device"));
  EXPECT_EQ(j.restarts(), 0u);
  EXPECT_FALSE(coord().ModelFile(job).ok());
  const absl::Status health = coord().StateHealth();
  EXPECT_TRUE(absl::IsUnavailable(health));
  EXPECT_THAT(health.message(), HasSubstr("No space left on device"));
  const CoordinatorStats stats = coord().Stats();
  EXPECT_GE(stats.state_write_failures.at("model"), 1u);
  EXPECT_EQ(stats.jobs_by_state.at(tagi::v1::RUNNING), 1);

  disk_.Break(false);
  Retry();
  EXPECT_EQ(State(job), tagi::v1::SUCCEEDED);
  EXPECT_TRUE(coord().StateHealth().ok());
  auto model = coord().ModelFile(job);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(*model, ModelBytes());
  Restart(StateOptions(1));
  EXPECT_EQ(State(job), tagi::v1::SUCCEEDED);
  EXPECT_TRUE(coord().ModelFile(job).ok());
}

TEST_F(StateTest, AnUnsavedEndIsNotFinalAfterARestartAndASavedOneIsNeverLeft) {
  Start(StateOptions(1));
  const std::string failed = Submit(1);
  const std::string w = Register();
  ASSERT_TRUE(Finish(failed, w, 0, /*ok=*/false, "NaN in the deltas").ok());
  coord().FlushState();
  ASSERT_EQ(State(failed), tagi::v1::FAILED);  // saved

  const std::string job = Submit(1);
  ASSERT_EQ(State(job), tagi::v1::RUNNING);
  coord().FlushState();
  disk_.Break(true);
  ASSERT_TRUE(Finish(job, w, 0, /*ok=*/false, "out of memory").ok());
  coord().FlushState();
  EXPECT_EQ(State(job), tagi::v1::RUNNING);  // FAILED, but not saved
  EXPECT_THAT(GetJob(job).reason(), HasSubstr("ending as FAILED (rank 0"));
  EXPECT_TRUE(absl::IsUnavailable(coord().Cancel(job).status()));

  // A crash now: the disk says RUNNING, so the job resumes instead of being
  // lost; the job that FAILED (saved) stays FAILED.
  disk_.Break(false);
  Restart(StateOptions(1));
  EXPECT_EQ(State(failed), tagi::v1::FAILED);
  EXPECT_EQ(State(job), tagi::v1::PENDING);
  EXPECT_EQ(GetJob(job).restarts(), 1u);
}

TEST_F(StateTest, CancelWhileTheDiskFailsIsSavedOnceItCanBeAndSurvivesARestart) {
  Start(StateOptions(1));
  const std::string job = Submit(1);
  Register();
  coord().FlushState();
  disk_.Break(true);
  auto cancelled = coord().Cancel(job);
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), tagi::v1::RUNNING);
  EXPECT_THAT(cancelled->reason(), HasSubstr("ending as CANCELLED"));
  coord().FlushState();
  disk_.Break(false);
  Retry();
  EXPECT_EQ(State(job), tagi::v1::CANCELLED);
  Restart(StateOptions(1));
  Register();
  coord().Tick();
  EXPECT_EQ(State(job), tagi::v1::CANCELLED);
}

TEST_F(StateTest, NoGenerationIsPlacedWhileTheStateDirCannotBeWritten) {
  Start(StateOptions(1));
  const std::string first = Submit(1);
  const std::string w = Register();
  ASSERT_EQ(State(first), tagi::v1::RUNNING);
  const std::string second = Submit(1);  // queued behind the first
  coord().FlushState();
  disk_.Break(true);
  ASSERT_TRUE(coord().UploadSnapshot(w, first, 1, 10, SnapshotBytes(first, 10, 0)).ok());
  coord().FlushState();  // the snapshot write fails
  coord().Tick();
  ASSERT_TRUE(Finish(first, w, 0, /*ok=*/false, "bad data").ok());
  coord().Tick();
  EXPECT_EQ(State(second), tagi::v1::PENDING);
  EXPECT_THAT(GetJob(second).reason(), HasSubstr("waiting for the state dir"));
  EXPECT_TRUE(absl::IsUnavailable(coord().Submit(Spec(1)).status()));
  disk_.Break(false);
  Retry();
  tagi::v1::RegisterRequest again;  // heard from again after the fake half minute
  again.set_worker_id(w);
  coord().Register(again, "peer", coord().WorkerSecret(again.worker_id()));
  coord().Tick();  // finds the state dir writable again
  EXPECT_EQ(State(second), tagi::v1::RUNNING);
}

TEST_F(StateTest, EpochMetricsSurviveARecoveryAndTheFinalReport) {
  Start(StateOptions(1));
  const std::string job = SubmitLong();
  const std::string w = Register();
  ReportEpochs(job, w, 1, {1, 2}, 20);
  ASSERT_TRUE(coord().UploadSnapshot(w, job, 1, 20, SnapshotBytes(job, 20, 2)).ok());
  ASSERT_TRUE(FailRetryable(job, w, 1).ok());
  ASSERT_TRUE(Rendezvous(w, absl::ZeroDuration()).ok());
  ASSERT_EQ(AssignmentOf(w).resume_global_step(), 20u);
  // The new generation reports only its own epochs, the final report too.
  ReportEpochs(job, w, 2, {3}, 30);
  ASSERT_TRUE(Upload(job, w, ModelBytes(), 2).ok());
  ASSERT_TRUE(FinishRank0(job, w, 2, {3, 4}).ok());
  coord().FlushState();
  const tagi::v1::Job j = GetJob(job);
  ASSERT_EQ(j.state(), tagi::v1::SUCCEEDED);
  ASSERT_THAT(j.progress().epochs(), SizeIs(4));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(j.progress().epochs(i).epoch(), uint64_t(i + 1));
  Restart(StateOptions(1));
  EXPECT_THAT(GetJob(job).progress().epochs(), SizeIs(4));
}

// The worker key lives in the state dir, readable by the coordinator's user
// alone, and a restart keeps it: a worker's secret stays valid.
TEST_F(StateTest, TheWorkerKeyIsPrivateAndOutlivesARestart) {
  Start(StateOptions(1));
  const tagi::v1::RegisterResponse first = coord().Register(tagi::v1::RegisterRequest(), "peer");
  const fs::path key = dir_.path() / "worker-key";
  ASSERT_TRUE(fs::exists(key));
  EXPECT_EQ(fs::status(key).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  Restart(StateOptions(1));
  EXPECT_TRUE(coord().VerifyWorker(first.worker_id(), first.secret()));
  // A key file that is not one is not used: secrets are then this process's.
  { std::ofstream(key) << "not a key"; }
  Restart(StateOptions(1));
  EXPECT_FALSE(coord().VerifyWorker(first.worker_id(), first.secret()));
  const tagi::v1::RegisterResponse fresh = coord().Register(tagi::v1::RegisterRequest(), "peer");
  EXPECT_TRUE(coord().VerifyWorker(fresh.worker_id(), fresh.secret()));
}

TEST_F(StateTest, ASnapshotAheadOfItsEpochMetricsWaitsForThem) {
  Start(StateOptions(1));
  const std::string job = SubmitLong();
  const std::string w = Register();
  ReportEpochs(job, w, 1, {1}, 10);
  ASSERT_TRUE(coord().UploadSnapshot(w, job, 1, 10, SnapshotBytes(job, 10, 1)).ok());
  // Epoch 2 ended and its snapshot came before the report of its metrics.
  ASSERT_TRUE(coord().UploadSnapshot(w, job, 1, 20, SnapshotBytes(job, 20, 2)).ok());
  EXPECT_EQ(GetJob(job).snapshot_step(), 10u);
  coord().FlushState();
  EXPECT_EQ(coord().Stats().snapshots_stored, 1u);  // not on disk before the metrics
  ReportEpochs(job, w, 1, {1, 2}, 25);  // the metrics arrive: the snapshot counts
  EXPECT_EQ(GetJob(job).snapshot_step(), 20u);
  // Epoch 3's snapshot, then a failure before its metrics came: the next
  // generation resumes from it anyway (at most one interval redone).
  ASSERT_TRUE(coord().UploadSnapshot(w, job, 1, 30, SnapshotBytes(job, 30, 3)).ok());
  ASSERT_TRUE(FailRetryable(job, w, 1).ok());
  ASSERT_TRUE(Rendezvous(w, absl::ZeroDuration()).ok());
  EXPECT_EQ(AssignmentOf(w).resume_global_step(), 30u);
  EXPECT_THAT(GetJob(job).progress().epochs(), SizeIs(2));
  ReportEpochs(job, w, 2, {4}, 40);
  ASSERT_TRUE(coord().UploadSnapshot(w, job, 2, 40, SnapshotBytes(job, 40, 4)).ok());
  coord().FlushState();
  // A coordinator restart resumes from it, with every epoch's metrics.
  Restart(StateOptions(1));
  tagi::v1::RegisterRequest again;
  again.set_worker_id(w);
  coord().Register(again, "peer", coord().WorkerSecret(again.worker_id()));
  EXPECT_EQ(AssignmentOf(w).resume_global_step(), 40u);
  const tagi::v1::Job j = GetJob(job);
  ASSERT_THAT(j.progress().epochs(), SizeIs(3));  // 1, 2 and 4: rank 0 never sent epoch 3's
  EXPECT_EQ(j.progress().epochs(2).epoch(), 4u);
}

// The history keeps the newest kMaxEpochHistory epochs: reports, records
// and snapshots waiting for their metrics count epochs by number.
TEST_F(StateTest, TheEpochHistoryKeepsTheNewestEpochsAndCountsByNumber) {
  Start(StateOptions(1));
  const std::string job = SubmitLong();
  const std::string w = Register();
  std::vector<uint64_t> many;
  for (uint64_t e = 1; e <= kMaxEpochHistory + 5; ++e) many.push_back(e);
  ReportEpochs(job, w, 1, many, 2000);
  tagi::v1::Job j = GetJob(job);
  ASSERT_THAT(j.progress().epochs(), SizeIs(kMaxEpochHistory));
  EXPECT_EQ(j.progress().epochs(0).epoch(), 6u);
  EXPECT_EQ(LastEpoch(j.progress()), uint64_t{kMaxEpochHistory} + 5);
  // A snapshot past the newest reported epoch waits for it, then counts.
  const uint64_t next = kMaxEpochHistory + 6;
  ASSERT_TRUE(coord().UploadSnapshot(w, job, 1, 2010, SnapshotBytes(job, 2010, next)).ok());
  EXPECT_NE(GetJob(job).snapshot_step(), 2010u);
  many.push_back(next);
  ReportEpochs(job, w, 1, many, 2011);
  EXPECT_EQ(GetJob(job).snapshot_step(), 2010u);
  // A recovery keeps the epochs up to its snapshot's, still the newest.
  ASSERT_TRUE(FailRetryable(job, w, 1).ok());
  ASSERT_TRUE(Rendezvous(w, absl::ZeroDuration()).ok());
  EXPECT_EQ(AssignmentOf(w).resume_global_step(), 2010u);
  j = GetJob(job);
  ASSERT_THAT(j.progress().epochs(), SizeIs(kMaxEpochHistory));
  EXPECT_EQ(LastEpoch(j.progress()), next);
}

TEST_F(StateTest, ListKeepsOnlyTheLatestEpochAndRecoveryGetKeepsAll) {
  Start(StateOptions(1));
  const std::string job = Submit(1);
  const std::string w = Register();
  ReportEpochs(job, w, 1, {1, 2, 3}, 30);
  const auto listed = coord().List();
  ASSERT_THAT(listed, SizeIs(1));
  ASSERT_THAT(listed[0].progress().epochs(), SizeIs(1));
  EXPECT_EQ(listed[0].progress().epochs(0).epoch(), 3u);
  EXPECT_THAT(GetJob(job).progress().epochs(), SizeIs(3));
}

TEST_F(StateTest, RetentionForgetsTheOldestEndedJobsWithTheirFiles) {
  CoordinatorOptions o = StateOptions(1);
  o.retention.max_ended_jobs = 2;
  o.retention.max_ended_age = absl::Hours(1);
  Start(o);
  const std::string w = Register();
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    tagi::v1::RegisterRequest again;  // heard from: not departed after the minute
    again.set_worker_id(w);
    coord().Register(again, "peer", coord().WorkerSecret(again.worker_id()));
    ids.push_back(Submit(1));
    ASSERT_TRUE(coord().UploadSnapshot(w, ids.back(), 1, 10, SnapshotBytes(ids.back(), 10, 0))
                    .ok());
    Complete(ids.back());
    coord().FlushState();
    clock_.Advance(absl::Minutes(1));
    coord().Tick();
    coord().FlushState();
  }
  const fs::path root = dir_.path();
  auto present = [&](const std::string& id) {
    return fs::exists(root / "jobs" / (id + ".job")) ||
           fs::exists(root / "models" / (id + ".tagi")) ||
           fs::exists(root / "snapshots" / id);
  };
  // By count: the two oldest are gone, records and files.
  EXPECT_TRUE(absl::IsNotFound(coord().Get(ids[0]).status()));
  EXPECT_TRUE(absl::IsNotFound(coord().Get(ids[1]).status()));
  EXPECT_FALSE(present(ids[0]));
  EXPECT_FALSE(present(ids[1]));
  EXPECT_EQ(State(ids[3]), tagi::v1::SUCCEEDED);
  EXPECT_TRUE(fs::exists(root / "models" / (ids[3] + ".tagi")));
  EXPECT_TRUE(fs::exists(root / "snapshots" / ids[3]));
  EXPECT_EQ(coord().Stats().jobs_pruned, 2u);
  // By age.
  clock_.Advance(absl::Minutes(59));
  coord().Tick();
  coord().FlushState();
  EXPECT_TRUE(absl::IsNotFound(coord().Get(ids[2]).status()));
  EXPECT_EQ(State(ids[3]), tagi::v1::SUCCEEDED);
  clock_.Advance(absl::Minutes(2));
  coord().Tick();
  coord().FlushState();
  EXPECT_THAT(coord().List(), SizeIs(0));
  for (const auto& id : ids) EXPECT_FALSE(present(id)) << id;
  // No id is handed out twice, even after a restart.
  Restart(o);
  EXPECT_EQ(Submit(1), "job-5");
}

TEST_F(StateTest, RestartAppliesRetentionAndRemovesFilesOfJobsItDoesNotHold) {
  Start(StateOptions(1));
  const std::string w = Register();
  const std::string a = Submit(1);
  Complete(a);
  const std::string b = Submit(1);
  Complete(b);
  coord().FlushState();
  const fs::path root = dir_.path();
  fs::create_directories(root / "snapshots" / "job-77");
  { std::ofstream(root / "models" / "job-78.tagi") << "stale"; }
  CoordinatorOptions o = StateOptions(1);
  o.retention.max_ended_jobs = 1;
  Restart(o);
  coord().FlushState();
  EXPECT_TRUE(absl::IsNotFound(coord().Get(a).status()));
  EXPECT_EQ(State(b), tagi::v1::SUCCEEDED);
  EXPECT_FALSE(fs::exists(root / "jobs" / (a + ".job")));
  EXPECT_FALSE(fs::exists(root / "models" / (a + ".tagi")));
  EXPECT_FALSE(fs::exists(root / "snapshots" / "job-77"));
  EXPECT_FALSE(fs::exists(root / "models" / "job-78.tagi"));
  EXPECT_TRUE(fs::exists(root / "models" / (b + ".tagi")));
}

TEST_F(StateTest, SubmitRefusesANetworkWhoseModelCannotBeUploaded) {
  CoordinatorOptions o = Options(1);
  o.max_model_bytes = 1 << 20;
  Start(o);
  // The example (784-?-11 MLP) has about 100k+ parameters: 0.8+ MiB of
  // means and variances, with the room for headers more than 1 MiB.
  const absl::Status st = coord().Submit(Spec(1)).status();
  ASSERT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_THAT(st.message(), HasSubstr("parameters"));
  EXPECT_THAT(st.message(), HasSubstr("the 1 MiB the coordinator accepts"));
  EXPECT_THAT(coord().List(), SizeIs(0));
}

TEST(Retention, PrunesByAgeThenByCountOldestFirst) {
  const absl::Time now = absl::FromUnixSeconds(1'000'000);
  std::vector<EndedJob> ended = {{"a", now - absl::Hours(30), 1},
                                 {"b", now - absl::Hours(2), 2},
                                 {"c", now - absl::Hours(1), 3},
                                 {"d", now - absl::Hours(1), 4},
                                 {"e", now, 5}};
  RetentionOptions o;
  o.max_ended_jobs = 3;
  o.max_ended_age = absl::Hours(24);
  std::vector<std::string> ids;
  for (const Pruning& p : DecideRetention(now, ended, o)) ids.push_back(p.id);
  EXPECT_THAT(ids, ::testing::UnorderedElementsAre("a", "b"));
  o.max_ended_jobs = 0;
  EXPECT_THAT(DecideRetention(now, ended, o), SizeIs(5));
  o.max_ended_jobs = 10;
  o.max_ended_age = absl::InfiniteDuration();
  EXPECT_THAT(DecideRetention(now, ended, o), SizeIs(0));
}

TEST(StateWriterTest, WritesOfAGroupKeepTheirOrderAndAFailureHoldsTheLaterOnes) {
  FakeClock clock;
  std::vector<std::string> done;
  absl::Mutex mu;
  bool fail = true;
  {
    StateWriter writer(clock);
    auto write = [&](const std::string& group, const std::string& key) {
      writer.Queue({.group = group,
                    .key = key,
                    .kind = key,
                    .op = [&, group, key]() -> absl::Status {
                      absl::MutexLock lock(&mu);
                      if (fail && key == "model") return absl::InternalError("EIO");
                      done.push_back(group + "/" + key);
                      return absl::OkStatus();
                    },
                    .done = nullptr});
    };
    write("job-1", "model");
    write("job-1", "job");
    write("job-2", "job");
    writer.Flush();
    {
      absl::MutexLock lock(&mu);
      EXPECT_THAT(done, ::testing::ElementsAre("job-2/job"));
    }
    EXPECT_TRUE(absl::IsUnavailable(writer.Health()));
    EXPECT_EQ(writer.Failures().at("model"), 1u);
    EXPECT_EQ(writer.Pending(), 2u);
    {
      absl::MutexLock lock(&mu);
      fail = false;
    }
    writer.Kick();  // before the backoff: nothing is retried
    writer.Flush();
    EXPECT_EQ(writer.Pending(), 2u);
    clock.Advance(absl::Seconds(1));
    writer.Kick();
    writer.Flush();
    EXPECT_TRUE(writer.Health().ok());
    EXPECT_EQ(writer.Pending(), 0u);
  }
  EXPECT_THAT(done, ::testing::ElementsAre("job-2/job", "job-1/model", "job-1/job"));
}

TEST(JobText, NamesAndPathsAreBoundedAndFreeOfControlCharacters) {
  tagi::v1::JobSpec spec = Spec(1);
  spec.set_name(std::string(kMaxJobNameBytes, 'n'));
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.set_name("r\xc3\xa9sum\xc3\xa9 \xe2\x9c\x93");  // UTF-8 is fine
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.set_name(std::string(kMaxJobNameBytes + 1, 'n'));
  EXPECT_THAT(ValidateJobSpec(spec).message(), HasSubstr("name: 257 bytes; at most 256"));
  spec.set_name("evil\x1b[2Jname");
  EXPECT_THAT(ValidateJobSpec(spec).message(),
              HasSubstr("name: holds the control character U+001B at byte 4"));
  spec.set_name("\xc2\x9b" "31m");  // C1 CSI
  EXPECT_THAT(ValidateJobSpec(spec).message(), HasSubstr("U+009B"));
  spec.set_name("\xe2\x80\xae" "doc.exe");  // right-to-left override
  EXPECT_THAT(ValidateJobSpec(spec).message(), HasSubstr("U+202E"));
  spec.set_name("bad \xff utf8");
  EXPECT_THAT(ValidateJobSpec(spec).message(), HasSubstr("name: not valid UTF-8 at byte 4"));
  spec.set_name("ok");
  spec.mutable_data()->set_train_images(std::string(kMaxDataPathBytes + 1, 'p'));
  EXPECT_THAT(ValidateJobSpec(spec).message(),
              HasSubstr("data.trainImages: 1025 bytes; at most 1024"));
  spec.mutable_data()->set_train_images("/data/x\ny");
  EXPECT_THAT(ValidateJobSpec(spec).message(), HasSubstr("data.trainImages: holds the control"));
}


}  // namespace
}  // namespace tagi::coordinator::test
