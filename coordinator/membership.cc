#include "coordinator/membership.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tagi::coordinator {
namespace {

bool Live(absl::Time now, const WorkerView& w, const MembershipOptions& o) {
  return now - w.last_seen <= o.worker_timeout;
}

uint64_t NumericSuffix(const std::string& id) {
  const size_t dash = id.rfind('-');
  uint64_t n = 0;
  if (dash == std::string::npos) return 0;
  std::from_chars(id.data() + dash + 1, id.data() + id.size(), n);
  return n;
}

}  // namespace

bool WorkerIdLess(const std::string& a, const std::string& b) {
  const uint64_t na = NumericSuffix(a);
  const uint64_t nb = NumericSuffix(b);
  return na != nb ? na < nb : a < b;
}

std::vector<Placement> DecidePlacements(absl::Time now,
                                        const std::vector<PendingJobView>& queue,
                                        const std::vector<WorkerView>& workers,
                                        const MembershipOptions& options) {
  std::vector<std::string> free;
  for (const WorkerView& w : workers) {
    if (w.idle && Live(now, w, options)) free.push_back(w.id);
  }
  std::sort(free.begin(), free.end(), WorkerIdLess);
  std::vector<Placement> out;
  size_t next = 0;
  for (const PendingJobView& job : queue) {
    const size_t need = static_cast<size_t>(job.world);
    if (free.size() - next < need) continue;
    Placement p;
    p.job_id = job.id;
    p.workers.assign(free.begin() + static_cast<long>(next),
                     free.begin() + static_cast<long>(next + need));
    next += need;
    p.reason = absl::StrFormat("%d idle workers for world %d: ranks %s", free.size(), need,
                               absl::StrJoin(p.workers, ", "));
    out.push_back(std::move(p));
  }
  return out;
}

std::vector<Departure> DecideDepartures(absl::Time now, const std::vector<WorkerView>& workers,
                                        const MembershipOptions& options) {
  std::vector<Departure> out;
  for (const WorkerView& w : workers) {
    if (!Live(now, w, options)) {
      out.push_back({w.id, absl::StrCat("not heard from for ",
                                        absl::FormatDuration(absl::Trunc(now - w.last_seen,
                                                                         absl::Milliseconds(1))),
                                        " (timeout ", absl::FormatDuration(options.worker_timeout),
                                        ")")});
    }
  }
  return out;
}

}  // namespace tagi::coordinator
