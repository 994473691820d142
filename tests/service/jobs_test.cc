// Jobs through the whole service: real coordinator, workers and tagictl on
// loopback. Training, its results, cancellation and a failing job.
#include <signal.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/service/service_cluster.h"

namespace tagi::testing {
namespace {

using tagi::v1::Job;
using ::testing::HasSubstr;

bool Terminal(const Job& j) {
  return j.state() == tagi::v1::SUCCEEDED || j.state() == tagi::v1::FAILED ||
         j.state() == tagi::v1::CANCELLED;
}

double LastTestAccuracy(const Job& j) {
  const auto& epochs = j.progress().epochs();
  return epochs.empty() ? -1.0 : epochs[epochs.size() - 1].test_accuracy();
}

// The value of `"key":` in tagi-train's one-line JSON (a number or a string).
std::string JsonField(const std::string& line, const std::string& key) {
  const std::string tag = absl::StrCat("\"", key, "\":");
  const size_t at = line.find(tag);
  if (at == std::string::npos) return "";
  size_t begin = at + tag.size();
  if (line[begin] == '"') ++begin;
  const size_t end = line.find_first_of("\",}", begin);
  return line.substr(begin, end - begin);
}

// The state column of the row of `id` in `tagictl list`.
std::string ListedState(const std::string& table, const std::string& id) {
  for (absl::string_view line : absl::StrSplit(table, '\n', absl::SkipWhitespace())) {
    std::vector<std::string> cols = absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (cols.size() >= 3 && cols[0] == id) return cols[2];
  }
  return "";
}

using ServiceJobs = ServiceTest;

TEST_F(ServiceJobs, ThreeWorkersTwoJobsBackToBack) {
  if (!HaveFashionMnist())
    GTEST_SKIP() << "Fashion-MNIST is not in /usr/share/datasets/fashion-mnist";
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(3));
  for (int i = 0; i < 3; ++i) StartWorker();
  // All three registered first, so that job A (world 3) is placed at once.
  ASSERT_TRUE(WaitForWorkers(3, "IDLE", absl::Seconds(20)));

  FmnistJob spec_a{.name = "fmnist-a", .world = 3, .epochs = 2};
  FmnistJob spec_b{.name = "fmnist-b", .world = 2, .epochs = 1};
  const std::string file_a = WriteJob("a", FmnistJobJson(spec_a));
  const std::string file_b = WriteJob("b", FmnistJobJson(spec_b));
  const std::string a = Submit(file_a);
  const std::string b = Submit(file_b);
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  EXPECT_NE(a, b);
  // B waits while A holds every worker (unless A is already over).
  const auto b_early = GetJob(b);
  ASSERT_TRUE(b_early.has_value());
  if (b_early->state() != tagi::v1::PENDING) {
    const auto a_now = GetJob(a);
    ASSERT_TRUE(a_now.has_value());
    EXPECT_TRUE(Terminal(*a_now)) << "job " << b << " left PENDING while " << a
                                  << " held all three workers";
  }

  const ProcessResult watch_a = Ctl({"watch", a}, absl::Seconds(120));
  const ProcessResult watch_b = Ctl({"watch", b}, absl::Seconds(120));
  EXPECT_EQ(watch_a.exit_code, 0) << watch_a.out << watch_a.err;
  EXPECT_EQ(watch_b.exit_code, 0) << watch_b.out << watch_b.err;
  EXPECT_THAT(watch_a.out, HasSubstr(a + " SUCCEEDED"));
  EXPECT_THAT(watch_b.out, HasSubstr(b + " SUCCEEDED"));

  const std::vector<std::pair<std::string, std::string>> jobs = {{a, file_a}, {b, file_b}};
  for (size_t k = 0; k < jobs.size(); ++k) {
    const auto& [id, file] = jobs[k];
    SCOPED_TRACE(id);
    const auto job = GetJob(id);
    ASSERT_TRUE(job.has_value());
    EXPECT_EQ(job->state(), tagi::v1::SUCCEEDED) << job->reason();
    EXPECT_EQ(job->world_size(), k == 0 ? 3u : 2u);
    EXPECT_EQ(job->workers_size(), k == 0 ? 3 : 2);
    EXPECT_EQ(job->progress().epochs_size(), k == 0 ? 2 : 1);
    // 3000 samples, 784-64-11: one process reaches about 76 % after one epoch.
    EXPECT_GE(LastTestAccuracy(*job), 0.70);
    ASSERT_FALSE(job->model_checksum().empty());

    // The downloaded model evaluates, on its own, to what the job reported.
    const std::string model = dir_.File(id + ".tagi");
    const ProcessResult dl = Ctl({"download", id, "-o", model});
    ASSERT_EQ(dl.exit_code, 0) << dl.err;
    const ProcessResult eval =
        RunProcess({BinPath("tagi-train"), "--eval", model, file, "--json"}, absl::Seconds(60));
    ASSERT_EQ(eval.exit_code, 0) << eval.err;
    const std::string acc = JsonField(eval.out, "test_accuracy");
    ASSERT_FALSE(acc.empty()) << eval.out;
    EXPECT_NEAR(std::stod(acc), LastTestAccuracy(*job), 1e-6) << eval.out;
    EXPECT_EQ(JsonField(eval.out, "parameter_checksum"), job->model_checksum()) << eval.out;
  }

