#include "coordinator/services.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "common/grpc_util.h"

namespace tagi::coordinator {
namespace {

// Every handler starts with the protocol check.
#define TAGI_CHECK_PROTOCOL(ctx)                                  \
  do {                                                            \
    if (auto st = CheckProtocol(*(ctx)); !st.ok()) return ToGrpcStatus(st); \
  } while (0)

template <typename T>
grpc::Status Reply(absl::StatusOr<T> result, T* out) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  *out = std::move(*result);
  return grpc::Status::OK;
}

absl::Duration Millis(uint32_t ms) { return absl::Milliseconds(ms); }

}  // namespace

grpc::Status JobsService::Submit(grpc::ServerContext* ctx, const tagi::v1::SubmitJobRequest* req,
                                 tagi::v1::Job* resp) {
  TAGI_CHECK_PROTOCOL(ctx);
  return Reply(c_.Submit(req->spec()), resp);
}

grpc::Status JobsService::Get(grpc::ServerContext* ctx, const tagi::v1::GetJobRequest* req,
                              tagi::v1::Job* resp) {
  TAGI_CHECK_PROTOCOL(ctx);
  return Reply(c_.Get(req->id()), resp);
}

grpc::Status JobsService::List(grpc::ServerContext* ctx, const tagi::v1::ListJobsRequest*,
                               tagi::v1::ListJobsResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx);
  for (auto& job : c_.List()) *resp->add_jobs() = std::move(job);
  return grpc::Status::OK;
}

grpc::Status JobsService::Cancel(grpc::ServerContext* ctx, const tagi::v1::CancelJobRequest* req,
                                 tagi::v1::Job* resp) {
  TAGI_CHECK_PROTOCOL(ctx);
  return Reply(c_.Cancel(req->id()), resp);
}

grpc::Status JobsService::Watch(grpc::ServerContext* ctx, const tagi::v1::WatchJobRequest* req,
                                grpc::ServerWriter<tagi::v1::Job>* writer) {
  TAGI_CHECK_PROTOCOL(ctx);
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
  TAGI_CHECK_PROTOCOL(ctx);
  auto bytes = c_.ModelFile(req->id());
  if (!bytes.ok()) return ToGrpcStatus(bytes.status());
  for (size_t off = 0; off < bytes->size(); off += kModelChunkBytes) {
    tagi::v1::ModelChunk chunk;
    chunk.set_offset(off);
    chunk.set_total_bytes(bytes->size());
    chunk.set_data(bytes->substr(off, kModelChunkBytes));
    if (!writer->Write(chunk)) return grpc::Status(grpc::StatusCode::CANCELLED, "client left");
  }
  return grpc::Status::OK;
}

grpc::Status JobsService::ListWorkers(grpc::ServerContext* ctx, const tagi::v1::ListWorkersRequest*,
                                      tagi::v1::ListWorkersResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx);
  for (auto& w : c_.ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status ClusterService::Register(grpc::ServerContext* ctx,
                                      const tagi::v1::RegisterRequest* req,
                                      tagi::v1::RegisterResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx);
  *resp = c_.Register(*req, ctx->peer());
  return grpc::Status::OK;
}

grpc::Status ClusterService::Rendezvous(grpc::ServerContext* ctx,
                                        const tagi::v1::RendezvousRequest* req,
                                        tagi::v1::RendezvousResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx);
  return Reply(c_.Rendezvous(req->worker_id(), Millis(req->wait_ms())), resp);
}

grpc::Status ClusterService::StoreSet(grpc::ServerContext* ctx,
                                      const tagi::v1::StoreSetRequest* req,
                                      tagi::v1::StoreSetResponse*) {
  TAGI_CHECK_PROTOCOL(ctx);
  return ToGrpcStatus(c_.StoreSet(req->job_id(), req->generation(), req->key(), req->value()));
}

grpc::Status ClusterService::StoreGet(grpc::ServerContext* ctx,
                                      const tagi::v1::StoreGetRequest* req,
                                      tagi::v1::StoreGetResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx);
  auto v = c_.StoreGet(req->job_id(), req->generation(), req->key(), Millis(req->wait_ms()));
  if (!v.ok()) return ToGrpcStatus(v.status());
  resp->set_value(std::move(*v));
  return grpc::Status::OK;
}

grpc::Status ClusterService::StoreWait(grpc::ServerContext* ctx,
                                       const tagi::v1::StoreWaitRequest* req,
                                       tagi::v1::StoreWaitResponse*) {
  TAGI_CHECK_PROTOCOL(ctx);
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  return ToGrpcStatus(
      c_.StoreWait(req->job_id(), req->generation(), keys, Millis(req->wait_ms())));
}

grpc::Status ClusterService::StoreAdd(grpc::ServerContext* ctx,
                                      const tagi::v1::StoreAddRequest* req,
                                      tagi::v1::StoreAddResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx);
  auto v = c_.StoreAdd(req->job_id(), req->generation(), req->key(), req->delta());
  if (!v.ok()) return ToGrpcStatus(v.status());
  resp->set_value(*v);
  return grpc::Status::OK;
}

grpc::Status ClusterService::ReportProgress(grpc::ServerContext* ctx,
                                            const tagi::v1::ProgressReport* req,
                                            tagi::v1::ProgressReply* resp) {
  TAGI_CHECK_PROTOCOL(ctx);
  return Reply(c_.ReportProgress(*req), resp);
}

grpc::Status ClusterService::UploadModel(grpc::ServerContext* ctx,
                                         grpc::ServerReader<tagi::v1::UploadModelRequest>* reader,
                                         tagi::v1::UploadModelResponse*) {
  TAGI_CHECK_PROTOCOL(ctx);
  tagi::v1::UploadModelRequest first;
  if (!reader->Read(&first)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty model upload");
  }
  const uint64_t total = first.total_bytes();
  constexpr uint64_t kLimit = uint64_t{1} << 31;
  if (total > kLimit) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrFormat("model of %d bytes exceeds the limit of %d", total, kLimit));
  }
  std::string bytes = first.data();
  bytes.reserve(std::min<uint64_t>(total, uint64_t{64} << 20));  // total is untrusted
  tagi::v1::UploadModelRequest chunk;
  while (reader->Read(&chunk)) {
    if (bytes.size() + chunk.data().size() > total) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "model upload is longer than announced");
    }
    bytes += chunk.data();
  }
  if (bytes.size() != total) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrFormat("model upload ended at %d of %d bytes", bytes.size(),
                                        total));
  }
  return ToGrpcStatus(c_.UploadModel(first.worker_id(), first.job_id(), first.generation(),
                                     first.checksum(), std::move(bytes)));
}

grpc::Status ClusterService::FinishJob(grpc::ServerContext* ctx,
                                       const tagi::v1::FinishJobRequest* req,
                                       tagi::v1::FinishJobResponse*) {
  TAGI_CHECK_PROTOCOL(ctx);
  return ToGrpcStatus(c_.FinishJob(*req));
}

}  // namespace tagi::coordinator
