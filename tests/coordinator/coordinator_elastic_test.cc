// Elastic jobs in the Coordinator (JobSpec.min_world_size/max_world_size):
// the bounds Submit resolves, a generation that resumes on fewer ranks after
// a failure once the settle time is over, growth at a snapshot point when a
// worker is idle, and Job.worlds/resizes. FakeClock only; nothing sleeps.
#include <string>
#include <vector>

#include "common/snapshot.h"
#include "coordinator/metrics.h"
#include "coordinator_harness.h"
#include "gmock/gmock.h"

namespace tagi::coordinator::test {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string SnapshotBytes(const std::string& job, uint64_t global_step, uint64_t epoch = 0) {
  return ExampleSnapshotBytes(job, global_step, epoch, global_step);
}

tagi::v1::JobSpec ElasticSpec(uint32_t min_world, uint32_t max_world) {
  tagi::v1::JobSpec spec = Spec(0);
  spec.set_min_world_size(min_world);
  spec.set_max_world_size(max_world);
  return spec;
}

class ElasticTest : public CoordinatorTest {
 protected:
  static constexpr absl::Duration kSettle = absl::Seconds(2);

  Coordinator& StartElastic(int world) {
    CoordinatorOptions o = Options(world);
    o.membership.elastic_settle = kSettle;
    return Start(o);
  }
  std::string SubmitElastic(uint32_t min_world, uint32_t max_world) {
    auto job = coord().Submit(ElasticSpec(min_world, max_world));
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }
  // The worker asks for work (and is seen alive), without waiting.
  void CheckIn(const std::string& worker) {
    ASSERT_TRUE(Rendezvous(worker, absl::ZeroDuration()).ok());
  }
  // Advances the clock with the workers heard from on the way (heartbeats).
  void Pass(absl::Duration d, const std::vector<std::string>& alive) {
    clock_.Advance(d);
    for (const std::string& w : alive) CheckIn(w);
    coord().Tick();
  }
};

void ExpectSpan(const tagi::v1::WorldSpan& span, uint64_t from_step, uint32_t world,
                uint64_t generation) {
  EXPECT_EQ(span.from_step(), from_step);
  EXPECT_EQ(span.world(), world);
  EXPECT_EQ(span.generation(), generation);
}

TEST_F(ElasticTest, SubmitValidatesAndResolvesTheBounds) {
  StartElastic(3);
  tagi::v1::JobSpec both = ElasticSpec(1, 3);
  both.set_world_size(2);
  auto job = coord().Submit(both);
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(job.status()));
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("worldSize"));

  job = coord().Submit(ElasticSpec(1, 4));
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(job.status()));
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("maxWorldSize"));
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("--world 3"));

  job = coord().Submit(ElasticSpec(3, 2));
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(job.status()));
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("minWorldSize"));
  // An unset maximum is --world: a minimum above it is refused.
  job = coord().Submit(ElasticSpec(4, 0));
  ASSERT_FALSE(job.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(job.status()));
  EXPECT_THAT(std::string(job.status().message()), HasSubstr("--world"));
  EXPECT_TRUE(coord().List().empty()) << "nothing refused was queued";

  job = coord().Submit(ElasticSpec(1, 3));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), tagi::v1::PENDING);
  EXPECT_EQ(job->min_world_size(), 1u);
  EXPECT_EQ(job->max_world_size(), 3u);
  EXPECT_EQ(job->world_size(), 3u);
  EXPECT_EQ(job->reason(), "waiting for 1 to 3 idle workers");
  EXPECT_EQ(job->resizes(), 0u);
  EXPECT_TRUE(job->worlds().empty());
  // Unset bounds: a minimum of 1, a maximum of --world.
  job = coord().Submit(ElasticSpec(0, 2));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->min_world_size(), 1u);
  EXPECT_EQ(job->max_world_size(), 2u);
  EXPECT_EQ(job->reason(), "waiting for 1 to 2 idle workers");
  job = coord().Submit(ElasticSpec(2, 0));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->min_world_size(), 2u);
  EXPECT_EQ(job->max_world_size(), 3u);
  // A fixed job has no bounds.
  job = coord().Submit(Spec(2));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->min_world_size(), 0u);
  EXPECT_EQ(job->max_world_size(), 0u);
  EXPECT_EQ(job->reason(), "waiting for 2 idle workers");
}

