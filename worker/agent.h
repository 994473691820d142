// Agent: the worker's lifecycle. Registers with the coordinator (retrying
// with exponential backoff and jitter while it is unreachable), waits for
// an assignment, runs it with RunAssignment, and goes back to waiting, until
// asked to stop. Re-registers when the coordinator forgot it (a restart).
// Run() blocks; Stop() may be called from another thread.
#ifndef TAGI_WORKER_AGENT_H_
#define TAGI_WORKER_AGENT_H_

#include <atomic>
#include <string>

#include "common/clock.h"
#include "worker/coordinator_client.h"
#include "worker/job_runner.h"

namespace tagi {

struct AgentOptions {
  std::string coordinator;  // host:port
  std::string device = "cpu";
  std::string hostname;
  JobRunnerOptions runner;  // worker_id is filled in by registration
  absl::Duration rpc_timeout = absl::Seconds(10);
  absl::Duration poll = absl::Seconds(2);  // rendezvous long-poll length
  absl::Duration max_backoff = absl::Seconds(5);
  int max_jobs = 0;  // stop after this many jobs (0: never); for tests and benchmarks
};

class Agent {
 public:
  Agent(AgentOptions options, Clock& clock);
  // Returns 0 after Stop() or max_jobs, 1 on a permanent error (e.g. the
  // coordinator speaks another protocol version).
  int Run();
  void Stop() { stop_ = true; }

 private:
  bool RegisterWithRetry();
  void Backoff(int attempt);

  AgentOptions options_;
  Clock& clock_;
  CoordinatorClient client_;
  std::atomic<bool> stop_{false};
  std::string worker_id_;
};

}  // namespace tagi

#endif  // TAGI_WORKER_AGENT_H_
