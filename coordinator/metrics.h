// CoordinatorMetrics: the coordinator's Prometheus metrics.
//
// Every gauge is computed at scrape time from Coordinator::Stats(), a
// read-only snapshot taken under the coordinator's lock; nothing on the
// coordinator's hot paths records anything. The one histogram,
// tagi_coordinator_rendezvous_seconds, is fed by what successive snapshots
// reveal: the first scrape that sees a generation of a job running observes
// that generation's rendezvous time (started -> all ranks joined), once.
//
// The registry lives inside the object (no global registry), so tests can
// build several. Series of jobs that are over are dropped from the per-job
// families (job_generation, job_samples_per_second, ...) except for the
// most recently ended job, which stays so that dashboards show its final
// values; workers that are gone keep no heartbeat-age series.
//
// Thread-safe: Scrape() may be called concurrently (it serialises).
#ifndef TAGI_COORDINATOR_METRICS_H_
#define TAGI_COORDINATOR_METRICS_H_

#include <memory>
#include <string>

#include "common/clock.h"

namespace tagi::coordinator {

class Coordinator;
struct MetricsState;

class CoordinatorMetrics {
 public:
  // `coordinator` and `clock` must outlive this object.
  CoordinatorMetrics(Coordinator& coordinator, Clock& clock);
  ~CoordinatorMetrics();
  CoordinatorMetrics(const CoordinatorMetrics&) = delete;
  CoordinatorMetrics& operator=(const CoordinatorMetrics&) = delete;

  // The Prometheus text exposition (format 0.0.4) of every coordinator metric, computed at call time.
  std::string Scrape();

 private:
  Coordinator& coordinator_;
  Clock& clock_;
  std::unique_ptr<MetricsState> state_;
};

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_METRICS_H_
