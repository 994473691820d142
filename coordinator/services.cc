#include "coordinator/services.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/grpc_util.h"
#include "common/status.h"

namespace tagi::coordinator {
namespace {

// Every handler starts with the token check, then the protocol check.
// Takes one of the stream slots of `key` (an API client's peer string, or
// a worker id) for the rest of the handler, or answers RESOURCE_EXHAUSTED.
#define TAGI_ADMIT_STREAM(limiter, acquire, key)                       \
  std::optional<StreamLimiter::Lease> tagi_stream_lease;               \
  if ((limiter) != nullptr) {                                          \
    auto lease = (limiter)->acquire(key);                              \
    if (!lease.ok()) return ToGrpcStatus(lease.status());              \
    tagi_stream_lease.emplace(std::move(*lease));                      \
  }

#define TAGI_CHECK_PROTOCOL(ctx, rpc)                                       \
  do {                                                                      \
    if (auto st = Authorize(*(ctx), rpc); !st.ok()) return st;              \
    if (auto st = CheckProtocol(*(ctx)); !st.ok()) return ToGrpcStatus(st); \
  } while (0)

// The value of metadata `key`, empty when absent.
std::string Metadata(const grpc::ServerContext& ctx, const char* key) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

// Logs the refusal (through `log` when set: at most one line per client
// host and reason per minute) and answers UNAUTHENTICATED.
grpc::Status Refuse(const grpc::ServerContext& ctx, RefusalLog* log, const char* rpc,
                    const char* why, const std::string& message) {
  LogRefusal(log, "tagi-coordinator", ctx.peer(), absl::StrCat(rpc, ": ", why));
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, message);
}

template <typename T>
grpc::Status Reply(absl::StatusOr<T> result, T* out) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *out = std::move(*result);
  return grpc::Status::OK;
}

absl::Duration Millis(uint32_t ms) { return absl::Milliseconds(ms); }

// Reads the first message of a chunked upload (which names the worker,
// the job and generation, and announces total_bytes); a stream without one
// is InvalidArgument.
template <typename Chunk>
absl::Status ReadFirstChunk(grpc::ServerReader<Chunk>* reader, Chunk& first, const char* what) {
  if (!reader->Read(&first)) {
    return absl::InvalidArgumentError(absl::StrCat("empty ", what, " upload"));
  }
  if (first.data().size() > first.total_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(what, " upload is longer than announced"));
  }
  return absl::OkStatus();
}

// Reads the rest of an upload admitted after its first message: every
// message's data() is appended in order, never past the announced total
// (which the coordinator checked against its limit before this runs).
template <typename Chunk>
absl::StatusOr<std::string> ReadRestOfUpload(grpc::ServerReader<Chunk>* reader,
                                             const Chunk& first, const char* what) {
  const uint64_t total = first.total_bytes();
  std::string bytes = first.data();
  bytes.reserve(std::min<uint64_t>(total, uint64_t{64} << 20));
  Chunk chunk;
  while (reader->Read(&chunk)) {
    if (bytes.size() + chunk.data().size() > total) {
      return absl::InvalidArgumentError(absl::StrCat(what, " upload is longer than announced"));
    }
    bytes += chunk.data();
  }
  if (bytes.size() != total) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s upload ended at %d of %d bytes", what, bytes.size(), total));
  }
  return bytes;
}

// An upload admitted and read whole; the lease holds its stream slot.
template <typename Chunk>
struct Upload {
  Chunk first;
  std::string bytes;
  std::optional<StreamLimiter::Lease> lease;
};

