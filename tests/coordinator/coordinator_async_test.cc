// The Coordinator's callback-answered long polls (the asynchronous Cluster
// service, coordinator_async.cc): Rendezvous and store waits answered by
// the event they wait for or by Tick at their deadline (FakeClock), always
// outside the coordinator's lock, exactly once; sessions woken when a
// directive is queued or they are superseded.
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/coordinator_harness.h"

namespace tagi::coordinator::test {
namespace {

using ::testing::HasSubstr;

// Records a poll's answers; each callback also calls into the coordinator,
// which would deadlock if it ran under the coordinator's lock.
struct PollResult {
  int answers = 0;
  std::optional<absl::StatusOr<tagi::v1::RendezvousResponse>> reply;
};

Coordinator::RendezvousDone Record(Coordinator& c, PollResult& r) {
  return [&c, &r](absl::StatusOr<tagi::v1::RendezvousResponse> reply) {
    ++r.answers;
    r.reply = std::move(reply);
    (void)c.ListWorkers();  // takes the lock: the callback must not hold it
  };
}

TEST_F(CoordinatorTest, AsyncRendezvousIsAnsweredWhenAJobStartsNotBefore) {
  Start(2);
  const std::vector<std::string> w = RegisterN(2);
  PollResult a, b;
  coord().RendezvousAsync(w[0], absl::Seconds(30), Record(coord(), a));
  coord().RendezvousAsync(w[1], absl::Seconds(30), Record(coord(), b));
  EXPECT_EQ(a.answers, 0);
  EXPECT_EQ(coord().PendingWaits(), 2u);
  const std::string job = Submit(2);  // places both: answers both polls
  ASSERT_EQ(a.answers, 1);
  ASSERT_EQ(b.answers, 1);
  ASSERT_TRUE(a.reply->ok()) << a.reply->status();
  EXPECT_TRUE((*a.reply)->assigned());
  EXPECT_EQ((*a.reply)->assignment().job_id(), job);
  EXPECT_EQ((*b.reply)->assignment().rank() + (*a.reply)->assignment().rank(), 1u);
  EXPECT_EQ(coord().PendingWaits(), 0u);
}

TEST_F(CoordinatorTest, AsyncRendezvousOfAnAssignedWorkerAnswersAtOnce) {
  Start(1);
  const std::string w = Register();
  const std::string job = Submit(1);
  PollResult r;
  coord().RendezvousAsync(w, absl::Seconds(30), Record(coord(), r));
  ASSERT_EQ(r.answers, 1);
  EXPECT_EQ((*r.reply)->assignment().job_id(), job);
}

TEST_F(CoordinatorTest, AsyncRendezvousEndsAtItsDeadlineThroughTick) {
  Start(2);
  const std::string w = Register();
  PollResult r;
  coord().RendezvousAsync(w, absl::Seconds(2), Record(coord(), r));
  clock_.Advance(absl::Milliseconds(1900));
  coord().Tick();
  EXPECT_EQ(r.answers, 0) << "answered before its deadline";
  clock_.Advance(absl::Milliseconds(200));
  coord().Tick();
  ASSERT_EQ(r.answers, 1);
  ASSERT_TRUE(r.reply->ok());
  EXPECT_FALSE((*r.reply)->assigned());
  coord().Tick();
  EXPECT_EQ(r.answers, 1) << "answered twice";
}

// A worker forgotten while its long poll waits (gone, beyond the records
// kept) gets its poll answered at once, and nothing names it afterwards.
TEST_F(CoordinatorTest, AForgottenWorkersPendingPollIsAnswered) {
  CoordinatorOptions o = Options(2);
  o.membership.keep_gone_workers = 0;
  Start(std::move(o));
  const std::string w = Register();
  PollResult r;
  coord().RendezvousAsync(w, absl::Seconds(30), Record(coord(), r));
  EXPECT_EQ(r.answers, 0);
  clock_.Advance(absl::Seconds(4));  // past the 3 s heartbeat timeout
  coord().Tick();
  ASSERT_EQ(r.answers, 1);
  EXPECT_TRUE(coord().ListWorkers().empty());
  clock_.Advance(absl::Seconds(40));
  coord().Tick();  // the poll's deadline passes: nothing left to answer
  EXPECT_EQ(r.answers, 1);
}

TEST_F(CoordinatorTest, ANewerPollOfTheSameWorkerAnswersTheOlderOne) {
  Start(2);
  const std::string w = Register();
  PollResult first, second;
  coord().RendezvousAsync(w, absl::Seconds(30), Record(coord(), first));
  coord().RendezvousAsync(w, absl::Seconds(30), Record(coord(), second));
  EXPECT_EQ(first.answers, 1);
  EXPECT_FALSE((*first.reply)->assigned());
  EXPECT_EQ(second.answers, 0);
  EXPECT_EQ(coord().PendingWaits(), 1u);
}

TEST_F(CoordinatorTest, AsyncRendezvousOfAnUnknownWorkerIsNotFound) {
  Start(1);
  PollResult r;
  coord().RendezvousAsync("w-99", absl::Seconds(1), Record(coord(), r));
  ASSERT_EQ(r.answers, 1);
  EXPECT_EQ(r.reply->status().code(), absl::StatusCode::kNotFound);
}

TEST_F(CoordinatorTest, AsyncStoreGetIsAnsweredByTheSetOfItsKey) {
  Start(2);
  const std::string job = Submit(2);
  RegisterN(2);
  int answers = 0;
  absl::StatusOr<std::string> got;
  coord().StoreGetAsync(job, 1, "ring/addr/1", absl::Seconds(30),
                        [&](absl::StatusOr<std::string> v) {
                          ++answers;
                          got = std::move(v);
                        });
  ASSERT_TRUE(coord().StoreSet(job, 1, "ring/addr/0", "a").ok());
  EXPECT_EQ(answers, 0) << "answered by another key";
  ASSERT_TRUE(coord().StoreSet(job, 1, "ring/addr/1", "10.0.0.2:4000").ok());
  ASSERT_EQ(answers, 1);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "10.0.0.2:4000");
  // A key that exists answers at once; so does a stale generation.
  coord().StoreGetAsync(job, 1, "ring/addr/0", absl::Seconds(30),
                        [&](absl::StatusOr<std::string> v) { got = std::move(v); });
  EXPECT_EQ(*got, "a");
  coord().StoreGetAsync(job, 7, "ring/addr/0", absl::Seconds(30),
                        [&](absl::StatusOr<std::string> v) { got = std::move(v); });
  EXPECT_EQ(got.status().code(), absl::StatusCode::kAborted);
}

TEST_F(CoordinatorTest, AsyncStoreWaitNeedsEveryKeyAndEndsAtItsDeadline) {
  Start(2);
  const std::string job = Submit(2);
  RegisterN(2);
  std::vector<absl::Status> results;
  auto record = [&](absl::Status st) { results.push_back(st); };
  coord().StoreWaitAsync(job, 1, {"done/1", "done/2", "done/3"}, absl::Seconds(30), record);
  ASSERT_TRUE(coord().StoreAdd(job, 1, "done/2", 1).ok());  // out of order
  ASSERT_TRUE(coord().StoreSet(job, 1, "done/1", "1").ok());
  EXPECT_TRUE(results.empty());
  ASSERT_TRUE(coord().StoreSet(job, 1, "done/3", "1").ok());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].ok()) << results[0];

  // (Within the heartbeat timeout: the workers stay, and so do the keys.)
  coord().StoreWaitAsync(job, 1, {"done/1", "late/9"}, absl::Seconds(2), record);
  clock_.Advance(absl::Milliseconds(2500));
  coord().Tick();
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[1].code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(results[1].message()), HasSubstr("late/9"));
  EXPECT_THAT(std::string(results[1].message()), ::testing::Not(HasSubstr("done/1")));
  EXPECT_EQ(coord().PendingWaits(), 0u);
  // The deadline's wait left nothing indexed: a late set answers nobody.
  ASSERT_TRUE(coord().StoreSet(job, 1, "late/9", "1").ok());
  EXPECT_EQ(results.size(), 2u);
}

