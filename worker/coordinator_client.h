// The worker's side of the Cluster service over gRPC: CoordinatorApi
// (coordinator_api.h) with deadlines and absl::Status results, the session
// stream, and a tagi::Store over the coordinator's job-scoped key-value
// store (what Gloo's rendezvous and the NCCL unique id use), on any
// CoordinatorApi. Thread-safe (gRPC stubs are).
#ifndef TAGI_WORKER_COORDINATOR_CLIENT_H_
#define TAGI_WORKER_COORDINATOR_CLIENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/grpc_util.h"
#include "absl/synchronization/mutex.h"
#include "common/store.h"
#include "tagi/v1/cluster.grpc.pb.h"
#include "worker/coordinator_api.h"

namespace tagi {

class CoordinatorClient final : public CoordinatorApi {
 public:
  // `rpc_timeout` bounds every call that does not wait on purpose.
  // `security`: TLS and per-call metadata (the join token), grpc_util.h.
  CoordinatorClient(const std::string& target, absl::Duration rpc_timeout,
                    const ClientSecurity& security = {});

  const std::string& target() const { return target_; }

  // The credentials, as metadata on `ctx` (the session stream's context,
  // which the caller makes).
  void AddCredentials(grpc::ClientContext* ctx) const;
  // The worker's session stream; `ctx` (from MakeClientContext without a
  // deadline: the stream lives as long as the worker) outlives it.
  using SessionStream =
      grpc::ClientReaderWriter<tagi::v1::SessionMessage, tagi::v1::SessionDirective>;
  std::unique_ptr<SessionStream> OpenSession(grpc::ClientContext* ctx);

  // CoordinatorApi. A re-registration keeps its id only with the
  // credentials the last Register returned.
  absl::StatusOr<tagi::v1::RegisterResponse> Register(
      const tagi::v1::RegisterRequest& req) override;
  void ClearCredentials() override;
  absl::StatusOr<tagi::v1::RendezvousResponse> Rendezvous(const std::string& worker_id,
                                                          absl::Duration wait) override;
  absl::Status UploadModel(const tagi::v1::UploadModelRequest& header,
                           const std::string& bytes) override;
  absl::Status UploadSnapshot(const tagi::v1::SnapshotChunk& header,
                              const std::string& bytes) override;
  absl::StatusOr<std::string> DownloadSnapshot(const tagi::v1::DownloadSnapshotRequest& req,
                                               size_t max_bytes) override;
  absl::Status FinishJob(const tagi::v1::FinishJobRequest& req) override;
  absl::Status StoreSet(const std::string& job, uint64_t gen, const std::string& key,
                        const std::string& value) override;
  absl::StatusOr<std::string> StoreGet(const std::string& job, uint64_t gen,
                                       const std::string& key, absl::Duration wait) override;
  absl::Status StoreWait(const std::string& job, uint64_t gen,
                         const std::vector<std::string>& keys, absl::Duration wait) override;
  absl::StatusOr<int64_t> StoreAdd(const std::string& job, uint64_t gen, const std::string& key,
                                   int64_t delta) override;

 private:
  // MakeClientContext with the credentials.
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;

  const std::string target_;
  const absl::Duration rpc_timeout_;
  std::unique_ptr<tagi::v1::Cluster::Stub> stub_;
  mutable absl::Mutex mu_;
  std::string worker_id_ ABSL_GUARDED_BY(mu_);
  std::string secret_ ABSL_GUARDED_BY(mu_);
};

// A Store whose keys live under (job, generation) on the coordinator. Long
// waits are split into polls of at most the coordinator's long-poll cap.
class CoordinatorStore final : public Store {
 public:
  CoordinatorStore(CoordinatorApi& client, std::string job_id, uint64_t generation)
      : client_(client), job_(std::move(job_id)), gen_(generation) {}

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

 private:
  CoordinatorApi& client_;
  const std::string job_;
  const uint64_t gen_;
};

}  // namespace tagi

#endif  // TAGI_WORKER_COORDINATOR_CLIENT_H_
