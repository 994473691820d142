// The ring backend of Collective: CPU collectives over plain TCP, written
// for low latency on small and medium buffers (a TAGI step all-reduces
// about 0.7 MB).
//
// CreateRingCollective rendezvouses through a tagi::Store (every rank of
// the group calls it with the same store scope, e.g. a PrefixStore on
// JobStorePrefix(job, generation)) and connects each rank to its ring
// neighbours: one TCP link to the successor (rank + 1) % world and one
// from the predecessor. Both ends of a link check each other's identity
// (rank, world and a random group id from rank 0), so a stray or stale
// connection to a listener is closed without harm. See ring_bootstrap.h.
//
// Connecting is bounded by options.connect_timeout, end to end. Errors:
// InvalidArgument for bad arguments or an unusable hostname;
// DeadlineExceeded when some rank did not show up (or connect) in time;
// Unavailable when the successor refused, dropped or misidentified the
// link; the store's own error when it fails.
//
// The returned Collective honours collective.h, with these specifics:
//  - Algorithms: AllReduceSum is a ring reduce-scatter then all-gather,
//    Broadcast is pipelined along the ring from the root, Barrier is an
//    all-reduce of `world` floats (every rank's arrival reaches every
//    rank). All of it runs in the calling thread: non-blocking sockets,
//    poll() on both links at once (full duplex), no helper threads, no
//    allocation per call beyond a reusable receive buffer.
//  - Sums: every rank ends with bit-identical results (each element is
//    reduced once, on one rank, then copied). With two ranks each element
//    is a + b, bit-identical to the in-process fake; with more, the order
//    of additions differs from the fake's.
//  - Timeouts: `timeout` bounds the whole call; a call that has not
//    finished by then returns DeadlineExceeded (the message says how many
//    bytes moved each way).
//  - Failures: a peer that closes or resets its link (process died,
//    collective destroyed or aborted) fails the call with Aborted as soon
//    as the socket reports it. A predecessor making a different call (kind,
//    element count, root or sequence number, all checked on the wire) is
//    FailedPrecondition. On any failure this rank shuts its links down, so
//    its neighbours fail promptly too, and so on around the ring. Errors
//    are sticky: later calls return Aborted.
//  - Abort(), from any thread: later calls return Aborted at once and a
//    call blocked in another thread returns Aborted within milliseconds
//    (an eventfd in its poll set; both links are shut down, which the
//    neighbours see at once). Abort() must not race with the destructor.
//  - Empty buffers move no payload but still exchange the call header, so
//    they return once the predecessor has made the same call.
//  - World 1: calls complete at once (a bad Broadcast root is still
//    InvalidArgument, and sticky).
//  - SIGPIPE is never raised (MSG_NOSIGNAL).
// The object owns its sockets; destroying it closes them (peers see the
// loss).
#ifndef TAGI_WORKER_COLLECTIVE_TCP_RING_COLLECTIVE_H_
#define TAGI_WORKER_COLLECTIVE_TCP_RING_COLLECTIVE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/store.h"
#include "worker/collective/collective.h"

namespace tagi {

using RingOptions = GroupOptions;

// REQUIRES: world >= 1, 0 <= rank < world (else InvalidArgument); `store`
// only needs to outlive this call.
absl::StatusOr<std::unique_ptr<Collective>> CreateRingCollective(Store& store, int rank, int world,
                                                                 const RingOptions& options);

}  // namespace tagi

#endif  // TAGI_WORKER_COLLECTIVE_TCP_RING_COLLECTIVE_H_