TEST_F(CoordinatorTest, EndWaitsAnswersEveryPendingPollAndStoreWait) {
  Start(3);
  const std::string job = Submit(2);
  const std::vector<std::string> w = RegisterN(3);  // two placed, one spare
  PollResult spare;
  const std::string idle = Worker(w[2]).state() == "IDLE" ? w[2] : w[0];
  coord().RendezvousAsync(idle, absl::Seconds(30), Record(coord(), spare));
  absl::Status store;
  coord().StoreGetAsync(job, 1, "never", absl::Seconds(30),
                        [&](absl::StatusOr<std::string> v) { store = v.status(); });
  coord().EndWaits("shutting down");
  EXPECT_EQ(spare.answers, 1);
  EXPECT_EQ(store.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(store.message()), HasSubstr("shutting down"));
  EXPECT_EQ(coord().PendingWaits(), 0u);
  // A wait that comes after is answered at once: none may hold the server's
  // shutdown (a worker's Rendezvous right after its session ended kept a
  // coordinator from exiting for its whole poll).
  absl::Status late_poll;
  coord().RendezvousAsync(idle, absl::Seconds(30),
                          [&](absl::StatusOr<tagi::v1::RendezvousResponse> r) {
                            late_poll = r.status();
                          });
  absl::Status late_store;
  coord().StoreWaitAsync(job, 1, {"never"}, absl::Seconds(30),
                         [&](absl::Status st) { late_store = st; });
  EXPECT_EQ(late_poll.code(), absl::StatusCode::kUnavailable) << late_poll;
  EXPECT_EQ(late_store.code(), absl::StatusCode::kUnavailable) << late_store;
  EXPECT_EQ(coord().PendingWaits(), 0u);
}