TEST_F(ElasticTest, ShrinksOnTheSurvivorsAfterTheSettleTimeThenGrowsAtASnapshotPoint) {
  StartElastic(3);
  const std::string job = SubmitElastic(1, 3);
  const auto w = RegisterN(3);
  tagi::v1::Job j = GetJob(job);
  ASSERT_EQ(j.state(), tagi::v1::RUNNING);  // three idle at once: no settle wait
  ASSERT_THAT(j.workers(), ::testing::ElementsAre(w[0], w[1], w[2]));
  EXPECT_EQ(j.world_size(), 3u);
  EXPECT_EQ(AssignmentOf(w[2]).world_size(), 3u);
  ASSERT_EQ(j.worlds_size(), 1);
  ExpectSpan(j.worlds(0), 0, 3, 1);
  const uint64_t t0 = Open(w[0]);
  const uint64_t t1 = Open(w[1]);
  const uint64_t t2 = Open(w[2]);
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 1, 10, SnapshotBytes(job, 10)).ok());
  EXPECT_EQ(State(job), tagi::v1::RUNNING);  // at its maximum: nothing to grow
  ASSERT_TRUE(Report(job, w[0], 0, 14).ok());

  // w-2 fails; no spare is idle.
  coord().CloseSession(w[1], t1, "connection lost");
  j = GetJob(job);
  EXPECT_EQ(j.state(), tagi::v1::PENDING);
  EXPECT_EQ(j.restarts(), 1u);
  EXPECT_THAT(j.reason(), HasSubstr("waiting for 1 to 3 idle workers"));
  for (const auto& [worker, token] : {std::pair{w[0], t0}, std::pair{w[2], t2}}) {
    const auto d = Drain(worker, token);
    ASSERT_EQ(d.size(), 1u) << worker;
    EXPECT_EQ(d[0].directive(), tagi::v1::ABORT);
    EXPECT_EQ(d[0].generation(), 1u);
  }
  // One survivor asks again: within the settle time the job waits for more
  // (the other survivor is on its way back).
  CheckIn(w[0]);
  EXPECT_EQ(State(job), tagi::v1::PENDING);
  Pass(kSettle - absl::Milliseconds(1), {w[0]});
  EXPECT_EQ(State(job), tagi::v1::PENDING);
  // The other one is back; the settle time is over a moment later at most.
  CheckIn(w[2]);
  Pass(absl::Milliseconds(1), {w[0], w[2]});
  j = GetJob(job);
  ASSERT_EQ(j.state(), tagi::v1::RUNNING);
  EXPECT_EQ(j.generation(), 2u);
  EXPECT_EQ(j.world_size(), 2u);
  EXPECT_THAT(j.workers(), ::testing::ElementsAre(w[0], w[2]));
  EXPECT_EQ(j.restarts(), 1u);
  EXPECT_EQ(j.resizes(), 0u);
  EXPECT_THAT(j.reason(), HasSubstr("resumed on 2 workers"));
  for (int r = 0; r < 2; ++r) {
    const tagi::v1::Assignment a = AssignmentOf(j.workers(r));
    EXPECT_EQ(a.generation(), 2u);
    EXPECT_EQ(a.rank(), static_cast<uint32_t>(r));
    EXPECT_EQ(a.world_size(), 2u);
    EXPECT_TRUE(a.resume());
    EXPECT_EQ(a.resume_global_step(), 10u);
  }
  ASSERT_EQ(j.recoveries_size(), 1);
  EXPECT_EQ(j.recoveries(0).new_generation(), 2u);
  EXPECT_EQ(j.recoveries(0).resumed_from_step(), 10u);
  ASSERT_EQ(j.worlds_size(), 2);
  ExpectSpan(j.worlds(0), 0, 3, 1);
  ExpectSpan(j.worlds(1), 10, 2, 2);

  // A fourth worker joins: nothing happens before a snapshot point.
  const std::string w4 = Register();
  CheckIn(w4);
  Pass(absl::Seconds(1), {w[0], w[2], w4});
  ASSERT_TRUE(Report(job, w[0], 0, 15, /*gen=*/2).ok());
  j = GetJob(job);
  EXPECT_EQ(j.state(), tagi::v1::RUNNING);
  EXPECT_EQ(j.generation(), 2u);
  EXPECT_EQ(Worker(w4).state(), "IDLE");

  // Rank 0's snapshot of step 20 is one: generation 2 ends to grow, and
  // generation 3 is formed at once, on the survivors (still ready: they are
  // not suspects) and w-4.
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 2, 20, SnapshotBytes(job, 20)).ok());
  for (const auto& [worker, token] : {std::pair{w[0], t0}, std::pair{w[2], t2}}) {
    const auto d = Drain(worker, token);
    ASSERT_EQ(d.size(), 1u) << worker;
    EXPECT_EQ(d[0].directive(), tagi::v1::ABORT);
    EXPECT_EQ(d[0].generation(), 2u);
    EXPECT_THAT(d[0].reason(), HasSubstr("growing from 2 to 3"));
    EXPECT_THAT(d[0].reason(), HasSubstr(w4));
    EXPECT_THAT(d[0].reason(), HasSubstr("step 20"));
  }
  EXPECT_TRUE(absl::IsAborted(coord().StoreSet(job, 2, "k", "v")));
  EXPECT_TRUE(absl::IsAborted(
      coord().UploadSnapshot(w[0], job, 2, 21, SnapshotBytes(job, 21))));  // gen 2 is over
  j = GetJob(job);
  ASSERT_EQ(j.state(), tagi::v1::RUNNING);
  EXPECT_EQ(j.generation(), 3u);
  EXPECT_EQ(j.world_size(), 3u);
  EXPECT_EQ(j.resizes(), 1u);
  EXPECT_EQ(j.restarts(), 1u);  // a planned re-formation is not a restart
  EXPECT_EQ(j.recoveries_size(), 1);
  EXPECT_THAT(j.workers(), ::testing::ElementsAre(w[0], w[2], w4));
  // The ranks pick their assignments up when they ask again.
  for (int r = 0; r < 3; ++r) {
    const tagi::v1::Assignment a = AssignmentOf(j.workers(r));
    EXPECT_EQ(a.generation(), 3u);
    EXPECT_EQ(a.rank(), static_cast<uint32_t>(r));
    EXPECT_EQ(a.world_size(), 3u);
    EXPECT_TRUE(a.resume());
    EXPECT_EQ(a.resume_global_step(), 20u);
  }
  auto bytes = coord().ResumeSnapshot(w4, job, 3);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto decoded = DecodeSnapshot(**bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->global_step, 20u);
  EXPECT_EQ(j.restarts(), 1u);
  EXPECT_EQ(j.resizes(), 1u);
  ASSERT_EQ(j.worlds_size(), 3);
  ExpectSpan(j.worlds(0), 0, 3, 1);
  ExpectSpan(j.worlds(1), 10, 2, 2);
  ExpectSpan(j.worlds(2), 20, 3, 3);
  // At its maximum now: the next snapshot point changes nothing.
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 3, 30, SnapshotBytes(job, 30)).ok());
  EXPECT_EQ(State(job), tagi::v1::RUNNING);
  EXPECT_EQ(GetJob(job).generation(), 3u);
  const std::string scraped = CoordinatorMetrics(coord(), clock_).Scrape();
  EXPECT_THAT(scraped, HasSubstr("tagi_coordinator_job_world_size{job=\"" + job + "\"} 3"));
  EXPECT_THAT(scraped, HasSubstr("tagi_coordinator_job_resizes_total{job=\"" + job + "\"} 1"));
}

