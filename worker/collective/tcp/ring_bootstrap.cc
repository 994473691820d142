#include "worker/collective/tcp/ring_bootstrap.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "worker/collective/tcp/wire.h"

namespace tagi::ring_internal {
namespace {

// Connections accepted but not yet identified; beyond this many the oldest
// is dropped, so a flood of strays cannot exhaust descriptors.
constexpr size_t kMaxCandidates = 16;

absl::Status Annotate(const absl::Status& st, const std::string& where) {
  return absl::Status(st.code(), absl::StrCat(where, ": ", st.message()));
}

absl::StatusOr<std::string> GetKey(Store& store, const std::string& key, absl::Time deadline) {
  auto value = store.Get(key, std::max(deadline - absl::Now(), absl::ZeroDuration()));
  if (!value.ok()) return Annotate(value.status(), absl::StrCat("waiting for store key ", key));
  return value;
}

absl::StatusOr<uint64_t> AgreeOnGroup(Store& store, int rank, absl::Time deadline) {
  if (rank == 0) {
    std::random_device entropy;
    const uint64_t group = (uint64_t{entropy()} << 32) ^ entropy();
    if (auto st = store.Set("ring/group", absl::StrCat(group)); !st.ok()) return st;
    return group;
  }
  auto text = GetKey(store, "ring/group", deadline);
  if (!text.ok()) return text.status();
  uint64_t group = 0;
  if (!absl::SimpleAtoi(*text, &group)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store key ring/group holds '", *text, "'; expected a decimal 64-bit id"));
  }
  return group;
}

// Reads into `buf` up to its end; false when the peer closed or failed.
bool ReadSome(int fd, Hello::Bytes& buf, size_t& got) {
  const ssize_t n = ::recv(fd, buf.data() + got, buf.size() - got, MSG_DONTWAIT);
  if (n > 0) got += static_cast<size_t>(n);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR));
}

// A fresh socket's send buffer always takes 32 bytes at once.
absl::Status SendHello(int fd, const Hello& hello) {
  const Hello::Bytes bytes = hello.Encode();
  const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(bytes.size())) return absl::OkStatus();
  if (n < 0) return ErrnoStatus(errno, "sending the ring hello");
  return absl::InternalError("ring hello only partly sent");
}

struct Candidate {
  Fd fd;
  Hello::Bytes buf{};
  size_t got = 0;
};

// The poll() loop: one outgoing link being connected and identified, and
// the listener with the connections it accepted, until both links stand.
class Handshake {
 public:
  Handshake(int rank, int world, uint64_t group, Fd listener, std::string succ_address)
      : rank_(rank),
        world_(world),
        group_(group),
        listener_(std::move(listener)),
        succ_address_(std::move(succ_address)) {}

  absl::StatusOr<RingLinks> Run(absl::Time deadline) {
    auto out = StartConnect(succ_address_);
    if (!out.ok()) return out.status();
    links_.to_successor = std::move(*out);
    while (!out_done_ || !links_.from_predecessor.valid()) {
      std::vector<pollfd> fds;
      // Once the successor accepted, its link is still watched: a successor
      // that gives up (its job was cancelled, a peer of its failed) closes
      // it, and waiting on for a predecessor would then only end at the
      // deadline.
      const bool watch = !out_done_ || watching_successor_;
      const int out_fd = watch ? links_.to_successor.get() : -1;
      fds.push_back({out_fd, short(out_connected_ ? POLLIN : POLLOUT), 0});
      fds.push_back({links_.from_predecessor.valid() ? -1 : listener_.get(), POLLIN, 0});
      for (const Candidate& c : candidates_) fds.push_back({c.fd.get(), POLLIN, 0});
      const int ready = ::poll(fds.data(), fds.size(), PollTimeoutMs(deadline));
      if (ready < 0 && errno != EINTR) return ErrnoStatus(errno, "poll");
      if (absl::Now() >= deadline) return TimedOut();  // even if strays keep it busy
      if (fds[0].revents != 0) {
        if (auto st = out_done_ ? CheckSuccessor() : AdvanceOutgoing(); !st.ok()) return st;
      }
      for (size_t i = fds.size() - 1; i >= 2; --i) {
        if (fds[i].revents != 0 && AdvanceCandidate(i - 2)) break;
      }
      if (fds[1].revents != 0 && listener_.valid()) {
        if (auto st = AcceptAll(); !st.ok()) return st;
      }
    }
    return std::move(links_);
  }

 private:
  int succ() const { return (rank_ + 1) % world_; }
  int pred() const { return (rank_ + world_ - 1) % world_; }

