#include "coordinator/membership.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"

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

bool IsCudaDevice(const std::string& device) {
  const absl::StatusOr<int> ordinal = ParseDevice(device);
  return ordinal.ok() && *ordinal >= 0;
}

std::string WaitingReason(int world, bool gpu) {
  return absl::StrFormat("waiting for %d idle %sworkers", world, gpu ? "cuda " : "");
}

std::vector<Placement> DecidePlacements(absl::Time now,
                                        const std::vector<PendingJobView>& queue,
                                        const std::vector<WorkerView>& workers,
                                        const MembershipOptions& options) {
  struct Free {
    std::string id;
    bool gpu;
    bool taken;
  };
  std::vector<Free> free;
  for (const WorkerView& w : workers) {
    if (w.idle && Live(now, w, options)) free.push_back({w.id, w.gpu, false});
  }
  std::sort(free.begin(), free.end(),
            [](const Free& a, const Free& b) { return WorkerIdLess(a.id, b.id); });
  std::vector<Placement> out;
  for (const PendingJobView& job : queue) {
    // The workers this job may take, most preferred first: GPU workers for
    // a GPU job; CPU workers, then GPU workers, for a CPU job.
    std::vector<Free*> eligible;
    for (Free& f : free) {
      if (!f.taken && f.gpu == job.gpu) eligible.push_back(&f);
    }
    if (!job.gpu) {
      for (Free& f : free) {
        if (!f.taken && f.gpu) eligible.push_back(&f);
      }
    }
    const size_t need = static_cast<size_t>(job.world);
    if (eligible.size() < need) continue;
    const size_t available = eligible.size();
    Placement p;
    p.job_id = job.id;
    p.workers.assign(need, "");
    size_t kept = 0;
    for (size_t rank = 0; rank < need && rank < job.previous.size(); ++rank) {
      auto it = std::find_if(eligible.begin(), eligible.end(), [&](const Free* f) {
        return !f->taken && f->id == job.previous[rank];
      });
      if (it == eligible.end()) continue;
      p.workers[rank] = (*it)->id;
      (*it)->taken = true;
      ++kept;
    }
    auto next = eligible.begin();
    for (std::string& slot : p.workers) {
      if (!slot.empty()) continue;
      while ((*next)->taken) ++next;
      slot = (*next)->id;
      (*next)->taken = true;
    }
    const char* kind = job.gpu ? "cuda " : "";
    p.reason = job.previous.empty()
                   ? absl::StrFormat("%d idle %sworkers for world %d: ranks %s", available, kind,
                                     need, RankList(p.workers))
                   : absl::StrFormat("resumed on %d %sworkers (%d kept their ranks): ranks %s",
                                     need, kind, kept, RankList(p.workers));
    out.push_back(std::move(p));
  }
  return out;
}

std::string RankList(const std::vector<std::string>& workers) {
  if (workers.size() <= kRanksNamed) return absl::StrJoin(workers, ", ");
  return absl::StrCat(
      absl::StrJoin(workers.begin(), workers.begin() + static_cast<long>(kRanksNamed), ", "),
      " and ", workers.size() - kRanksNamed, " more");
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
