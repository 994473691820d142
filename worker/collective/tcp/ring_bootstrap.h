// Internal to the ring backend: builds the two TCP links of one rank of a
// ring through a tagi::Store.
//
// Keys (under whatever scope the caller's store has):
//   ring/group       a random 64-bit group id, set by rank 0;
//   ring/addr/<r>    "host:port" of rank r's listener.
// Each rank listens on an OS-chosen port, publishes it, connects to its
// successor (rank + 1) % world and accepts its predecessor, all in the
// calling thread with one poll() loop (so the two halves cannot deadlock
// each other). Both ends prove who they are with a Hello (role, rank,
// world, group id); a connection whose hello is wrong, incomplete or
// garbage is closed and the rank keeps waiting for the right one. The
// listener is closed once the predecessor is in, so later strays are
// refused by the kernel. The successor's link stays watched until the
// predecessor is in: a successor that gives up (closes it) ends the wait
// at once, Unavailable, instead of at the deadline.
#ifndef TAGI_WORKER_COLLECTIVE_TCP_RING_BOOTSTRAP_H_
#define TAGI_WORKER_COLLECTIVE_TCP_RING_BOOTSTRAP_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/store.h"
#include "worker/collective/tcp/socket.h"

namespace tagi::ring_internal {

struct RingLinks {
  Fd to_successor;      // this rank writes the call stream here
  Fd from_predecessor;  // and reads its predecessor's from here
};

// REQUIRES: world >= 2, 0 <= rank < world (checked by the caller).
// Errors: InvalidArgument for an unusable hostname; DeadlineExceeded when
// a key or a peer does not show up by `deadline`; Unavailable when the
// successor refuses or drops the connection or answers with the wrong
// identity; the store's own error when it fails.
absl::StatusOr<RingLinks> ConnectRing(Store& store, int rank, int world,
                                      const std::string& hostname, absl::Time deadline);

}  // namespace tagi::ring_internal

#endif  // TAGI_WORKER_COLLECTIVE_TCP_RING_BOOTSTRAP_H_
