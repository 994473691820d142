// The worker's agent: on a FakeClock, its back-off between registrations is
// timed by the injected clock and Stop() ends a back-off at once; on an
// in-process coordinator (fake_coordinator.h) and fake session streams, it
// runs what it is assigned, comes back under its id when the coordinator
// forgot it, takes a new one when its credentials are refused, does not
// count a retryable attempt as a job, and stops on a permanent refusal.
#include "worker/agent.h"

#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gtest/gtest.h"
#include "absl/strings/substitute.h"
#include "common/job_spec.h"
#include "tests/testing/child_process.h"
#include "tests/worker/fake_coordinator.h"
#include "tests/worker/fake_session_streams.h"

namespace tagi {
namespace {

// A loopback port nothing listens on (bound, then closed: the OS does not
// hand it out again at once).
int ClosedPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ADD_FAILURE() << "cannot bind a loopback port";
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Polls (in real time, bounded) until `pred` holds.
// Polls (in real time, bounded) until `pred` holds.
bool Eventually(const std::function<bool()>& pred) {
  return testing::WaitUntil(pred, absl::Seconds(30), absl::Milliseconds(1));
}

TEST(Agent, RetriesRegistrationOnlyAfterItsBackOffOnTheClock) {
  FakeClock clock;
  AgentOptions o;
  o.coordinator = "127.0.0.1:" + std::to_string(ClosedPort());
  o.rpc_timeout = absl::Milliseconds(50);  // each try fails fast (real time: gRPC's deadline)
  o.max_backoff = absl::Seconds(5);
  o.hostname = "agent-test";
  Agent agent(o, clock);
  std::atomic<int> rc{-1};
  std::thread run([&] { rc = agent.Run(); });
  // The first try failed; the agent backs off on the clock.
  ASSERT_TRUE(clock.AwaitWaiters(1));
  EXPECT_EQ(clock.waits_begun(), 1);
  absl::SleepFor(absl::Milliseconds(300));  // real time: no second try
  EXPECT_EQ(clock.waits_begun(), 1);
  EXPECT_EQ(clock.waiters(), 1);
  // The longest first back-off (100 ms + 50 % jitter) passes on the clock:
  // it tries again, fails, and backs off again.
  clock.Advance(absl::Milliseconds(150));
  EXPECT_TRUE(Eventually([&] { return clock.waits_begun() == 2 && clock.waiters() == 1; }));
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(clock.waits_begun(), 2);
  // Stop ends the back-off without the clock moving.
  agent.Stop();
  EXPECT_TRUE(Eventually([&] { return rc.load() != -1; }));
  run.join();
  EXPECT_EQ(rc.load(), 0);
}

// A one-rank regression job on generated data (a few milliseconds).
tagi::v1::Assignment ToyAssignment(const std::string& job, int rank = 0, int world = 1) {
  auto spec = ParseJobSpecJson(absl::Substitute(R"({"name": "toy",
    "layers": [{"linear": {"inFeatures": 1, "outFeatures": 8}}, {"relu": {}},
               {"linear": {"inFeatures": 8, "outFeatures": 1}}],
    "head": {"regression": {}}, "data": {"kind": "TOY_CUBIC"}, "noise": {"sigmaV": 0.3},
    "batchSize": 10, "epochs": 1, "seed": 3, "worldSize": $0, "device": "cpu"})",
                                                world));
  EXPECT_TRUE(spec.ok()) << spec.status();
  tagi::v1::Assignment a;
  a.set_job_id(job);
  a.set_generation(1);
  a.set_rank(rank);
  a.set_world_size(world);
  *a.mutable_spec() = *spec;
  return a;
}

AgentOptions FakeOptions() {
  AgentOptions o;
  o.coordinator = "fake";
  o.hostname = "agent-test";
  o.poll = absl::Milliseconds(20);
  o.max_backoff = absl::Milliseconds(50);
  o.max_jobs = 1;
  o.runner.connect_timeout = absl::Milliseconds(300);
  return o;
}

// Runs the agent to its end (max_jobs or a permanent refusal), bounded;
// `meanwhile` runs on the test's thread while the agent does.
int RunAgent(test::FakeCoordinator& fake, test::FakeSessionStreams& streams,
             const AgentOptions& o, const std::function<void()>& meanwhile = {}) {
  RealClock clock;
  Agent agent(o, clock, fake, streams);
  std::atomic<int> rc{-1};
  std::jthread run([&] { rc = agent.Run(); });
  if (meanwhile) meanwhile();
  if (!Eventually([&] { return rc.load() != -1; })) agent.Stop();
  return rc.load();
}

// The hello (first message) of the newest session stream, if it has one.
std::string NewestHello(test::FakeSessionStreams& streams) {
  if (streams.opened() == 0) return "";
  const auto written = streams.end(streams.opened() - 1)->written();
  return written.empty() ? "" : written[0].worker_id();
}

TEST(AgentOnAFake, RunsItsAssignmentAndReportsIt) {
  test::FakeCoordinator fake;
  test::FakeSessionStreams streams;
  EXPECT_EQ(RunAgent(fake, streams, FakeOptions(), [&] {
              // The session says hello; then work comes.
              EXPECT_TRUE(Eventually([&] { return NewestHello(streams) == "w1"; }));
              fake.QueueAssignment(ToyAssignment("job-1"));
            }),
            0);
  ASSERT_EQ(fake.registrations().size(), 1u);
  EXPECT_EQ(fake.registrations()[0].hostname(), "agent-test");
  ASSERT_EQ(fake.finished().size(), 1u);
  EXPECT_TRUE(fake.finished()[0].ok());
  EXPECT_EQ(fake.finished()[0].worker_id(), "w1");
  EXPECT_EQ(fake.models().size(), 1u);
}

