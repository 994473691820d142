// The gRPC faces of the Coordinator: the user-facing Jobs service and the
// worker-facing Cluster service. Each handler checks the protocol version,
// validates sizes, calls the Coordinator and maps the status; none holds a
// lock across anything but the Coordinator's own bounded waits.
// Authentication (when the token sets are not empty): every Jobs RPC needs
// "authorization: Bearer <api token>" metadata, every Cluster RPC
// "tagi-join-token: <join token>"; a call without a valid one is refused
// with UNAUTHENTICATED before it reaches the Coordinator (so it changes
// nothing), and the refusal is logged with the peer and the RPC, never a
// token. Thread-safe (the Coordinator is; the token sets are immutable).
#ifndef TAGI_COORDINATOR_SERVICES_H_
#define TAGI_COORDINATOR_SERVICES_H_

#include <memory>
#include <map>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "common/auth.h"
#include "common/refusal_log.h"
#include "coordinator/coordinator.h"
#include "coordinator/stream_limiter.h"
#include "tagi/v1/cluster.grpc.pb.h"
#include "tagi/v1/jobs.grpc.pb.h"

namespace tagi::coordinator {

// Bytes per DownloadModel chunk.
inline constexpr size_t kModelChunkBytes = 1 << 20;

class JobsService final : public tagi::v1::Jobs::Service {
 public:
  explicit JobsService(Coordinator& c, TokenSet api_tokens = {})
      : c_(c), api_tokens_(std::move(api_tokens)) {}
  grpc::Status Submit(grpc::ServerContext*, const tagi::v1::SubmitJobRequest*,
                      tagi::v1::Job*) override;
  grpc::Status Get(grpc::ServerContext*, const tagi::v1::GetJobRequest*, tagi::v1::Job*) override;
  grpc::Status List(grpc::ServerContext*, const tagi::v1::ListJobsRequest*,
                    tagi::v1::ListJobsResponse*) override;
  grpc::Status Cancel(grpc::ServerContext*, const tagi::v1::CancelJobRequest*,
                      tagi::v1::Job*) override;
  grpc::Status Watch(grpc::ServerContext*, const tagi::v1::WatchJobRequest*,
                     grpc::ServerWriter<tagi::v1::Job>*) override;
  grpc::Status DownloadModel(grpc::ServerContext*, const tagi::v1::DownloadModelRequest*,
                             grpc::ServerWriter<tagi::v1::ModelChunk>*) override;
  grpc::Status ListWorkers(grpc::ServerContext*, const tagi::v1::ListWorkersRequest*,
                           tagi::v1::ListWorkersResponse*) override;
  grpc::Status GetLogs(grpc::ServerContext*, const tagi::v1::GetJobLogsRequest*,
                       tagi::v1::JobLogs*) override;
  // Bounds Watch and DownloadModel streams (keyed by client host); not
  // owned; may be null.
  void set_stream_limiter(StreamLimiter* limiter) { streams_ = limiter; }
  // Rate-limits the log lines of refused calls; not owned; null logs each.
  void set_refusal_log(RefusalLog* log) { refusals_ = log; }