  const ProcessResult list = Ctl({"list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(ListedState(list.out, a), "SUCCEEDED") << list.out;
  EXPECT_EQ(ListedState(list.out, b), "SUCCEEDED") << list.out;
  EXPECT_TRUE(WaitForWorkers(3, "IDLE", absl::Seconds(5)));
}

TEST_F(ServiceJobs, CancelStopsTheJobOnEveryWorker) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  ChildProcess& w1 = StartWorker();
  ChildProcess& w2 = StartWorker();
  ASSERT_TRUE(WaitForWorkers(2, "IDLE", absl::Seconds(20)));
  // Hours of training unless it is cancelled.
  const std::string id = Submit(WriteJob(
      "long", ToyJobJson({.name = "long", .world = 2, .epochs = 100000, .train_size = 2000})));
  ASSERT_FALSE(id.empty());
  const auto running = WaitForJob(
      id, [](const Job& j) { return Terminal(j) || j.progress().global_step() > 0; },
      absl::Seconds(30));
  ASSERT_TRUE(running.has_value());
  ASSERT_EQ(running->state(), tagi::v1::RUNNING) << running->reason();
  ASSERT_GT(running->progress().global_step(), 0u) << "no progress reported";

  const ProcessResult cancel = Ctl({"cancel", id});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_THAT(cancel.out, HasSubstr("CANCELLED"));
  const auto ended = WaitForJob(id, Terminal, absl::Seconds(10));
  ASSERT_TRUE(ended.has_value());
  EXPECT_EQ(ended->state(), tagi::v1::CANCELLED) << ended->reason();
  EXPECT_LT(ended->progress().global_step(), ended->progress().total_steps());

  const std::string logged = absl::StrCat("job ", id, " generation 1 cancelled");
  for (ChildProcess* w : {&w1, &w2}) {
    EXPECT_TRUE(
        WaitUntil([&] { return w->Stderr().find(logged) != std::string::npos; }, absl::Seconds(10)))
        << w->name() << " did not log \"" << logged << "\"";
  }
  EXPECT_TRUE(WaitForWorkers(2, "IDLE", absl::Seconds(10)));
  // A cancelled job cannot be cancelled again, and it has no model.
  EXPECT_EQ(Ctl({"cancel", id}).exit_code, 1);
  EXPECT_EQ(Ctl({"download", id, "-o", dir_.File("none.tagi")}).exit_code, 1);

  for (ChildProcess* w : {&w1, &w2}) {
    ASSERT_TRUE(w->Signal(SIGTERM));
    const auto st = w->WaitExit(absl::Seconds(10));
    ASSERT_TRUE(st.has_value()) << w->name() << " still runs 10 s after SIGTERM";
    EXPECT_TRUE(st->ExitedWith(0)) << w->name() << ": " << st->ToString();
  }
}

// What a cancelled job got to is not lost: its newest snapshot comes back
// as a model file (tagictl download --snapshot), which evaluates and which
// a new job starts from (initFrom).
TEST_F(ServiceJobs, ACancelledJobsNewestSnapshotIsAModelToStartAgainFrom) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2, {"--state-dir", dir_.File("state")}));
  StartWorker({"--data-root", dir_.path()});
  ASSERT_TRUE(WaitForWorkers(1, "IDLE", absl::Seconds(20)));
  // Two ranks, one worker: it waits, with no snapshot.
  const std::string queued = Submit(WriteJob("queued", ToyJobJson({.name = "queued", .world = 2})));
  const ProcessResult none = Ctl({"download", queued, "--snapshot", "-o", dir_.File("x.tagi")});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.err, HasSubstr("has no stored snapshot"));
  ASSERT_EQ(Ctl({"cancel", queued}).exit_code, 0);

  const std::string file = WriteJob(
      "long", absl::StrReplaceAll(ToyJobJson({.name = "long", .epochs = 100000, .train_size = 2000}),
                                  {{"\"batchSize\"", "\"snapshotInterval\": 5, \"batchSize\""}}));
  const std::string id = Submit(file);
  const auto snapshotted = WaitForJob(
      id, [](const Job& j) { return Terminal(j) || j.snapshot_step() > 0; }, absl::Seconds(60));
  ASSERT_TRUE(snapshotted.has_value());
  ASSERT_GT(snapshotted->snapshot_step(), 0u) << snapshotted->reason();
  ASSERT_EQ(Ctl({"cancel", id}).exit_code, 0);
  const auto ended = WaitForJob(id, Terminal, absl::Seconds(10));
  ASSERT_TRUE(ended.has_value());
  ASSERT_EQ(ended->state(), tagi::v1::CANCELLED);

  const ProcessResult plain = Ctl({"download", id, "-o", dir_.File("plain.tagi")});
  EXPECT_EQ(plain.exit_code, 1);
  EXPECT_THAT(plain.err, HasSubstr("can be downloaded as one (tagictl download --snapshot"));
  const std::string model = dir_.File("from-snapshot.tagi");
  const ProcessResult got = Ctl({"download", id, "--snapshot", "-o", model});
  ASSERT_EQ(got.exit_code, 0) << got.err;
  const ProcessResult eval =
      RunProcess({BinPath("tagi-train"), "--eval", model, file}, absl::Seconds(60));
  EXPECT_EQ(eval.exit_code, 0) << eval.err;

  // A new job starts from it.
  const ProcessResult again =
      Ctl({"submit", WriteJob("again", ToyJobJson({.name = "again", .epochs = 1})), "--set",
           "initFrom=" + model, "--watch"},
          absl::Seconds(90));
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_THAT(again.out, HasSubstr("SUCCEEDED"));
}

