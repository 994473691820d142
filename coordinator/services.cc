#include "coordinator/services.h"

#include <algorithm>
#include <atomic>
#include <optional>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/grpc_util.h"
#include "common/worker_credentials.h"
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
std::string Metadata(const grpc::ServerContextBase& ctx, const char* key) {
  const auto& md = ctx.client_metadata();
  auto it = md.find(key);
  return it == md.end() ? std::string() : std::string(it->second.data(), it->second.size());
}

// The name of the client certificate the connection was authenticated with
// under mutual TLS (its subject alternative names, else its common name, as
// gRPC reports the peer's identity); empty without one.
std::string ClientCertificateName(const grpc::ServerContextBase& ctx) {
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return "";
  std::string name;
  for (const grpc::string_ref& part : auth->GetPeerIdentity()) {
    absl::StrAppend(&name, name.empty() ? "" : ",", absl::string_view(part.data(), part.size()));
  }
  return name;
}

// Logs the refusal (through `log` when set: at most one line per client
// host and reason per minute) and answers UNAUTHENTICATED.
grpc::Status Refuse(const grpc::ServerContextBase& ctx, RefusalLog* log, const char* rpc,
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

uint64_t StepOf(const tagi::v1::SnapshotChunk& first) { return first.global_step(); }
uint64_t StepOf(const tagi::v1::UploadModelRequest&) { return 0; }

// Reads the first message, takes a slot of the sender's worker id, has the
// coordinator admit the upload (sender, job, generation, size), and only
// then reads the rest.
template <typename Chunk>
absl::StatusOr<Upload<Chunk>> ReceiveUpload(grpc::ServerReader<Chunk>* reader,
                                            StreamLimiter* limiter, Coordinator& c,
                                            Coordinator::UploadKind kind,
                                            const std::string& caller) {
  const char* what = kind == Coordinator::UploadKind::kSnapshot ? "snapshot" : "model";
  Upload<Chunk> up;
  TAGI_RETURN_IF_ERROR(ReadFirstChunk(reader, up.first, what));
  if (up.first.worker_id() != caller) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "the %s upload names worker %s but its credentials are %s's", what,
        up.first.worker_id().substr(0, 64), caller));
  }
  if (limiter != nullptr) {
    TAGI_ASSIGN_OR_RETURN(StreamLimiter::Lease lease, limiter->AcquireKey(up.first.worker_id()));
    up.lease.emplace(std::move(lease));
  }
  TAGI_RETURN_IF_ERROR(c.AdmitUpload(up.first.worker_id(), up.first.job_id(),
                                     up.first.generation(), kind, up.first.total_bytes(),
                                     StepOf(up.first)));
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