 private:
  grpc::Status Authorize(const grpc::ServerContextBase& ctx, const char* rpc) const;
  Coordinator& c_;
  const TokenSet api_tokens_;
  StreamLimiter* streams_ = nullptr;
  RefusalLog* refusals_ = nullptr;
};

// The worker-facing service. Its long-lived calls are asynchronous
// (gRPC's callback API): a session stream is a reactor that reads the
// worker's heartbeats as they come and writes a directive when the
// coordinator wakes it (or a keep-alive when one ticker thread says it is
// due); a Rendezvous long poll or a store wait is a callback the
// coordinator answers when the event happens or at its deadline. So no
// thread is parked per worker: the threads are gRPC's few plus one
// ticker, whatever the number of workers. The short calls (Register,
// store writes, uploads, FinishJob) stay synchronous; they hold a thread
// only while they run, and uploads are bounded by the stream limiter.
class SessionReactor;
using ClusterServiceBase = tagi::v1::Cluster::WithCallbackMethod_Session<
    tagi::v1::Cluster::WithCallbackMethod_Rendezvous<tagi::v1::Cluster::WithCallbackMethod_StoreGet<
        tagi::v1::Cluster::WithCallbackMethod_StoreWait<tagi::v1::Cluster::Service>>>>;

class ClusterService final : public ClusterServiceBase {
 public:
  // `keepalive`: how often a session stream carries a message to the worker
  // when there is no directive (so a worker notices a silent coordinator).
  ClusterService(Coordinator& c, absl::Duration keepalive, TokenSet join_tokens = {});
  ~ClusterService() override;
  ClusterService(const ClusterService&) = delete;
  ClusterService& operator=(const ClusterService&) = delete;
  grpc::Status Register(grpc::ServerContext*, const tagi::v1::RegisterRequest*,
                        tagi::v1::RegisterResponse*) override;
  grpc::ServerUnaryReactor* Rendezvous(grpc::CallbackServerContext*,
                                       const tagi::v1::RendezvousRequest*,
                                       tagi::v1::RendezvousResponse*) override;
  grpc::Status StoreSet(grpc::ServerContext*, const tagi::v1::StoreSetRequest*,
                        tagi::v1::StoreSetResponse*) override;
  grpc::ServerUnaryReactor* StoreGet(grpc::CallbackServerContext*,
                                     const tagi::v1::StoreGetRequest*,
                                     tagi::v1::StoreGetResponse*) override;
  grpc::ServerUnaryReactor* StoreWait(grpc::CallbackServerContext*,
                                      const tagi::v1::StoreWaitRequest*,
                                      tagi::v1::StoreWaitResponse*) override;
  grpc::Status StoreAdd(grpc::ServerContext*, const tagi::v1::StoreAddRequest*,
                        tagi::v1::StoreAddResponse*) override;
  grpc::ServerBidiReactor<tagi::v1::SessionMessage, tagi::v1::SessionDirective>* Session(
      grpc::CallbackServerContext*) override;
  grpc::Status UploadSnapshot(grpc::ServerContext*, grpc::ServerReader<tagi::v1::SnapshotChunk>*,
                              tagi::v1::UploadSnapshotResponse*) override;
  grpc::Status DownloadSnapshot(grpc::ServerContext*, const tagi::v1::DownloadSnapshotRequest*,
                                grpc::ServerWriter<tagi::v1::SnapshotData>*) override;
  grpc::Status UploadModel(grpc::ServerContext*,
                           grpc::ServerReader<tagi::v1::UploadModelRequest>*,
                           tagi::v1::UploadModelResponse*) override;
  grpc::Status FinishJob(grpc::ServerContext*, const tagi::v1::FinishJobRequest*,
                         tagi::v1::FinishJobResponse*) override;
  // Bounds sessions, uploads and downloads (keyed by worker id): a limiter
  // apart from the API clients'; not owned; may be null. An upload is
  // admitted (Coordinator::AdmitUpload: sender, job, generation, size)
  // after its first message, before any more of its bytes are read.
  void set_stream_limiter(StreamLimiter* limiter) { streams_ = limiter; }
  // Rate-limits the log lines of refused calls; not owned; null logs each.
  void set_refusal_log(RefusalLog* log) { refusals_ = log; }

  // Session streams at once, opened or not: a stream beyond it is refused
  // with RESOURCE_EXHAUSTED. A stream must send its first message within
  // kFirstMessageTimeout (the ticker ends it otherwise).
  void set_max_sessions(size_t n) { max_sessions_ = n; }
  static constexpr absl::Duration kFirstMessageTimeout = absl::Seconds(10);

  // Before the server shuts down: ends every session stream and answers
  // every pending long poll, so that no call waits for the shutdown's
  // deadline. Idempotent.
  void Shutdown();
  // Session streams not yet done.
  size_t OpenSessions();

 private:
  friend class SessionReactor;
  grpc::Status Authorize(const grpc::ServerContextBase& ctx, const char* rpc) const;
  grpc::Status Check(const grpc::ServerContextBase& ctx, const char* rpc) const;
  // Check for a callback call: true (the reactor finished with the refusal)
  // when it is refused.
  bool Refused(const grpc::ServerContextBase& ctx, const char* rpc,
               grpc::ServerUnaryReactor* reactor) const;
  // The worker whose credentials (Register's id and secret, as metadata)
  // the call carries; refused (UNAUTHENTICATED, logged) without valid ones,
  // and PERMISSION_DENIED when `named` (the worker the request names; empty:
  // none) is another worker.
  absl::StatusOr<std::string> CallingWorker(const grpc::ServerContextBase& ctx, const char* rpc,
                                            const std::string& named) const;
  // CallingWorker, and it must hold a rank in the job's generation (the
  // store's calls).
  grpc::Status CheckMemberCall(const grpc::ServerContextBase& ctx, const char* rpc,
                               const std::string& job, uint64_t gen) const;
  // Drops the service's ownership of a reactor that is done.
  void RemoveSession(SessionReactor* reactor);
  void KeepAliveLoop();

  Coordinator& c_;
  const absl::Duration keepalive_;
  const TokenSet join_tokens_;
  StreamLimiter* streams_ = nullptr;
  RefusalLog* refusals_ = nullptr;
  size_t max_sessions_ = 8192;

  absl::Mutex sessions_mu_;
  // Every session reactor from its creation to its OnDone.
  std::map<SessionReactor*, std::shared_ptr<SessionReactor>> sessions_
      ABSL_GUARDED_BY(sessions_mu_);
  bool stopping_ ABSL_GUARDED_BY(sessions_mu_) = false;
  std::thread keepalive_thread_;  // last: starts once the members above exist
};

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_SERVICES_H_
