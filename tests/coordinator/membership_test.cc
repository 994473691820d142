// The pure membership decisions: who runs which job with which rank, and
// who is gone. No threads, no clock: time is a value.
#include "coordinator/membership.h"

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tagi::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);

MembershipOptions Options() {
  MembershipOptions o;
  o.worker_timeout = absl::Seconds(10);
  return o;
}

WorkerView Idle(const std::string& id, absl::Duration silent = absl::ZeroDuration()) {
  return {id, /*idle=*/true, kNow - silent};
}

std::vector<WorkerView> IdleWorkers(int n) {
  std::vector<WorkerView> out;
  for (int i = 1; i <= n; ++i) out.push_back(Idle("w-" + std::to_string(i)));
  return out;
}

TEST(WorkerIdLess, ComparesNumericSuffixes) {
  EXPECT_TRUE(WorkerIdLess("w-2", "w-10"));
  EXPECT_FALSE(WorkerIdLess("w-10", "w-2"));
  EXPECT_FALSE(WorkerIdLess("w-3", "w-3"));
  EXPECT_TRUE(WorkerIdLess("w-9", "w-100"));
}

TEST(DecidePlacements, NothingToPlaceWithoutJobs) {
  EXPECT_THAT(DecidePlacements(kNow, {}, IdleWorkers(4), Options()), IsEmpty());
}

TEST(DecidePlacements, JobWaitsUntilEnoughIdleWorkers) {
  EXPECT_THAT(DecidePlacements(kNow, {{"job-1", 3}}, IdleWorkers(2), Options()), IsEmpty());
  const auto placed = DecidePlacements(kNow, {{"job-1", 3}}, IdleWorkers(3), Options());
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, "job-1");
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-2", "w-3"));
  EXPECT_FALSE(placed[0].reason.empty());
}

TEST(DecidePlacements, PlacesOldestJobFirst) {
  // Two jobs of world 2, two idle workers: the first in the queue wins.
  const auto placed =
      DecidePlacements(kNow, {{"job-1", 2}, {"job-2", 2}}, IdleWorkers(2), Options());
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, "job-1");
}

TEST(DecidePlacements, OlderJobsGetTheLowestWorkerIds) {
  const auto placed =
      DecidePlacements(kNow, {{"job-1", 2}, {"job-2", 1}}, IdleWorkers(3), Options());
  ASSERT_EQ(placed.size(), 2u);
  EXPECT_EQ(placed[0].job_id, "job-1");
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-2"));
  EXPECT_EQ(placed[1].job_id, "job-2");
  EXPECT_THAT(placed[1].workers, ElementsAre("w-3"));
}

TEST(DecidePlacements, BackfillsYoungerSmallerJobWhileOlderLargerOneWaits) {
  // job-1 needs 3, only 2 idle: job-2 (world 2) starts, job-1 waits.
  const std::vector<PendingJobView> queue = {{"job-1", 3}, {"job-2", 2}};
  const auto placed = DecidePlacements(kNow, queue, IdleWorkers(2), Options());
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, "job-2");
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-2"));
}

TEST(DecidePlacements, WaitingOlderJobStartsOnceEnoughWorkersAreIdle) {
  // job-1 (world 3) is still first in the queue; a younger job-3 of world 1
  // also waits. With 3 idle workers job-1 takes all three.
  const std::vector<PendingJobView> queue = {{"job-1", 3}, {"job-3", 1}};
  const auto placed = DecidePlacements(kNow, queue, IdleWorkers(3), Options());
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, "job-1");
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-2", "w-3"));
}

TEST(DecidePlacements, AssignsRanksInNumericWorkerIdOrder) {
  // Given out of order, and "w-10" sorts before "w-2" as a string.
  const std::vector<WorkerView> workers = {Idle("w-10"), Idle("w-2"), Idle("w-1")};
  const auto placed = DecidePlacements(kNow, {{"job-1", 3}}, workers, Options());
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-2", "w-10"));
}

