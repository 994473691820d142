#include "worker/collective/tcp/ring_transfer.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "worker/collective/collective.h"
#include "worker/collective/tcp/socket.h"

namespace tagi::ring_internal {
namespace {

size_t TotalBytes(const std::vector<Segment>& segments, size_t element) {
  size_t total = 0;
  for (const Segment& s : segments) total += s.count * element;
  return total;
}

// Largest piece moved by one send or recv call: small enough that sending
// and receiving interleave on large buffers (what arrives can be forwarded
// while the rest is in flight), large enough that loopback runs at full
// speed (on loopback, 64 KiB pieces made 4 MiB all-reduces slower).
constexpr size_t kMaxIoBytes = size_t{1} << 20;

// dst[i] = src[i] + dst[i]; the buffers never overlap (src is scratch).
void AddInto(float* __restrict dst, const float* __restrict src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = src[i] + dst[i];
}

bool WouldBlock(int err) { return err == EAGAIN || err == EWOULDBLOCK || err == EINTR; }

bool PeerGone(int err) { return err == EPIPE || err == ECONNRESET || err == ECONNABORTED; }

// One call's progress in both directions. Cursors: a segment index and the
// bytes done in it; zero-length segments are skipped.
class Mover {
 public:
  Mover(const Links& links, const Plan& plan, Scratch& scratch)
      : links_(links),
        plan_(plan),
        narrow_(plan.wire != WirePrecision::kFp32),
        element_(WireBytes(plan.wire)),
        inv_scale_(1.0f / plan.scale),
        scratch_(scratch.recv),
        stage_(scratch.send),
        header_out_(plan.header.Encode()),
        send_total_(TotalBytes(plan.send, element_)),
        recv_total_(TotalBytes(plan.recv, element_)) {
    // Floats that wait to be added in, or (16-bit wires) every segment's
    // codes, which wait to be widened.
    size_t need = 0;
    for (const Segment& s : plan.recv) {
      if (s.reduce || narrow_) need = std::max(need, s.count);
    }
    if (narrow_) need = (need + 1) / 2;
    if (scratch_.size() < need) scratch_.resize(need);
    if (narrow_) {
      size_t most = 0;
      for (const Segment& s : plan.send) most = std::max(most, s.count);
      if (stage_.size() < most) stage_.resize(most);
    }
    SkipEmpty(plan_.send, send_seg_, send_off_);
    SkipEmpty(plan_.recv, recv_seg_, recv_off_);
  }

  absl::Status Run(absl::Time deadline) {
    for (;;) {
      bool progress = false;
      if (!send_finished()) {
        auto sent = SendSome();
        if (!sent.ok()) return sent.status();
        progress = *sent;
      }
      if (!recv_finished()) {
        auto received = RecvSome();
        if (!received.ok()) return received.status();
        progress = progress || *received;
      }
      if (send_finished() && recv_finished()) return absl::OkStatus();
      if (!progress) {
        if (auto st = Wait(deadline); !st.ok()) return st;
      }
    }
  }

 private:
  size_t Bytes(const Segment& s) const { return s.count * element_; }

  void SkipEmpty(const std::vector<Segment>& segments, size_t& seg, size_t& off) const {
    while (seg < segments.size() && off == Bytes(segments[seg])) {
      ++seg;
      off = 0;
    }
  }

  bool header_sent() const { return header_sent_ == CallHeader::kBytes; }
  bool send_finished() const { return header_sent() && sent_ == send_total_; }
  bool recv_finished() const { return header_got_ == CallHeader::kBytes && done_ == recv_total_; }
  size_t send_ready() const { return std::min(send_total_, plan_.send_ready_at_start + done_); }
  bool can_send() const { return !header_sent() || sent_ < send_ready(); }

