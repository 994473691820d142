// Process lifecycles: workers that start before their coordinator, and
// clean exits on SIGTERM / SIGINT.
#include <signal.h>

#include <string>

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

TEST_F(ServiceLifecycle, CoordinatorExitsOnSigint) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(1));
  ExpectExitsCleanly(coordinator(), SIGINT, absl::Seconds(5));
}

}  // namespace
}  // namespace tagi::testing
