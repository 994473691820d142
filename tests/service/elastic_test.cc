// Elastic jobs through the real binaries on loopback (docs/fault-tolerance.md "Elastic
// jobs"): a job of 1 to 3 ranks loses a worker with no spare and goes on
// with 2, gains a worker back and grows to 3 at a snapshot point, and
// SUCCEEDS with the model of one uninterrupted run forced through the same
// worlds (tagi-train --world-schedule, from the job's own Job.worlds).
#include <signal.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/service/service_cluster.h"

namespace tagi::testing {
namespace {

using ::testing::HasSubstr;

// 784-128-ReLU-128-ReLU-11 on 4,000 samples, batch 16, 30 epochs: about
// 2,500 to 3,750 steps of a few ms (83 steps an epoch at world 3, 125 at 2).
std::string ElasticJobJson(const std::string& reduction) {
  return absl::Substitute(R"({
  "name": "elastic",
  "layers": [
    {"linear": {"inFeatures": 784, "outFeatures": 128}}, {"relu": {}},
    {"linear": {"inFeatures": 128, "outFeatures": 128}}, {"relu": {}},
    {"linear": {"inFeatures": 128, "outFeatures": 11}}
  ],
  "head": {"classification": {"numClasses": 10}},
  "data": {"kind": "FASHION_MNIST", "trainLimit": 4000, "testLimit": 500},
  "noise": {"sigmaV": 1.0},
  "batchSize": 16, "epochs": 30, "seed": 5, "reduction": "$0",
  "minWorldSize": 1, "maxWorldSize": 3, "snapshotInterval": 20, "device": "cpu"
})",
                          reduction);
}

bool Ended(const tagi::v1::Job& j) {
  return j.state() == tagi::v1::SUCCEEDED || j.state() == tagi::v1::FAILED ||
         j.state() == tagi::v1::CANCELLED;
}

// "0:3,1200:2,..." from the job's worlds (what tagi-train takes).
std::string Schedule(const tagi::v1::Job& j) {
  std::string out;
  for (const tagi::v1::WorldSpan& s : j.worlds()) {
    absl::StrAppend(&out, out.empty() ? "" : ",", s.from_step(), ":", s.world());
  }
  return out;
}

// tagi-train's parameter checksum for the job through `schedule`.
std::string ScheduleChecksum(const std::string& job_file, const std::string& schedule) {
  const ProcessResult r = RunProcess(
      {BinPath("tagi-train"), job_file, "--world-schedule", schedule, "--json"},
      absl::Seconds(300));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string tag = "\"parameter_checksum\":\"";
  const size_t at = r.out.find(tag);
  if (at == std::string::npos) return "";
  return r.out.substr(at + tag.size(), 16);
}

class ElasticTest : public ServiceTest, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }

  ChildProcess* ProcessOf(const std::vector<ChildProcess*>& workers, const std::string& id) {
    for (ChildProcess* w : workers) {
      if (w->Alive() && w->Stderr().find(absl::StrCat(" as ", id, "\n")) != std::string::npos) {
        return w;
      }
    }
    return nullptr;
  }
};