TEST_F(CoordinatorTest, AnAsyncSessionIsWokenForItsDirectivesAndWhenSuperseded) {
  Start(1);
  const std::string w = Register();
  const std::string job = Submit(1);
  int wakes = 0;
  tagi::v1::SessionMessage first;
  first.set_worker_id(w);
  first.set_hostname("host");
  auto token = coord().OpenSession(first, "ipv4:127.0.0.1:1", [&] {
    ++wakes;
    (void)coord().ListWorkers();  // outside the lock
  });
  ASSERT_TRUE(token.ok()) << token.status();
  auto none = coord().TakeDirective(w, *token);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  // The user cancels: a CANCEL directive is queued and the stream woken.
  ASSERT_TRUE(coord().Cancel(job).ok());
  EXPECT_GE(wakes, 1);
  auto next = coord().TakeDirective(w, *token);
  ASSERT_TRUE(next.ok() && next->has_value());
  EXPECT_EQ((*next)->directive(), tagi::v1::CANCEL);
  EXPECT_EQ((*next)->job_id(), job);
  // A newer stream of the worker supersedes this one, and wakes it to say so.
  const int before = wakes;
  auto newer = coord().OpenSession(first, "ipv4:127.0.0.1:2", [] {});
  ASSERT_TRUE(newer.ok());
  EXPECT_EQ(wakes, before + 1);
  EXPECT_EQ(coord().TakeDirective(w, *token).status().code(), absl::StatusCode::kCancelled);
}