TEST(DecidePlacements, NeverPlacesWorkersSilentLongerThanTheTimeout) {
  const std::vector<WorkerView> workers = {Idle("w-1", absl::Seconds(11)), Idle("w-2"),
                                           Idle("w-3", absl::Seconds(10))};
  const auto placed = DecidePlacements(kNow, {{"job-1", 2}}, workers, Options());
  ASSERT_EQ(placed.size(), 1u);
  // w-3 was heard from exactly at the timeout: still live.
  EXPECT_THAT(placed[0].workers, ElementsAre("w-2", "w-3"));
  EXPECT_THAT(DecidePlacements(kNow, {{"job-1", 3}}, workers, Options()), IsEmpty());
}

TEST(DecidePlacements, NeverPlacesBusyWorkers) {
  std::vector<WorkerView> workers = IdleWorkers(3);
  workers[0].idle = false;
  const auto placed = DecidePlacements(kNow, {{"job-1", 2}}, workers, Options());
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-2", "w-3"));
  EXPECT_THAT(DecidePlacements(kNow, {{"job-1", 3}}, workers, Options()), IsEmpty());
}

TEST(DecidePlacements, PlacesEachWorkerAtMostOnceAcrossJobs) {
  const std::vector<PendingJobView> queue = {
      {"job-1", 2}, {"job-2", 3}, {"job-3", 1}, {"job-4", 2}, {"job-5", 1}};
  const auto placed = DecidePlacements(kNow, queue, IdleWorkers(5), Options());
  std::set<std::string> seen;
  size_t total = 0;
  for (const Placement& p : placed) {
    for (const std::string& w : p.workers) {
      EXPECT_TRUE(seen.insert(w).second) << w << " placed twice";
      ++total;
    }
  }
  EXPECT_EQ(total, 5u);
  ASSERT_EQ(placed.size(), 2u);
  EXPECT_EQ(placed[0].job_id, "job-1");
  EXPECT_EQ(placed[1].job_id, "job-2");
}

// Devices: w-1, w-2 run the CPU engine, w-3, w-4 have a GPU.
std::vector<WorkerView> MixedWorkers() {
  std::vector<WorkerView> out = IdleWorkers(4);
  out[2].gpu = true;
  out[3].gpu = true;
  return out;
}

PendingJobView GpuJob(const std::string& id, int world, std::vector<std::string> previous = {}) {
  return {id, world, std::move(previous), /*gpu=*/true};
}

TEST(DecidePlacements, GpuJobWaitsForGpuWorkersHoweverManyCpuWorkersAreIdle) {
  EXPECT_THAT(DecidePlacements(kNow, {GpuJob("job-1", 1)}, IdleWorkers(8), Options()), IsEmpty());
  const auto placed = DecidePlacements(kNow, {GpuJob("job-1", 3)}, MixedWorkers(), Options());
  EXPECT_THAT(placed, IsEmpty()) << "only two GPU workers for world 3";
}

TEST(DecidePlacements, GpuJobTakesGpuWorkersEvenWhenCpuWorkersHaveLowerIds) {
  const auto placed = DecidePlacements(kNow, {GpuJob("job-1", 2)}, MixedWorkers(), Options());
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-3", "w-4"));
  EXPECT_THAT(placed[0].reason, HasSubstr("placed on 2 cuda workers: ranks"));
}

TEST(DecidePlacements, CpuJobPrefersCpuWorkersAndSpillsOntoGpuWorkersOnlyWhenShort) {
  std::vector<WorkerView> workers = MixedWorkers();
  std::swap(workers[0].gpu, workers[3].gpu);  // w-1 has a GPU, w-4 does not
  auto placed = DecidePlacements(kNow, {{"job-1", 2}}, workers, Options());
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-2", "w-4"));
  placed = DecidePlacements(kNow, {{"job-1", 3}}, workers, Options());
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-2", "w-4", "w-1"));
}

