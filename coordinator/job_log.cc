#include "coordinator/job_log.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace tagi::coordinator {

void JobLog::Append(int64_t time_ms, uint32_t rank, uint64_t generation,
                    const std::string& worker_id, absl::string_view text) {
  tagi::v1::JobLogLine& line = lines_.emplace_back();
  line.set_seq(next_++);
  line.set_time_ms(time_ms);
  line.set_rank(rank);
  line.set_generation(generation);
  line.set_worker_id(worker_id);
  if (text.size() > limits_.max_line_bytes) {
    line.set_text(absl::StrCat(text.substr(0, limits_.max_line_bytes), " [cut]"));
  } else {
    line.set_text(std::string(text));
  }
  bytes_ += line.text().size();
  Trim();
}

void JobLog::Trim() {
  while (!lines_.empty() && (lines_.size() > limits_.max_lines || bytes_ > limits_.max_bytes)) {
    bytes_ -= lines_.front().text().size();
    lines_.pop_front();
    ++dropped_;
  }
}

tagi::v1::JobLogs JobLog::Since(uint64_t after, size_t max_lines) const {
  tagi::v1::JobLogs out;
  const size_t most =
      max_lines == 0 ? limits_.max_read_lines : std::min(max_lines, limits_.max_read_lines);
  // Lines are in seq order: the first one past `after` by binary search.
  auto first = std::upper_bound(lines_.begin(), lines_.end(), after,
                                [](uint64_t a, const tagi::v1::JobLogLine& l) {
                                  return a < l.seq();
                                });
  for (auto it = first; it != lines_.end() && static_cast<size_t>(out.lines_size()) < most;
       ++it) {
    *out.add_lines() = *it;
  }
  out.set_next(out.lines_size() > 0 ? out.lines(out.lines_size() - 1).seq()
                                    : std::max(after, uint64_t{0}));
  out.set_dropped(dropped_);
  return out;
}

std::string JobLog::Encode() const {
  tagi::v1::JobLogs all;
  for (const tagi::v1::JobLogLine& l : lines_) *all.add_lines() = l;
  all.set_next(next_);
  all.set_dropped(dropped_);
  return all.SerializeAsString();
}

absl::StatusOr<JobLog> JobLog::Decode(absl::string_view bytes, JobLogLimits limits) {
  tagi::v1::JobLogs all;
  if (!all.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return absl::DataLossError("not a job log");
  }
  JobLog log(limits);
  uint64_t before = 0;
  for (tagi::v1::JobLogLine& l : *all.mutable_lines()) {
    if (l.seq() <= before || l.seq() >= all.next()) {
      return absl::DataLossError("a job log whose lines are out of order");
    }
    before = l.seq();
    if (l.text().size() > limits.max_line_bytes) l.mutable_text()->resize(limits.max_line_bytes);
    log.bytes_ += l.text().size();
    log.lines_.push_back(std::move(l));
  }
  log.next_ = std::max<uint64_t>(all.next(), 1);
  log.dropped_ = all.dropped();
  log.Trim();
  return log;
}

}  // namespace tagi::coordinator
