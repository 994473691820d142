// The job's lifecycle as pure functions: every state against every event,
// then the policies (restart limit, back-off, NaN steps) and the effects'
// order. No threads, no clock: time is a value.
#include "coordinator/job_lifecycle.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/time/time.h"
#include "common/protocol.h"
#include "coordinator/membership.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tagi::coordinator {
namespace {

using tagi::v1::JobState;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using E = JobEffect;

const absl::Time kNow = absl::FromUnixSeconds(1'000'000);
const LifecycleOptions kOptions{/*max_restarts=*/3};

JobLife Job(JobState state, uint64_t generation = 1) {
  JobLife j;
  j.id = "job-1";
  j.state = state;
  j.generation = generation;
  j.generation_started = kNow - absl::Minutes(5);
  j.waiting = "waiting for 2 idle workers";
  return j;
}

const std::vector<JobState> kStates = {tagi::v1::PENDING, tagi::v1::RUNNING, tagi::v1::SUCCEEDED,
                                       tagi::v1::FAILED, tagi::v1::CANCELLED};

std::vector<JobEvent> AllEvents() {
  return {Placed{{"w-1", "w-2"}, "placed on w-1, w-2"},
          RankFailed{"worker w-2 (rank 1) failed: session broke"},
          RankGaveUp{"rank 1 (worker w-2): bad data"},
          Grow{"grows from 2 to 3 ranks"},
          RanksFinished{/*all=*/true, /*model_ready=*/true, /*epochs=*/2, /*world=*/2},
          CancelRequested{},
          CoordinatorRestarted{}};
}

// The next state of every (state, event) pair; absent: refused.
std::map<std::pair<JobState, std::string>, JobState> Table() {
  return {
      {{tagi::v1::PENDING, "Placed"}, tagi::v1::RUNNING},
      {{tagi::v1::PENDING, "CancelRequested"}, tagi::v1::CANCELLED},
      {{tagi::v1::PENDING, "CoordinatorRestarted"}, tagi::v1::PENDING},
      {{tagi::v1::RUNNING, "RankFailed"}, tagi::v1::PENDING},
      {{tagi::v1::RUNNING, "RankGaveUp"}, tagi::v1::FAILED},
      {{tagi::v1::RUNNING, "Grow"}, tagi::v1::PENDING},
      {{tagi::v1::RUNNING, "RanksFinished"}, tagi::v1::SUCCEEDED},
      {{tagi::v1::RUNNING, "CancelRequested"}, tagi::v1::CANCELLED},
      {{tagi::v1::RUNNING, "CoordinatorRestarted"}, tagi::v1::PENDING},
      // A restart reloads final jobs as they are.
      {{tagi::v1::SUCCEEDED, "CoordinatorRestarted"}, tagi::v1::SUCCEEDED},
      {{tagi::v1::FAILED, "CoordinatorRestarted"}, tagi::v1::FAILED},
      {{tagi::v1::CANCELLED, "CoordinatorRestarted"}, tagi::v1::CANCELLED},
  };
}

TEST(DecideJobEvent, EveryStateAgainstEveryEvent) {
  const auto table = Table();
  int allowed = 0;
  for (JobState state : kStates) {
    for (const JobEvent& event : AllEvents()) {
      const std::string name = JobEventName(event);
      SCOPED_TRACE(tagi::v1::JobState_Name(state) + " + " + name);
      const JobLife before = Job(state);
      const JobTransition t = DecideJobEvent(before, event, kNow, kOptions);
      auto it = table.find({state, name});
      if (it == table.end()) {
        EXPECT_FALSE(t.status.ok());
        EXPECT_FALSE(t.changed);
        EXPECT_TRUE(t.effects.empty());
        EXPECT_EQ(t.next.state, state);  // nothing changes
        // Cancelling a final job answers the user in its own words (below).
        if (name != "CancelRequested") {
          EXPECT_THAT(std::string(t.status.message()), HasSubstr(name));
        }
        continue;
      }
      ++allowed;
      EXPECT_TRUE(t.status.ok()) << t.status;
      EXPECT_EQ(t.next.state, it->second);
      if (t.next.state != state) {
        EXPECT_TRUE(t.changed);
        EXPECT_FALSE(t.reason.empty());
        EXPECT_FALSE(t.effects.empty());
      }
    }
  }
  EXPECT_EQ(allowed, static_cast<int>(table.size()));
}

TEST(DecideJobEvent, FinalStatesAreNeverLeft) {
  for (JobState state : {tagi::v1::SUCCEEDED, tagi::v1::FAILED, tagi::v1::CANCELLED}) {
    for (const JobEvent& event : AllEvents()) {
      const JobTransition t = DecideJobEvent(Job(state), event, kNow, kOptions);
      EXPECT_EQ(t.next.state, state) << JobEventName(event);
      EXPECT_FALSE(t.changed) << JobEventName(event);
    }
  }
}

TEST(DecideJobEvent, PlacedStartsTheNextGeneration) {
  JobLife job = Job(tagi::v1::PENDING, /*generation=*/3);
  const JobTransition t = DecideJobEvent(job, Placed{{"w-4"}, "placed on w-4"}, kNow, kOptions);
  ASSERT_TRUE(t.status.ok());
  EXPECT_EQ(t.next.generation, 4u);
  EXPECT_EQ(t.next.generation_started, kNow);
  EXPECT_EQ(t.reason, "placed on w-4");
  EXPECT_THAT(t.effects, ElementsAre(E::kStartGeneration, E::kChanged, E::kPersist));
}

TEST(DecideJobEvent, PlacedWaitsOutTheBackOffAndNeedsRanks) {
  JobLife job = Job(tagi::v1::PENDING);
  job.not_before = kNow + absl::Seconds(2);
  JobTransition t = DecideJobEvent(job, Placed{{"w-1"}, "x"}, kNow, kOptions);
  EXPECT_FALSE(t.status.ok());
  EXPECT_THAT(std::string(t.status.message()), HasSubstr("back-off"));
  EXPECT_TRUE(DecideJobEvent(job, Placed{{"w-1"}, "x"}, kNow + absl::Seconds(2), kOptions)
                  .status.ok());
  EXPECT_FALSE(DecideJobEvent(Job(tagi::v1::PENDING), Placed{{}, "x"}, kNow, kOptions).status.ok());
}

TEST(DecideJobEvent, RankFailedRecoversAndTellsTheRanks) {
  const JobLife job = Job(tagi::v1::RUNNING, /*generation=*/2);
  const JobTransition t = DecideJobEvent(job, RankFailed{"w-2 died"}, kNow, kOptions);
  ASSERT_TRUE(t.status.ok());
  EXPECT_EQ(t.next.state, tagi::v1::PENDING);
  EXPECT_EQ(t.next.generation, 2u);  // the next one is formed by Placed
  EXPECT_EQ(t.next.restarts, 1u);
  EXPECT_EQ(t.next.quick_failures, 0);  // it ran 5 minutes
  EXPECT_EQ(t.next.not_before, kNow);
  EXPECT_EQ(t.reason, "recovering: w-2 died; waiting for 2 idle workers");
  EXPECT_EQ(t.rank_reason, "w-2 died");
  EXPECT_THAT(t.log, HasSubstr("generation 2 ended: w-2 died (restart 1)"));
  EXPECT_THAT(t.effects,
              ElementsAre(E::kAddRecovery, E::kKeepAwaitingSnapshot, E::kRememberRanks,
                          E::kAbortRanks, E::kReleaseRanks, E::kRanksCheckInAgain, E::kEndStore,
                          E::kDropResume, E::kPendingSince, E::kChanged, E::kPersist,
                          E::kSchedule));
}

TEST(DecideJobEvent, QuickFailuresInARowBackOff) {
  JobLife job = Job(tagi::v1::RUNNING);
  absl::Time now = kNow;
  std::vector<absl::Duration> delays;
  for (int i = 0; i < 6; ++i) {
    job.state = tagi::v1::RUNNING;
    job.restarts = 0;  // the limit is not what this tests
    job.generation_started = now - absl::Seconds(1);
    const JobTransition t = DecideJobEvent(job, RankFailed{"lost"}, now, kOptions);
    ASSERT_TRUE(t.status.ok());
    EXPECT_EQ(t.next.quick_failures, i + 1);
    delays.push_back(t.next.not_before - now);
    if (delays.back() > absl::ZeroDuration()) {
      EXPECT_THAT(t.reason, HasSubstr("generations in a row failed within"));
    }
    job = t.next;
    now += absl::Seconds(100);
  }
  for (int i = 0; i < 6; ++i) EXPECT_EQ(delays[i], RestartDelay(i + 1)) << i;
  EXPECT_EQ(delays[0], absl::ZeroDuration());
  EXPECT_GT(delays[5], delays[4]);
  // A generation that lived past kQuickGeneration resets the count.
  job.state = tagi::v1::RUNNING;
  job.generation_started = now - kQuickGeneration;
  EXPECT_EQ(DecideJobEvent(job, RankFailed{"lost"}, now, kOptions).next.quick_failures, 0);
}

TEST(DecideJobEvent, RankFailedGivesUpAfterMaxRestarts) {
  JobLife job = Job(tagi::v1::RUNNING);
  job.restarts = 3;
  const JobTransition t = DecideJobEvent(job, RankFailed{"w-2 died"}, kNow, kOptions);
  ASSERT_TRUE(t.status.ok());
  EXPECT_EQ(t.next.state, tagi::v1::FAILED);
  EXPECT_EQ(t.next.restarts, 3u);
  EXPECT_EQ(t.reason, "w-2 died (gave up after 3 restarts)");
  EXPECT_THAT(t.log, HasSubstr("failed: w-2 died (gave up"));
  EXPECT_THAT(t.effects, ElementsAre(E::kMarkEnded, E::kEndStore, E::kDropSnapshots,
                                     E::kAbortRanks, E::kChanged, E::kMarkFinalVersion,
                                     E::kPersist, E::kSchedule, E::kReleaseRanks));
}

TEST(DecideJobEvent, NonFiniteStepTwiceFromOneSnapshotStopsTheJob) {
  const std::string nan = std::string("rank 0: ") + kNonFiniteStepReason + " at step 40";
  JobLife job = Job(tagi::v1::RUNNING);
  job.snapshot_step = 30;
  JobTransition t = DecideJobEvent(job, RankFailed{nan}, kNow, kOptions);
  EXPECT_EQ(t.next.state, tagi::v1::PENDING);
  EXPECT_EQ(t.next.nonfinite_from, 30u);
  // Resumed from 30 and the same again: no passing fault.
  job = t.next;
  job.state = tagi::v1::RUNNING;
  t = DecideJobEvent(job, RankFailed{nan}, kNow, kOptions);
  EXPECT_EQ(t.next.state, tagi::v1::FAILED);
  EXPECT_THAT(t.reason, HasSubstr("again after resuming from step 30, so the job stops"));
  // From a newer snapshot it is a new chance.
  job.snapshot_step = 50;
  t = DecideJobEvent(job, RankFailed{nan}, kNow, kOptions);
  EXPECT_EQ(t.next.state, tagi::v1::PENDING);
  EXPECT_EQ(t.next.nonfinite_from, 50u);
  // Impossible evaluation sums count the same; other failures do not.
  job.snapshot_step = 30;
  job.nonfinite_from = 30;
  EXPECT_EQ(DecideJobEvent(job, RankFailed{kImpossibleEvalReason}, kNow, kOptions).next.state,
            tagi::v1::FAILED);
  EXPECT_EQ(DecideJobEvent(job, RankFailed{"session broke"}, kNow, kOptions).next.state,
            tagi::v1::PENDING);
}

TEST(DecideJobEvent, GrowKeepsTheRanksReady) {
  JobLife job = Job(tagi::v1::RUNNING);
  job.resizes = 1;
  const JobTransition t =
      DecideJobEvent(job, Grow{"grows from 2 to 3 ranks (the snapshot of step 8)"}, kNow, kOptions);
  ASSERT_TRUE(t.status.ok());
  EXPECT_EQ(t.next.state, tagi::v1::PENDING);
  EXPECT_EQ(t.next.resizes, 2u);
  EXPECT_EQ(t.next.restarts, 0u);
  EXPECT_THAT(t.reason, HasSubstr("growing: grows from 2 to 3"));
  // Planned: no kRanksCheckInAgain, no recovery.
  EXPECT_THAT(t.effects, ElementsAre(E::kMarkGrowth, E::kRememberRanks, E::kAbortRanks,
                                     E::kReleaseRanks, E::kEndStore, E::kDropResume,
                                     E::kPendingSince, E::kChanged, E::kPersist, E::kSchedule));
}

TEST(DecideJobEvent, RanksFinished) {
  const JobLife job = Job(tagi::v1::RUNNING);
  JobTransition t = DecideJobEvent(job, RanksFinished{false, true, 2, 2}, kNow, kOptions);
  EXPECT_TRUE(t.status.ok());
  EXPECT_FALSE(t.changed);
  EXPECT_TRUE(t.effects.empty());
  t = DecideJobEvent(job, RanksFinished{true, true, 2, 1}, kNow, kOptions);
  EXPECT_EQ(t.next.state, tagi::v1::SUCCEEDED);
  EXPECT_EQ(t.reason, "trained 2 epochs on 1 worker");
  // Every rank finished: none is told anything.
  EXPECT_THAT(t.effects, ElementsAre(E::kMarkEnded, E::kEndStore, E::kDropSnapshots, E::kChanged,
                                     E::kMarkFinalVersion, E::kPersist, E::kSchedule));
  t = DecideJobEvent(job, RanksFinished{true, false, 2, 2}, kNow, kOptions);
  EXPECT_EQ(t.next.state, tagi::v1::FAILED);
  EXPECT_EQ(t.reason, "every rank finished but rank 0 uploaded no model");
}

TEST(DecideJobEvent, CancelTellsRunningRanksOnly) {
  JobTransition t = DecideJobEvent(Job(tagi::v1::RUNNING), CancelRequested{}, kNow, kOptions);
  EXPECT_EQ(t.reason, "cancelled by the user");
  EXPECT_EQ(std::count(t.effects.begin(), t.effects.end(), E::kCancelRanks), 1);
  EXPECT_EQ(std::count(t.effects.begin(), t.effects.end(), E::kAbortRanks), 0);
  t = DecideJobEvent(Job(tagi::v1::PENDING), CancelRequested{}, kNow, kOptions);
  EXPECT_EQ(t.next.state, tagi::v1::CANCELLED);
  EXPECT_EQ(std::count(t.effects.begin(), t.effects.end(), E::kCancelRanks), 0);
}

TEST(DecideJobEvent, CancellingAFinalJobSaysWhetherItIsSaved) {
  JobLife job = Job(tagi::v1::SUCCEEDED);
  JobTransition t = DecideJobEvent(job, CancelRequested{}, kNow, kOptions);
  EXPECT_EQ(t.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(t.status.message()), HasSubstr("already SUCCEEDED"));
  job.final_saved = false;
  t = DecideJobEvent(job, CancelRequested{}, kNow, kOptions);
  EXPECT_EQ(t.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(t.status.message()), HasSubstr("not saved yet"));
}

TEST(DecideJobEvent, CoordinatorRestarted) {
  JobLife job = Job(tagi::v1::RUNNING, /*generation=*/4);
  job.restarts = 1;
  JobTransition t = DecideJobEvent(job, CoordinatorRestarted{}, kNow, kOptions);
  EXPECT_EQ(t.next.state, tagi::v1::PENDING);
  EXPECT_EQ(t.next.restarts, 2u);
  EXPECT_EQ(t.rank_reason, kCoordinatorRestarted);
  EXPECT_EQ(t.reason, "recovering: the coordinator restarted; waiting for 2 idle workers");
  EXPECT_THAT(t.effects, ElementsAre(E::kAddRecovery, E::kRememberRanks, E::kPersist));
  // Recovering already: it keeps the ranks, its reason and its counts.
  t = DecideJobEvent(Job(tagi::v1::PENDING, 4), CoordinatorRestarted{}, kNow, kOptions);
  EXPECT_TRUE(t.changed);
  EXPECT_TRUE(t.reason.empty());
  EXPECT_THAT(t.effects, ElementsAre(E::kRememberRanks));
  // Never ran: nothing to do.
  t = DecideJobEvent(Job(tagi::v1::PENDING, 0), CoordinatorRestarted{}, kNow, kOptions);
  EXPECT_FALSE(t.changed);
}

TEST(DecideJobEvent, ReadOnlyFieldsAreNotWritten) {
  for (JobState state : kStates) {
    for (const JobEvent& event : AllEvents()) {
      JobLife job = Job(state);
      job.snapshot_step = 7;
      job.final_saved = true;
      const JobTransition t = DecideJobEvent(job, event, kNow, kOptions);
      EXPECT_EQ(t.next.id, job.id);
      EXPECT_EQ(t.next.snapshot_step, 7u);
      EXPECT_EQ(t.next.waiting, job.waiting);
    }
  }
}

}  // namespace
}  // namespace tagi::coordinator
