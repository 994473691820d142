// Wall-clock jumps (issue 31): a coordinator whose host clock is 200 h ahead
// after a restart, and a worker whose clock steps 600 s forward mid-job.
// Retention, heartbeats and deadlines count on the monotonic clock, so
// neither deletes a job nor fails a heartbeat. The jumps come from
// libfaketime (Debian's faketime) preloaded into the real binaries, with
// the monotonic clock left alone, as a real clock step leaves it. On the
// main of before, the restarted coordinator deleted the ended job and its
// model ("ended 200h ago"), and the worker's step ended its session.
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/service/service_cluster.h"

namespace tagi::testing {
namespace {

constexpr char kLibFaketime[] = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1";

// `env` with libfaketime preloaded; `settings` are its variables.
std::vector<std::string> Faketime(std::vector<std::string> settings) {
  std::vector<std::string> wrapper = {"/usr/bin/env", absl::StrCat("LD_PRELOAD=", kLibFaketime),
                                      "FAKETIME_DONT_FAKE_MONOTONIC=1"};
  wrapper.insert(wrapper.end(), settings.begin(), settings.end());
  return wrapper;
}

bool Ended(const tagi::v1::Job& j) {
  return j.state() == tagi::v1::SUCCEEDED || j.state() == tagi::v1::FAILED ||
         j.state() == tagi::v1::CANCELLED;
}

class HostileTimeTest : public ServiceTest {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kLibFaketime)) {
      GTEST_SKIP() << kLibFaketime << " is missing (make deps installs faketime)";
    }
  }
};

TEST_F(HostileTimeTest, ACoordinatorRestartedWithItsClock200HoursAheadDeletesNoJob) {
  const std::string state = dir_.File("state");
  const std::vector<std::string> flags = {"--state-dir", state, "--retain-ended-for", "168h"};
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1, flags));
  StartWorker();
  const std::string id = Submit(WriteJob("toy.json", ToyJobJson(ToyJob())));
  ASSERT_FALSE(id.empty());
  const auto done = WaitForJob(id, Ended, absl::Seconds(60));
  ASSERT_TRUE(done.has_value());
  ASSERT_EQ(done->state(), tagi::v1::SUCCEEDED) << done->reason();
  ASSERT_TRUE(coordinator().Signal(SIGTERM));
  ASSERT_TRUE(coordinator().WaitExit(absl::Seconds(20)).has_value());

  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1, flags, "127.0.0.1:0", Faketime({"FAKETIME=+200h"})));
  const auto after = GetJob(id);
  ASSERT_TRUE(after.has_value()) << "the job was deleted";
  EXPECT_EQ(after->state(), tagi::v1::SUCCEEDED);
  EXPECT_EQ(after->model_checksum(), done->model_checksum());
  const ProcessResult model = Ctl({"download", id, "-o", dir_.File("model.tagi")});
  EXPECT_EQ(model.exit_code, 0) << model.err;
  EXPECT_TRUE(std::filesystem::exists(dir_.File("model.tagi")));
  EXPECT_THAT(coordinator().Stderr(), ::testing::Not(::testing::HasSubstr("forgetting job")));
}

TEST_F(HostileTimeTest, AWorkersClockSteppingTenMinutesMidJobFailsNoHeartbeat) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1, {"--heartbeat-interval", "200ms",
                                               "--heartbeat-timeout", "3s"}));
  // The worker's wall clock: read from this file on every call.
  const std::string offset = dir_.Write("faketime", "+0\n");
  StartWorker({}, "", Faketime({absl::StrCat("FAKETIME_TIMESTAMP_FILE=", offset),
                                "FAKETIME_NO_CACHE=1"}));
  ASSERT_TRUE(WaitForWorkers(1, "IDLE", absl::Seconds(20)));
  ToyJob toy;
  toy.train_size = 50000;
  toy.epochs = 400;  // several seconds
  const std::string id = Submit(WriteJob("toy.json", ToyJobJson(toy)));
  ASSERT_FALSE(id.empty());
  const auto running = WaitForJob(
      id, [](const tagi::v1::Job& j) { return j.state() == tagi::v1::RUNNING || Ended(j); },
      absl::Seconds(30));
  ASSERT_TRUE(running.has_value() && running->state() == tagi::v1::RUNNING);
  absl::SleepFor(absl::Milliseconds(500));
  { std::ofstream(offset) << "+600\n"; }  // ten minutes ahead, at once
  const auto done = WaitForJob(id, Ended, absl::Seconds(120));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->state(), tagi::v1::SUCCEEDED) << done->reason();
  EXPECT_EQ(done->restarts(), 0u) << "a recovery: "
                                  << (done->recoveries().empty() ? ""
                                                                 : done->recoveries(0).reason());
}

}  // namespace
}  // namespace tagi::testing
