// The job runner on an in-process coordinator (fake_coordinator.h): the
// ranks of a world are threads of this test, their group is the TCP ring
// over loopback through the fake's store. Recovery from a snapshot, the
// stop vote of a world, a coordinator that goes away and comes back or
// restarts, and an elastic re-formation checked bit for bit against the
// uninterrupted run through the same worlds (world_schedule.h).
#include "worker/job_runner.h"

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/substitute.h"
#include "absl/time/clock.h"
#include "common/job_spec.h"
#include "common/snapshot.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"
#include "tests/worker/fake_coordinator.h"
#include "worker/attempt.h"
#include "worker/engine/model_file.h"
#include "worker/world_schedule.h"

namespace tagi {
namespace {

using ::testing::HasSubstr;
using test::FakeCoordinator;

// Cubic regression on 200 generated samples, batch 10 per rank, with a
// batch norm so that running statistics are part of what is carried.
// World 1: 20 steps an epoch; world 2: 10.
tagi::v1::JobSpec ToySpec(int epochs, int snapshot_interval, const std::string& world) {
  auto spec = ParseJobSpecJson(absl::Substitute(R"({"name": "toy",
    "layers": [{"linear": {"inFeatures": 1, "outFeatures": 16}}, {"relu": {}},
               {"batchNorm": {}}, {"linear": {"inFeatures": 16, "outFeatures": 1}}],
    "head": {"regression": {}},
    "data": {"kind": "TOY_CUBIC", "toyTrainSize": 200, "toyTestSize": 20},
    "noise": {"sigmaV": 0.3}, "batchSize": 10, "epochs": $0, "seed": 9,
    "snapshotInterval": $1, $2, "device": "cpu"})",
                                                epochs, snapshot_interval, world));
  EXPECT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  return *spec;
}

tagi::v1::Assignment Assign(const tagi::v1::JobSpec& spec, uint64_t generation, int rank,
                            int world, int64_t resume_step = -1) {
  tagi::v1::Assignment a;
  a.set_job_id("job-1");
  a.set_generation(generation);
  a.set_rank(rank);
  a.set_world_size(world);
  *a.mutable_spec() = spec;
  if (resume_step >= 0) {
    a.set_resume(true);
    a.set_resume_global_step(resume_step);
  }
  return a;
}

JobRunnerOptions Options(int rank) {
  JobRunnerOptions o;
  o.worker_id = absl::StrCat("w", rank);
  o.connect_timeout = absl::Seconds(20);
  o.collective_timeout = absl::Seconds(20);
  o.report_interval = absl::ZeroDuration();  // progress published every step
  return o;
}

// One rank: its assignment, options and attempt control.
struct Rank {
  explicit Rank(const tagi::v1::Assignment& assignment) : a(assignment), control(assignment) {
    options = Options(static_cast<int>(assignment.rank()));
  }
  tagi::v1::Assignment a;
  JobRunnerOptions options;
  AttemptControl control;
  JobOutcome out;
};

// Runs every rank to its end, each on its own thread.
void RunRanks(FakeCoordinator& fake, std::vector<std::unique_ptr<Rank>>& ranks) {
  RealClock clock;
  std::vector<std::thread> threads;
  for (auto& r : ranks) {
    threads.emplace_back([&fake, &clock, rank = r.get()] {
      rank->out = RunAssignment(fake, rank->options, rank->a, clock, rank->control);
    });
  }
  for (auto& t : threads) t.join();
}

std::vector<std::unique_ptr<Rank>> World(const tagi::v1::JobSpec& spec, uint64_t generation,
                                         int world, int64_t resume_step = -1) {
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.push_back(std::make_unique<Rank>(Assign(spec, generation, r, world, resume_step)));
  }
  return ranks;
}

// A model file's parameters followed by its state.
std::vector<float> Weights(const std::string& model_file) {
  auto m = engine::DecodeModelFile(model_file);
  EXPECT_TRUE(m.ok()) << m.status();
  if (!m.ok()) return {};
  std::vector<float> all = m->parameters;
  all.insert(all.end(), m->state.begin(), m->state.end());
  return all;
}

// The FinishJob report of `rank` (the last one).
tagi::v1::FinishJobRequest Finished(FakeCoordinator& fake, int rank) {
  tagi::v1::FinishJobRequest last;
  for (const auto& f : fake.finished()) {
    if (static_cast<int>(f.rank()) == rank) last = f;
  }
  return last;
}