  absl::Status AdvanceOutgoing() {
    const int fd = links_.to_successor.get();
    const std::string who = absl::StrFormat("successor rank %d at %s", succ(), succ_address_);
    if (!out_connected_) {
      if (auto st = FinishConnect(fd, succ_address_); !st.ok()) return st;
      out_connected_ = true;
      Hello hello{Hello::kConnect, uint32_t(rank_), uint32_t(world_), group_};
      return Annotate(SendHello(fd, hello), who);
    }
    if (!ReadSome(fd, reply_, reply_got_)) {
      return absl::UnavailableError(absl::StrCat(who, " closed the connection during the hello"));
    }
    if (reply_got_ < reply_.size()) return absl::OkStatus();
    std::string why;
    if (!Hello::Matches(reply_, {Hello::kAccept, uint32_t(succ()), uint32_t(world_), group_},
                        &why)) {
      return absl::UnavailableError(absl::StrCat(who, " is not the expected peer: ", why));
    }
    out_done_ = true;
    return absl::OkStatus();
  }

  // The successor's link after its accept: nothing more comes on it during
  // the bootstrap, so readable means closed (Unavailable) or the stream of
  // a peer already past its own handshake (left for the collective; not
  // watched any more).
  absl::Status CheckSuccessor() {
    char byte;
    const ssize_t n =
        ::recv(links_.to_successor.get(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return absl::UnavailableError(absl::StrFormat(
          "successor rank %d at %s closed its link before the ring formed (it gave up)", succ(),
          succ_address_));
    }
    if (n > 0) watching_successor_ = false;
    return absl::OkStatus();
  }

  // Returns whether candidate i became the predecessor's link.
  bool AdvanceCandidate(size_t i) {
    Candidate& c = candidates_[i];
    if (!ReadSome(c.fd.get(), c.buf, c.got)) {
      candidates_.erase(candidates_.begin() + static_cast<ptrdiff_t>(i));
      return false;
    }
    if (c.got < c.buf.size()) return false;
    std::string why;
    const Hello expected{Hello::kConnect, uint32_t(pred()), uint32_t(world_), group_};
    if (Hello::Matches(c.buf, expected, &why) &&
        SendHello(c.fd.get(), {Hello::kAccept, uint32_t(rank_), uint32_t(world_), group_}).ok()) {
      links_.from_predecessor = std::move(c.fd);
      candidates_.clear();
      listener_.Reset();
      return true;
    }
    last_refusal_ = why;
    candidates_.erase(candidates_.begin() + static_cast<ptrdiff_t>(i));
    return false;
  }

  absl::Status AcceptAll() {
    for (;;) {
      auto fd = AcceptOne(listener_.get());
      if (!fd.ok()) return fd.status();
      if (!fd->valid()) return absl::OkStatus();
      if (candidates_.size() >= kMaxCandidates) candidates_.erase(candidates_.begin());
      candidates_.push_back(Candidate{std::move(*fd)});
    }
  }

  absl::Status TimedOut() const {
    std::string missing;
    if (!out_done_) {
      absl::StrAppendFormat(&missing, " the hello of successor rank %d at %s;", succ(),
                            succ_address_);
    }
    if (!links_.from_predecessor.valid()) {
      absl::StrAppendFormat(&missing, " a connection from predecessor rank %d%s;", pred(),
                            last_refusal_.empty() ? "" : " (refused: " + last_refusal_ + ")");
    }
    return absl::DeadlineExceededError(
        absl::StrCat("ring connect deadline passed; missing", missing));
  }

  const int rank_;
  const int world_;
  const uint64_t group_;
  Fd listener_;
  const std::string succ_address_;
  RingLinks links_;
  bool out_connected_ = false;
  bool out_done_ = false;
  bool watching_successor_ = true;  // after out_done_ (CheckSuccessor)
  Hello::Bytes reply_{};
  size_t reply_got_ = 0;
  std::vector<Candidate> candidates_;
  std::string last_refusal_;
};

}  // namespace

absl::StatusOr<RingLinks> ConnectRing(Store& store, int rank, int world,
                                      const std::string& hostname, absl::Time deadline) {
  auto listener = Listen(hostname);
  if (!listener.ok()) return listener.status();
  if (auto st = store.Set(absl::StrCat("ring/addr/", rank), listener->address); !st.ok()) {
    return Annotate(st, "publishing this rank's address");
  }
  auto group = AgreeOnGroup(store, rank, deadline);
  if (!group.ok()) return group.status();
  auto succ_address = GetKey(store, absl::StrCat("ring/addr/", (rank + 1) % world), deadline);
  if (!succ_address.ok()) return succ_address.status();
  Handshake handshake(rank, world, *group, std::move(listener->fd), *succ_address);
  return handshake.Run(deadline);
}

}  // namespace tagi::ring_internal