TEST_F(ElasticTest, GrowsAtASnapshotAcceptedWithItsEpochsMetrics) {
  // A snapshot that ends an epoch waits for rank 0's metrics of it; the
  // progress report that brings them is the snapshot point.
  StartElastic(3);
  const std::string job = SubmitElastic(1, 3);
  const auto w = RegisterN(2);
  Pass(kSettle, {w[0], w[1]});
  ASSERT_EQ(State(job), tagi::v1::RUNNING);
  ASSERT_EQ(GetJob(job).world_size(), 2u);
  const uint64_t t0 = Open(w[0]);
  const std::string w3 = Register();
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 1, 25, SnapshotBytes(job, 25, /*epoch=*/1)).ok());
  EXPECT_EQ(State(job), tagi::v1::RUNNING) << "not before its epoch's metrics are in";
  tagi::v1::ProgressReport report;
  report.set_worker_id(w[0]);
  report.set_job_id(job);
  report.set_generation(1);
  report.set_rank(0);
  report.mutable_progress()->set_global_step(26);
  report.mutable_progress()->add_epochs()->set_epoch(1);
  auto reply = coord().ReportProgress(report);
  ASSERT_TRUE(reply.ok()) << reply.status();
  // The reporting rank learns that its generation is over, whichever way it asks.
  EXPECT_EQ(reply->directive(), tagi::v1::ABORT);
  EXPECT_THAT(reply->reason(), HasSubstr("generation 1 ended to grow at the snapshot of step 25"));
  const auto d = Drain(w[0], t0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].directive(), tagi::v1::ABORT);
  EXPECT_EQ(d[0].generation(), 1u);
  const tagi::v1::Job j = GetJob(job);
  ASSERT_EQ(j.state(), tagi::v1::RUNNING);
  EXPECT_EQ(j.generation(), 2u);
  EXPECT_EQ(j.resizes(), 1u);
  EXPECT_EQ(j.snapshot_step(), 25u);
  EXPECT_EQ(j.world_size(), 3u);
  EXPECT_THAT(j.workers(), ::testing::ElementsAre(w[0], w[1], w3));
  EXPECT_EQ(AssignmentOf(w3).resume_global_step(), 25u);
  ASSERT_EQ(j.progress().epochs_size(), 1);  // the metrics of epoch 1 are kept
  ASSERT_EQ(j.worlds_size(), 2);
  ExpectSpan(j.worlds(0), 0, 2, 1);
  ExpectSpan(j.worlds(1), 25, 3, 2);
}