// Loses the coordinator during the rank's `step`-th step (from its
// training thread, so at a known point): every call fails Unavailable and
// the session says so on the attempt.
void LoseCoordinatorAtStep(FakeCoordinator& fake, Rank& r, int step) {
  auto polls = std::make_shared<std::atomic<int>>(0);
  r.options.shutting_down = [&fake, &r, polls, step] {
    if (++*polls == step) {
      fake.SetUnreachable(true);
      r.control.coordinator_lost = true;
    }
    return false;
  };
}

bool Eventually(const std::function<bool()>& pred) {
  return testing::WaitUntil(pred, absl::Seconds(30), absl::Milliseconds(1));
}

TEST(JobRunner, TrainsAloneSnapshotsOnItsIntervalAndReportsTheEnd) {
  FakeCoordinator fake;
  auto ranks = World(ToySpec(3, 7, R"("worldSize": 1)"), 1, 1);
  RunRanks(fake, ranks);
  EXPECT_TRUE(ranks[0]->out.ok) << ranks[0]->out.reason;

  // Snapshots every 7 steps inside an epoch and at every epoch's end; the
  // uploader sends only the newest one offered, so a slow upload may skip
  // one, but never the last (drained before the model).
  const std::vector<uint64_t> offered = {7, 14, 20, 21, 28, 35, 40, 42, 49, 56, 60};
  uint64_t before = 0;
  for (const auto& s : fake.snapshots()) {
    EXPECT_THAT(offered, ::testing::Contains(s.global_step));
    EXPECT_GT(s.global_step, before);
    before = s.global_step;
  }
  EXPECT_EQ(before, 60u);
  const auto last = DecodeSnapshot(fake.SnapshotAt("job-1", 60).value_or(""));
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(last->epoch, 3u);

  ASSERT_EQ(fake.models().size(), 1u);
  EXPECT_FALSE(fake.models()[0].checksum.empty());
  EXPECT_EQ(Weights(fake.models()[0].bytes),
            [&] {  // the model is the final snapshot's state
              std::vector<float> all = last->parameters;
              all.insert(all.end(), last->state.begin(), last->state.end());
              return all;
            }());
  const tagi::v1::FinishJobRequest fin = Finished(fake, 0);
  EXPECT_TRUE(fin.ok());
  EXPECT_EQ(fin.generation(), 1u);
  EXPECT_EQ(fin.progress().global_step(), 60u);
  EXPECT_EQ(fin.progress().total_steps(), 60u);
  EXPECT_EQ(fin.progress().epochs_size(), 3);
  EXPECT_GT(fin.progress().first_step_ms(), 0);
}

// Rank 0 with a lost session stores every snapshot before it trains on
// (it holds at each snapshot point until the upload lands), so a run
// "without" the coordinator yields all of them.
std::vector<uint64_t> Steps(const std::vector<FakeCoordinator::Upload>& uploads) {
  std::vector<uint64_t> steps;
  for (const auto& u : uploads) steps.push_back(u.global_step);
  return steps;
}

