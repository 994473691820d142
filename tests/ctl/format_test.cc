// The text tagictl prints: watch lines, metrics, job and worker tables.
#include "ctl/format.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tagi/v1/jobs.pb.h"

namespace tagi {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

tagi::v1::Job Classifier(const std::string& id) {
  tagi::v1::Job job;
  job.set_id(id);
  job.mutable_spec()->set_name("fmnist-fnn");
  job.mutable_spec()->set_epochs(3);
  job.mutable_spec()->mutable_head()->mutable_classification()->set_num_classes(10);
  job.set_world_size(2);
  return job;
}

tagi::v1::Job Regressor(const std::string& id) {
  tagi::v1::Job job;
  job.set_id(id);
  job.mutable_spec()->set_epochs(5);
  job.mutable_spec()->mutable_head()->mutable_regression();
  job.set_world_size(1);
  return job;
}

void AddEpoch(tagi::v1::Job& job, double test_accuracy, double test_rmse) {
  auto* e = job.mutable_progress()->add_epochs();
  e->set_epoch(static_cast<uint64_t>(job.progress().epochs_size()));
  e->set_train_accuracy(0.9);
  e->set_test_accuracy(test_accuracy);
  e->set_test_rmse(test_rmse);
  e->set_test_log_likelihood(-0.5);
  e->set_sigma_v(1.0f);
  e->set_seconds(2.5);
  e->set_test_ece(0.0312);
  e->set_test_brier(0.2109);
  e->set_test_coverage_68(0.672);
  e->set_test_coverage_95(0.951);
}

// Epoch 2 of 3 under way, 61 of 100 steps, one epoch finished.
tagi::v1::Job Running() {
  tagi::v1::Job job = Classifier("job-3");
  job.set_state(tagi::v1::RUNNING);
  job.set_generation(1);
  job.add_workers("w-1");
  job.add_workers("w-2");
  auto* p = job.mutable_progress();
  p->set_epoch(1);
  p->set_global_step(61);
  p->set_total_steps(100);
  p->set_samples_per_second(38200);
  p->set_eta_seconds(4.1);
  AddEpoch(job, 0.8534, 0.0);
  return job;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(WatchLine, PendingJobShowsWhyItWaits) {
  tagi::v1::Job job = Classifier("job-4");
  job.set_state(tagi::v1::PENDING);
  job.set_reason("waiting for 2 idle workers");
  const std::string line = WatchLine(job);
  EXPECT_THAT(line, StartsWith("job-4"));
  EXPECT_THAT(line, HasSubstr("PENDING"));
  EXPECT_THAT(line, HasSubstr("waiting for 2 idle workers"));
  EXPECT_THAT(line, Not(HasSubstr("[")));
}

TEST(WatchLine, RunningJobShowsEpochBarPercentRateEtaAndMetric) {
  const std::string line = WatchLine(Running());
  EXPECT_THAT(line, StartsWith("job-3"));
  EXPECT_THAT(line, HasSubstr("RUNNING"));
  EXPECT_THAT(line, HasSubstr("epoch 2/3"));  // 0-based epoch 1 is the second
  // 24 cells, 61% of them filled: 14 '=' then the head.
  EXPECT_THAT(line, HasSubstr("[" + std::string(14, '=') + ">" + std::string(9, ' ') + "]"));
  EXPECT_THAT(line, HasSubstr("61%"));
  EXPECT_THAT(line, HasSubstr("38.2k samples/s"));
  EXPECT_THAT(line, HasSubstr("ETA 4.1s"));
  EXPECT_THAT(line, HasSubstr("test accuracy 85.34%"));
}

TEST(WatchLine, RunningJobBeforeItsFirstStepShowsTheReason) {
  tagi::v1::Job job = Classifier("job-5");
  job.set_state(tagi::v1::RUNNING);
  job.set_reason("placed on 2 workers: ranks w-1, w-2");
  EXPECT_THAT(WatchLine(job), AllOf(HasSubstr("RUNNING"), HasSubstr("ranks w-1, w-2")));
}

TEST(WatchLine, SucceededJobShowsAFullBarAndTheFinalMetric) {
  tagi::v1::Job job = Running();
  job.set_state(tagi::v1::SUCCEEDED);
  auto* p = job.mutable_progress();
  p->set_epoch(2);
  p->set_global_step(100);
  p->set_eta_seconds(0);
  AddEpoch(job, 0.8612, 0.0);
  AddEpoch(job, 0.8701, 0.0);
  const std::string line = WatchLine(job);
  EXPECT_THAT(line, HasSubstr("SUCCEEDED"));
  EXPECT_THAT(line, HasSubstr("epoch 3/3"));
  EXPECT_THAT(line, HasSubstr("[" + std::string(24, '=') + "]"));
  EXPECT_THAT(line, HasSubstr("100%"));
  EXPECT_THAT(line, HasSubstr("test accuracy 87.01%"));
}

TEST(LatestMetric, EmptyBeforeTheFirstEpochEnds) {
  EXPECT_EQ(LatestMetric(Classifier("job-1")), "");
  EXPECT_EQ(LatestMetric(Regressor("job-2")), "");
}

TEST(LatestMetric, ClassificationShowsTheLastEpochsTestAccuracy) {
  tagi::v1::Job job = Classifier("job-1");
  AddEpoch(job, 0.8012, 0.0);
  AddEpoch(job, 0.8534, 0.0);
  EXPECT_EQ(LatestMetric(job), "test accuracy 85.34%");
}

TEST(LatestMetric, RegressionShowsTheLastEpochsTestRmse) {
  tagi::v1::Job job = Regressor("job-2");
  AddEpoch(job, 0.0, 4.5);
  AddEpoch(job, 0.0, 3.21);
  EXPECT_EQ(LatestMetric(job), "test RMSE 3.2100");
  EXPECT_THAT(JobDetails(job), HasSubstr("test RMSE 3.2100  cover68 67.2%  cover95 95.1%"));
}

TEST(JobTable, HasAHeaderAndOneRowPerJob) {
  tagi::v1::Job pending = Regressor("job-4");
  pending.set_state(tagi::v1::PENDING);
  pending.set_reason("waiting for 1 idle worker");
  const std::string table = JobTable({Running(), pending});
  const std::vector<std::string> lines = Lines(table);
  ASSERT_EQ(lines.size(), 3u);
  for (const char* column : {"ID", "NAME", "STATE", "WORLD", "PROGRESS", "METRIC", "REASON"}) {
    EXPECT_THAT(lines[0], HasSubstr(column));
  }
  EXPECT_THAT(lines[1], StartsWith("job-3"));
  EXPECT_THAT(lines[1], AllOf(HasSubstr("fmnist-fnn"), HasSubstr("RUNNING"), HasSubstr("61%"),
                              HasSubstr("test accuracy 85.34%")));
  EXPECT_THAT(lines[2], StartsWith("job-4"));
  EXPECT_THAT(lines[2], AllOf(HasSubstr("PENDING"), HasSubstr("waiting for 1 idle worker")));
  EXPECT_EQ(Lines(JobTable({})).size(), 1u);
}

TEST(JobDetails, ShowsEveryEpochAndTheModelChecksum) {
  tagi::v1::Job job = Running();
  job.set_state(tagi::v1::SUCCEEDED);
  job.set_reason("trained 3 epochs on 2 workers");
  AddEpoch(job, 0.8612, 0.0);
  job.set_model_checksum("0123456789abcdef");
  job.set_model_bytes(4096);
  const std::string text = JobDetails(job);
  EXPECT_THAT(text, AllOf(HasSubstr("job-3"), HasSubstr("fmnist-fnn"), HasSubstr("SUCCEEDED"),
                          HasSubstr("trained 3 epochs on 2 workers"), HasSubstr("w-1,w-2")));
  EXPECT_THAT(text, HasSubstr("step 61/100"));
  EXPECT_THAT(text, HasSubstr("test acc 85.34%"));
  EXPECT_THAT(text, HasSubstr("test acc 86.12%"));
  EXPECT_THAT(text, HasSubstr("ECE 0.0312  Brier 0.2109"));
  int epoch_lines = 0;
  for (const std::string& line : Lines(text)) epoch_lines += line.rfind("epoch ", 0) == 0;
  EXPECT_EQ(epoch_lines, 2);
  EXPECT_THAT(text, AllOf(HasSubstr("4096 bytes"), HasSubstr("0123456789abcdef")));
}

TEST(JobDetails, ShowsEachRecoveryAndTheNewestSnapshot) {
  tagi::v1::Job job = Running();
  job.set_snapshot_step(60);
  job.set_snapshot_bytes(718000);
  job.set_snapshot_time_ms(1'700'000'000'000);
  tagi::v1::Recovery* r = job.add_recoveries();
  r->set_failed_generation(1);
  r->set_failed_at_step(47);
  r->set_reason("worker w-2 (rank 1) failed: its session stream broke");
  r->set_detected_ms(1'700'000'000'000);
  r->set_new_generation(2);
  r->set_resumed_from_step(40);
  r->set_snapshot("snapshot-000000000040.tagisnap");
  r->set_first_step_ms(1'700'000'000'045);
  r->set_steps_redone(7);
  tagi::v1::Recovery* pending = job.add_recoveries();
  pending->set_failed_generation(2);
  pending->set_failed_at_step(58);
  pending->set_reason("the coordinator restarted");
  const std::string text = JobDetails(job);
  EXPECT_THAT(text, HasSubstr("snapshot   step 60, 718000 bytes"));
  EXPECT_THAT(text, HasSubstr("generation 1 failed at step 47: worker w-2 (rank 1) failed"));
  EXPECT_THAT(text, HasSubstr("generation 2 resumed at step 40 (snapshot-000000000040.tagisnap); "
                              "first step 45 ms after detection, 7 steps redone"));
  EXPECT_THAT(text, HasSubstr("generation 2 failed at step 58: the coordinator restarted"));
  EXPECT_THAT(text, Not(HasSubstr("generation 3")));
}

TEST(JobDetails, OmitsTheModelLineWithoutAModel) {
  EXPECT_THAT(JobDetails(Classifier("job-1")), Not(HasSubstr("checksum")));
}

TEST(WorkerTable, ListsEachWorkerWithItsJobAndRank) {
  tagi::v1::WorkerInfo busy;
  busy.set_id("w-1");
  busy.set_state("BUSY");
  busy.set_job_id("job-3");
  busy.set_rank(1);
  busy.set_address("ipv4:10.0.0.5:5000");
  busy.set_hostname("gpu-a");
  busy.set_device("cuda:0");
  tagi::v1::WorkerInfo idle;
  idle.set_id("w-2");
  idle.set_state("IDLE");
  idle.set_rank(1);  // stale rank of a finished job: not shown
  idle.set_hostname("gpu-b");
  const std::vector<std::string> lines = Lines(WorkerTable({busy, idle}));
  ASSERT_EQ(lines.size(), 3u);
  for (const char* column : {"ID", "STATE", "JOB", "RANK", "DEVICE", "ADDRESS", "HOST"}) {
    EXPECT_THAT(lines[0], HasSubstr(column));
  }
  EXPECT_THAT(lines[1], StartsWith("w-1"));
  EXPECT_THAT(lines[1], AllOf(HasSubstr("BUSY"), HasSubstr("job-3"), HasSubstr(" 1 "),
                              HasSubstr("cuda:0"), HasSubstr("ipv4:10.0.0.5:5000"),
                              HasSubstr("gpu-a")));
  EXPECT_THAT(lines[2], StartsWith("w-2"));
  EXPECT_THAT(lines[2], AllOf(HasSubstr("IDLE"), HasSubstr(" cpu "), HasSubstr("gpu-b"),
                              Not(HasSubstr(" 1 "))));
}

TEST(Printable, EscapesEveryControlCharacterAndKeepsPrintableUtf8) {
  EXPECT_EQ(Printable("plain name-1"), "plain name-1");
  EXPECT_EQ(Printable("caf\xc3\xa9 \xe2\x9c\x93"), "caf\xc3\xa9 \xe2\x9c\x93");  // é ✓
  EXPECT_EQ(Printable("\x1b[2J\x1b]0;pwned\x07"), "\\e[2J\\e]0;pwned\\x07");
  EXPECT_EQ(Printable("a\nb\tc\rd"), "a\\nb\\tc\\rd");
  EXPECT_EQ(Printable(std::string("nul\0here", 8)), "nul\\x00here");
  EXPECT_EQ(Printable("del\x7f"), "del\\x7f");
  EXPECT_EQ(Printable("csi\xc2\x9b" "31m"), "csi\\xc2\\x9b31m");  // C1 CSI
  EXPECT_EQ(Printable("bidi\xe2\x80\xae" "evil"), "bidi\\xe2\\x80\\xaeevil");
  EXPECT_EQ(Printable("bad\xff\xc0\x80"), "bad\\xff\\xc0\\x80");  // not UTF-8, overlong
  EXPECT_EQ(Printable("back\\slash"), "back\\\\slash");  // so the output is unambiguous
}

TEST(JobTable, PrintsNamesAndReasonsWithEscapesEscaped) {
  tagi::v1::Job job;
  job.set_id("job-1");
  job.set_state(tagi::v1::FAILED);
  job.mutable_spec()->set_name("\x1b[31mred\x1b[0m");
  job.set_reason("line one\nline two \x1b]52;c;Y3VybA==\x07");
  for (const std::string& text : {JobTable({job}), JobDetails(job), WatchLine(job)}) {
    EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
    EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
  }
  const std::string table = JobTable({job});
  EXPECT_THAT(table, HasSubstr("\\e[31mred\\e[0m"));
  EXPECT_THAT(table, HasSubstr("line one\\nline two \\e]52;c;Y3VybA==\\x07"));
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 2) << "one header and one row";
}

TEST(WorkerTable, PrintsWorkerFieldsEscaped) {
  tagi::v1::WorkerInfo w;
  w.set_id("w-1");
  w.set_state("IDLE");
  w.set_hostname("host\x1b[1A");
  w.set_address("10.0.0.1:1\r");
  const std::string table = WorkerTable({w});
  EXPECT_EQ(table.find('\x1b'), std::string::npos);
  EXPECT_EQ(table.find('\r'), std::string::npos);
  EXPECT_THAT(table, HasSubstr("host\\e[1A"));
}

}  // namespace
}  // namespace tagi
