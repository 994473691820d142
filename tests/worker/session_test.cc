// The worker's Session on a FakeClock and fake streams: heartbeats every
// interval of the clock, a silent coordinator left after the silence
// timeout, a closed stream reopened after the back-off, directives applied
// to the attempt they name, and a clean leave.
#include "worker/session.h"

#include <atomic>
#include <functional>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/child_process.h"
#include "tests/worker/fake_session_streams.h"

namespace tagi {
namespace {

using test::FakeSessionStreams;

// Polls (in real time, bounded) until `pred` holds.
bool Eventually(const std::function<bool()>& pred) {
  return testing::WaitUntil(pred, absl::Seconds(30), absl::Milliseconds(1));
}

tagi::v1::SessionDirective Directive(tagi::v1::Directive kind, const std::string& job = "",
                                     uint64_t gen = 0, const std::string& reason = "") {
  tagi::v1::SessionDirective d;
  d.set_directive(kind);
  d.set_job_id(job);
  d.set_generation(gen);
  d.set_reason(reason);
  return d;
}

class SessionTest : public ::testing::Test {
 protected:
  SessionTest() {
    options_.worker_id = "w-7";
    options_.hostname = "fake-host";
    options_.heartbeat = absl::Seconds(1);
    options_.report_interval = absl::Milliseconds(250);
    options_.silence_timeout = absl::Seconds(3);
    options_.max_backoff = absl::Seconds(5);
    options_.on_connected = [this](bool c) { connected_ = c; };
  }
  ~SessionTest() override {
    if (session_ != nullptr) session_->Stop();
  }
  void Start() {
    session_ = std::make_unique<Session>(streams_, options_, clock_);
    session_->Start();
    ASSERT_TRUE(Eventually([&] { return streams_.opened() == 1; }));
  }
  // Advances the clock by `d` once the session's writer waits on it again
  // (a wait begun after the previous advance), so that no advance is lost.
  void AdvanceWhenWaiting(absl::Duration d) {
    ASSERT_TRUE(Eventually([&] { return clock_.waits_begun() > begun_ && clock_.waiters() > 0; }));
    begun_ = clock_.waits_begun();
    clock_.Advance(d);
  }