  // Returns whether bytes moved.
  absl::StatusOr<bool> SendSome() {
    iovec iov[2];
    int n = 0;
    if (!header_sent()) {
      iov[n++] = {header_out_.data() + header_sent_, CallHeader::kBytes - header_sent_};
    }
    const size_t ready = send_ready();
    if (sent_ < ready) {
      const Segment& s = plan_.send[send_seg_];
      std::byte* base = reinterpret_cast<std::byte*>(s.data);
      if (narrow_) {
        // Codes of the segment's ready elements (whole elements: what is
        // ready is always a multiple of the element size).
        const size_t segment_ready = std::min(Bytes(s), ready - (sent_ - send_off_)) / element_;
        if (staged_ < segment_ready) {
          NarrowTo16(plan_.wire, s.data + staged_, plan_.scale, stage_.data() + staged_,
                     segment_ready - staged_);
          staged_ = segment_ready;
        }
        base = reinterpret_cast<std::byte*>(stage_.data());
      }
      const size_t len = std::min({Bytes(s) - send_off_, ready - sent_, kMaxIoBytes});
      iov[n++] = {base + send_off_, len};
    }
    if (n == 0) return false;
    msghdr msg = {};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<size_t>(n);
    const ssize_t k = ::sendmsg(links_.successor_fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k < 0) {
      if (WouldBlock(errno)) return false;
      if (PeerGone(errno)) return Lost("successor", links_.successor_rank, "reset");
      return ErrnoStatus(errno, "send to the successor");
    }
    size_t left = static_cast<size_t>(k);
    const size_t h = std::min(left, CallHeader::kBytes - header_sent_);
    header_sent_ += h;
    left -= h;
    send_off_ += left;
    sent_ += left;
    const size_t seg = send_seg_;
    SkipEmpty(plan_.send, send_seg_, send_off_);
    if (send_seg_ != seg) staged_ = 0;
    return true;
  }

  absl::StatusOr<bool> RecvSome() {
    if (header_got_ < CallHeader::kBytes) {
      const ssize_t k = Recv(header_in_.data() + header_got_, CallHeader::kBytes - header_got_);
      if (k < 0) return Failure();
      header_got_ += static_cast<size_t>(k);
      if (header_got_ < CallHeader::kBytes) return k > 0;
      std::string why;
      if (!CallHeader::Matches(header_in_, plan_.header, &why)) {
        return WithPeerRank(
            absl::FailedPreconditionError(absl::StrFormat(
                "ranks are out of step with predecessor rank %d: %s", links_.predecessor_rank,
                why)),
            links_.predecessor_rank);
      }
      return true;
    }
    const Segment& s = plan_.recv[recv_seg_];
    std::byte* dst = s.reduce || narrow_ ? reinterpret_cast<std::byte*>(scratch_.data())
                                         : reinterpret_cast<std::byte*>(s.data);
    const ssize_t k = Recv(dst + recv_off_, std::min(Bytes(s) - recv_off_, kMaxIoBytes));
    if (k <= 0) return k == 0 ? absl::StatusOr<bool>(false) : Failure();
    recv_off_ += static_cast<size_t>(k);
    size_t processed = recv_off_;
    if (narrow_) {
      // Whole codes only, widened (and added) into the float buffer.
      const size_t end = recv_off_ / element_;
      const size_t begin = reduced_ / element_;
      const uint16_t* codes = reinterpret_cast<const uint16_t*>(scratch_.data()) + begin;
      if (s.reduce) {
        WidenAddFrom16(plan_.wire, codes, inv_scale_, s.data + begin, end - begin);
        if (s.keep_rounded) {
          RoundThrough16(plan_.wire, plan_.scale, inv_scale_, s.data + begin, end - begin);
        }
      } else {
        WidenFrom16(plan_.wire, codes, inv_scale_, s.data + begin, end - begin);
      }
      reduced_ = end * element_;
      processed = reduced_;
    } else if (s.reduce) {
      // Whole floats only: a float split across two reads waits for its rest.
      const size_t end = recv_off_ / sizeof(float);
      const size_t begin = reduced_ / sizeof(float);
      AddInto(s.data + begin, scratch_.data() + begin, end - begin);
      reduced_ = end * sizeof(float);
      processed = reduced_;
    }
    done_ = finished_segments_ + processed;
    if (recv_off_ == Bytes(s)) {
      finished_segments_ += Bytes(s);
      recv_off_ = 0;
      reduced_ = 0;
      ++recv_seg_;
      SkipEmpty(plan_.recv, recv_seg_, recv_off_);
    }
    return true;
  }