TEST_F(CoordinatorTest, StoreWaitsBeyondTheBoundsAreRefused) {
  CoordinatorOptions o = Options(2);
  o.max_store_waits = 2;
  o.max_keys_per_wait = 3;
  Start(std::move(o));
  const std::string job = Submit(2);
  RegisterN(2);
  std::vector<absl::Status> got;
  auto record = [&](absl::StatusOr<std::string> v) { got.push_back(v.status()); };
  coord().StoreGetAsync(job, 1, "a", absl::Seconds(30), record);
  coord().StoreGetAsync(job, 1, "b", absl::Seconds(30), record);
  coord().StoreGetAsync(job, 1, "c", absl::Seconds(30), record);  // the third: refused
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].code(), absl::StatusCode::kResourceExhausted) << got[0];
  EXPECT_EQ(coord().PendingWaits(), 2u);
  ASSERT_TRUE(coord().StoreSet(job, 1, "a", "1").ok());  // frees one
  coord().StoreGetAsync(job, 1, "c", absl::Seconds(30), record);
  EXPECT_EQ(got.size(), 2u) << "admitted again once one was answered";
  absl::Status wide;
  coord().StoreWaitAsync(job, 1, {"k1", "k2", "k3", "k4"}, absl::Seconds(30),
                         [&](absl::Status st) { wide = st; });
  EXPECT_EQ(wide.code(), absl::StatusCode::kInvalidArgument) << wide;
}

// A rank still waiting in the store when its job is cancelled (the ring
// bootstrap waits for its neighbour's address, which the neighbour can no
// longer publish: the job is not RUNNING) is answered at once, not at its
// deadline: until it hears, it cannot report back, and the coordinator keeps
// it busy (the next job waited one --connect-timeout). Likewise when the
// generation ends and the job recovers; another job's waits stay.
TEST_F(CoordinatorTest, StoreWaitsOfAnEndedJobOrGenerationAreAnsweredAtOnce) {
  Start(4);
  RegisterN(4);
  const std::string job = Submit(2);
  const std::string other = Submit(2);
  ASSERT_EQ(State(job), tagi::v1::RUNNING);
  ASSERT_EQ(State(other), tagi::v1::RUNNING);
  std::vector<absl::Status> got;
  auto record = [&](absl::StatusOr<std::string> v) {
    got.push_back(v.status());
    (void)coord().ListWorkers();  // outside the coordinator's lock
  };
  coord().StoreGetAsync(job, 1, "ring/addr/0", absl::Seconds(20), record);
  coord().StoreWaitAsync(job, 1, {"done/1"}, absl::Seconds(20),
                         [&](absl::Status st) { got.push_back(st); });
  coord().StoreGetAsync(other, 1, "ring/addr/0", absl::Seconds(20), record);
  ASSERT_EQ(coord().PendingWaits(), 3u);
  ASSERT_TRUE(coord().Cancel(job).ok());
  ASSERT_EQ(got.size(), 2u) << "the cancelled job's waits linger until their deadline";
  for (const absl::Status& st : got) {
    EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr("CANCELLED"));
  }
  EXPECT_EQ(coord().PendingWaits(), 1u) << "the other job's wait stays";
  // The ranks then report and are free at once.
  const tagi::v1::Job cancelled = GetJob(job);
  for (int r = 0; r < cancelled.workers_size(); ++r) {
    (void)Finish(job, cancelled.workers(r), static_cast<uint32_t>(r), false, "cancelled");
    EXPECT_EQ(Worker(cancelled.workers(r)).state(), "IDLE");
  }

  // A generation that ends (a rank failed, retryably): its survivors' waits
  // end too, while the job goes back to PENDING to recover.
  got.clear();
  const tagi::v1::Job running = GetJob(other);
  tagi::v1::FinishJobRequest fail;
  fail.set_worker_id(running.workers(1));
  fail.set_job_id(other);
  fail.set_generation(1);
  fail.set_rank(1);
  fail.set_retryable(true);
  fail.set_reason("connection reset");
  ASSERT_TRUE(coord().FinishJob(fail).ok());
  ASSERT_EQ(got.size(), 1u) << "the ended generation's wait lingers until its deadline";
  EXPECT_EQ(got[0].code(), absl::StatusCode::kAborted) << got[0];
  EXPECT_EQ(coord().PendingWaits(), 0u);
}

}  // namespace
}  // namespace tagi::coordinator::test