// A job cancelled while it starts: one rank (w2) is in the ring bootstrap,
// waiting in the coordinator's store for the key of its peer (w1, stopped
// with SIGSTOP before the job was placed, so it cannot have published it).
// The cancel must answer that wait at once, so that both ranks report back
// and the next job starts; it used to linger until the wait's deadline (the
// workers' --connect-timeout, 5 s here), keeping w2 busy. Several times:
// each must start the next job well within the connect timeout.
TEST_F(ServiceJobs, AJobCancelledWhileItsRanksRendezvousFreesThemAtOnce) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  const std::vector<std::string> flags = {"--connect-timeout", "5s"};
  ChildProcess& w1 = StartWorker(flags);
  ChildProcess& w2 = StartWorker(flags);
  ASSERT_TRUE(WaitForWorkers(2, "IDLE", absl::Seconds(20)));
  const std::string long_job = WriteJob(
      "long", ToyJobJson({.name = "long", .world = 2, .epochs = 100000, .train_size = 2000}));
  const std::string next_job =
      WriteJob("next", ToyJobJson({.name = "next", .world = 2, .epochs = 1}));
  for (int trial = 0; trial < 3; ++trial) {
    SCOPED_TRACE(absl::StrCat("trial ", trial));
    ASSERT_TRUE(w1.Signal(SIGSTOP));
    const std::string id = Submit(long_job);
    ASSERT_FALSE(id.empty());
    const std::string placed = absl::StrCat("job ", id, " generation 1: rank");
    ASSERT_TRUE(WaitUntil([&] { return w2.Stderr().find(placed) != std::string::npos; },
                          absl::Seconds(20)))
        << "w2 was not given job " << id;
    absl::SleepFor(absl::Milliseconds(300));  // w2 reaches its store wait for w1's key
    const absl::Time cancelled_at = absl::Now();
    const ProcessResult cancel = Ctl({"cancel", id});
    ASSERT_TRUE(w1.Signal(SIGCONT));
    ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
    const std::string next = Submit(next_job);
    ASSERT_FALSE(next.empty());
    const auto started =
        WaitForJob(next, [](const Job& j) { return j.state() != tagi::v1::PENDING; },
                   absl::Seconds(20));
    const absl::Duration took = absl::Now() - cancelled_at;
    ASSERT_TRUE(started.has_value());
    EXPECT_LT(took, absl::Milliseconds(2500))
        << "the next job started " << took << " after the cancel (connect timeout 5 s)";
    const auto done = WaitForJob(next, Terminal, absl::Seconds(60));
    ASSERT_TRUE(done.has_value());
    ASSERT_EQ(done->state(), tagi::v1::SUCCEEDED) << done->reason();
  }
}