grpc::Status JobsService::Authorize(const grpc::ServerContextBase& ctx, const char* rpc) const {
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

grpc::Status ClusterService::Authorize(const grpc::ServerContextBase& ctx,
                                       const char* rpc) const {
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
  auto bytes = req->from_snapshot() ? c_.SnapshotModelFile(req->id()) : c_.ModelFile(req->id());
  if (!bytes.ok()) return ToGrpcStatus(bytes.status());
  return WriteChunks(writer, *bytes);
}

grpc::Status JobsService::ListWorkers(grpc::ServerContext* ctx, const tagi::v1::ListWorkersRequest*,
                                      tagi::v1::ListWorkersResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Jobs.ListWorkers");
  for (auto& w : c_.ListWorkers()) *resp->add_workers() = std::move(w);
  return grpc::Status::OK;
}

grpc::Status JobsService::GetLogs(grpc::ServerContext* ctx, const tagi::v1::GetJobLogsRequest* req,
                                  tagi::v1::JobLogs* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Jobs.GetLogs");
  return Reply(c_.Logs(req->id(), req->after(), req->max_lines()), resp);
}

grpc::Status ClusterService::Register(grpc::ServerContext* ctx,
                                      const tagi::v1::RegisterRequest* req,
                                      tagi::v1::RegisterResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.Register");
  // A re-registration keeps its id only with that id's credentials.
  const bool own = Metadata(*ctx, kWorkerIdMetadataKey) == req->worker_id();
  *resp = c_.Register(*req, ctx->peer(), own ? Metadata(*ctx, kWorkerSecretMetadataKey) : "",
                      ClientCertificateName(*ctx));
  return grpc::Status::OK;
}

absl::StatusOr<std::string> ClusterService::CallingWorker(const grpc::ServerContextBase& ctx,
                                                          const char* rpc,
                                                          const std::string& named) const {
  std::string id = Metadata(ctx, kWorkerIdMetadataKey);
  const std::string secret = Metadata(ctx, kWorkerSecretMetadataKey);
  if (id.empty() || secret.empty()) {
    return FromGrpcStatus(Refuse(ctx, refusals_, rpc, "no worker credentials",
                                 "this call needs the worker credentials Register returned "
                                 "(\"tagi-worker-id\" and \"tagi-worker-secret\" metadata)"));
  }
  if (!c_.VerifyWorker(id, secret, ClientCertificateName(ctx))) {
    return FromGrpcStatus(Refuse(ctx, refusals_, rpc, "invalid worker credentials",
                                 "the worker credentials are not valid: register again"));
  }
  if (!named.empty() && named != id) {
    LogRefusal(refusals_, "tagi-coordinator", ctx.peer(),
               absl::StrCat(rpc, ": a request naming another worker"));
    return absl::PermissionDeniedError(
        absl::StrFormat("the request names worker %s but its credentials are %s's",
                        named.substr(0, 64), id));
  }
  return id;
}

grpc::Status ClusterService::CheckMemberCall(const grpc::ServerContextBase& ctx, const char* rpc,
                                             const std::string& job, uint64_t gen) const {
  absl::StatusOr<std::string> id = CallingWorker(ctx, rpc, "");
  if (!id.ok()) return ToGrpcStatus(id.status());
  return ToGrpcStatus(c_.CheckMember(*id, job, gen));
}

grpc::ServerUnaryReactor* ClusterService::Rendezvous(grpc::CallbackServerContext* ctx,
                                                     const tagi::v1::RendezvousRequest* req,
                                                     tagi::v1::RendezvousResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (Refused(*ctx, "Cluster.Rendezvous", reactor)) return reactor;
  if (auto id = CallingWorker(*ctx, "Cluster.Rendezvous", req->worker_id()); !id.ok()) {
    reactor->Finish(ToGrpcStatus(id.status()));
    return reactor;
  }
  c_.RendezvousAsync(req->worker_id(), Millis(req->wait_ms()),
                     [reactor, resp](absl::StatusOr<tagi::v1::RendezvousResponse> r) {
                       if (r.ok()) *resp = std::move(*r);
                       reactor->Finish(ToGrpcStatus(r.status()));
                     });
  return reactor;
}

grpc::Status ClusterService::StoreSet(grpc::ServerContext* ctx,
                                      const tagi::v1::StoreSetRequest* req,
                                      tagi::v1::StoreSetResponse*) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.StoreSet");
  if (auto st = CheckMemberCall(*ctx, "Cluster.StoreSet", req->job_id(), req->generation());
      !st.ok()) {
    return st;
  }
  return ToGrpcStatus(c_.StoreSet(req->job_id(), req->generation(), req->key(), req->value()));
}

grpc::ServerUnaryReactor* ClusterService::StoreGet(grpc::CallbackServerContext* ctx,
                                                   const tagi::v1::StoreGetRequest* req,
                                                   tagi::v1::StoreGetResponse* resp) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (Refused(*ctx, "Cluster.StoreGet", reactor)) return reactor;
  if (auto st = CheckMemberCall(*ctx, "Cluster.StoreGet", req->job_id(), req->generation());
      !st.ok()) {
    reactor->Finish(st);
    return reactor;
  }
  c_.StoreGetAsync(req->job_id(), req->generation(), req->key(), Millis(req->wait_ms()),
                   [reactor, resp](absl::StatusOr<std::string> v) {
                     if (v.ok()) resp->set_value(std::move(*v));
                     reactor->Finish(ToGrpcStatus(v.status()));
                   });
  return reactor;
}

grpc::ServerUnaryReactor* ClusterService::StoreWait(grpc::CallbackServerContext* ctx,
                                                    const tagi::v1::StoreWaitRequest* req,
                                                    tagi::v1::StoreWaitResponse*) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  if (Refused(*ctx, "Cluster.StoreWait", reactor)) return reactor;
  if (auto st = CheckMemberCall(*ctx, "Cluster.StoreWait", req->job_id(), req->generation());
      !st.ok()) {
    reactor->Finish(st);
    return reactor;
  }
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  c_.StoreWaitAsync(req->job_id(), req->generation(), keys, Millis(req->wait_ms()),
                    [reactor](absl::Status st) { reactor->Finish(ToGrpcStatus(st)); });
  return reactor;
}