TEST(JobRunner, ResumesFromAMidEpochSnapshotToTheSameBits) {
  const tagi::v1::JobSpec spec = ToySpec(3, 7, R"("worldSize": 1)");
  FakeCoordinator first;
  auto plain = World(spec, 1, 1);
  plain[0]->control.coordinator_lost = true;  // the fake answers: each upload lands
  RunRanks(first, plain);
  ASSERT_TRUE(plain[0]->out.ok) << plain[0]->out.reason;
  ASSERT_EQ(first.models().size(), 1u);
  EXPECT_THAT(Steps(first.snapshots()),
              ::testing::ElementsAre(7, 14, 20, 21, 28, 35, 40, 42, 49, 56, 60));

  // Generation 2 resumes from step 28 (step 8 of epoch 1: mid-epoch, the
  // sampler's cursor is inside it).
  const uint64_t from = 28;
  FakeCoordinator second;
  second.ServeSnapshot("job-1", first.SnapshotAt("job-1", from).value_or(""));
  auto resumed = World(spec, 2, 1, static_cast<int64_t>(from));
  RunRanks(second, resumed);
  ASSERT_TRUE(resumed[0]->out.ok) << resumed[0]->out.reason;
  ASSERT_EQ(second.models().size(), 1u);
  EXPECT_EQ(Weights(second.models()[0].bytes), Weights(first.models()[0].bytes));
  const tagi::v1::FinishJobRequest fin = Finished(second, 0);
  EXPECT_EQ(fin.progress().resumed_from_step(), from);
  EXPECT_EQ(fin.progress().global_step(), 60u);
  EXPECT_EQ(fin.progress().epochs_size(), 2);  // epochs 1 and 2 ran here
  // The epoch split across the generations reports the whole epoch: the
  // same training accuracy as the uninterrupted run, over all its samples,
  // and at least the time the first generation had spent in it.
  const auto at = DecodeSnapshot(first.SnapshotAt("job-1", from).value_or(""));
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(at->epoch_samples, 8u * spec.batch_size());  // 8 steps of epoch 1 before it
  EXPECT_LE(at->epoch_correct, at->epoch_samples);
  const tagi::v1::EpochMetrics& split = fin.progress().epochs(0);
  const tagi::v1::EpochMetrics& whole = Finished(first, 0).progress().epochs(1);
  ASSERT_EQ(split.epoch(), whole.epoch());
  EXPECT_EQ(split.train_accuracy(), whole.train_accuracy());
  EXPECT_EQ(split.test_accuracy(), whole.test_accuracy());
  EXPECT_GE(split.seconds(), static_cast<double>(at->epoch_micros) / 1e6);
  EXPECT_GT(at->epoch_micros, 0u);
  // An epoch-end snapshot starts the next epoch afresh.
  const auto end = DecodeSnapshot(first.SnapshotAt("job-1", 40).value_or(""));
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->epoch_samples, 0u);
  EXPECT_EQ(end->epoch_micros, 0u);
}

TEST(JobRunner, RefusesASnapshotOtherThanTheOneAnnounced) {
  const tagi::v1::JobSpec spec = ToySpec(2, 7, R"("worldSize": 1)");
  FakeCoordinator first;
  auto plain = World(spec, 1, 1);
  RunRanks(first, plain);
  ASSERT_TRUE(plain[0]->out.ok);

  FakeCoordinator second;
  second.ServeSnapshot("job-1", first.SnapshotAt("job-1", 40).value_or(""));
  auto resumed = World(spec, 2, 1, 21);
  RunRanks(second, resumed);
  EXPECT_FALSE(resumed[0]->out.ok);
  EXPECT_FALSE(resumed[0]->out.retryable);  // another try would read the same snapshot
  EXPECT_THAT(resumed[0]->out.reason,
              HasSubstr("cannot resume from the snapshot: it is at step 40, the coordinator "
                        "announced 21"));
  EXPECT_TRUE(second.models().empty());
  EXPECT_FALSE(Finished(second, 0).ok());

  // A truncated download is refused as such.
  FakeCoordinator third;
  third.ServeSnapshot("job-1", first.SnapshotAt("job-1", 40).value_or("").substr(0, 100));
  auto cut = World(spec, 2, 1, 40);
  RunRanks(third, cut);
  EXPECT_FALSE(cut[0]->out.ok);
  EXPECT_TRUE(third.models().empty());
}

// Rank 1 votes to stop (its worker is shutting down) at its 13th step, once
// rank 0's snapshot of step 10 is stored: both ranks stop after the same
// step, rank 1 for its shutdown and rank 0 because a peer stopped the group;
// both outcomes are retryable (the job goes on in another generation).
std::vector<std::unique_ptr<Rank>> StopAtStep13(FakeCoordinator& fake,
                                                const tagi::v1::JobSpec& spec) {
  auto ranks = World(spec, 1, 2);
  auto polls = std::make_shared<std::atomic<int>>(0);
  ranks[1]->options.shutting_down = [&fake, polls] {
    if (++*polls < 13) return false;
    // Bounded: the upload is in process.
    EXPECT_TRUE(Eventually([&] { return fake.SnapshotAt("job-1", 10).has_value(); }));
    return true;
  };
  RunRanks(fake, ranks);
  return ranks;
}

TEST(JobRunner, AWorldStopsTogetherOnOneRanksVote) {
  FakeCoordinator fake;
  auto ranks = StopAtStep13(fake, ToySpec(3, 5, R"("worldSize": 2)"));
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(ranks[r]->out.ok) << r;
    EXPECT_TRUE(ranks[r]->out.cancelled) << r;
    EXPECT_TRUE(ranks[r]->out.retryable) << r;
  }
  EXPECT_EQ(ranks[1]->out.reason, "the worker is shutting down (signal)");
  EXPECT_THAT(ranks[0]->out.reason, HasSubstr("a peer rank stopped the group"));
  const uint64_t stopped0 = Finished(fake, 0).progress().global_step();
  const uint64_t stopped1 = Finished(fake, 1).progress().global_step();
  EXPECT_EQ(stopped0, stopped1);
  EXPECT_EQ(stopped0, 12u);  // the step of the vote is not applied
  EXPECT_TRUE(fake.models().empty());
}

