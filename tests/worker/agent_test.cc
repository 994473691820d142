// The worker's agent on a FakeClock: its back-off between registrations is
// timed by the injected clock, and Stop() ends a back-off at once.
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
#include "tests/testing/child_process.h"

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

}  // namespace
}  // namespace tagi