grpc::Status ClusterService::StoreAdd(grpc::ServerContext* ctx,
                                      const tagi::v1::StoreAddRequest* req,
                                      tagi::v1::StoreAddResponse* resp) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.StoreAdd");
  if (auto st = CheckMemberCall(*ctx, "Cluster.StoreAdd", req->job_id(), req->generation());
      !st.ok()) {
    return st;
  }
  auto v = c_.StoreAdd(req->job_id(), req->generation(), req->key(), req->delta());
  if (!v.ok()) return ToGrpcStatus(v.status());
  resp->set_value(*v);
  return grpc::Status::OK;
}

// One worker's session stream. Reads: the first message opens the session
// (after the worker's stream slot is taken), every later one is a
// heartbeat for Coordinator::OnSessionMessage; a read that fails closes the
// session as the worker's failure. Writes: one at a time, of the next
// queued directive (Pump, when the coordinator wakes the stream) or a
// keep-alive (Pump(true), from the ticker).
//
// Ownership: the service holds a shared_ptr from creation to OnDone; the
// coordinator's wake-up and the ticker hold weak or short-lived ones, so a
// Pump never reaches a destroyed reactor, and one after OnDone does nothing
// (finished_). mu_ is held across StartWrite and Finish, which never run a
// reaction inline (gRPC schedules them), so that no write starts after
// Finish. No call into the coordinator is made with mu_ held: its
// callbacks may come back here (a message about an attempt that is over
// queues an ABORT for this very stream).
class SessionReactor final
    : public grpc::ServerBidiReactor<tagi::v1::SessionMessage, tagi::v1::SessionDirective> {
 public:
  SessionReactor(ClusterService& service, grpc::CallbackServerContext* ctx)
      : s_(service), ctx_(ctx) {}

  void set_self(std::weak_ptr<SessionReactor> self) { self_ = std::move(self); }
  // Ends a stream whose first message has not come by `deadline`: until
  // then it holds a slot no limiter counts.
  void EndIfUnopenedBy(absl::Time now, absl::Time deadline) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (opened_ || now < deadline) return;
    }
    Close(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                       "no first session message in time (it names the worker)"));
  }
  absl::Time created() const { return created_; }
  // Refuses the stream, or ends it (shutdown).
  void Refuse(const grpc::Status& st) { Close(st); }
  // Starts reading; the stream's credentials are `caller`'s.
  void Start(std::string caller) {
    caller_ = std::move(caller);
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      if (!opened_) return Close(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "empty session"));
      s_.c_.CloseSession(worker_id_, token_,
                         ctx_->IsCancelled() ? "its session stream broke (connection lost)"
                                             : "it closed its session stream");
      return Close(grpc::Status::OK);
    }
    if (!opened_) return Open();
    if (in_.worker_id() != worker_id_) {
      s_.c_.CloseSession(worker_id_, token_, "a session message named another worker");
      return Close(grpc::Status::OK);
    }
    // Superseded by a newer stream of the worker: not a failure.
    if (!s_.c_.OnSessionMessage(token_, in_).ok()) return Close(grpc::Status::OK);
    StartRead(&in_);
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
    }
    if (ok) Pump(false);  // a failed write: the read fails too and closes
  }

  void OnDone() override { s_.RemoveSession(this); }  // may destroy this

  // Writes the next queued directive, or with `keepalive` a CONTINUE when
  // none is queued; at most one write at a time (a call while one is in
  // flight is remembered and served when it completes).
  void Pump(bool keepalive) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (finished_ || !opened_) return;
        if (writing_) {
          again_ = true;
          keepalive_due_ = keepalive_due_ || keepalive;
          return;
        }
        writing_ = true;
        again_ = false;
        keepalive = keepalive || keepalive_due_;
        keepalive_due_ = false;
      }
      auto next = s_.c_.TakeDirective(worker_id_, token_);
      std::unique_lock<std::mutex> lock(mu_);
      if (!next.ok()) {  // superseded or closed
        writing_ = false;
        lock.unlock();
        return Close(grpc::Status::OK);
      }
      if (finished_) {
        writing_ = false;
        return;
      }
      if (next->has_value() || keepalive) {
        if (next->has_value()) {
          out_ = std::move(**next);
        } else {
          out_.Clear();
          out_.set_directive(tagi::v1::CONTINUE);  // keep-alive
        }
        StartWrite(&out_);
        return;
      }
      writing_ = false;
      if (!again_) return;
    }
  }

 private:
  void Open() {
    if (in_.worker_id() != caller_) {
      return Close(grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrFormat("the session names worker %s but its credentials are %s's",
                          in_.worker_id().substr(0, 64), caller_)));
    }
    if (s_.streams_ != nullptr) {
      auto lease = s_.streams_->AcquireKey(in_.worker_id());
      if (!lease.ok()) return Close(ToGrpcStatus(lease.status()));
      lease_.emplace(std::move(*lease));
    }
    auto token = s_.c_.OpenSession(in_, ctx_->peer(), [self = self_] {
      if (auto r = self.lock()) r->Pump(false);
    });
    if (!token.ok()) return Close(ToGrpcStatus(token.status()));
    worker_id_ = in_.worker_id();
    token_ = *token;
    {
      std::lock_guard<std::mutex> lock(mu_);
      opened_ = true;
    }
    Pump(true);  // tells the worker the session is open
    StartRead(&in_);
  }

  void Close(const grpc::Status& st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    Finish(st);
  }

  ClusterService& s_;
  grpc::CallbackServerContext* const ctx_;
  // On the coordinator's clock (steady: a wall-clock step changes nothing).
  const absl::Time created_ = s_.c_.clock().Now();
  std::weak_ptr<SessionReactor> self_;
  tagi::v1::SessionMessage in_;  // the reads' own (one read at a time)
  std::string caller_;           // set by Start: whose credentials the stream has
  std::string worker_id_;        // set by Open, then read-only
  uint64_t token_ = 0;
  std::optional<StreamLimiter::Lease> lease_;
  std::mutex mu_;
  tagi::v1::SessionDirective out_;  // the write in flight
  bool opened_ = false;
  bool writing_ = false;
  bool again_ = false;          // a Pump came while writing
  bool keepalive_due_ = false;  // a keep-alive came while writing
  bool finished_ = false;
};

