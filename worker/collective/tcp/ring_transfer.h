// Internal to the ring backend: moves one collective call's bytes over the
// two links of a rank, full duplex, in the calling thread.
//
// A call is described as two streams of float segments: what this rank
// sends to its successor and what it receives from its predecessor (each
// preceded by a CallHeader on the wire). Sending is gated by receiving:
// `send_ready_at_start` bytes of the send stream are ready at once, and
// every further byte that arrives (and, for a reducing segment, has been
// added in) makes one more ready. That one rule pipelines both the ring
// all-reduce (what a rank forwards is what it just reduced or received)
// and the ring broadcast (forward what arrived), at byte granularity.
//
// RunTransfer uses non-blocking sockets and poll() on both links and a
// wake-up descriptor; it allocates nothing except growing `scratch`.
// Not thread-safe.
#ifndef TAGI_WORKER_COLLECTIVE_TCP_RING_TRANSFER_H_
#define TAGI_WORKER_COLLECTIVE_TCP_RING_TRANSFER_H_

#include <cstddef>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/collective/tcp/wire.h"
#include "worker/collective/wire_precision.h"

namespace tagi::ring_internal {

struct Segment {
  float* data;
  size_t count;
  // Receive only: data[i] = incoming[i] + data[i] instead of overwriting.
  bool reduce = false;
  // Receive only, 16-bit wires: after the addition, data[i] keeps the
  // wire's rounding of itself (the final sum this rank then sends on, so
  // that it holds what every other rank receives).
  bool keep_rounded = false;
};

struct Plan {
  CallHeader header;          // sent to the successor, expected from the predecessor
  std::vector<Segment> send;  // to the successor, in order
  std::vector<Segment> recv;  // from the predecessor, in order
  size_t send_ready_at_start = 0;  // bytes on the wire
  // The payload's format: floats, or 16-bit codes of value * scale
  // (wire_precision.h), converted as they are sent and received.
  WirePrecision wire = WirePrecision::kFp32;
  float scale = 1.0f;

  void Clear(const CallHeader& h) {
    header = h;
    send.clear();
    recv.clear();
    send_ready_at_start = 0;
    wire = static_cast<WirePrecision>(h.wire);
    scale = 1.0f;
  }
};

// Reusable buffers of a rank's calls: received payload waiting to be added
// in (or widened), and 16-bit codes waiting to be sent. Grown, never shrunk.
struct Scratch {
  std::vector<float> recv;
  std::vector<uint16_t> send;
};

struct Links {
  int successor_fd;    // written
  int predecessor_fd;  // read
  int wake_fd;         // readable once the call must stop (Abort)
  int successor_rank;
  int predecessor_rank;
};

// Returns OK once every byte of the plan is sent and received. Errors:
// DeadlineExceeded when `deadline` passes first (the message says how far
// each direction got); Aborted when wake_fd becomes readable or a peer
// closes or resets its link; FailedPrecondition when the predecessor's
// CallHeader differs from plan.header (the ranks are not making the same
// call) or the successor sends bytes it never should; Internal for
// unexpected errors of the OS.
absl::Status RunTransfer(const Links& links, const Plan& plan, Scratch& scratch,
                         absl::Time deadline);

}  // namespace tagi::ring_internal

#endif  // TAGI_WORKER_COLLECTIVE_TCP_RING_TRANSFER_H_