TEST_F(ServiceJobs, CudaJobWaitsForAGpuWorkerWhileCpuWorkersRunCpuJobs) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  StartWorker();
  StartWorker();
  ASSERT_TRUE(WaitForWorkers(2, "IDLE", absl::Seconds(20)));
  const std::string gpu_json =
      absl::StrReplaceAll(ToyJobJson({.name = "gpu", .world = 1}),
                          {{"\"device\": \"cpu\"", "\"device\": \"cuda:0\""}});
  ASSERT_THAT(gpu_json, HasSubstr("cuda:0"));
  const std::string gpu = Submit(WriteJob("gpu", gpu_json));
  ASSERT_FALSE(gpu.empty());
  // A CPU job submitted after it runs to its end on the CPU workers while
  // the GPU job keeps waiting (it is never placed on a CPU worker, where it
  // would fail).
  const std::string cpu = Submit(WriteJob("cpu", ToyJobJson({.name = "cpu", .world = 2})));
  ASSERT_FALSE(cpu.empty());
  const auto done = WaitForJob(cpu, Terminal, absl::Seconds(60));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state(), tagi::v1::SUCCEEDED) << done->reason();
  const auto waiting = GetJob(gpu);
  ASSERT_TRUE(waiting.has_value());
  EXPECT_EQ(waiting->state(), tagi::v1::PENDING);
  EXPECT_THAT(waiting->reason(), HasSubstr("waiting for 1 idle cuda worker"));
  EXPECT_EQ(waiting->generation(), 0u) << "placed on a CPU worker";
  EXPECT_TRUE(WaitForWorkers(2, "IDLE", absl::Seconds(10)));
  const ProcessResult cancel = Ctl({"cancel", gpu});
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
}

TEST_F(ServiceJobs, MissingDataFileFailsTheJobWithTheReason) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  // The temp dir is one of the workers' data roots: the file is looked for.
  ChildProcess& w1 = StartWorker({"--data-root", dir_.path()});
  ChildProcess& w2 = StartWorker({"--data-root", dir_.path()});
  ASSERT_TRUE(WaitForWorkers(2, "IDLE", absl::Seconds(20)));
  const std::string missing = dir_.File("absent/train-images-idx3-ubyte");
  const std::string json = absl::StrCat(R"({
  "name": "mnist-missing",
  "layers": [{"kind": "LINEAR", "inFeatures": 784, "outFeatures": 11}],
  "head": {"classification": {"numClasses": 10}},
  "data": {"kind": "MNIST", "trainImages": ")",
                                        missing, R"(",
           "trainLabels": ")",
                                        dir_.File("absent/train-labels-idx1-ubyte"), R"(",
           "testImages": ")",
                                        dir_.File("absent/t10k-images-idx3-ubyte"), R"(",
           "testLabels": ")",
                                        dir_.File("absent/t10k-labels-idx1-ubyte"), R"("},
  "noise": {"sigmaV": 1.0},
  "batchSize": 16, "epochs": 1, "seed": 1, "worldSize": 2, "device": "cpu"
})");
  const std::string id = Submit(WriteJob("mnist", json));
  ASSERT_FALSE(id.empty());

  const ProcessResult watch = Ctl({"watch", id});
  EXPECT_EQ(watch.exit_code, 1) << "watch of a FAILED job: " << watch.out << watch.err;
  const auto job = GetJob(id);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->state(), tagi::v1::FAILED);
  EXPECT_THAT(job->reason(), HasSubstr(missing));
  EXPECT_THAT(job->reason(), HasSubstr("does not exist"));

  EXPECT_TRUE(WaitForWorkers(2, "IDLE", absl::Seconds(10)));
  EXPECT_TRUE(w1.Alive());
  EXPECT_TRUE(w2.Alive());
  // They still train: the next job succeeds on the same two workers.
  const std::string next = Submit(WriteJob("toy", ToyJobJson({.world = 2, .epochs = 2})));
  ASSERT_FALSE(next.empty());
  const ProcessResult ok = Ctl({"watch", next});
  EXPECT_EQ(ok.exit_code, 0) << ok.out << ok.err;
}

}  // namespace
}  // namespace tagi::testing