ClusterService::ClusterService(Coordinator& c, absl::Duration keepalive, TokenSet join_tokens)
    : c_(c),
      keepalive_(keepalive),
      join_tokens_(std::move(join_tokens)),
      keepalive_thread_([this] { KeepAliveLoop(); }) {}

ClusterService::~ClusterService() {
  Shutdown();
  keepalive_thread_.join();
}

bool ClusterService::Refused(const grpc::ServerContextBase& ctx, const char* rpc,
                             grpc::ServerUnaryReactor* reactor) const {
  grpc::Status st = Check(ctx, rpc);
  if (st.ok()) return false;
  reactor->Finish(std::move(st));
  return true;
}

grpc::Status ClusterService::Check(const grpc::ServerContextBase& ctx, const char* rpc) const {
  if (auto st = Authorize(ctx, rpc); !st.ok()) return st;
  return ToGrpcStatus(CheckProtocol(ctx));
}

grpc::ServerBidiReactor<tagi::v1::SessionMessage, tagi::v1::SessionDirective>*
ClusterService::Session(grpc::CallbackServerContext* ctx) {
  auto owned = std::make_shared<SessionReactor>(*this, ctx);
  owned->set_self(owned);
  SessionReactor* reactor = owned.get();
  bool stopping = false;
  size_t open = 0;
  {
    absl::MutexLock lock(&sessions_mu_);
    stopping = stopping_;
    open = sessions_.size();
    sessions_.emplace(reactor, std::move(owned));
  }
  if (stopping) {
    reactor->Refuse(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down"));
  } else if (open >= max_sessions_) {
    reactor->Refuse(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrFormat("%d session streams are open, the most this coordinator holds "
                        "(--max-worker-streams)",
                        open)));
  } else if (auto st = Check(*ctx, "Cluster.Session"); !st.ok()) {
    reactor->Refuse(st);
  } else if (auto id = CallingWorker(*ctx, "Cluster.Session", ""); !id.ok()) {
    reactor->Refuse(ToGrpcStatus(id.status()));
  } else {
    reactor->Start(*id);
  }
  return reactor;
}

void ClusterService::RemoveSession(SessionReactor* reactor) {
  std::shared_ptr<SessionReactor> last;  // released after the lock
  absl::MutexLock lock(&sessions_mu_);
  auto it = sessions_.find(reactor);
  if (it == sessions_.end()) return;
  last = std::move(it->second);
  sessions_.erase(it);
}

