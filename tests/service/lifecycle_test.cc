// Process lifecycles: workers that start before their coordinator, and
// clean exits on SIGTERM / SIGINT.
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/service/service_cluster.h"

namespace tagi::testing {
namespace {

using ::testing::HasSubstr;

using ServiceLifecycle = ServiceTest;

void ExpectExitsCleanly(ChildProcess& p, int sig, absl::Duration within) {
  ASSERT_TRUE(p.Signal(sig)) << p.name() << " was already gone";
  const auto st = p.WaitExit(within);
  ASSERT_TRUE(st.has_value()) << p.name() << " still runs " << within << " after signal " << sig;
  EXPECT_TRUE(st->ExitedWith(0)) << p.name() << ": " << st->ToString();
}

TEST_F(ServiceLifecycle, WorkersSurviveCoordinatorAbsence) {
  const int port = PickFreePort();
  const std::string address = absl::StrCat("127.0.0.1:", port);
  ChildProcess& worker = StartWorker({}, address);
  ASSERT_TRUE(WaitUntil([&] { return worker.Stderr().find("retrying") != std::string::npos; },
                        absl::Seconds(10)))
      << "the worker did not report that the coordinator is unreachable";
  // It keeps retrying instead of exiting.
  EXPECT_FALSE(worker.WaitExit(absl::Seconds(1)).has_value())
      << "the worker ended without a coordinator: "
      << worker.WaitExit(absl::ZeroDuration())->ToString();

  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1, {}, address));
  ASSERT_EQ(this->address(), address);
  // Up to ~20 s: the worker backs off to 5 s (+-50 %) between attempts, and
  // gRPC may take one backup-poll period (5 s) to see its reconnection.
  EXPECT_TRUE(
      WaitUntil([&] { return worker.Stderr().find("registered with") != std::string::npos; },
                absl::Seconds(30)))
      << "the worker did not register once the coordinator was up";
  EXPECT_TRUE(WaitForWorkers(1, "IDLE", absl::Seconds(10)));
  // And it works: a job runs on it.
  const ProcessResult submit =
      Ctl({"submit", WriteJob("toy", ToyJobJson({.world = 1, .epochs = 2})), "--watch"});
  EXPECT_EQ(submit.exit_code, 0) << submit.out << submit.err;
  EXPECT_THAT(submit.out, HasSubstr("SUCCEEDED"));

  ExpectExitsCleanly(worker, SIGTERM, absl::Seconds(10));
  ExpectExitsCleanly(coordinator(), SIGTERM, absl::Seconds(10));
}

TEST_F(ServiceLifecycle, WorkerWithoutCoordinatorExitsOnSigterm) {
  ChildProcess& worker = StartWorker({}, absl::StrCat("127.0.0.1:", PickFreePort()));
  ASSERT_TRUE(WaitUntil([&] { return worker.Stderr().find("retrying") != std::string::npos; },
                        absl::Seconds(10)));
  ExpectExitsCleanly(worker, SIGTERM, absl::Seconds(10));
}

TEST_F(ServiceLifecycle, EveryProcessExitsOnSigterm) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  ChildProcess& w1 = StartWorker();
  ChildProcess& w2 = StartWorker();
  ASSERT_TRUE(WaitForWorkers(2, "IDLE", absl::Seconds(20)));
  ExpectExitsCleanly(w1, SIGTERM, absl::Seconds(5));
  ExpectExitsCleanly(w2, SIGTERM, absl::Seconds(5));
  ExpectExitsCleanly(coordinator(), SIGTERM, absl::Seconds(5));
  EXPECT_THAT(coordinator().Stderr(), HasSubstr("shutting down"));
}

// A rank whose worker gets SIGTERM mid-job votes to stop; the other rank
// stops by that vote without having been told to cancel, and must report a
// retryable end (it used to say "cancelled", which FAILED the job whenever
// its report reached the coordinator before the leaving worker's). The job
// resumes on a spare and SUCCEEDS. Three times: the order of the two reports
// is up to the scheduler.
TEST_F(ServiceLifecycle, AWorkerLeavingMidJobOnSigtermHandsItsRankToASpare) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  std::vector<ChildProcess*> workers = {&StartWorker(), &StartWorker(), &StartWorker()};
  ASSERT_TRUE(WaitForWorkers(3, "IDLE", absl::Seconds(20)));
  const std::string job = WriteJob("fmnist", FmnistJobJson({.world = 2, .epochs = 30}));
  for (int trial = 0; trial < 3; ++trial) {
    const std::string id = Submit(job);
    auto running = WaitForJob(id, [](const tagi::v1::Job& j) {
      return j.state() != tagi::v1::PENDING && j.progress().global_step() >= 20;
    }, absl::Seconds(60));
    ASSERT_TRUE(running.has_value() && running->state() == tagi::v1::RUNNING)
        << (running ? running->reason() : "no job");
    const std::string leaving = running->workers(1);
    ChildProcess* w = nullptr;
    for (ChildProcess* c : workers) {
      if (c->Alive() && c->Stderr().find(absl::StrCat(" as ", leaving, "\n")) != std::string::npos) {
        w = c;
      }
    }
    ASSERT_NE(w, nullptr) << leaving;
    ExpectExitsCleanly(*w, SIGTERM, absl::Seconds(10));
    workers.push_back(&StartWorker());  // the next trial's spare
    const auto done = WaitForJob(id, [](const tagi::v1::Job& j) {
      return j.state() == tagi::v1::SUCCEEDED || j.state() == tagi::v1::FAILED ||
             j.state() == tagi::v1::CANCELLED;
    }, absl::Seconds(120));
    ASSERT_TRUE(done.has_value());
    ASSERT_EQ(done->state(), tagi::v1::SUCCEEDED) << "trial " << trial << ": " << done->reason();
    EXPECT_GE(done->restarts(), 1u);
  }
}

TEST_F(ServiceLifecycle, CoordinatorExitsOnSigint) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  ExpectExitsCleanly(coordinator(), SIGINT, absl::Seconds(5));
}

}  // namespace
}  // namespace tagi::testing
