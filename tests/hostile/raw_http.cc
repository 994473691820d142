#include "tests/hostile/raw_http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>


#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/time/clock.h"

namespace tagi::testing {

int ConnectFrom(const std::string& from, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, from.c_str(), &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  remote.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string ReadUntilClosed(int fd, absl::Duration timeout) {
  std::string out;
  const absl::Time deadline = absl::Now() + timeout;
  char buf[8192];
  while (absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

bool PeerClosed(int fd, absl::Duration wait) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(wait))) <= 0) return false;
  char buf[4096];
  while (true) {  // drain what the server sent before closing
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

std::string Exchange(int port, const std::string& request, absl::Duration timeout,
                     const std::string& from) {
  const int fd = ConnectFrom(from, port);
  if (fd < 0) return "";
  std::string reply;
  if (SendAll(fd, request)) reply = ReadUntilClosed(fd, timeout);
  ::close(fd);
  return reply;
}

int StatusOf(const std::string& reply) {
  int status = 0;
  if (!absl::StartsWith(reply, "HTTP/1.") || reply.size() < 12 ||
      !absl::SimpleAtoi(reply.substr(9, 3), &status)) {
    return 0;
  }
  return status;
}


}  // namespace tagi::testing