TEST(DecidePlacements, OlderCpuJobAndYoungerGpuJobShareAMixedCluster) {
  const auto placed = DecidePlacements(kNow, {{"job-1", 2}, GpuJob("job-2", 2)}, MixedWorkers(),
                                       Options());
  ASSERT_EQ(placed.size(), 2u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-2"));
  EXPECT_THAT(placed[1].workers, ElementsAre("w-3", "w-4"));
  // A GPU job first in the queue leaves the CPU workers to the CPU job.
  const auto swapped = DecidePlacements(kNow, {GpuJob("job-1", 2), {"job-2", 2}}, MixedWorkers(),
                                        Options());
  ASSERT_EQ(swapped.size(), 2u);
  EXPECT_THAT(swapped[0].workers, ElementsAre("w-3", "w-4"));
  EXPECT_THAT(swapped[1].workers, ElementsAre("w-1", "w-2"));
}

TEST(DecidePlacements, ResumedGpuJobKeepsItsGpuRanksAndNeverTakesACpuWorker) {
  std::vector<WorkerView> workers = MixedWorkers();
  workers.push_back(Idle("w-5"));
  workers.back().gpu = true;
  // Rank 0 was w-4 (still free), rank 1 was w-9 (dead); w-1 is a CPU worker
  // named as a previous rank by a corrupt record: it is not taken.
  const auto placed = DecidePlacements(kNow, {GpuJob("job-1", 3, {"w-4", "w-9", "w-1"})},
                                       workers, Options());
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-4", "w-3", "w-5"));
  EXPECT_THAT(placed[0].reason, HasSubstr("resumed on 3 cuda workers (1 kept their ranks)"));
}

// Elastic jobs (min_world > 0): `world` is the maximum; `since` when the
// job became pending (its settle time counts from there).
PendingJobView Elastic(const std::string& id, int min_world, int max_world,
                       absl::Time since = kNow, std::vector<std::string> previous = {},
                       bool gpu = false) {
  PendingJobView v;
  v.id = id;
  v.world = max_world;
  v.previous = std::move(previous);
  v.gpu = gpu;
  v.min_world = min_world;
  v.since = since;
  return v;
}

MembershipOptions ElasticOptions() {
  MembershipOptions o = Options();
  o.elastic_settle = absl::Seconds(2);
  return o;
}

TEST(DecidePlacementsElastic, StartsWithItsMaximumAtOnceWhenThatManyAreIdle) {
  const auto placed =
      DecidePlacements(kNow, {Elastic("job-1", 1, 3)}, IdleWorkers(3), ElasticOptions());
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-2", "w-3"));
  EXPECT_THAT(placed[0].reason, HasSubstr("(elastic 1-3)"));
  // More idle than its maximum: it takes its maximum.
  const auto more =
      DecidePlacements(kNow, {Elastic("job-1", 1, 3)}, IdleWorkers(5), ElasticOptions());
  ASSERT_EQ(more.size(), 1u);
  EXPECT_THAT(more[0].workers, ElementsAre("w-1", "w-2", "w-3"));
}

TEST(DecidePlacementsElastic, WithFewerThanItsMaximumItStartsOnlyAfterTheSettleTime) {
  const MembershipOptions o = ElasticOptions();
  const absl::Time since = kNow - absl::Seconds(5);
  const std::vector<PendingJobView> queue = {Elastic("job-1", 1, 3, since)};
  EXPECT_THAT(DecidePlacements(since, queue, IdleWorkers(2), o), IsEmpty());
  EXPECT_THAT(DecidePlacements(since + o.elastic_settle - absl::Milliseconds(1), queue,
                               IdleWorkers(2), o),
              IsEmpty());
  const auto placed = DecidePlacements(since + o.elastic_settle, queue, IdleWorkers(2), o);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-2"));
  EXPECT_THAT(placed[0].reason, HasSubstr("placed on 2 workers (elastic 1-3)"));
  // Long after, the same.
  EXPECT_EQ(DecidePlacements(kNow, queue, IdleWorkers(2), o).size(), 1u);
}

TEST(DecidePlacementsElastic, NeverStartsBelowItsMinimum) {
  const MembershipOptions o = ElasticOptions();
  const std::vector<PendingJobView> queue = {Elastic("job-1", 2, 3, kNow - absl::Hours(1))};
  EXPECT_THAT(DecidePlacements(kNow, queue, IdleWorkers(1), o), IsEmpty());
  EXPECT_THAT(DecidePlacements(kNow, queue, {Idle("w-1"), Idle("w-2", absl::Seconds(11))}, o),
              IsEmpty())
      << "a dead worker does not count";
  const auto placed = DecidePlacements(kNow, queue, IdleWorkers(2), o);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-2"));
}

TEST(DecidePlacementsElastic, AJobInItsSettleTimeHoldsItsWorkersAgainstYoungerJobs) {
  const MembershipOptions o = ElasticOptions();
  // job-1 (elastic 1-3) waits for a third worker: the younger job-2 does
  // not take the two it holds...
  EXPECT_THAT(DecidePlacements(kNow, {Elastic("job-1", 1, 3), {"job-2", 1}}, IdleWorkers(2), o),
              IsEmpty());
  // ...and once the settle time is over job-1 starts on them.
  const auto later = DecidePlacements(kNow + o.elastic_settle,
                                      {Elastic("job-1", 1, 3), {"job-2", 1}}, IdleWorkers(2), o);
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].job_id, "job-1");
  // A younger job gets only the rest: a GPU elastic job holds the GPU
  // workers (w-3, w-4); a CPU job of world 2 takes w-1, w-2, one of world 3
  // (which would spill onto a GPU worker) waits.
  const PendingJobView gpu = Elastic("job-1", 1, 3, kNow, {}, /*gpu=*/true);
  auto placed = DecidePlacements(kNow, {gpu, {"job-2", 2}}, MixedWorkers(), o);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, "job-2");
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-2"));
  EXPECT_THAT(DecidePlacements(kNow, {gpu, {"job-2", 3}}, MixedWorkers(), o), IsEmpty());
  // Not while it cannot start at all (below its minimum): then it holds nothing.
  placed = DecidePlacements(kNow, {Elastic("job-1", 3, 4), {"job-2", 1}}, IdleWorkers(2), o);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_EQ(placed[0].job_id, "job-2");
}

