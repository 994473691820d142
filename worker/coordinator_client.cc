#include "worker/coordinator_client.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_format.h"
#include "common/grpc_util.h"
#include "common/worker_credentials.h"

namespace tagi {
namespace {

// One long poll never asks the coordinator to wait longer than this.
constexpr absl::Duration kMaxPoll = absl::Seconds(20);
// Slack for the network on top of a server-side wait.
constexpr absl::Duration kWaitSlack = absl::Seconds(5);

const absl::Status& StatusOf(const absl::Status& st) { return st; }
template <typename T>
const absl::Status& StatusOf(const absl::StatusOr<T>& st) {
  return st.status();
}

// Runs a server-side wait of `timeout` as long polls of at most kMaxPoll,
// until it succeeds, fails otherwise than by its deadline, or time is up.
template <typename Result, typename Poll>
Result PollInSlices(absl::Duration timeout, Poll poll) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    Result r = poll(std::clamp(left, absl::ZeroDuration(), kMaxPoll));
    if (!absl::IsDeadlineExceeded(StatusOf(r)) || absl::Now() >= deadline) return r;
  }
}

uint32_t Ms(absl::Duration d) {
  return static_cast<uint32_t>(std::max<int64_t>(0, absl::ToInt64Milliseconds(d)));
}

}  // namespace

CoordinatorClient::CoordinatorClient(const std::string& target, absl::Duration rpc_timeout,
                                     const ClientSecurity& security)
    : target_(target),
      rpc_timeout_(rpc_timeout),
      stub_(tagi::v1::Cluster::NewStub(MakeChannel(target, security))) {}

