#include "worker/agent.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <thread>

#include "worker/attempt.h"
#include "worker/job_rules.h"
#include "worker/metrics.h"

#include "absl/strings/str_format.h"
#include "common/backoff.h"
#include "common/worker_credentials.h"

namespace tagi {

Agent::Agent(AgentOptions options, Clock& clock)
    : options_(std::move(options)),
      clock_(clock),
      grpc_client_(std::make_unique<CoordinatorClient>(options_.coordinator,
                                                       options_.rpc_timeout, options_.security)),
      grpc_streams_(std::make_unique<GrpcSessionStreams>(*grpc_client_)),
      client_(*grpc_client_),
      streams_(*grpc_streams_) {}

Agent::Agent(AgentOptions options, Clock& clock, CoordinatorApi& coordinator,
             SessionStreams& streams)
    : options_(std::move(options)), clock_(clock), client_(coordinator), streams_(streams) {}

void Agent::Backoff(int attempt) {
  const absl::Time until =
      clock_.Now() + BackoffDelay(attempt, options_.max_backoff,
                                  static_cast<uint64_t>(absl::ToUnixNanos(clock_.WallNow())));
  absl::MutexLock lock(&stop_mu_);  // Stop() wakes it
  auto stopping = [this]() { return stop_.load(); };
  clock_.AwaitWithDeadline(stop_mu_, absl::Condition(&stopping), until);
}

bool Agent::RegisterWithRetry() {
  tagi::v1::RegisterRequest req;
  req.set_hostname(options_.hostname);
  req.set_device(options_.device);
  req.set_threads(static_cast<uint32_t>(options_.runner.threads));
  req.set_worker_id(worker_id_);
  // One nonce for every try of this registration: a retry whose first try
  // was answered too late gets the same id, not a second one.
  if (auto nonce = RandomHex(16); nonce.ok()) req.set_nonce(*nonce);
  for (int attempt = 0; !stop_; ++attempt) {
    auto resp = client_.Register(req);
    if (resp.ok()) {
      worker_id_ = resp->worker_id();
      if (resp->heartbeat_ms() > 0) heartbeat_ = absl::Milliseconds(resp->heartbeat_ms());
      std::fprintf(stderr, "tagi-worker: registered with %s as %s\n",
                   options_.coordinator.c_str(), worker_id_.c_str());
      return true;
    }
    if (!RetryRegistration(resp.status())) {
      std::fprintf(stderr, "tagi-worker: the coordinator refused us: %s%s\n",
                   std::string(resp.status().message()).c_str(),
                   absl::IsUnauthenticated(resp.status()) ? " (check --join-token-file)" : "");
      return false;
    }
    if (attempt == 0 || attempt % 10 == 0) {
      std::fprintf(stderr, "tagi-worker: cannot reach %s (%s); retrying\n",
                   options_.coordinator.c_str(),
                   ExplainCallFailure(resp.status(), !options_.security.tls_ca_pem.empty()).c_str());
    }
    Backoff(attempt);
  }
  return false;
}

void Agent::Warm(const tagi::v1::JobSpec& spec) {
  const absl::Status st = WarmDataCache(spec, data_cache_, options_.runner.data_roots);
  if (!st.ok() && warm_error_ != st.message()) {
    warm_error_ = std::string(st.message());
    std::fprintf(stderr, "tagi-worker %s: cannot load the data of a running job ahead: %s\n",
                 worker_id_.c_str(), warm_error_.c_str());
  }
}

int Agent::Run() {
  if (!RegisterWithRetry()) return stop_ ? 0 : 1;
  // The id stays the same across re-registrations (its credentials keep
  // it), so one session serves the run; a coordinator that no longer
  // accepts the credentials (it lost its state dir) gives a new id, and
  // the session starts again under it.
  std::optional<Session> session;
  auto start_session = [&] {
    SessionOptions so;
    so.worker_id = worker_id_;
    so.hostname = options_.hostname;
    so.device = options_.device;
    so.heartbeat = heartbeat_;
    so.report_interval = std::min(options_.runner.report_interval, heartbeat_);
    so.silence_timeout = heartbeat_ * options_.silence_heartbeats;
    so.max_backoff = options_.max_backoff;
    if (WorkerMetrics* m = options_.runner.metrics; m != nullptr) {
      so.on_connected = [m](bool connected) { m->SetCoordinatorConnected(connected); };
    }
    session.reset();
    session.emplace(streams_, so, clock_);
    session->Start();
  };
  start_session();
  int jobs = 0;
  int failures = 0;
  while (!stop_) {
    auto resp = client_.Rendezvous(worker_id_, options_.poll);
    if (!resp.ok()) {
      const RendezvousAction action = OnRendezvousFailure(resp.status());
      if (action == RendezvousAction::kRegisterAgain || action == RendezvousAction::kNewIdentity) {
        if (action == RendezvousAction::kNewIdentity) {
          std::fprintf(stderr, "tagi-worker %s: the coordinator refused our credentials (%s); "
                       "registering again\n", worker_id_.c_str(),
                       std::string(resp.status().message()).c_str());
          client_.ClearCredentials();
          worker_id_.clear();
        }
        const std::string before = worker_id_;
        if (!RegisterWithRetry()) return stop_ ? 0 : 1;
        if (worker_id_ != before) start_session();
        continue;
      }
      if (action == RendezvousAction::kStop) return 1;
      Backoff(failures++);
      continue;
    }
    failures = 0;
    if (!resp->assigned()) {
      if (resp->has_warm()) Warm(resp->warm());
      continue;
    }
    const tagi::v1::Assignment& a = resp->assignment();
    std::fprintf(stderr, "tagi-worker %s: job %s generation %d: rank %d of %d\n",
                 worker_id_.c_str(), a.job_id().c_str(), static_cast<int>(a.generation()),
                 a.rank(), a.world_size());
    JobRunnerOptions runner = options_.runner;
    runner.worker_id = worker_id_;
    runner.shutting_down = [this] { return stop_.load(); };
    runner.data_cache = &data_cache_;
    AttemptControl control(a);
    control.SetPoke([&session] { session->Poke(); });
    control.SetLogSink([&session, &a](const std::string& text) {
      session->Log(a.job_id(), a.generation(), a.rank(), text);
    });
    session->SetAttempt(&control);
    const JobOutcome out = RunAssignment(client_, runner, a, clock_, control);
    session->SetAttempt(nullptr);
    const std::string end = absl::StrFormat(
        "%s%s%s", out.ok ? "finished" : (out.cancelled ? "cancelled" : "failed"),
        out.reason.empty() ? "" : ": ", out.reason);
    std::fprintf(stderr, "tagi-worker %s: job %s generation %d %s\n", worker_id_.c_str(),
                 a.job_id().c_str(), static_cast<int>(a.generation()), end.c_str());
    session->Log(a.job_id(), a.generation(), a.rank(), end);  // in the job's log too
    // An attempt whose group failed does not count: the job goes on.
    if (options_.max_jobs > 0 && !(out.retryable && !stop_) && ++jobs >= options_.max_jobs) break;
  }
  return 0;
}

}  // namespace tagi