TEST(DecidePlacementsElastic, ResumesOnItsSurvivorsInTheirOldRankOrder) {
  const MembershipOptions o = ElasticOptions();
  // Generation 1 ran on w-1, w-2, w-3; w-2 is gone.
  const std::vector<PendingJobView> queue = {
      Elastic("job-1", 1, 3, kNow, {"w-1", "w-2", "w-3"})};
  const std::vector<WorkerView> survivors = {Idle("w-1"), Idle("w-3")};
  const auto placed = DecidePlacements(kNow + o.elastic_settle, queue, survivors, o);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-3"));  // ranks 0, 1
  EXPECT_THAT(placed[0].reason, HasSubstr("resumed on 2 workers (elastic 1-3) (2 kept"));
  // Rank order, not id order: w-3 was rank 0.
  const auto reordered =
      DecidePlacements(kNow + o.elastic_settle,
                       {Elastic("job-1", 1, 3, kNow, {"w-3", "w-2", "w-1"})}, survivors, o);
  ASSERT_EQ(reordered.size(), 1u);
  EXPECT_THAT(reordered[0].workers, ElementsAre("w-3", "w-1"));
}

TEST(DecidePlacementsElastic, AResumingJobWaitsOnlyWhileAPreviousWorkerIsReturning) {
  const MembershipOptions o = ElasticOptions();
  const std::vector<PendingJobView> queue = {
      Elastic("job-1", 1, 3, kNow, {"w-1", "w-2", "w-3"})};
  // w-3 was told to leave the failed generation and has not asked again.
  WorkerView w3 = Idle("w-3");
  w3.idle = false;
  w3.returning = true;
  EXPECT_THAT(DecidePlacements(kNow, queue, {Idle("w-1"), w3}, o), IsEmpty());
  // A returning worker that is not a previous one is not waited for.
  WorkerView w9 = w3;
  w9.id = "w-9";
  auto placed = DecidePlacements(kNow, queue, {Idle("w-1"), Idle("w-3"), w9}, o);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-3"));
  // The settle time bounds the wait for one that never comes back.
  placed = DecidePlacements(kNow + o.elastic_settle, queue, {Idle("w-1"), w3}, o);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1"));
}