size_t ClusterService::OpenSessions() {
  absl::MutexLock lock(&sessions_mu_);
  return sessions_.size();
}

// One thread for every session's keep-alives: every `keepalive_` each open
// stream gets a CONTINUE unless a directive is on its way.
void ClusterService::KeepAliveLoop() {
  for (;;) {
    std::vector<std::shared_ptr<SessionReactor>> open;
    {
      absl::MutexLock lock(&sessions_mu_);
      auto stopping = [this]() ABSL_SHARED_LOCKS_REQUIRED(sessions_mu_) { return stopping_; };
      c_.clock().AwaitWithTimeout(sessions_mu_, absl::Condition(&stopping), keepalive_);
      if (stopping_) return;
      open.reserve(sessions_.size());
      for (const auto& [raw, owned] : sessions_) open.push_back(owned);
    }
    const absl::Time now = c_.clock().Now();
    for (const auto& r : open) {
      r->EndIfUnopenedBy(now, r->created() + kFirstMessageTimeout);
      r->Pump(true);
    }
  }
}

void ClusterService::Shutdown() {
  std::vector<std::shared_ptr<SessionReactor>> open;
  {
    absl::MutexLock lock(&sessions_mu_);
    stopping_ = true;
    for (const auto& [raw, owned] : sessions_) open.push_back(owned);
  }
  c_.EndWaits("the coordinator is shutting down");
  for (const auto& r : open) {
    r->Refuse(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the coordinator is shutting down"));
  }
}

grpc::Status ClusterService::UploadSnapshot(grpc::ServerContext* ctx,
                                            grpc::ServerReader<tagi::v1::SnapshotChunk>* reader,
                                            tagi::v1::UploadSnapshotResponse*) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.UploadSnapshot");
  auto caller = CallingWorker(*ctx, "Cluster.UploadSnapshot", "");
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  auto up = ReceiveUpload(reader, streams_, c_, Coordinator::UploadKind::kSnapshot, *caller);
  if (!up.ok()) return ToGrpcStatus(up.status());
  return ToGrpcStatus(c_.UploadSnapshot(up->first.worker_id(), up->first.job_id(),
                                        up->first.generation(), up->first.global_step(),
                                        std::move(up->bytes)));
}

grpc::Status ClusterService::DownloadSnapshot(grpc::ServerContext* ctx,
                                              const tagi::v1::DownloadSnapshotRequest* req,
                                              grpc::ServerWriter<tagi::v1::SnapshotData>* writer) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.DownloadSnapshot");
  if (auto id = CallingWorker(*ctx, "Cluster.DownloadSnapshot", req->worker_id()); !id.ok()) {
    return ToGrpcStatus(id.status());
  }
  TAGI_ADMIT_STREAM(streams_, AcquireKey, req->worker_id());
  auto bytes = c_.ResumeSnapshot(req->worker_id(), req->job_id(), req->generation());
  if (!bytes.ok()) return ToGrpcStatus(bytes.status());
  return WriteChunks(writer, **bytes);
}

grpc::Status ClusterService::UploadModel(grpc::ServerContext* ctx,
                                         grpc::ServerReader<tagi::v1::UploadModelRequest>* reader,
                                         tagi::v1::UploadModelResponse*) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.UploadModel");
  auto caller = CallingWorker(*ctx, "Cluster.UploadModel", "");
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  auto up = ReceiveUpload(reader, streams_, c_, Coordinator::UploadKind::kModel, *caller);
  if (!up.ok()) return ToGrpcStatus(up.status());
  return ToGrpcStatus(c_.UploadModel(up->first.worker_id(), up->first.job_id(),
                                     up->first.generation(), up->first.checksum(),
                                     std::move(up->bytes)));
}

grpc::Status ClusterService::FinishJob(grpc::ServerContext* ctx,
                                       const tagi::v1::FinishJobRequest* req,
                                       tagi::v1::FinishJobResponse*) {
  TAGI_CHECK_PROTOCOL(ctx, "Cluster.FinishJob");
  if (auto id = CallingWorker(*ctx, "Cluster.FinishJob", req->worker_id()); !id.ok()) {
    return ToGrpcStatus(id.status());
  }
  return ToGrpcStatus(c_.FinishJob(*req));
}

}  // namespace tagi::coordinator