// Reads the first message, takes a slot of the sender's worker id, has the
// coordinator admit the upload (sender, job, generation, size), and only
// then reads the rest.
template <typename Chunk>
absl::StatusOr<Upload<Chunk>> ReceiveUpload(grpc::ServerReader<Chunk>* reader,
                                            StreamLimiter* limiter, Coordinator& c,
                                            Coordinator::UploadKind kind) {
  const char* what = kind == Coordinator::UploadKind::kSnapshot ? "snapshot" : "model";
  Upload<Chunk> up;
  TAGI_RETURN_IF_ERROR(ReadFirstChunk(reader, up.first, what));
  if (limiter != nullptr) {
    TAGI_ASSIGN_OR_RETURN(StreamLimiter::Lease lease, limiter->AcquireKey(up.first.worker_id()));
    up.lease.emplace(std::move(lease));
  }
  TAGI_RETURN_IF_ERROR(c.AdmitUpload(up.first.worker_id(), up.first.job_id(),
                                     up.first.generation(), kind, up.first.total_bytes()));
  TAGI_ASSIGN_OR_RETURN(up.bytes, ReadRestOfUpload(reader, up.first, what));
  return up;
}

// Streams `bytes` in chunks of kModelChunkBytes.
template <typename Chunk>
grpc::Status WriteChunks(grpc::ServerWriter<Chunk>* writer, const std::string& bytes) {
  for (size_t off = 0; off < bytes.size(); off += kModelChunkBytes) {
    Chunk chunk;
    chunk.set_offset(off);
    chunk.set_total_bytes(bytes.size());
    chunk.set_data(bytes.substr(off, kModelChunkBytes));
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "client left");
  }
  return grpc::Status::OK;
}

}  // namespace

grpc::Status JobsService::Authorize(const grpc::ServerContext& ctx, const char* rpc) const {
  if (!api_tokens_.required()) return grpc::Status::OK;
  const std::string header = Metadata(ctx, kAuthorizationMetadataKey);
  if (header.empty()) {
    return Refuse(ctx, refusals_, rpc, "no authorization metadata",
                  "this coordinator requires an API token: send \"authorization: Bearer "
                  "<token>\" metadata (tagictl --token-file FILE)");
  }
  const std::string token = BearerToken(header);
  if (token.empty() || !api_tokens_.Accepts(token)) {
    return Refuse(ctx, refusals_, rpc, "invalid API token", "the API token is not valid");
  }
  return grpc::Status::OK;
}

grpc::Status ClusterService::Authorize(const grpc::ServerContext& ctx, const char* rpc) const {
  if (!join_tokens_.required()) return grpc::Status::OK;
  const std::string token = Metadata(ctx, kJoinTokenMetadataKey);
  if (token.empty()) {
    return Refuse(ctx, refusals_, rpc, "no join token",
                  "this coordinator requires a cluster join token: send \"tagi-join-token\" "
                  "metadata (tagi-worker --join-token-file FILE)");
  }
  if (!join_tokens_.Accepts(token)) {
    return Refuse(ctx, refusals_, rpc, "invalid join token",
                  "the cluster join token is not valid");
  }
  return grpc::Status::OK;
}

grpc::Status JobsService::Submit(grpc::ServerContext* ctx, const tagi::v1::SubmitJobRequest* req,
                                 tagi::v1::Job* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Jobs.Submit");
  return Reply(c_.Submit(req->spec()), resp);
}

grpc::Status JobsService::Get(grpc::ServerContext* ctx, const tagi::v1::GetJobRequest* req,
                              tagi::v1::Job* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Jobs.Get");
  return Reply(c_.Get(req->id()), resp);
}

grpc::Status JobsService::List(grpc::ServerContext* ctx, const tagi::v1::ListJobsRequest*,
                               tagi::v1::ListJobsResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Jobs.List");
  for (auto& job : c_.List()) *resp->add_jobs() = std::move(job);
  return grpc::Status::OK;
}

grpc::Status JobsService::Cancel(grpc::ServerContext* ctx, const tagi::v1::CancelJobRequest* req,
                                 tagi::v1::Job* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Jobs.Cancel");
  return Reply(c_.Cancel(req->id()), resp);
}