TEST(DecidePlacementsElastic, ResumesAtOnceWithASpareWhenItReachesItsMaximum) {
  const std::vector<WorkerView> workers = {Idle("w-1"), Idle("w-3"), Idle("w-4")};
  const auto placed = DecidePlacements(
      kNow, {Elastic("job-1", 1, 3, kNow, {"w-1", "w-2", "w-3"})}, workers, ElasticOptions());
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-1", "w-3", "w-4"));
  EXPECT_THAT(placed[0].reason, HasSubstr("(2 kept their ranks)"));
}

TEST(DecidePlacementsElastic, AGpuElasticJobTakesOnlyGpuWorkers) {
  const MembershipOptions o = ElasticOptions();
  const PendingJobView job = Elastic("job-1", 1, 3, kNow, {}, /*gpu=*/true);
  EXPECT_THAT(DecidePlacements(kNow + absl::Hours(1), {job}, IdleWorkers(8), o), IsEmpty());
  EXPECT_THAT(DecidePlacements(kNow, {job}, MixedWorkers(), o), IsEmpty());  // settling
  const auto placed = DecidePlacements(kNow + o.elastic_settle, {job}, MixedWorkers(), o);
  ASSERT_EQ(placed.size(), 1u);
  EXPECT_THAT(placed[0].workers, ElementsAre("w-3", "w-4"));
  EXPECT_THAT(placed[0].reason, HasSubstr("cuda"));
}

// w-1, w-2 run the job; the others as given.
std::vector<WorkerView> Running(std::vector<WorkerView> idle) {
  std::vector<WorkerView> out = {Idle("w-1"), Idle("w-2")};
  out[0].idle = out[1].idle = false;
  for (WorkerView& w : idle) out.push_back(std::move(w));
  return out;
}

TEST(DecideGrowth, GrowsByTheIdleWorker) {
  const auto g = DecideGrowth(kNow, {"job-1", 2, 3}, {}, Running({Idle("w-3")}), Options());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->job_id, "job-1");
  EXPECT_EQ(g->from, 2);
  EXPECT_EQ(g->to, 3);
  EXPECT_THAT(g->joining, ElementsAre("w-3"));
  EXPECT_THAT(g->reason, HasSubstr("growing from 2 to 3"));
  EXPECT_THAT(g->reason, HasSubstr("w-3"));
}

TEST(DecideGrowth, NeverBeyondItsMaximum) {
  const auto g = DecideGrowth(kNow, {"job-1", 2, 3}, {}, Running({Idle("w-3"), Idle("w-4")}),
                              Options());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->to, 3);
  EXPECT_THAT(g->joining, ElementsAre("w-3"));
  EXPECT_FALSE(
      DecideGrowth(kNow, {"job-1", 3, 3}, {}, Running({Idle("w-3"), Idle("w-4")}), Options())
          .has_value());
}

TEST(DecideGrowth, WaitingJobsComeFirst) {
  const std::vector<WorkerView> workers = Running({Idle("w-3")});
  EXPECT_FALSE(
      DecideGrowth(kNow, {"job-1", 2, 3}, {{"job-2", 1}}, workers, Options()).has_value());
  // A larger job that cannot start yet still comes first.
  EXPECT_FALSE(
      DecideGrowth(kNow, {"job-1", 2, 3}, {{"job-2", 4}}, workers, Options()).has_value());
  // A GPU job cannot use the idle CPU worker: the running job grows.
  const auto g =
      DecideGrowth(kNow, {"job-1", 2, 3}, {GpuJob("job-2", 1)}, workers, Options());
  ASSERT_TRUE(g.has_value());
  EXPECT_THAT(g->joining, ElementsAre("w-3"));
}

