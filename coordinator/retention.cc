#include "coordinator/retention.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_format.h"

namespace tagi::coordinator {

std::vector<Pruning> DecideRetention(absl::Time now, std::vector<EndedJob> ended,
                                     const RetentionOptions& options) {
  // Newest first.
  std::sort(ended.begin(), ended.end(), [](const EndedJob& a, const EndedJob& b) {
    return std::tie(a.ended, a.seq) > std::tie(b.ended, b.seq);
  });
  std::vector<Pruning> out;
  for (size_t i = 0; i < ended.size(); ++i) {
    const absl::Duration age = now - ended[i].ended;
    if (age > options.max_ended_age) {
      out.push_back({ended[i].id, absl::StrFormat("ended %s ago (--retain-ended-for %s)",
                                                  absl::FormatDuration(absl::Floor(age, absl::Seconds(1))),
                                                  absl::FormatDuration(options.max_ended_age))});
    } else if (i >= options.max_ended_jobs) {
      out.push_back({ended[i].id, absl::StrFormat("beyond the newest %d ended jobs "
                                                  "(--retain-ended-jobs)",
                                                  options.max_ended_jobs)});
    }
  }
  return out;
}

}  // namespace tagi::coordinator