  FakeClock clock_{absl::FromUnixSeconds(1'700'000'000)};
  FakeSessionStreams streams_;
  SessionOptions options_;
  std::unique_ptr<Session> session_;
  std::atomic<bool> connected_{false};
  int64_t begun_ = 0;
};

TEST_F(SessionTest, SendsAHeartbeatEveryIntervalOfTheClock) {
  Start();
  auto end = streams_.end(0);
  ASSERT_TRUE(Eventually([&] { return end->written().size() == 1; }));
  EXPECT_EQ(end->written()[0].worker_id(), "w-7");  // the first message names the worker
  EXPECT_EQ(end->written()[0].hostname(), "fake-host");
  end->Send(Directive(tagi::v1::CONTINUE));  // a keep-alive: heard
  ASSERT_TRUE(Eventually([&] { return connected_.load(); }));
  for (size_t i = 2; i <= 4; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
    EXPECT_EQ(end->written().size(), i - 1) << "a heartbeat without the clock moving";
    ASSERT_NO_FATAL_FAILURE(AdvanceWhenWaiting(options_.heartbeat));
    ASSERT_TRUE(Eventually([&] { return end->written().size() == i; }));
    end->Send(Directive(tagi::v1::CONTINUE));
  }
  EXPECT_EQ(streams_.opened(), 1u);
  EXPECT_EQ(session_->streams_opened(), 1);
}

TEST_F(SessionTest, LeavesASilentCoordinatorAfterTheSilenceTimeoutAndReconnects) {
  Start();
  auto first = streams_.end(0);
  first->Send(Directive(tagi::v1::CONTINUE));
  ASSERT_TRUE(Eventually([&] { return connected_.load(); }));
  // Then nothing: heartbeats go out, no keep-alive comes back.
  for (int s = 1; s <= 3; ++s) ASSERT_NO_FATAL_FAILURE(AdvanceWhenWaiting(absl::Seconds(1)));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(first->cancelled()) << "left before the silence timeout";
  ASSERT_NO_FATAL_FAILURE(AdvanceWhenWaiting(absl::Seconds(1)));  // 4 s silent > 3 s
  ASSERT_TRUE(Eventually([&] { return first->cancelled(); }));
  ASSERT_TRUE(Eventually([&] { return !connected_.load(); }));
  // It reconnects once its back-off (at most 150 ms after a stream that was
  // heard) has passed on the clock.
  ASSERT_NO_FATAL_FAILURE(AdvanceWhenWaiting(absl::Milliseconds(150)));
  ASSERT_TRUE(Eventually([&] { return streams_.opened() == 2; }));
  auto second = streams_.end(1);
  ASSERT_TRUE(Eventually([&] { return second->written().size() == 1; }))
      << second->written().size() << " messages on the second stream";
  EXPECT_EQ(second->written()[0].worker_id(), "w-7");
}

TEST_F(SessionTest, AStreamTheCoordinatorClosesIsReopenedAfterTheBackOff) {
  Start();
  auto first = streams_.end(0);
  first->Send(Directive(tagi::v1::CONTINUE));
  ASSERT_TRUE(Eventually([&] { return connected_.load(); }));
  first->Close();  // e.g. the coordinator restarted
  ASSERT_TRUE(Eventually([&] { return !connected_.load(); }));
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(streams_.opened(), 1u) << "reopened without waiting for its back-off";
  ASSERT_NO_FATAL_FAILURE(AdvanceWhenWaiting(absl::Milliseconds(150)));
  ASSERT_TRUE(Eventually([&] { return streams_.opened() == 2; }));
}

TEST_F(SessionTest, DirectivesApplyToTheAttemptTheyName) {
  Start();
  auto end = streams_.end(0);
  tagi::v1::Assignment a;
  a.set_job_id("job-3");
  a.set_generation(2);
  a.set_rank(1);
  AttemptControl control(a);
  session_->SetAttempt(&control);
  // The session reports the attempt at once (SetAttempt pokes it).
  ASSERT_TRUE(Eventually([&] {
    for (const auto& m : end->written()) {
      if (m.job_id() == "job-3" && m.generation() == 2 && m.rank() == 1) return true;
    }
    return false;
  }));
  end->Send(Directive(tagi::v1::ABORT, "job-3", 1, "an older generation"));
  end->Send(Directive(tagi::v1::CANCEL, "job-4", 2, "another job"));
  end->Send(Directive(tagi::v1::CANCEL, "job-3", 2, "cancelled by the user"));
  ASSERT_TRUE(Eventually([&] { return control.stop_vote.load(); }));
  EXPECT_FALSE(control.aborted()) << "an ABORT of another generation applied";
  end->Send(Directive(tagi::v1::ABORT, "job-3", 2, "generation 2 is over"));
  std::string reason;
  ASSERT_TRUE(Eventually([&] { return control.aborted(&reason); }));
  EXPECT_EQ(reason, "generation 2 is over");
  session_->SetAttempt(nullptr);
}

TEST_F(SessionTest, AnAbortThatCameBeforeItsAttemptAppliesWhenItIsSet) {
  Start();
  auto end = streams_.end(0);
  tagi::v1::Assignment a;
  a.set_job_id("job-5");
  a.set_generation(1);
  {
    AttemptControl other(a);  // before the ABORT: nothing applies
    session_->SetAttempt(&other);
    EXPECT_FALSE(other.aborted());
    session_->SetAttempt(nullptr);
  }
  end->Send(Directive(tagi::v1::ABORT, "job-5", 1, "over before it began"));
  // An attempt set after the session has read it is aborted at once.
  EXPECT_TRUE(Eventually([&] {
    AttemptControl control(a);
    session_->SetAttempt(&control);
    const bool aborted = control.aborted();
    session_->SetAttempt(nullptr);
    return aborted;
  }));
}

TEST_F(SessionTest, StopLeavesCleanlyWithoutTheClockMoving) {
  Start();
  auto end = streams_.end(0);
  end->Send(Directive(tagi::v1::CONTINUE));
  ASSERT_TRUE(Eventually([&] { return connected_.load(); }));
  session_->Stop();
  EXPECT_TRUE(end->writes_done());  // the coordinator sees the worker leave
  EXPECT_EQ(streams_.opened(), 1u);
  EXPECT_FALSE(connected_.load());
}

// Log lines go out at once (without the clock moving), cut at
// kMaxLogLineBytes; after a stop nothing more is sent.
TEST_F(SessionTest, LogLinesGoOutPromptlyAndLongOnesAreCut) {
  Start();
  auto end = streams_.end(0);
  ASSERT_TRUE(Eventually([&] { return end->written().size() == 1; }));
  auto lines_written = [&] {
    size_t n = 0;
    for (const auto& m : end->written()) n += static_cast<size_t>(m.logs_size());
    return n;
  };
  session_->Log("job-1", 2, 1, "hello");
  ASSERT_TRUE(Eventually([&] { return lines_written() == 1; }));
  const tagi::v1::WorkerLogLine line = end->written().back().logs(0);
  EXPECT_EQ(line.job_id(), "job-1");
  EXPECT_EQ(line.generation(), 2u);
  EXPECT_EQ(line.rank(), 1u);
  EXPECT_EQ(line.text(), "hello");
  EXPECT_EQ(line.time_ms(), absl::ToUnixMillis(clock_.WallNow()));
  session_->Log("job-1", 2, 1, std::string(kMaxLogLineBytes + 10, 'x'));
  ASSERT_TRUE(Eventually([&] { return lines_written() == 2; }));
  EXPECT_EQ(end->written().back().logs(0).text().size(), kMaxLogLineBytes);

  EXPECT_EQ(clock_.Now(), absl::FromUnixSeconds(1'700'000'000));  // no interval passed

  const size_t before = lines_written();
  session_->Stop();
  session_->Log("job-1", 2, 1, "too late");  // after the stop: never sent, no crash
  EXPECT_EQ(lines_written(), before);
}

// Lines queued faster than they go (here: before the session runs): at
// most kMaxPendingLogLines wait, the rest are counted as dropped; they go
// kLogLinesPerMessage a message, in order.
TEST_F(SessionTest, AFloodOfLogLinesIsBoundedAndCounted) {
  session_ = std::make_unique<Session>(streams_, options_, clock_);
  const size_t flood = kMaxPendingLogLines + 500;
  for (size_t i = 0; i < flood; ++i) session_->Log("job-1", 2, 1, std::to_string(i));
  session_->Start();
  ASSERT_TRUE(Eventually([&] { return streams_.opened() == 1; }));
  auto end = streams_.end(0);
  auto lines_written = [&] {
    size_t n = 0;
    for (const auto& m : end->written()) n += static_cast<size_t>(m.logs_size());
    return n;
  };
  ASSERT_TRUE(Eventually([&] { return lines_written() == kMaxPendingLogLines; }));
  uint64_t dropped = 0;
  int next = 0;
  for (const auto& m : end->written()) {
    dropped += m.logs_dropped();
    EXPECT_LE(static_cast<size_t>(m.logs_size()), kLogLinesPerMessage);
    for (const auto& l : m.logs()) EXPECT_EQ(l.text(), std::to_string(next++));
  }
  EXPECT_EQ(dropped, 500u);
  EXPECT_EQ(clock_.Now(), absl::FromUnixSeconds(1'700'000'000));  // no interval passed
}

}  // namespace
}  // namespace tagi