TEST(DecideGrowth, OnlyLiveEligibleWorkersCount) {
  EXPECT_FALSE(DecideGrowth(kNow, {"job-1", 2, 3}, {},
                            Running({Idle("w-3", absl::Seconds(11))}), Options())
                   .has_value())
      << "a timed-out worker is dead";
  WorkerView cpu = Idle("w-3");
  const RunningJobView gpu_job{"job-1", 2, 3, /*gpu=*/true};
  EXPECT_FALSE(DecideGrowth(kNow, gpu_job, {}, Running({cpu}), Options()).has_value());
  WorkerView gpu = Idle("w-4");
  gpu.gpu = true;
  const auto g = DecideGrowth(kNow, gpu_job, {}, Running({cpu, gpu}), Options());
  ASSERT_TRUE(g.has_value());
  EXPECT_THAT(g->joining, ElementsAre("w-4"));
}

TEST(DecideGrowth, TheReasonNamesEveryJoiningWorker) {
  const auto g = DecideGrowth(kNow, {"job-1", 2, 4}, {}, Running({Idle("w-4"), Idle("w-3")}),
                              Options());
  ASSERT_TRUE(g.has_value());
  EXPECT_THAT(g->joining, ElementsAre("w-3", "w-4"));
  EXPECT_THAT(g->reason, HasSubstr("growing from 2 to 4"));
  EXPECT_THAT(g->reason, HasSubstr("idle workers w-3, w-4"));
}

TEST(WaitingReason, NamesTheDeviceKind) {
  EXPECT_EQ(WaitingReason(2, false), "waiting for 2 idle workers");
  EXPECT_EQ(WaitingReason(1, true), "waiting for 1 idle cuda worker");
  EXPECT_EQ(WaitingReason(3, false, 1), "waiting for 1 to 3 idle workers");
  EXPECT_EQ(WaitingReason(3, true, 2), "waiting for 2 to 3 idle cuda workers");
  EXPECT_EQ(WaitingReason(3, false, 3), "waiting for 3 idle workers");  // min == max
}

TEST(IsCudaDevice, ParsesDeviceStrings) {
  EXPECT_TRUE(IsCudaDevice("cuda:0"));
  EXPECT_TRUE(IsCudaDevice("cuda:7"));
  EXPECT_FALSE(IsCudaDevice("cpu"));
  EXPECT_FALSE(IsCudaDevice(""));
  EXPECT_FALSE(IsCudaDevice("cuda"));  // malformed: not a GPU
  EXPECT_FALSE(IsCudaDevice("gpu:0"));
}

TEST(DecideDepartures, NoneWhileEveryWorkerIsWithinTheTimeout) {
  const std::vector<WorkerView> workers = {Idle("w-1"), Idle("w-2", absl::Seconds(10))};
  EXPECT_THAT(DecideDepartures(kNow, workers, Options()), IsEmpty());
}

TEST(DecideDepartures, ExactlyTheStaleWorkersDepartWithTheSilenceInTheReason) {
  std::vector<WorkerView> workers = {Idle("w-1"), Idle("w-2", absl::Milliseconds(12500)),
                                     Idle("w-3", absl::Seconds(9)), Idle("w-4", absl::Seconds(30))};
  workers[3].idle = false;  // busy workers depart too
  const auto gone = DecideDepartures(kNow, workers, Options());
  ASSERT_EQ(gone.size(), 2u);
  EXPECT_EQ(gone[0].worker_id, "w-2");
  EXPECT_THAT(gone[0].reason, HasSubstr("12.5s"));
  EXPECT_THAT(gone[0].reason, HasSubstr("10s"));
  EXPECT_EQ(gone[1].worker_id, "w-4");
  EXPECT_THAT(gone[1].reason, HasSubstr("30s"));
}

TEST(RankList, NamesEveryRankOfASmallWorldAndSixteenOfALargeOne) {
  EXPECT_EQ(RankList({"w-1", "w-2"}), "w-1, w-2");
  std::vector<std::string> many;
  for (int i = 1; i <= 4096; ++i) many.push_back("w-" + std::to_string(i));
  const std::string list = RankList(many);
  EXPECT_EQ(list.rfind("w-1, w-2, ", 0), 0u);
  EXPECT_NE(list.find("w-16 and 4080 more"), std::string::npos) << list;
  EXPECT_LT(list.size(), 200u);
}