TEST_P(ElasticTest, ShrinksWithoutASpareGrowsBackAndEndsAsItsWorldsReplayed) {
  StartCoordinator(3, {"--heartbeat-interval", "1s", "--heartbeat-timeout", "3s",
                       "--elastic-settle", "1s"});
  std::vector<ChildProcess*> workers;
  for (int i = 0; i < 3; ++i) workers.push_back(&StartWorker());
  ASSERT_TRUE(WaitForWorkers(3, "IDLE", absl::Seconds(30)));
  const std::string job_file = WriteJob("elastic", ElasticJobJson(GetParam()));
  const std::string id = Submit(job_file);

  // Three ranks (the maximum: no settle wait), then one killed with no spare.
  auto job = WaitForJob(id, [](const tagi::v1::Job& j) {
    return Ended(j) || (j.state() == tagi::v1::RUNNING && j.progress().global_step() >= 200);
  }, absl::Seconds(60));
  ASSERT_TRUE(job.has_value() && !Ended(*job)) << (job ? job->reason() : "no job");
  ASSERT_EQ(job->world_size(), 3u);
  EXPECT_EQ(job->min_world_size(), 1u);
  EXPECT_EQ(job->max_world_size(), 3u);
  ChildProcess* victim = ProcessOf(workers, job->workers(1));
  ASSERT_NE(victim, nullptr);
  ASSERT_TRUE(victim->Signal(SIGKILL));
  ASSERT_TRUE(victim->WaitExit(absl::Seconds(10)).has_value());

  // Shrunk: the two survivors run the next generation, stepping.
  job = WaitForJob(id, [](const tagi::v1::Job& j) {
    return Ended(j) || (j.state() == tagi::v1::RUNNING && j.restarts() == 1 &&
                        j.recoveries_size() > 0 && j.recoveries(0).first_step_ms() > 0);
  }, absl::Seconds(60));
  ASSERT_TRUE(job.has_value() && !Ended(*job)) << (job ? job->reason() : "no job");
  EXPECT_EQ(job->world_size(), 2u);
  EXPECT_EQ(job->workers_size(), 2);
  EXPECT_THAT(job->reason(), HasSubstr("resumed on 2 workers (elastic 1-3)"));
  const uint64_t shrunk_at = job->recoveries(0).resumed_from_step();

  // A worker joins: the job grows back to 3 at a snapshot point.
  workers.push_back(&StartWorker());
  job = WaitForJob(id, [](const tagi::v1::Job& j) {
    return Ended(j) || (j.state() == tagi::v1::RUNNING && j.resizes() == 1 &&
                        j.world_size() == 3);
  }, absl::Seconds(60));
  ASSERT_TRUE(job.has_value() && !Ended(*job)) << (job ? job->reason() : "no job");
  EXPECT_EQ(job->restarts(), 1u) << "growing is not a restart";

  const auto done = WaitForJob(id, Ended, absl::Seconds(180));
  ASSERT_TRUE(done.has_value());
  ASSERT_EQ(done->state(), tagi::v1::SUCCEEDED) << done->reason();
  ASSERT_EQ(done->worlds_size(), 3) << Schedule(*done);
  EXPECT_EQ(done->worlds(0).from_step(), 0u);
  EXPECT_EQ(done->worlds(0).world(), 3u);
  EXPECT_EQ(done->worlds(1).from_step(), shrunk_at);
  EXPECT_EQ(done->worlds(1).world(), 2u);
  EXPECT_GT(done->worlds(2).from_step(), shrunk_at);
  // At a snapshot point: every 20 steps or an epoch's end.
  EXPECT_THAT(coordinator().Stderr(),
              HasSubstr(absl::StrCat("growing from 2 to 3 ranks at a snapshot point: idle worker ",
                                     done->workers(2), " (the snapshot of step ",
                                     done->worlds(2).from_step(), ")")));
  EXPECT_EQ(done->worlds(2).world(), 3u);

  // Exact resume for an elastic job: the uninterrupted run through the same
  // worlds ends with the same model; moving the growth by one snapshot
  // interval changes it (so the comparison can fail).
  const std::string schedule = Schedule(*done);
  EXPECT_EQ(ScheduleChecksum(job_file, schedule), done->model_checksum()) << schedule;
  const std::string moved = absl::StrCat("0:3,", shrunk_at, ":2,",
                                         done->worlds(2).from_step() + 20, ":3");
  EXPECT_NE(ScheduleChecksum(job_file, moved), done->model_checksum()) << moved;
}

// SUM (global batch W x B) and AVERAGE (deltas over W) both follow the world.
INSTANTIATE_TEST_SUITE_P(Reductions, ElasticTest, ::testing::Values("SUM", "AVERAGE"));

}  // namespace
}  // namespace tagi::testing
