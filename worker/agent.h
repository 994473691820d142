// Agent: the worker's lifecycle. Registers with the coordinator (retrying
// with exponential backoff and jitter while it is unreachable), opens its
// session stream (worker/session.h: heartbeats, progress, directives),
// waits for an assignment, runs it with RunAssignment, and goes back to
// waiting, until asked to stop. An attempt that ends because its group
// failed is not the worker's end: it asks for work again at once (the
// coordinator resumes the job in a new generation). Re-registers, keeping
// its id, when the coordinator forgot it (a restart).
// Run() blocks; Stop() may be called from another thread. The coordinator
// and the session streams are seams: gRPC in production, fakes in tests
// (tests/worker/fake_coordinator.h, fake_session_streams.h).
#ifndef TAGI_WORKER_AGENT_H_
#define TAGI_WORKER_AGENT_H_

#include <atomic>
#include <memory>
#include <string>

#include "common/clock.h"
#include "common/grpc_util.h"
#include "worker/coordinator_api.h"
#include "worker/coordinator_client.h"
#include "worker/job_runner.h"
#include "worker/session.h"
#include "worker/session_stream.h"

namespace tagi {

struct AgentOptions {
  std::string coordinator;  // host:port
  ClientSecurity security;  // TLS and the join token, for every Cluster call
  std::string device = "cpu";
  std::string hostname;
  JobRunnerOptions runner;  // worker_id is filled in by registration
  absl::Duration rpc_timeout = absl::Seconds(10);
  absl::Duration poll = absl::Seconds(2);  // rendezvous long-poll length
  absl::Duration max_backoff = absl::Seconds(5);
  // The coordinator silent on the session for this many heartbeats: reconnect.
  int silence_heartbeats = 3;
  int max_jobs = 0;  // stop after this many jobs (0: never); for tests and benchmarks
};

class Agent {
 public:
  // Talks gRPC to options.coordinator.
  Agent(AgentOptions options, Clock& clock);
  // Talks to `coordinator` and opens its session on `streams` (both
  // outlive the agent); options.coordinator only names it in logs.
  Agent(AgentOptions options, Clock& clock, CoordinatorApi& coordinator,
        SessionStreams& streams);
  // Returns 0 after Stop() or max_jobs, 1 on a permanent error (e.g. the
  // coordinator speaks another protocol version).
  int Run();
  void Stop() {
    absl::MutexLock lock(&stop_mu_);
    stop_ = true;
  }

 private:
  bool RegisterWithRetry();
  // As a spare: loads the data of a running job into the cache.
  void Warm(const tagi::v1::JobSpec& spec);
  void Backoff(int attempt);

  AgentOptions options_;
  Clock& clock_;
  std::unique_ptr<CoordinatorClient> grpc_client_;  // when the agent makes its own
  std::unique_ptr<GrpcSessionStreams> grpc_streams_;  // over grpc_client_
  CoordinatorApi& client_;
  SessionStreams& streams_;
  absl::Mutex stop_mu_;  // held to set stop_, so that a back-off wakes
  std::atomic<bool> stop_{false};
  std::string worker_id_;
  absl::Duration heartbeat_ = absl::Seconds(1);  // from the coordinator
  DataCache data_cache_;
  std::string warm_error_;  // the last one logged
};

}  // namespace tagi

#endif  // TAGI_WORKER_AGENT_H_