TEST_F(ElasticTest, AWaitingJobComesBeforeGrowth) {
  StartElastic(3);
  const std::string elastic = SubmitElastic(1, 3);
  const auto w = RegisterN(2);
  Pass(kSettle, {w[0], w[1]});
  ASSERT_EQ(GetJob(elastic).world_size(), 2u);
  const std::string fixed = Submit(2);  // waits for two idle workers
  const std::string w3 = Register();
  EXPECT_EQ(State(fixed), tagi::v1::PENDING);
  ASSERT_TRUE(coord().UploadSnapshot(w[0], elastic, 1, 10, SnapshotBytes(elastic, 10)).ok());
  EXPECT_EQ(State(elastic), tagi::v1::RUNNING) << "w-3 is kept for the waiting job";
  EXPECT_EQ(GetJob(elastic).resizes(), 0u);
  EXPECT_EQ(Worker(w3).state(), "IDLE");
}

TEST_F(ElasticTest, AFixedJobNeverGrows) {
  StartElastic(3);
  const std::string job = Submit(2);
  const auto w = RegisterN(3);
  ASSERT_EQ(State(job), tagi::v1::RUNNING);
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 1, 10, SnapshotBytes(job, 10)).ok());
  const tagi::v1::Job j = GetJob(job);
  EXPECT_EQ(j.state(), tagi::v1::RUNNING);
  EXPECT_EQ(j.generation(), 1u);
  EXPECT_EQ(j.world_size(), 2u);
  EXPECT_EQ(j.resizes(), 0u);
  ASSERT_EQ(j.worlds_size(), 1);
  ExpectSpan(j.worlds(0), 0, 2, 1);
  EXPECT_EQ(Worker(w[2]).state(), "IDLE");
}

TEST_F(ElasticTest, AJobBelowItsMinimumWaitsForWorkers) {
  StartElastic(3);
  const std::string job = SubmitElastic(2, 3);
  const auto w = RegisterN(3);
  ASSERT_EQ(State(job), tagi::v1::RUNNING);
  const uint64_t t1 = Open(w[1]);
  const uint64_t t2 = Open(w[2]);
  coord().CloseSession(w[1], t1, "connection lost");
  coord().CloseSession(w[2], t2, "connection lost");
  CheckIn(w[0]);
  for (int i = 0; i < 5; ++i) Pass(kSettle, {w[0]});
  tagi::v1::Job j = GetJob(job);
  EXPECT_EQ(j.state(), tagi::v1::PENDING);
  EXPECT_THAT(j.reason(), HasSubstr("waiting for 2 to 3 idle workers"));
  EXPECT_EQ(j.generation(), 1u);
  // A new worker makes two: long past its settle time, it resumes at once.
  const std::string w4 = Register();
  j = GetJob(job);
  ASSERT_EQ(j.state(), tagi::v1::RUNNING);
  EXPECT_EQ(j.generation(), 2u);
  EXPECT_THAT(j.workers(), ::testing::ElementsAre(w[0], w4));
  EXPECT_EQ(AssignmentOf(w4).world_size(), 2u);
}

