// A rogue rank through the real binaries: a worker process that speaks the
// real protocol and joins the ring (tests/hostile/rogue_worker.cc), but
// sends a NaN in every all-reduce. On the main of before the chaos run, a
// job with such a rank SUCCEEDED with a NaN model; now no step holding it
// is applied, and the same failure from the same snapshot stops the job
// with the reason, without a model and without burning its restarts.
#include <cstdio>
#include <memory>
#include <string>

#include "common/protocol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/service/service_cluster.h"

namespace tagi::testing {
namespace {

using ::testing::HasSubstr;

class HostileRogueTest : public ServiceTest {};

TEST_F(HostileRogueTest, ARankSendingNaNStopsItsJobWithTheReasonAndNoModel) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator(2));
  StartWorker();
  ChildProcess rogue({BinPath("rogue_worker"), address()}, dir_, "rogue");
  ASSERT_TRUE(WaitForWorkers(2, "IDLE", absl::Seconds(20)));
  ToyJob toy;
  toy.world = 2;
  const std::string id = Submit(WriteJob("toy.json", ToyJobJson(toy)));
  ASSERT_FALSE(id.empty());
  const auto job = WaitForJob(
      id,
      [](const tagi::v1::Job& j) {
        return j.state() == tagi::v1::SUCCEEDED || j.state() == tagi::v1::FAILED;
      },
      absl::Seconds(120));
  ASSERT_TRUE(job.has_value());
  std::fprintf(stderr, "[figure] a NaN rank: job %s after %d restarts: %s\n",
               tagi::v1::JobState_Name(job->state()).c_str(), static_cast<int>(job->restarts()),
               job->reason().c_str());
  EXPECT_EQ(job->state(), tagi::v1::FAILED) << job->reason();
  EXPECT_THAT(job->reason(), HasSubstr(kNonFiniteStepReason));
  EXPECT_THAT(job->reason(), HasSubstr("again after resuming from step 0"));
  EXPECT_LE(job->restarts(), 1u);
  EXPECT_EQ(job->model_checksum(), "");
  const ProcessResult download = Ctl({"download", id, "-o", dir_.File("model.bin")});
  EXPECT_NE(download.exit_code, 0);
}

}  // namespace
}  // namespace tagi::testing
