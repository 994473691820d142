#include "ctl/jobs_client.h"

#include "absl/strings/str_format.h"
#include "common/grpc_util.h"

namespace tagi {

JobsClient::JobsClient(const std::string& target, absl::Duration rpc_timeout,
                       const ClientSecurity& security)
    : rpc_timeout_(rpc_timeout), stub_(tagi::v1::Jobs::NewStub(MakeChannel(target, security))) {}

absl::StatusOr<tagi::v1::Job> JobsClient::Submit(const tagi::v1::JobSpec& spec) {
  auto ctx = MakeClientContext(rpc_timeout_);
  tagi::v1::SubmitJobRequest req;
  *req.mutable_spec() = spec;
  tagi::v1::Job job;
  if (auto st = FromGrpcStatus(stub_->Submit(ctx.get(), req, &job)); !st.ok()) return st;
  return job;
}

absl::StatusOr<tagi::v1::Job> JobsClient::Get(const std::string& id) {
  auto ctx = MakeClientContext(rpc_timeout_);
  tagi::v1::GetJobRequest req;
  req.set_id(id);
  tagi::v1::Job job;
  if (auto st = FromGrpcStatus(stub_->Get(ctx.get(), req, &job)); !st.ok()) return st;
  return job;
}

absl::StatusOr<tagi::v1::JobLogs> JobsClient::GetLogs(const std::string& id, uint64_t after,
                                                      uint32_t max_lines) {
  auto ctx = MakeClientContext(rpc_timeout_);
  tagi::v1::GetJobLogsRequest req;
  req.set_id(id);
  req.set_after(after);
  req.set_max_lines(max_lines);
  tagi::v1::JobLogs logs;
  if (auto st = FromGrpcStatus(stub_->GetLogs(ctx.get(), req, &logs)); !st.ok()) return st;
  return logs;
}

absl::StatusOr<std::vector<tagi::v1::Job>> JobsClient::List() {
  auto ctx = MakeClientContext(rpc_timeout_);
  tagi::v1::ListJobsResponse resp;
  if (auto st = FromGrpcStatus(stub_->List(ctx.get(), {}, &resp)); !st.ok()) return st;
  return std::vector<tagi::v1::Job>(resp.jobs().begin(), resp.jobs().end());
}

absl::StatusOr<tagi::v1::Job> JobsClient::Cancel(const std::string& id) {
  auto ctx = MakeClientContext(rpc_timeout_);
  tagi::v1::CancelJobRequest req;
  req.set_id(id);
  tagi::v1::Job job;
  if (auto st = FromGrpcStatus(stub_->Cancel(ctx.get(), req, &job)); !st.ok()) return st;
  return job;
}

absl::StatusOr<std::vector<tagi::v1::WorkerInfo>> JobsClient::ListWorkers() {
  auto ctx = MakeClientContext(rpc_timeout_);
  tagi::v1::ListWorkersResponse resp;
  if (auto st = FromGrpcStatus(stub_->ListWorkers(ctx.get(), {}, &resp)); !st.ok()) return st;
  return std::vector<tagi::v1::WorkerInfo>(resp.workers().begin(), resp.workers().end());
}

absl::StatusOr<tagi::v1::Job> JobsClient::Watch(
    const std::string& id, absl::Duration timeout,
    const std::function<void(const tagi::v1::Job&)>& on_update) {
  auto ctx = MakeClientContext(timeout);
  tagi::v1::WatchJobRequest req;
  req.set_id(id);
  auto reader = stub_->Watch(ctx.get(), req);
  tagi::v1::Job job;
  bool any = false;
  while (reader->Read(&job)) {
    any = true;
    on_update(job);
  }
  const absl::Status st = FromGrpcStatus(reader->Finish());
  if (!st.ok()) return st;
  if (!any) return absl::UnavailableError("the watch stream ended without an update");
  return job;
}

absl::StatusOr<std::string> JobsClient::DownloadModel(const std::string& id,
                                                      absl::Duration timeout,
                                                      bool from_snapshot) {
  auto ctx = MakeClientContext(timeout);
  tagi::v1::DownloadModelRequest req;
  req.set_id(id);
  req.set_from_snapshot(from_snapshot);
  auto reader = stub_->DownloadModel(ctx.get(), req);
  std::string bytes;
  tagi::v1::ModelChunk chunk;
  uint64_t total = 0;
  while (reader->Read(&chunk)) {
    if (chunk.offset() != bytes.size()) {
      ctx->TryCancel();
      return absl::DataLossError("model download arrived out of order");
    }
    total = chunk.total_bytes();
    bytes += chunk.data();
  }
  if (auto st = FromGrpcStatus(reader->Finish()); !st.ok()) return st;
  if (bytes.size() != total) {
    return absl::DataLossError(absl::StrFormat("model download ended at %d of %d bytes",
                                               bytes.size(), total));
  }
  return bytes;
}

}  // namespace tagi
