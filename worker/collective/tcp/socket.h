// Internal to the ring backend: thin, Status-returning wrappers of the
// POSIX socket calls it needs (IPv4 and IPv6 TCP, non-blocking).
//
// Fd owns one file descriptor (RAII, move-only). Every function returns a
// Status that names the call, the address and errno's text; none raises a
// signal (the backend writes with MSG_NOSIGNAL). Thread-compatible.
#ifndef TAGI_WORKER_COLLECTIVE_TCP_SOCKET_H_
#define TAGI_WORKER_COLLECTIVE_TCP_SOCKET_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace tagi::ring_internal {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { Reset(); }
  Fd(Fd&& other) noexcept : fd_(other.Release()) {}
  Fd& operator=(Fd&& other) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release();
  void Reset();

 private:
  int fd_ = -1;
};

// "<what>: <strerror(err)>" with the code errno suggests (Unavailable for
// refused, reset or unreachable peers; Internal otherwise).
absl::Status ErrnoStatus(int err, const std::string& what);

// A TCP listener on host (a numeric address or a name that resolves) with
// an OS-chosen port, non-blocking, with the ring's socket options already
// set so that accepted sockets inherit them.
struct Listener {
  Fd fd;
  std::string address;  // "host:port" to publish; "[v6]:port" for IPv6
};
absl::StatusOr<Listener> Listen(const std::string& host);

// Splits "host:port" or "[v6]:port"; InvalidArgument for anything else.
absl::Status ParseHostPort(const std::string& address, std::string* host, uint16_t* port);

// The numeric address of this host's interface that routes to "host:port"
// (the source address a connection there would use): what a worker
// advertises to its peers when it is not told. No packet is sent (a UDP
// socket is connected, which only looks up the route). InvalidArgument for
// a malformed or unresolvable address; the OS's error when no route exists.
absl::StatusOr<std::string> LocalAddressTowards(const std::string& address);

// Starts a non-blocking connect to "host:port"; completion is signalled by
// POLLOUT and checked with FinishConnect.
absl::StatusOr<Fd> StartConnect(const std::string& address);
absl::Status FinishConnect(int fd, const std::string& address);

// Accepts one pending connection, non-blocking with the ring's options;
// an invalid Fd when none is pending.
absl::StatusOr<Fd> AcceptOne(int listen_fd);

// TCP_NODELAY, large send and receive buffers, O_NONBLOCK.
absl::Status ConfigureSocket(int fd);

// Milliseconds for poll() until `deadline`, rounded up, at least 0.
int PollTimeoutMs(absl::Time deadline);

}  // namespace tagi::ring_internal

#endif  // TAGI_WORKER_COLLECTIVE_TCP_SOCKET_H_