TEST(JobRunner, ACancelledRankStopsItsWorldAndOnlyItIsFinal) {
  FakeCoordinator fake;
  auto ranks = World(ToySpec(3, 0, R"("worldSize": 2)"), 1, 2);
  auto polls = std::make_shared<std::atomic<int>>(0);
  Rank* rank0 = ranks[0].get();
  // The session's CANCEL directive sets the stop vote; here at step 4.
  rank0->options.shutting_down = [rank0, polls] {
    if (++*polls == 4) rank0->control.stop_vote = true;
    return false;
  };
  RunRanks(fake, ranks);
  EXPECT_TRUE(ranks[0]->out.cancelled);
  EXPECT_FALSE(ranks[0]->out.retryable);  // the job's end
  EXPECT_EQ(ranks[0]->out.reason, "cancelled");
  EXPECT_TRUE(ranks[1]->out.cancelled);
  EXPECT_TRUE(ranks[1]->out.retryable);  // the coordinator knows it was a cancel
  EXPECT_EQ(Finished(fake, 0).progress().global_step(),
            Finished(fake, 1).progress().global_step());
}

// A rank whose peer drops out of the ring mid-step names that peer in its
// FinishJob (the coordinator counts it against the peer's worker); the
// rank that was aborted names nobody.
TEST(JobRunner, ARankWhosePeerLeftTheRingNamesIt) {
  FakeCoordinator fake;
  auto ranks = World(ToySpec(3, 0, R"("worldSize": 2)"), 1, 2);
  auto polls = std::make_shared<std::atomic<int>>(0);
  Rank* rank1 = ranks[1].get();
  rank1->options.shutting_down = [rank1, polls] {
    if (++*polls == 4) rank1->control.Abort("its host is going away");
    return false;
  };
  RunRanks(fake, ranks);
  EXPECT_TRUE(ranks[0]->out.retryable);
  EXPECT_EQ(ranks[0]->out.suspect_rank, 1) << ranks[0]->out.reason;
  const tagi::v1::FinishJobRequest fin0 = Finished(fake, 0);
  ASSERT_TRUE(fin0.has_suspect_rank()) << fin0.reason();
  EXPECT_EQ(fin0.suspect_rank(), 1u);
  EXPECT_TRUE(ranks[1]->out.retryable);
  EXPECT_FALSE(Finished(fake, 1).has_suspect_rank());
}

TEST(JobRunner, AnElasticJobReformsUnderAnotherWorldToTheScheduledBits) {
  const tagi::v1::JobSpec spec = ToySpec(3, 5, R"("minWorldSize": 1, "maxWorldSize": 2)");
  FakeCoordinator fake;
  auto two = StopAtStep13(fake, spec);
  ASSERT_TRUE(two[1]->out.retryable);
  // The newest stored snapshot at or before the stop: step 10, an epoch's
  // end under world 2 (global batch 20).
  std::optional<std::string> at10 = fake.SnapshotAt("job-1", 10);
  ASSERT_TRUE(at10.has_value());

  // Generation 2: one rank resumes from it. World 1 runs 20 steps an epoch.
  fake.ServeSnapshot("job-1", *at10);
  auto one = World(spec, 2, 1, 10);
  RunRanks(fake, one);
  ASSERT_TRUE(one[0]->out.ok) << one[0]->out.reason;
  const tagi::v1::FinishJobRequest fin = Finished(fake, 0);
  EXPECT_EQ(fin.generation(), 2u);
  EXPECT_EQ(fin.progress().total_steps(), 10u + 2 * 20);
  EXPECT_EQ(fin.progress().global_step(), 50u);

  // Bit for bit the uninterrupted run that trains steps [0, 10) under
  // world 2 and the rest under world 1.
  auto d = data::LoadData(spec.data(), spec.seed());
  ASSERT_TRUE(d.ok()) << d.status();
  RealClock clock;
  auto schedule = ParseWorldSchedule("0:2,10:1");
  ASSERT_TRUE(schedule.ok());
  auto reference = RunWorldSchedule(spec, *d, *schedule, clock, absl::Seconds(30));
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::vector<float> expected = reference->parameters;
  expected.insert(expected.end(), reference->state.begin(), reference->state.end());
  ASSERT_EQ(fake.models().size(), 1u);
  EXPECT_EQ(Weights(fake.models()[0].bytes), expected);
}

