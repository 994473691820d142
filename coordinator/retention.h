// Retention of ended jobs: which SUCCEEDED, FAILED and CANCELLED jobs the
// coordinator forgets (record, final model and snapshots), so that its
// memory, its state dir and `tagictl list` stay bounded however long it
// runs. A pure function; thread-safe.
#ifndef TAGI_COORDINATOR_RETENTION_H_
#define TAGI_COORDINATOR_RETENTION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace tagi::coordinator {

struct RetentionOptions {
  size_t max_ended_jobs = 1000;                      // kept, newest by end time
  absl::Duration max_ended_age = absl::Hours(24 * 7);  // since the job ended
};

struct EndedJob {
  std::string id;
  absl::Time ended;
  uint64_t seq = 0;  // submission order, to break ties
};

struct Pruning {
  std::string id;
  std::string reason;  // for the log: "ended 8d ago (limit 7d)", "beyond the newest 1000"
};

// The ended jobs to remove: every one that ended more than max_ended_age
// before `now`, then the oldest (by end time, then submission) beyond the
// newest max_ended_jobs. Order of `ended` does not matter.
std::vector<Pruning> DecideRetention(absl::Time now, std::vector<EndedJob> ended,
                                     const RetentionOptions& options);

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_RETENTION_H_
