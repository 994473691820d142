#include "worker/collective/tcp/socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tagi::ring_internal {
namespace {

// Asked for on every ring socket. Linux caps the request at
// net.core.{w,r}mem_max; explicit sizes keep a whole TAGI step's chunk in
// flight without waiting for autotuning to grow the window.
constexpr int kSocketBufferBytes = 4 << 20;

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};
using AddrInfoPtr = std::unique_ptr<addrinfo, AddrInfoDeleter>;

absl::StatusOr<AddrInfoPtr> Resolve(const std::string& host, uint16_t port) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  const std::string service = std::to_string(port);
  const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &result);
  if (rc != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve host '", host, "': ", gai_strerror(rc)));
  }
  return AddrInfoPtr(result);
}

std::string FormatAddress(const sockaddr* addr, socklen_t len) {
  char host[NI_MAXHOST];
  char port[NI_MAXSERV];
  if (getnameinfo(addr, len, host, sizeof(host), port, sizeof(port),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "";
  }
  if (addr->sa_family == AF_INET6) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

}  // namespace

Fd& Fd::operator=(Fd&& other) noexcept {
  if (this != &other) {
    Reset();
    fd_ = other.Release();
  }
  return *this;
}

int Fd::Release() { return std::exchange(fd_, -1); }

void Fd::Reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

absl::Status ErrnoStatus(int err, const std::string& what) {
  const std::string message = absl::StrCat(what, ": ", std::strerror(err));
  switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
      return absl::UnavailableError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::Status ConfigureSocket(int fd) {
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    return ErrnoStatus(errno, "setsockopt(TCP_NODELAY)");
  }
  for (int option : {SO_SNDBUF, SO_RCVBUF}) {
    if (setsockopt(fd, SOL_SOCKET, option, &kSocketBufferBytes, sizeof(kSocketBufferBytes)) != 0) {
      return ErrnoStatus(errno, "setsockopt(SO_SNDBUF/SO_RCVBUF)");
    }
  }
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus(errno, "fcntl(O_NONBLOCK)");
  }
  return absl::OkStatus();
}

absl::StatusOr<Listener> Listen(const std::string& host) {
  auto resolved = Resolve(host, 0);
  if (!resolved.ok()) return resolved.status();
  absl::Status last = absl::InvalidArgumentError(absl::StrCat("no address for host '", host, "'"));
  for (const addrinfo* ai = resolved->get(); ai != nullptr; ai = ai->ai_next) {
    Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
    if (!fd.valid()) {
      last = ErrnoStatus(errno, "socket");
      continue;
    }
    if (auto st = ConfigureSocket(fd.get()); !st.ok()) return st;
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      last = absl::InvalidArgumentError(
          absl::StrCat("cannot bind to host '", host, "': ", std::strerror(errno)));
      continue;
    }
    if (::listen(fd.get(), 64) != 0) return ErrnoStatus(errno, "listen");
    sockaddr_storage bound = {};
    socklen_t len = sizeof(bound);
    if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len) != 0) {
      return ErrnoStatus(errno, "getsockname");
    }
    std::string address = FormatAddress(reinterpret_cast<sockaddr*>(&bound), len);
    if (address.empty()) return absl::InternalError("getnameinfo failed on a bound socket");
    return Listener{std::move(fd), std::move(address)};
  }
  return last;
}

absl::Status ParseHostPort(const std::string& address, std::string* host, uint16_t* port) {
  const size_t colon = address.rfind(':');
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address '", address, "'; expected host:port or [v6]:port"));
  };
  if (colon == std::string::npos || colon == 0) return bad();
  std::string h = address.substr(0, colon);
  if (h.front() == '[') {
    if (h.size() < 3 || h.back() != ']') return bad();
    h = h.substr(1, h.size() - 2);
  }
  uint32_t p = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &p) || p == 0 || p > 65535) return bad();
  *host = std::move(h);
  *port = static_cast<uint16_t>(p);
  return absl::OkStatus();
}

// "host:port" resolved.
absl::StatusOr<AddrInfoPtr> ResolveAddress(const std::string& address) {
  std::string host;
  uint16_t port = 0;
  if (auto st = ParseHostPort(address, &host, &port); !st.ok()) return st;
  return Resolve(host, port);
}

absl::StatusOr<std::string> LocalAddressTowards(const std::string& address) {
  auto resolved = ResolveAddress(address);
  if (!resolved.ok()) return resolved.status();
  const addrinfo* ai = resolved->get();
  Fd fd(::socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return ErrnoStatus(errno, "socket");
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
    return ErrnoStatus(errno, absl::StrCat("no route to ", address));
  }
  sockaddr_storage local = {};
  socklen_t len = sizeof(local);
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
    return ErrnoStatus(errno, "getsockname");
  }
  char name[NI_MAXHOST];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&local), len, name, sizeof(name), nullptr,
                  0, NI_NUMERICHOST) != 0) {
    return absl::InternalError(absl::StrCat("cannot format the local address towards ", address));
  }
  return std::string(name);
}

absl::StatusOr<Fd> StartConnect(const std::string& address) {
  auto resolved = ResolveAddress(address);
  if (!resolved.ok()) return resolved.status();
  const addrinfo* ai = resolved->get();
  Fd fd(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol));
  if (!fd.valid()) return ErrnoStatus(errno, "socket");
  if (auto st = ConfigureSocket(fd.get()); !st.ok()) return st;
  if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
    return ErrnoStatus(errno, absl::StrCat("connect to ", address));
  }
  return fd;
}

absl::Status FinishConnect(int fd, const std::string& address) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err != 0) return ErrnoStatus(err, absl::StrCat("connect to ", address));
  return absl::OkStatus();
}

absl::StatusOr<Fd> AcceptOne(int listen_fd) {
  Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC));
  if (!fd.valid()) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
      return Fd();
    }
    return ErrnoStatus(errno, "accept");
  }
  if (auto st = ConfigureSocket(fd.get()); !st.ok()) return st;
  return fd;
}

int PollTimeoutMs(absl::Time deadline) {
  const absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  const double ms = std::ceil(absl::ToDoubleMilliseconds(left));
  return ms > 1e9 ? 1000000000 : static_cast<int>(ms);
}

}  // namespace tagi::ring_internal