grpc::Status JobsService::Watch(grpc::ServerContext* ctx, const tagi::v1::WatchJobRequest* req,
                                grpc::ServerWriter<tagi::v1::Job>* writer) {
  TAGI_CHECK_PROTOCOL(ctx, "Jobs.Watch");
  TAGI_ADMIT_STREAM(streams_, Acquire, ctx->peer());
  uint64_t seen = 0;
  while (!ctx->IsCancelled()) {
    const uint64_t before = seen;
    auto job = c_.WaitForChange(req->id(), seen, absl::Seconds(1));
    if (!job.ok()) return ToGrpcStatus(job.status());
    if (seen != before && !writer->Write(*job)) break;  // the client went away
    if (IsTerminal(job->state())) break;
  }
  return grpc::Status::OK;
}

grpc::Status JobsService::DownloadModel(grpc::ServerContext* ctx,
                                        const tagi::v1::DownloadModelRequest* req,
                                        grpc::ServerWriter<tagi::v1::ModelChunk>* writer) {
  TAGI_CHECK_PROTOCOL(ctx, "Jobs.DownloadModel");
  TAGI_ADMIT_STREAM(streams_, Acquire, ctx->peer());
  auto bytes = c_.ModelFile(req->id());
  if (!bytes.ok()) return ToGrpcStatus(bytes.status());
  return WriteChunks(writer, *bytes);
}

grpc::Status JobsService::ListWorkers(grpc::ServerContext* ctx, const tagi::v1::ListWorkersRequest*,
                                      tagi::v1::ListWorkersResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Jobs.ListWorkers");
  for (auto& w : c_.ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status ClusterService::Register(grpc::ServerContext* ctx,
                                      const tagi::v1::RegisterRequest* req,
                                      tagi::v1::RegisterResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.Register");
  *resp = c_.Register(*req, ctx->peer());
  return grpc::Status::OK;
}

grpc::Status ClusterService::Rendezvous(grpc::ServerContext* ctx,
                                        const tagi::v1::RendezvousRequest* req,
                                        tagi::v1::RendezvousResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.Rendezvous");
  return Reply(c_.Rendezvous(req->worker_id(), Millis(req->wait_ms())), resp);
}

grpc::Status ClusterService::StoreSet(grpc::ServerContext* ctx,
                                      const tagi::v1::StoreSetRequest* req,
                                      tagi::v1::StoreSetResponse*) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.StoreSet");
  return ToGrpcStatus(c_.StoreSet(req->job_id(), req->generation(), req->key(), req->value()));
}

grpc::Status ClusterService::StoreGet(grpc::ServerContext* ctx,
                                      const tagi::v1::StoreGetRequest* req,
                                      tagi::v1::StoreGetResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.StoreGet");
  auto v = c_.StoreGet(req->job_id(), req->generation(), req->key(), Millis(req->wait_ms()));
  if (!v.ok()) return ToGrpcStatus(v.status());
  resp->set_value(std::move(*v));
  return grpc::Status::OK;
}

grpc::Status ClusterService::StoreWait(grpc::ServerContext* ctx,
                                       const tagi::v1::StoreWaitRequest* req,
                                       tagi::v1::StoreWaitResponse*) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.StoreWait");
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  return ToGrpcStatus(
      c_.StoreWait(req->job_id(), req->generation(), keys, Millis(req->wait_ms())));
}

grpc::Status ClusterService::StoreAdd(grpc::ServerContext* ctx,
                                      const tagi::v1::StoreAddRequest* req,
                                      tagi::v1::StoreAddResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.StoreAdd");
  auto v = c_.StoreAdd(req->job_id(), req->generation(), req->key(), req->delta());
  if (!v.ok()) return ToGrpcStatus(v.status());
  resp->set_value(*v);
  return grpc::Status::OK;
}

