// JobLog: the log lines a job's ranks sent, as the coordinator keeps them
// with the job's record: numbered from 1 in the order received (seq),
// bounded in lines and bytes (the oldest go first, and are counted), read
// from any seq on, and encoded for the state dir (a tagi.v1.JobLogs).
// Not thread-safe: the coordinator's lock guards each job's.
#ifndef TAGI_COORDINATOR_JOB_LOG_H_
#define TAGI_COORDINATOR_JOB_LOG_H_

#include <cstdint>
#include <deque>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tagi/v1/jobs.pb.h"

namespace tagi::coordinator {

// A job's log is written to the state dir (logs/ID.logs) at most this
// often while lines come in, and read back up to this size.
inline constexpr absl::Duration kLogWriteInterval = absl::Seconds(2);
inline constexpr size_t kMaxJobLogFileBytes = size_t{8} << 20;

struct JobLogLimits {
  size_t max_lines = 5000;
  size_t max_bytes = size_t{1} << 20;  // of text
  size_t max_line_bytes = 2048;        // longer lines are cut (and say so)
  size_t max_read_lines = 1000;        // one Since() answer
};

class JobLog {
 public:
  explicit JobLog(JobLogLimits limits = {}) : limits_(limits) {}

  // Appends a line (its seq is the next number), then drops the oldest
  // lines while over the limits.
  void Append(int64_t time_ms, uint32_t rank, uint64_t generation, const std::string& worker_id,
              absl::string_view text);
  // Lines lost before they got here (a worker's full queue).
  void AddDropped(uint64_t n) { dropped_ += n; }

  // The lines after seq `after`, at most `max_lines` (0 or more than the
  // limit: max_read_lines); `next` is the last one's seq (or `after`).
  // The state is the caller's to fill.
  tagi::v1::JobLogs Since(uint64_t after, size_t max_lines) const;

  std::string Encode() const;
  // A log as Encode wrote it; DataLoss for bytes that are not one. The
  // limits apply to what it holds (a file from a larger limit is trimmed).
  static absl::StatusOr<JobLog> Decode(absl::string_view bytes, JobLogLimits limits = {});

  size_t size() const { return lines_.size(); }
  size_t bytes() const { return bytes_; }
  uint64_t dropped() const { return dropped_; }
  uint64_t last_seq() const { return next_ - 1; }

 private:
  void Trim();

  JobLogLimits limits_;
  std::deque<tagi::v1::JobLogLine> lines_;
  size_t bytes_ = 0;
  uint64_t next_ = 1;
  uint64_t dropped_ = 0;
};

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_JOB_LOG_H_
