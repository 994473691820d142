// The NCCL backend of Collective: GPU all-reduce between the ranks of one
// job attempt, one GPU per rank.
//
// Bootstrap: rank 0 calls ncclGetUniqueId and puts the id into the store
// under kNcclUniqueIdKey (every rank passes the same store scope: the
// coordinator's store of the job and generation); the other ranks wait for
// it until options.connect_timeout. The communicator is created
// non-blocking (ncclCommInitRankConfig with blocking = 0) and polled with
// ncclCommGetAsyncError until it is ready or the same deadline passes.
//
// The returned Collective honours collective.h, with these specifics:
//  - Memory: AcceptsDeviceMemory() is true. A span in device memory of the
//    rank's GPU is reduced in place; a span in host memory is staged
//    through pinned and device scratch buffers (small control sums, the
//    barrier).
//  - Calls run on the collective's own stream; the caller makes sure that
//    a device span's contents are complete before the call (the CUDA
//    engine synchronises its stream in BeginReduce). When a call returns
//    OK the result is in place.
//  - Waiting never blocks in the driver: the calling thread polls the
//    stream's event and ncclCommGetAsyncError. A call that has not finished
//    by its timeout aborts the communicator (ncclCommAbort) and returns
//    DeadlineExceeded; an asynchronous NCCL error (a peer died, a network
//    error) aborts it and returns Aborted with NCCL's message.
//  - Abort(), from any thread: sets a flag that the polling call in
//    progress sees within about a millisecond; it then calls ncclCommAbort
//    and returns Aborted. Later calls return Aborted at once. Abort() must
//    not race with the destructor.
//  - Errors are sticky (later calls return Aborted).
//  - Destruction finalises the communicator (bounded by a few seconds, then
//    ncclCommAbort), or aborts it at once after a failure.
//  - Several ranks on one GPU are not supported by NCCL (it reports a
//    duplicate GPU); jobs that share a GPU use the ring or Gloo backend.
// In a build without NCCL, CreateNcclCollective is FailedPrecondition.
#ifndef TAGI_WORKER_COLLECTIVE_NCCL_NCCL_COLLECTIVE_H_
#define TAGI_WORKER_COLLECTIVE_NCCL_NCCL_COLLECTIVE_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/store.h"
#include "worker/collective/collective.h"

namespace tagi {

// Where rank 0 publishes the NCCL unique id (128 raw bytes).
inline constexpr char kNcclUniqueIdKey[] = "nccl/unique_id";

struct NcclOptions {
  int device = 0;  // the CUDA ordinal this rank uses
  absl::Duration connect_timeout = absl::Seconds(30);
};

// Whether this build has the NCCL backend.
bool NcclCompiledIn();

// InvalidArgument for a bad rank, world, device or timeout; DeadlineExceeded
// when the id or a peer does not arrive in time; FailedPrecondition when the
// build has no NCCL or the GPU cannot be used; the store's own errors.
// `store` only needs to outlive this call.
absl::StatusOr<std::unique_ptr<Collective>> CreateNcclCollective(Store& store, int rank, int world,
                                                                 const NcclOptions& options);

}  // namespace tagi

#endif  // TAGI_WORKER_COLLECTIVE_NCCL_NCCL_COLLECTIVE_H_