grpc::Status ClusterService::Session(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<tagi::v1::SessionDirective, tagi::v1::SessionMessage>* stream) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.Session");
  tagi::v1::SessionMessage msg;
  if (!stream->Read(&msg)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty session");
  }
  TAGI_ADMIT_STREAM(streams_, AcquireKey, msg.worker_id());
  auto token = c_.OpenSession(msg, ctx->peer());
  if (!token.ok()) return ToGrpcStatus(token.status());
  const std::string worker_id = msg.worker_id();
  tagi::v1::SessionDirective ack;  // tells the worker the session is open
  ack.set_directive(tagi::v1::CONTINUE);
  if (!stream->Write(ack)) {
    c_.CloseSession(worker_id, *token, "its session stream broke at once");
    return grpc::Status::OK;
  }
  // This thread reads; a second one writes directives (and keep-alives) as
  // they come. gRPC allows one reader and one writer at a time.
  std::atomic<bool> reading{true};
  std::thread writer([&] {
    while (reading.load() && !ctx->IsCancelled()) {
      auto next = c_.NextDirective(worker_id, *token, keepalive_);
      if (!next.ok()) break;  // superseded or closed
      tagi::v1::SessionDirective d;
      if (next->has_value()) {
        d = std::move(**next);
      } else {
        d.set_directive(tagi::v1::CONTINUE);  // keep-alive
      }
      if (!stream->Write(d)) break;
    }
  });
  std::string reason;
  while (true) {
    if (!stream->Read(&msg)) {
      reason = ctx->IsCancelled() ? "its session stream broke (connection lost)"
                                  : "it closed its session stream";
      break;
    }
    if (msg.worker_id() != worker_id) {
      reason = "a session message named another worker";
      break;
    }
    if (!c_.OnSessionMessage(*token, msg).ok()) break;  // superseded: not a failure
  }
  reading = false;
  if (!reason.empty()) c_.CloseSession(worker_id, *token, reason);
  ctx->TryCancel();  // wakes a Write blocked on a dead peer
  writer.join();
  return grpc::Status::OK;
}

grpc::Status ClusterService::UploadSnapshot(grpc::ServerContext* ctx,
                                            grpc::ServerReader<tagi::v1::SnapshotChunk>* reader,
                                            tagi::v1::UploadSnapshotResponse*) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.UploadSnapshot");
  auto up = ReceiveUpload(reader, streams_, c_, Coordinator::UploadKind::kSnapshot);
  if (!up.ok()) return ToGrpcStatus(up.status());
  return ToGrpcStatus(c_.UploadSnapshot(up->first.worker_id(), up->first.job_id(),
                                        up->first.generation(), up->first.global_step(),
                                        std::move(up->bytes)));
}

grpc::Status ClusterService::DownloadSnapshot(grpc::ServerContext* ctx,
                                              const tagi::v1::DownloadSnapshotRequest* req,
                                              grpc::ServerWriter<tagi::v1::SnapshotData>* writer) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.DownloadSnapshot");
  TAGI_ADMIT_STREAM(streams_, AcquireKey, req->worker_id());
  auto bytes = c_.ResumeSnapshot(req->worker_id(), req->job_id(), req->generation());
  if (!bytes.ok()) return ToGrpcStatus(bytes.status());
  return WriteChunks(writer, **bytes);
}

grpc::Status ClusterService::UploadModel(grpc::ServerContext* ctx,
                                         grpc::ServerReader<tagi::v1::UploadModelRequest>* reader,
                                         tagi::v1::UploadModelResponse*) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.UploadModel");
  auto up = ReceiveUpload(reader, streams_, c_, Coordinator::UploadKind::kModel);
  if (!up.ok()) return ToGrpcStatus(up.status());
  return ToGrpcStatus(c_.UploadModel(up->first.worker_id(), up->first.job_id(),
                                     up->first.generation(), up->first.checksum(),
                                     std::move(up->bytes)));
}

grpc::Status ClusterService::FinishJob(grpc::ServerContext* ctx,
                                       const tagi::v1::FinishJobRequest* req,
                                       tagi::v1::FinishJobResponse*) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.FinishJob");
  return ToGrpcStatus(c_.FinishJob(*req));
}

}  // namespace tagi::coordinator
