// CoordinatorApi: what the worker runtime asks of its coordinator, as an
// interface. Production implements it over gRPC (CoordinatorClient,
// coordinator_client.h); the unit tests of the agent and the job runner
// implement it in process (tests/worker/fake_coordinator.h) and so drive
// recoveries, stop votes, elastic re-formations and a lost coordinator
// without a server.
//
// The session stream is not here: the session has its own seam
// (session_stream.h). Every call is bounded by the implementation's
// deadline; the long polls (Rendezvous, StoreGet, StoreWait) by `wait` on
// top. Implementations are thread-safe: rank 0's snapshot uploader calls
// from its own thread while training calls the store.
#ifndef TAGI_WORKER_COORDINATOR_API_H_
#define TAGI_WORKER_COORDINATOR_API_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tagi/v1/cluster.pb.h"

namespace tagi {

class CoordinatorApi {
 public:
  virtual ~CoordinatorApi() = default;

  // On success the implementation keeps the worker's credentials (id and
  // secret) and sends them with every later call, Register included.
  virtual absl::StatusOr<tagi::v1::RegisterResponse> Register(
      const tagi::v1::RegisterRequest& req) = 0;
  // Forgets the credentials: the next Register gets a new id.
  virtual void ClearCredentials() = 0;
  // Long poll: waits up to `wait` for an assignment.
  virtual absl::StatusOr<tagi::v1::RendezvousResponse> Rendezvous(const std::string& worker_id,
                                                                  absl::Duration wait) = 0;
  virtual absl::Status UploadModel(const tagi::v1::UploadModelRequest& header,
                                   const std::string& bytes) = 0;
  // `header` names worker, job, generation and global_step. Unavailable or
  // DeadlineExceeded: the coordinator was not reached (try again); Aborted:
  // it ended this generation (the message says why).
  virtual absl::Status UploadSnapshot(const tagi::v1::SnapshotChunk& header,
                                      const std::string& bytes) = 0;
  // The snapshot of the caller's generation; DataLoss for a malformed
  // stream or one longer than `max_bytes`.
  virtual absl::StatusOr<std::string> DownloadSnapshot(
      const tagi::v1::DownloadSnapshotRequest& req, size_t max_bytes) = 0;
  virtual absl::Status FinishJob(const tagi::v1::FinishJobRequest& req) = 0;

  // The key-value store of one job attempt (job, generation). A long wait
  // is the caller's business: CoordinatorStore splits it into polls.
  virtual absl::Status StoreSet(const std::string& job, uint64_t gen, const std::string& key,
                                const std::string& value) = 0;
  virtual absl::StatusOr<std::string> StoreGet(const std::string& job, uint64_t gen,
                                               const std::string& key, absl::Duration wait) = 0;
  virtual absl::Status StoreWait(const std::string& job, uint64_t gen,
                                 const std::vector<std::string>& keys, absl::Duration wait) = 0;
  virtual absl::StatusOr<int64_t> StoreAdd(const std::string& job, uint64_t gen,
                                           const std::string& key, int64_t delta) = 0;
};

}  // namespace tagi

#endif  // TAGI_WORKER_COORDINATOR_API_H_
