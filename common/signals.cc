#include "common/signals.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace tagi {
namespace {

// Write end first: the handler only needs that one.
std::atomic<int> g_write_fd{-1};
std::atomic<int> g_read_fd{-1};

void OnSignal(int sig) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(sig);
  const int fd = g_write_fd.load();
  if (fd >= 0) (void)!::write(fd, &byte, 1);
  errno = saved;
}

}  // namespace

void InstallTerminationHandler() {
  if (g_read_fd.load() >= 0) return;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;
  g_read_fd = fds[0];
  g_write_fd = fds[1];
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

int WaitForTerminationSignal(absl::Duration timeout) {
  const int fd = g_read_fd.load();
  if (fd < 0) return 0;
  pollfd p{fd, POLLIN, 0};
  const int ms = timeout == absl::InfiniteDuration()
                     ? -1
                     : static_cast<int>(absl::ToInt64Milliseconds(timeout));
  if (::poll(&p, 1, ms) <= 0) return 0;
  unsigned char byte = 0;
  return ::read(fd, &byte, 1) == 1 ? byte : 0;
}

}  // namespace tagi
