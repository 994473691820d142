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
  std::vector<bool> taken(free.size(), false);
  size_t left = free.size();
  std::vector<Placement> out;
  for (const PendingJobView& job : queue) {
    const size_t need = static_cast<size_t>(job.world);
    if (left < need) continue;
    Placement p;
    p.job_id = job.id;
    p.workers.assign(need, "");
    size_t kept = 0;
    for (size_t rank = 0; rank < need && rank < job.previous.size(); ++rank) {
      auto it = std::find(free.begin(), free.end(), job.previous[rank]);
      const size_t i = static_cast<size_t>(it - free.begin());
      if (it == free.end() || taken[i]) continue;
      p.workers[rank] = *it;
      taken[i] = true;
      ++kept;
    }
    size_t next = 0;
    for (std::string& slot : p.workers) {
      if (!slot.empty()) continue;
      while (taken[next]) ++next;
      slot = free[next];
      taken[next] = true;
    }
    left -= need;
    p.reason = job.previous.empty()
                   ? absl::StrFormat("%d idle workers for world %d: ranks %s", free.size(), need,
                                     absl::StrJoin(p.workers, ", "))
                   : absl::StrFormat("resumed on %d workers (%d kept their ranks): ranks %s",
                                     need, kept, absl::StrJoin(p.workers, ", "));
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
