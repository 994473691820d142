// The Gloo backend of Collective: CPU collectives over TCP.
//
// CreateGlooCollective rendezvouses through a tagi::Store (every rank of
// the group calls it with the same store scope, e.g. a PrefixStore on
// JobStorePrefix(job, generation)), connects a full mesh of TCP pairs with
// Gloo's tcp transport, and returns a Collective that runs gloo::allreduce
// (ring, float sum), gloo::broadcast and gloo::barrier.
//
// Connecting is bounded by options.connect_timeout, end to end: the store
// waits stop at that deadline, and a watchdog fails the half-made TCP pairs
// when it passes. Errors: InvalidArgument for bad arguments or an unusable
// hostname; DeadlineExceeded when some rank did not show up (or connect) in
// time; the store's own error when it fails; Unavailable for a peer that
// refused or dropped the connection; Internal for a Gloo invariant.
//
// The returned Collective honours collective.h, with these specifics:
//  - Timeouts: `timeout` bounds every wait for a peer inside a call (Gloo
//    applies it to each send/receive completion). A call whose peer never
//    arrives returns DeadlineExceeded after about `timeout`; a call that
//    keeps making progress may take longer in total.
//  - Failures: a peer that is gone (process died, collective destroyed or
//    aborted) fails the call with Aborted as soon as its socket reports it.
//    On any failure this rank resets all its connections, so that its
//    peers fail promptly too instead of waiting for their timeouts (a peer
//    that was waiting for the rank that timed out therefore sees Aborted,
//    not DeadlineExceeded). Errors are sticky: later calls return Aborted.
//  - Abort(), from any thread: later calls return Aborted at once, and a
//    call blocked in another thread wakes and returns Aborted within
//    milliseconds, not at its timeout: every connection is reset (the
//    peers' pending calls fail at once too) and every pending wait is
//    failed; see abortable_tcp.h for how and why that is safe in Gloo.
//    Abort() must not race with the destructor.
//  - Buffers of 0 elements complete at once without communication (Gloo
//    itself skips them), but still report a sticky error.
//  - Sums: with two ranks every element is a + b, so results are
//    bit-identical to the in-process fake; with more ranks the ring adds
//    chunks in different orders, but all ranks receive identical bits.
//  - SIGPIPE: Gloo writes without MSG_NOSIGNAL; the backend blocks SIGPIPE
//    in the threads that write to its sockets (the caller, during each
//    call; Gloo's event-loop thread, always), so a reset connection is an
//    error status, never a killed process, whatever the process's SIGPIPE
//    disposition. The caller's signal mask is restored after each call.
// The object owns Gloo's event-loop thread and its sockets; destroying it
// closes them (peers see the loss).
#ifndef TAGI_WORKER_COLLECTIVE_GLOO_GLOO_COLLECTIVE_H_
#define TAGI_WORKER_COLLECTIVE_GLOO_GLOO_COLLECTIVE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/store.h"
#include "worker/collective/collective.h"

namespace tagi {

using GlooOptions = GroupOptions;

// REQUIRES: world >= 1, 0 <= rank < world (else InvalidArgument); `store`
// only needs to outlive this call.
absl::StatusOr<std::unique_ptr<Collective>> CreateGlooCollective(Store& store, int rank, int world,
                                                                 const GlooOptions& options);

}  // namespace tagi

#endif  // TAGI_WORKER_COLLECTIVE_GLOO_GLOO_COLLECTIVE_H_