// A growth whose target is below the maximum takes what is idle; a
// younger job submitted meanwhile does not take the ranks of the
// re-formation (held during its settle time, if it waits one).
TEST_F(ElasticTest, AGrowthBelowTheMaximumKeepsItsRanksFromYoungerJobs) {
  StartElastic(4);
  const std::string job = SubmitElastic(1, 4);
  const auto w = RegisterN(2);
  Pass(kSettle, {w[0], w[1]});
  ASSERT_EQ(GetJob(job).world_size(), 2u);
  const std::string w3 = Register();
  const uint64_t t0 = Open(w[0]);
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 1, 10, SnapshotBytes(job, 10)).ok());
  const auto d = Drain(w[0], t0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].directive(), tagi::v1::ABORT);
  EXPECT_THAT(d[0].reason(), HasSubstr("growing from 2 to 3"));
  tagi::v1::Job j = GetJob(job);
  EXPECT_EQ(j.resizes(), 1u);
  if (j.state() == tagi::v1::PENDING) {
    EXPECT_THAT(j.reason(), StartsWith("growing: growing from 2 to 3"));
    EXPECT_THAT(j.reason(), HasSubstr("waiting for 1 to 4 idle workers"));
  }
  const std::string other = Submit(1);
  EXPECT_EQ(State(other), tagi::v1::PENDING);
  Pass(kSettle, {w[0], w[1], w3});
  j = GetJob(job);
  ASSERT_EQ(j.state(), tagi::v1::RUNNING);
  EXPECT_EQ(j.generation(), 2u);
  EXPECT_THAT(j.workers(), ::testing::ElementsAre(w[0], w[1], w3));
  EXPECT_EQ(AssignmentOf(w3).resume_global_step(), 10u);
  EXPECT_EQ(State(other), tagi::v1::PENDING);
}

// The survivors of a growth are not left out of the generation it forms,
// however long they take to ask again: with no settle time at all the job
// re-formed on the joining worker alone (world 1 instead of 3), and with
// one it did whenever the survivors' abort took longer than the settle.
TEST_F(ElasticTest, AGrowthNeverReformsWithoutTheSurvivors) {
  CoordinatorOptions o = Options(3);
  o.membership.elastic_settle = absl::ZeroDuration();
  Start(o);
  const auto w = RegisterN(2);
  const std::string job = SubmitElastic(1, 3);
  ASSERT_EQ(GetJob(job).world_size(), 2u);  // no settle: at once with two
  const std::string w3 = Register();
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 1, 10, SnapshotBytes(job, 10)).ok());
  tagi::v1::Job j = GetJob(job);
  ASSERT_EQ(j.state(), tagi::v1::RUNNING);
  EXPECT_EQ(j.generation(), 2u);
  EXPECT_EQ(j.world_size(), 3u);
  EXPECT_THAT(j.workers(), ::testing::ElementsAre(w[0], w[1], w3));
  ASSERT_EQ(j.worlds_size(), 2);
  ExpectSpan(j.worlds(1), 10, 3, 2);
}

TEST_F(ElasticTest, SurvivorsSlowToAskAgainAfterAGrowthKeepTheirRanks) {
  StartElastic(3);
  const std::string job = SubmitElastic(1, 3);
  const auto w = RegisterN(2);
  Pass(kSettle, {w[0], w[1]});
  const std::string w3 = Register();
  ASSERT_TRUE(coord().UploadSnapshot(w[0], job, 1, 10, SnapshotBytes(job, 10)).ok());
  Pass(kSettle, {w3});  // the survivors are still aborting generation 1
  const tagi::v1::Job j = GetJob(job);
  ASSERT_EQ(j.state(), tagi::v1::RUNNING);
  EXPECT_EQ(j.world_size(), 3u);
  EXPECT_THAT(j.workers(), ::testing::ElementsAre(w[0], w[1], w3));
}

}  // namespace
}  // namespace tagi::coordinator::test