// While the session has lost the coordinator, rank 0 holds at its next
// snapshot point; when the coordinator is back the snapshot lands and
// training goes on from there.
TEST(JobRunner, HoldsAtASnapshotPointWhileTheCoordinatorIsAway) {
  FakeCoordinator fake;
  auto ranks = World(ToySpec(2, 5, R"("worldSize": 1)"), 1, 1);
  Rank& r = *ranks[0];
  LoseCoordinatorAtStep(fake, r, 3);
  std::jthread run([&] {
    RealClock clock;
    r.out = RunAssignment(fake, r.options, r.a, clock, r.control);
  });
  // The first snapshot (step 5) is tried and retried; training waits there.
  ASSERT_TRUE(Eventually([&] { return fake.snapshot_attempts() >= 3; }));
  EXPECT_EQ(r.control.progress().global_step(), 5u);
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_EQ(r.control.progress().global_step(), 5u);
  EXPECT_FALSE(r.control.aborted());

  fake.SetUnreachable(false);
  r.control.coordinator_lost = false;
  run.join();
  EXPECT_TRUE(r.out.ok) << r.out.reason;
  ASSERT_FALSE(fake.snapshots().empty());
  EXPECT_EQ(fake.snapshots()[0].global_step, 5u);
  EXPECT_EQ(fake.models().size(), 1u);
}

TEST(JobRunner, GivesUpAfterTheCollectiveTimeoutWhenTheCoordinatorStaysAway) {
  FakeCoordinator fake;
  auto ranks = World(ToySpec(2, 5, R"("worldSize": 1)"), 1, 1);
  Rank& r = *ranks[0];
  r.options.collective_timeout = absl::Milliseconds(400);
  LoseCoordinatorAtStep(fake, r, 3);
  RunRanks(fake, ranks);
  EXPECT_FALSE(r.out.ok);
  EXPECT_TRUE(r.out.retryable);
  EXPECT_THAT(r.out.reason, HasSubstr("the coordinator was unreachable for 400ms at a snapshot"));
  EXPECT_TRUE(fake.snapshots().empty());
  EXPECT_TRUE(fake.models().empty());
  // Aborted at step 5, it stopped at its next step (alone, it has no
  // collective to fail): the step of the stop is not applied.
  EXPECT_EQ(Finished(fake, 0).progress().global_step(), 5u);
}

TEST(JobRunner, EndsTheAttemptWhenARestartedCoordinatorEndedItsGeneration) {
  FakeCoordinator fake;
  fake.EndGenerations("generation 1 ended: the coordinator restarted");
  auto ranks = World(ToySpec(2, 5, R"("worldSize": 1)"), 1, 1);
  Rank& r = *ranks[0];
  r.control.coordinator_lost = true;  // the session lost it; the upload reaches it
  RunRanks(fake, ranks);
  EXPECT_FALSE(r.out.ok);
  EXPECT_TRUE(r.out.retryable);
  EXPECT_THAT(r.out.reason, HasSubstr("generation 1 ended: the coordinator restarted"));
  ASSERT_EQ(fake.snapshots().size(), 1u);
  EXPECT_EQ(fake.snapshots()[0].global_step, 5u);  // kept by the coordinator
  EXPECT_TRUE(fake.models().empty());
}

TEST(JobRunner, AFailureBeforeTheGroupFormsIsTheJobs) {
  FakeCoordinator fake;
  tagi::v1::JobSpec spec = ToySpec(1, 0, R"("worldSize": 1)");
  spec.set_device("cuda:0");  // a GPU job on this CPU worker (device -1)
  auto ranks = World(spec, 1, 1);
  RunRanks(fake, ranks);
  EXPECT_FALSE(ranks[0]->out.ok);
  EXPECT_FALSE(ranks[0]->out.retryable);
  EXPECT_FALSE(Finished(fake, 0).ok());
  EXPECT_EQ(Finished(fake, 0).reason(), ranks[0]->out.reason);
}

}  // namespace
}  // namespace tagi