TEST(AgentOnAFake, ComesBackUnderItsIdWhenTheCoordinatorForgotIt) {
  test::FakeCoordinator fake;
  test::FakeSessionStreams streams;
  fake.QueueRendezvous(absl::NotFoundError("unknown worker w1"));  // a restart lost it
  fake.QueueAssignment(ToyAssignment("job-1"));
  EXPECT_EQ(RunAgent(fake, streams, FakeOptions()), 0);
  const auto regs = fake.registrations();
  ASSERT_EQ(regs.size(), 2u);
  EXPECT_EQ(regs[1].worker_id(), "w1");  // asks for its id back
  EXPECT_EQ(fake.credential_clears(), 0);
  ASSERT_EQ(fake.finished().size(), 1u);
  EXPECT_EQ(fake.finished()[0].worker_id(), "w1");
  // The session went on under the same id (it may not have opened a
  // stream yet: the fake answers at once).
  for (size_t i = 0; i < streams.opened(); ++i) {
    for (const auto& m : streams.end(i)->written()) EXPECT_EQ(m.worker_id(), "w1");
  }
}

TEST(AgentOnAFake, RetriesARegistrationUnderOneNonce) {
  test::FakeCoordinator fake;
  test::FakeSessionStreams streams;
  fake.RefuseRegistration(absl::UnavailableError("starting"), 2);
  fake.QueueAssignment(ToyAssignment("job-1"));
  EXPECT_EQ(RunAgent(fake, streams, FakeOptions()), 0);
  const auto regs = fake.registrations();
  ASSERT_EQ(regs.size(), 3u);
  // One registration tried three times: a late answer to a try cannot
  // give the worker a second id.
  EXPECT_FALSE(regs[0].nonce().empty());
  EXPECT_EQ(regs[1].nonce(), regs[0].nonce());
  EXPECT_EQ(regs[2].nonce(), regs[0].nonce());
  EXPECT_EQ(fake.finished().size(), 1u);
}

TEST(AgentOnAFake, TakesANewIdentityWhenItsCredentialsAreRefused) {
  test::FakeCoordinator fake;
  test::FakeSessionStreams streams;
  fake.QueueRendezvous(absl::UnauthenticatedError("bad worker secret"));
  EXPECT_EQ(RunAgent(fake, streams, FakeOptions(), [&] {
              // The new identity's session says hello; then work comes.
              EXPECT_TRUE(Eventually([&] { return NewestHello(streams) == "w2"; }));
              fake.QueueAssignment(ToyAssignment("job-1"));
            }),
            0);
  const auto regs = fake.registrations();
  ASSERT_EQ(regs.size(), 2u);
  EXPECT_EQ(regs[1].worker_id(), "");
  EXPECT_EQ(fake.credential_clears(), 1);
  ASSERT_EQ(fake.finished().size(), 1u);
  EXPECT_EQ(fake.finished()[0].worker_id(), "w2");
  // w1's session (when it got as far as a stream) ended.
  for (size_t i = 0; i < streams.opened(); ++i) {
    const auto written = streams.end(i)->written();
    if (!written.empty() && written[0].worker_id() == "w1") {
      EXPECT_TRUE(streams.end(i)->cancelled() || streams.end(i)->writes_done());
    }
  }
}

TEST(AgentOnAFake, ARetryableAttemptIsNotCountedAsAJob) {
  test::FakeCoordinator fake;
  test::FakeSessionStreams streams;
  // Rank 0 of two whose peer never comes: the group does not form in
  // connect_timeout, the generation fails retryably, the agent asks again.
  tagi::v1::Assignment lonely = ToyAssignment("job-1", 0, 2);
  fake.QueueAssignment(lonely);
  tagi::v1::Assignment next = ToyAssignment("job-1");
  next.set_generation(2);
  fake.QueueAssignment(next);
  EXPECT_EQ(RunAgent(fake, streams, FakeOptions()), 0);
  const auto fin = fake.finished();
  ASSERT_EQ(fin.size(), 2u);
  EXPECT_FALSE(fin[0].ok());
  EXPECT_TRUE(fin[0].retryable()) << fin[0].reason();
  EXPECT_EQ(fin[1].generation(), 2u);
  EXPECT_TRUE(fin[1].ok()) << fin[1].reason();
}

TEST(AgentOnAFake, StopsOnAPermanentRefusal) {
  test::FakeCoordinator fake;
  test::FakeSessionStreams streams;
  fake.QueueRendezvous(absl::FailedPreconditionError("protocol version 2 expected"));
  EXPECT_EQ(RunAgent(fake, streams, FakeOptions()), 1);
  EXPECT_TRUE(fake.finished().empty());

  test::FakeCoordinator refusing;
  refusing.RefuseRegistration(absl::UnauthenticatedError("bad join token"));
  EXPECT_EQ(RunAgent(refusing, streams, FakeOptions()), 1);
  EXPECT_EQ(refusing.registrations().size(), 1u);  // not retried
}

}  // namespace
}  // namespace tagi