absl::StatusOr<tagi::v1::RegisterResponse> CoordinatorClient::Register(
    const tagi::v1::RegisterRequest& req) {
  // Wait (briefly) for the channel to connect instead of failing at once: a
  // coordinator that starts later is then found within gRPC's reconnect
  // backoff, not after the next retry of ours. Short, so that the agent
  // still logs an unreachable coordinator promptly.
  auto ctx = Context(std::min(rpc_timeout_, absl::Seconds(3)));
  ctx->set_wait_for_ready(true);
  tagi::v1::RegisterResponse resp;
  if (auto st = FromGrpcStatus(stub_->Register(ctx.get(), req, &resp)); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  worker_id_ = resp.worker_id();
  secret_ = resp.secret();
  return resp;
}

void CoordinatorClient::ClearCredentials() {
  absl::MutexLock lock(&mu_);
  worker_id_.clear();
  secret_.clear();
}

void CoordinatorClient::AddCredentials(grpc::ClientContext* ctx) const {
  absl::MutexLock lock(&mu_);
  if (worker_id_.empty()) return;
  ctx->AddMetadata(kWorkerIdMetadataKey, worker_id_);
  ctx->AddMetadata(kWorkerSecretMetadataKey, secret_);
}

std::unique_ptr<grpc::ClientContext> CoordinatorClient::Context(absl::Duration timeout) const {
  auto ctx = MakeClientContext(timeout);
  AddCredentials(ctx.get());
  return ctx;
}

absl::StatusOr<tagi::v1::RendezvousResponse> CoordinatorClient::Rendezvous(
    const std::string& worker_id, absl::Duration wait) {
  auto ctx = Context(wait + kWaitSlack);
  tagi::v1::RendezvousRequest req;
  req.set_worker_id(worker_id);
  req.set_wait_ms(Ms(wait));
  tagi::v1::RendezvousResponse resp;
  if (auto st = FromGrpcStatus(stub_->Rendezvous(ctx.get(), req, &resp)); !st.ok()) return st;
  return resp;
}

std::unique_ptr<CoordinatorClient::SessionStream> CoordinatorClient::OpenSession(
    grpc::ClientContext* ctx) {
  return stub_->Session(ctx);
}

namespace {

constexpr size_t kChunk = 1 << 20;

// A second per MiB on top of the usual timeout.
absl::Duration UploadTimeout(absl::Duration rpc_timeout, const std::string& bytes) {
  return rpc_timeout + absl::Seconds(bytes.size() / kChunk);
}

// Writes `bytes` as chunks of kChunk on `ctx`'s call; the first message is
// `header` with total_bytes set.
template <typename Message, typename Response, typename Open>
absl::Status UploadChunks(std::unique_ptr<grpc::ClientContext> ctx, Message header,
                          const std::string& bytes, Open open) {
  Response resp;
  auto writer = open(ctx.get(), &resp);
  header.set_total_bytes(bytes.size());
  header.set_data(bytes.substr(0, kChunk));
  bool ok = writer->Write(header);
  for (size_t off = kChunk; ok && off < bytes.size(); off += kChunk) {
    Message chunk;
    chunk.set_data(bytes.substr(off, kChunk));
    ok = writer->Write(chunk);
  }
  writer->WritesDone();
  return FromGrpcStatus(writer->Finish());
}

}  // namespace

absl::Status CoordinatorClient::UploadModel(const tagi::v1::UploadModelRequest& header,
                                            const std::string& bytes) {
  return UploadChunks<tagi::v1::UploadModelRequest, tagi::v1::UploadModelResponse>(
      Context(UploadTimeout(rpc_timeout_, bytes)), header, bytes,
      [this](grpc::ClientContext* ctx, tagi::v1::UploadModelResponse* resp) {
        return stub_->UploadModel(ctx, resp);
      });
}

absl::Status CoordinatorClient::UploadSnapshot(const tagi::v1::SnapshotChunk& header,
                                               const std::string& bytes) {
  return UploadChunks<tagi::v1::SnapshotChunk, tagi::v1::UploadSnapshotResponse>(
      Context(UploadTimeout(rpc_timeout_, bytes)), header, bytes,
      [this](grpc::ClientContext* ctx, tagi::v1::UploadSnapshotResponse* resp) {
        return stub_->UploadSnapshot(ctx, resp);
      });
}

absl::StatusOr<std::string> CoordinatorClient::DownloadSnapshot(
    const tagi::v1::DownloadSnapshotRequest& req, size_t max_bytes) {
  auto ctx = Context(rpc_timeout_ + absl::Seconds(max_bytes >> 26));
  auto reader = stub_->DownloadSnapshot(ctx.get(), req);
  std::string bytes;
  tagi::v1::SnapshotData chunk;
  while (reader->Read(&chunk)) {
    if (chunk.offset() != bytes.size() || chunk.total_bytes() > max_bytes ||
        bytes.size() + chunk.data().size() > chunk.total_bytes()) {
      ctx->TryCancel();
      (void)reader->Finish();
      return absl::DataLossError(absl::StrFormat(
          "snapshot download: chunk at offset %d (%d bytes of %d announced) does not follow "
          "the %d bytes received (limit %d)",
          chunk.offset(), chunk.data().size(), chunk.total_bytes(), bytes.size(), max_bytes));
    }
    bytes += chunk.data();
  }
  if (auto st = FromGrpcStatus(reader->Finish()); !st.ok()) return st;
  return bytes;
}

absl::Status CoordinatorClient::FinishJob(const tagi::v1::FinishJobRequest& req) {
  auto ctx = Context(rpc_timeout_);
  tagi::v1::FinishJobResponse resp;
  return FromGrpcStatus(stub_->FinishJob(ctx.get(), req, &resp));
}

absl::Status CoordinatorClient::StoreSet(const std::string& job, uint64_t gen,
                                         const std::string& key, const std::string& value) {
  auto ctx = Context(rpc_timeout_);
  tagi::v1::StoreSetRequest req;
  req.set_job_id(job);
  req.set_generation(gen);
  req.set_key(key);
  req.set_value(value);
  tagi::v1::StoreSetResponse resp;
  return FromGrpcStatus(stub_->StoreSet(ctx.get(), req, &resp));
}

absl::StatusOr<std::string> CoordinatorClient::StoreGet(const std::string& job, uint64_t gen,
                                                        const std::string& key,
                                                        absl::Duration wait) {
  auto ctx = Context(wait + kWaitSlack);
  tagi::v1::StoreGetRequest req;
  req.set_job_id(job);
  req.set_generation(gen);
  req.set_key(key);
  req.set_wait_ms(Ms(wait));
  tagi::v1::StoreGetResponse resp;
  if (auto st = FromGrpcStatus(stub_->StoreGet(ctx.get(), req, &resp)); !st.ok()) return st;
  return resp.value();
}

absl::Status CoordinatorClient::StoreWait(const std::string& job, uint64_t gen,
                                          const std::vector<std::string>& keys,
                                          absl::Duration wait) {
  auto ctx = Context(wait + kWaitSlack);
  tagi::v1::StoreWaitRequest req;
  req.set_job_id(job);
  req.set_generation(gen);
  for (const auto& k : keys) req.add_keys(k);
  req.set_wait_ms(Ms(wait));
  tagi::v1::StoreWaitResponse resp;
  return FromGrpcStatus(stub_->StoreWait(ctx.get(), req, &resp));
}

absl::StatusOr<int64_t> CoordinatorClient::StoreAdd(const std::string& job, uint64_t gen,
                                                    const std::string& key, int64_t delta) {
  auto ctx = Context(rpc_timeout_);
  tagi::v1::StoreAddRequest req;
  req.set_job_id(job);
  req.set_generation(gen);
  req.set_key(key);
  req.set_delta(delta);
  tagi::v1::StoreAddResponse resp;
  if (auto st = FromGrpcStatus(stub_->StoreAdd(ctx.get(), req, &resp)); !st.ok()) return st;
  return resp.value();
}

absl::Status CoordinatorStore::Set(const std::string& key, const std::string& value) {
  return client_.StoreSet(job_, gen_, key, value);
}

absl::StatusOr<std::string> CoordinatorStore::Get(const std::string& key,
                                                  absl::Duration timeout) {
  return PollInSlices<absl::StatusOr<std::string>>(timeout, [&](absl::Duration slice) {
    return client_.StoreGet(job_, gen_, key, slice);
  });
}

absl::Status CoordinatorStore::Wait(const std::vector<std::string>& keys,
                                    absl::Duration timeout) {
  return PollInSlices<absl::Status>(timeout, [&](absl::Duration slice) {
    return client_.StoreWait(job_, gen_, keys, slice);
  });
}

absl::StatusOr<int64_t> CoordinatorStore::Add(const std::string& key, int64_t delta) {
  return client_.StoreAdd(job_, gen_, key, delta);
}

}  // namespace tagi
