// Collective: the communication a data-parallel step needs, behind one
// small interface with Gloo (CPU, TCP), NCCL (GPU) and in-process (tests)
// implementations.
//
// Every call is collective: all ranks of the group make the same calls in
// the same order with the same sizes. Every call has a timeout: when the
// peers do not all arrive in time it returns DeadlineExceeded instead of
// hanging. Errors are sticky: after any failed call, or after Abort(), the
// object only returns Aborted; the caller builds a new group (a new
// generation). Not thread-safe except Abort(), which another thread may call
// to make a call in progress return as soon as the backend allows.
#ifndef TAGI_WORKER_COLLECTIVE_COLLECTIVE_H_
#define TAGI_WORKER_COLLECTIVE_COLLECTIVE_H_

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/collective/wire_precision.h"

namespace tagi {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  // Element-wise sum over all ranks, in place.
  virtual absl::Status AllReduceSum(std::span<float> data, absl::Duration timeout) = 0;
  // AllReduceSum with the values rounded to `wire` while they travel
  // (wire_precision.h: float accumulation, the same bits on every rank).
  // kFp32 is AllReduceSum; backends without 16-bit wires return
  // Unimplemented (and stay usable).
  virtual absl::Status AllReduceSumOnWire(std::span<float> data, WirePrecision wire,
                                          absl::Duration timeout);
  // Copies root's data to every rank.
  virtual absl::Status Broadcast(std::span<float> data, int root, absl::Duration timeout) = 0;
  virtual absl::Status Barrier(absl::Duration timeout) = 0;
  virtual void Abort() = 0;
  // Whether AllReduceSum and Broadcast take spans in GPU memory (NCCL);
  // the others take host memory only.
  virtual bool AcceptsDeviceMemory() const { return false; }
  // AllReduceSumOnWire of a span in GPU memory whose values are complete
  // once the device reaches `ready`, an event (cudaEvent_t, opaque here)
  // recorded on another stream of the same GPU: the collective's stream
  // waits for it on the device, and the calling thread does not. A null
  // `ready` is AllReduceSumOnWire. Backends that take no device memory
  // return Unimplemented for a non-null `ready` (and stay usable).
  virtual absl::Status AllReduceSumAfter(std::span<float> data, void* ready, WirePrecision wire,
                                         absl::Duration timeout);
};

// How a rank joins a group over TCP (the Gloo and ring backends).
struct GroupOptions {
  std::string hostname = "127.0.0.1";  // address to bind and advertise
  absl::Duration connect_timeout = absl::Seconds(30);
};

// InvalidArgument, prefixed with `backend`, unless world >= 1,
// 0 <= rank < world, connect_timeout > 0 and hostname is set.
absl::Status ValidateGroupArgs(const char* backend, int rank, int world,
                               const GroupOptions& options);

// A failure that one peer caused (it closed or reset its link in the middle
// of a call, or sent a call out of step) carries that peer's rank as a
// payload, so that the worker can tell the coordinator which rank ended the
// generation (FinishJobRequest.suspect_rank). A timeout names nobody: a
// slow rank and a slow link look alike.
absl::Status WithPeerRank(absl::Status st, int rank);
std::optional<int> PeerRankOf(const absl::Status& st);

// `st` with "where: " before its message; its payloads are kept.
absl::Status WithContext(const absl::Status& st, std::string_view where);

}  // namespace tagi

#endif  // TAGI_WORKER_COLLECTIVE_COLLECTIVE_H_