  // recv() from the predecessor: bytes read, 0 when none are pending, -1
  // after an error or end of stream (its status left in failure_).
  ssize_t Recv(std::byte* dst, size_t len) {
    const ssize_t k = ::recv(links_.predecessor_fd, dst, len, MSG_DONTWAIT);
    if (k > 0) return k;
    if (k < 0 && WouldBlock(errno)) return 0;
    if (k == 0 || PeerGone(errno)) {
      failure_ = Lost("predecessor", links_.predecessor_rank, "closed");
    } else {
      failure_ = ErrnoStatus(errno, "recv from the predecessor");
    }
    return -1;
  }
  absl::Status Failure() const { return failure_; }

  absl::Status Lost(const char* who, int rank, const char* what) const {
    return WithPeerRank(
        absl::AbortedError(absl::StrFormat("%s rank %d %s its link in the middle of a call "
                                           "(sent %d of %d bytes, received %d of %d)",
                                           who, rank, what, sent_, send_total_, done_,
                                           recv_total_)),
        rank);
  }

  // The successor never writes during calls: readable means it closed.
  absl::Status CheckSuccessor() const {
    std::byte b;
    const ssize_t k = ::recv(links_.successor_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k > 0) return absl::FailedPreconditionError("the successor sent bytes on the ring link");
    if (k < 0 && WouldBlock(errno)) return absl::OkStatus();
    if (k == 0 || PeerGone(errno)) return Lost("successor", links_.successor_rank, "closed");
    return ErrnoStatus(errno, "checking the successor link");
  }

  absl::Status Wait(absl::Time deadline) {
    if (absl::Now() >= deadline) return TimedOut();
    pollfd fds[3] = {
        {send_finished() ? -1 : links_.successor_fd,
         static_cast<short>(POLLIN | (can_send() ? POLLOUT : 0)), 0},
        {recv_finished() ? -1 : links_.predecessor_fd, POLLIN, 0},
        {links_.wake_fd, POLLIN, 0},
    };
    const int ready = ::poll(fds, 3, PollTimeoutMs(deadline));
    if (ready < 0) return errno == EINTR ? absl::OkStatus() : ErrnoStatus(errno, "poll");
    if (fds[2].revents != 0) return absl::AbortedError("collective aborted (Abort() was called)");
    if (ready == 0 && absl::Now() >= deadline) return TimedOut();
    if ((fds[0].revents & (POLLIN | POLLHUP | POLLERR)) != 0) return CheckSuccessor();
    return absl::OkStatus();
  }

  absl::Status TimedOut() const {
    return absl::DeadlineExceededError(absl::StrFormat(
        "timed out: sent %d of %d bytes to successor rank %d, received %d of %d from "
        "predecessor rank %d",
        sent_, send_total_, links_.successor_rank, done_, recv_total_, links_.predecessor_rank));
  }

  const Links& links_;
  const Plan& plan_;
  const bool narrow_;     // a 16-bit wire
  const size_t element_;  // bytes per element on the wire
  const float inv_scale_;
  std::vector<float>& scratch_;
  std::vector<uint16_t>& stage_;
  size_t staged_ = 0;  // elements of the current send segment in stage_
  CallHeader::Bytes header_out_;
  CallHeader::Bytes header_in_{};
  const size_t send_total_;
  const size_t recv_total_;
  size_t header_sent_ = 0;
  size_t header_got_ = 0;
  size_t send_seg_ = 0, send_off_ = 0, sent_ = 0;
  size_t recv_seg_ = 0, recv_off_ = 0, reduced_ = 0;
  size_t finished_segments_ = 0;  // bytes of the receive segments completed
  size_t done_ = 0;               // bytes received and, where due, reduced
  absl::Status failure_;
};

}  // namespace

absl::Status RunTransfer(const Links& links, const Plan& plan, Scratch& scratch,
                         absl::Time deadline) {
  Mover mover(links, plan, scratch);
  return mover.Run(deadline);
}

}  // namespace tagi::ring_internal
