// WorkerMetrics: the Prometheus metrics of one worker, and the HTTP
// endpoint that serves them (tagi-worker --metrics HOST:PORT).
//
// Every series carries the labels job, rank and worker. A worker trains one
// job at a time, so it exports the series of its current job attempt, or of
// its last one until the next begins: StartJob() removes the previous
// attempt's series, which keeps the number of series bounded however many
// jobs the worker runs. Epoch gauges (accuracies, log-likelihood, RMSE,
// sigma_v) appear after the first epoch of an attempt; accuracies only for
// classification jobs, RMSE only for regression.
//
// The registry lives in the object (no global registry). Thread-safe: the
// training thread records while the endpoint's threads collect.
#ifndef TAGI_WORKER_METRICS_H_
#define TAGI_WORKER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/trainer.h"

namespace tagi {

struct WorkerMetricsState;

class WorkerMetrics {
 public:
  WorkerMetrics();
  ~WorkerMetrics();
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // Begins the series of a job attempt (and drops the previous attempt's).
  void StartJob(const std::string& job, uint32_t rank, const std::string& worker,
                bool classification);
  // After each step: its timings and this rank's samples/s in the epoch so
  // far. REQUIRES: StartJob() was called.
  void RecordStep(const StepTimings& step, double samples_per_second);
  // After each epoch. REQUIRES: StartJob() was called.
  void RecordEpoch(const EpochMetrics& epoch);

  // Whether the worker's session to the coordinator is open and heard
  // (gauge tagi_worker_coordinator_connected; the endpoint's /readyz).
  void SetCoordinatorConnected(bool connected);
  bool coordinator_connected();

  // The Prometheus text exposition (format 0.0.4) of every worker metric.
  std::string Scrape();

 private:
  friend class MetricsEndpoint;
  std::unique_ptr<WorkerMetricsState> state_;
};

// Serves WorkerMetrics at http://ADDRESS/metrics from its own threads until
// destroyed, with /healthz (200 while the process serves: liveness) and
// /readyz (200 while its session to the coordinator is open, else 503 with
// the reason: readiness). The metrics must outlive the endpoint.
class MetricsEndpoint {
 public:
  // `address` is HOST:PORT (port 0 picks a free one). Unavailable when the
  // address cannot be bound (e.g. the port is in use).
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& address,
                                                                WorkerMetrics& metrics);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }

 private:
  struct Server;
  MetricsEndpoint(std::unique_ptr<Server> server, int port);
  std::unique_ptr<Server> server_;
  int port_ = 0;
};

}  // namespace tagi

#endif  // TAGI_WORKER_METRICS_H_