TEST(GoneWorkersToForget, KeepsTheNewestAndNeverOneHoldingARank) {
  const absl::Time t0 = absl::UnixEpoch();
  MembershipOptions o;
  o.keep_gone_workers = 2;
  std::vector<GoneWorkerView> gone = {
      {"w-5", t0 + absl::Seconds(5)}, {"w-1", t0 + absl::Seconds(1)},
      {"w-3", t0 + absl::Seconds(3)}, {"w-2", t0 + absl::Seconds(1), /*holds_rank=*/true},
      {"w-10", t0 + absl::Seconds(3)}};
  // Five gone, two kept: three forgotten, the longest gone first, w-2
  // spared (it holds a rank), ties by id (w-3 before w-10).
  EXPECT_EQ(GoneWorkersToForget(gone, o), (std::vector<std::string>{"w-1", "w-3", "w-10"}));
  o.keep_gone_workers = 5;
  EXPECT_TRUE(GoneWorkersToForget(gone, o).empty());
  o.keep_gone_workers = 0;
  EXPECT_EQ(GoneWorkersToForget(gone, o).size(), 4u);  // all but the rank holder
}

TEST(WorkerStrikes, ThreeGenerationsInARowExcludeForADoublingWhile) {
  const absl::Time t0 = absl::UnixEpoch() + absl::Hours(1);
  WorkerStrikes s;
  s = AfterStrike(s, "job-1/1", t0);
  s = AfterStrike(s, "job-1/1", t0);  // the same generation again: one strike
  EXPECT_EQ(s.in_a_row, 1);
  s = AfterStrike(s, "job-1/2", t0);
  EXPECT_FALSE(Excluded(s, t0));
  s = AfterStrike(s, "job-2/1", t0);  // any job's generation counts
  EXPECT_TRUE(Excluded(s, t0));
  EXPECT_EQ(s.excluded_until, t0 + kExclusionBase);
  EXPECT_FALSE(Excluded(s, t0 + kExclusionBase));
  EXPECT_EQ(s.in_a_row, 0);
  // The next exclusion in a row lasts twice as long, up to the cap.
  absl::Time t = t0 + kExclusionBase;
  absl::Duration expected = kExclusionBase;
  for (int k = 1; k < 8; ++k) {
    expected = std::min(expected * 2, kMaxExclusion);
    for (int g = 0; g < kStrikesBeforeExclusion; ++g) {
      s = AfterStrike(s, "job-3/" + std::to_string(k * 10 + g), t);
    }
    EXPECT_EQ(s.excluded_until - t, expected) << "exclusion " << k + 1;
    t = s.excluded_until;
  }
  EXPECT_EQ(expected, kMaxExclusion);  // the loop reached the cap
}

TEST(WorkerStrikes, AGoodGenerationClearsTheCountAndTheDoubling) {
  const absl::Time t0 = absl::UnixEpoch();
  WorkerStrikes s;
  for (int g = 1; g <= kStrikesBeforeExclusion; ++g) s = AfterStrike(s, absl::StrCat("j/", g), t0);
  ASSERT_TRUE(Excluded(s, t0));
  s = AfterGoodGeneration(s);
  EXPECT_EQ(s.exclusions, 0);
  s = AfterStrike(s, "j/10", t0 + kExclusionBase);
  s = AfterStrike(s, "j/11", t0 + kExclusionBase);
  s = AfterGoodGeneration(s);  // between: no exclusion
  s = AfterStrike(s, "j/12", t0 + kExclusionBase);
  EXPECT_EQ(s.in_a_row, 1);
  EXPECT_FALSE(Excluded(s, t0 + kExclusionBase));
  s = AfterStrike(s, "j/13", t0 + kExclusionBase);
  s = AfterStrike(s, "j/14", t0 + kExclusionBase);
  EXPECT_EQ(s.excluded_until, t0 + 2 * kExclusionBase);  // the base again, not doubled
}

}  // namespace
}  // namespace tagi::coordinator
