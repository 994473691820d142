#include "coordinator/membership.h"

#include <algorithm>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "common/progress_bar.h"
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

std::string WaitingReason(int world, bool gpu, int min_world) {
  if (min_world > 0 && min_world < world) {
    return absl::StrFormat("waiting for %d to %d idle %sworkers", min_world, world,
                           gpu ? "cuda " : "");
  }
  return absl::StrCat("waiting for ", Counted(world, gpu ? "idle cuda worker" : "idle worker"));
}

namespace {

struct Free {
  std::string id;
  bool gpu;
  bool taken;
};

// The idle, live workers in id order.
std::vector<Free> FreeWorkers(absl::Time now, const std::vector<WorkerView>& workers,
                              const MembershipOptions& options) {
  std::vector<Free> free;
  for (const WorkerView& w : workers) {
    if (w.idle && Live(now, w, options)) free.push_back({w.id, w.gpu, false});
  }
  std::sort(free.begin(), free.end(),
            [](const Free& a, const Free& b) { return WorkerIdLess(a.id, b.id); });
  return free;
}

// The workers a job may take, most preferred first: GPU workers for a GPU
// job; CPU workers, then GPU workers, for a CPU job.
std::vector<Free*> Eligible(std::vector<Free>& free, bool gpu_job) {
  std::vector<Free*> eligible;
  for (Free& f : free) {
    if (!f.taken && f.gpu == gpu_job) eligible.push_back(&f);
  }
  if (!gpu_job) {
    for (Free& f : free) {
      if (!f.taken && f.gpu) eligible.push_back(&f);
    }
  }
  return eligible;
}

// The workers of `job`'s ranks, `need` of them, from `eligible` (marked
// taken): a fixed job's previous workers keep their ranks; an elastic
// job's come first in their old order; the lowest free ids fill the rest.
std::vector<std::string> AssignRanks(const PendingJobView& job, std::vector<Free*>& eligible,
                                     size_t need, size_t* kept) {
  std::vector<std::string> ranks(need, "");
  *kept = 0;
  size_t next_rank = 0;  // elastic: the next rank to give a previous worker
  for (size_t rank = 0; rank < job.previous.size(); ++rank) {
    if (job.min_world == 0 && rank >= need) break;
    if (job.min_world > 0 && next_rank >= need) break;
    auto it = std::find_if(eligible.begin(), eligible.end(), [&](const Free* f) {
      return !f->taken && f->id == job.previous[rank];
    });
    if (it == eligible.end()) continue;
    ranks[job.min_world > 0 ? next_rank++ : rank] = (*it)->id;
    (*it)->taken = true;
    ++*kept;
  }
  auto next = eligible.begin();
  for (std::string& slot : ranks) {
    if (!slot.empty()) continue;
    while ((*next)->taken) ++next;
    slot = (*next)->id;
    (*next)->taken = true;
  }
  return ranks;
}

// Whether any of the job's previous workers is still returning (or, for a
// job that never ran, whether more workers may yet register): what an
// elastic job's settle time waits for.
bool Awaits(const PendingJobView& job, const std::vector<WorkerView>& workers) {
  if (job.previous.empty()) return true;
  return std::any_of(workers.begin(), workers.end(), [&](const WorkerView& w) {
    return w.returning &&
           std::find(job.previous.begin(), job.previous.end(), w.id) != job.previous.end();
  });
}

}  // namespace

std::vector<Placement> DecidePlacements(absl::Time now,
                                        const std::vector<PendingJobView>& queue,
                                        const std::vector<WorkerView>& workers,
                                        const MembershipOptions& options) {
  std::vector<Free> free = FreeWorkers(now, workers, options);
  std::vector<Placement> out;
  for (const PendingJobView& job : queue) {
    std::vector<Free*> eligible = Eligible(free, job.gpu);
    const bool elastic = job.min_world > 0;
    const size_t least = static_cast<size_t>(elastic ? job.min_world : job.world);
    if (eligible.size() < least) continue;
    const size_t available = eligible.size();
    const size_t need = std::min(available, static_cast<size_t>(job.world));
    if (elastic && need < static_cast<size_t>(job.world) &&
        now - job.since < options.elastic_settle && Awaits(job, workers)) {
      // Waiting for more: hold the ones it has (previous workers first).
      size_t kept = 0;
      AssignRanks(job, eligible, need, &kept);
      continue;
    }
    Placement p;
    p.job_id = job.id;
    size_t kept = 0;
    p.workers = AssignRanks(job, eligible, need, &kept);
    const char* kind = job.gpu ? "cuda " : "";
    const std::string bounds =
        elastic ? absl::StrFormat(" (elastic %d-%d)", job.min_world, job.world) : "";
    p.reason = job.previous.empty()
                   ? absl::StrFormat("placed on %s%s: ranks %s",
                                     Counted(need, absl::StrCat(kind, "worker")), bounds,
                                     RankList(p.workers))
                   : absl::StrFormat("resumed on %s%s (%d kept their ranks): ranks %s",
                                     Counted(need, absl::StrCat(kind, "worker")), bounds, kept,
                                     RankList(p.workers));
    out.push_back(std::move(p));
  }
  return out;
}

std::optional<Growth> DecideGrowth(absl::Time now, const RunningJobView& job,
                                   const std::vector<PendingJobView>& queue,
                                   const std::vector<WorkerView>& workers,
                                   const MembershipOptions& options) {
  if (job.world >= job.max_world) return std::nullopt;
  std::vector<Free> free = FreeWorkers(now, workers, options);
  std::vector<Free*> eligible = Eligible(free, job.gpu);
  if (eligible.empty()) return std::nullopt;
  for (const PendingJobView& waiting : queue) {
    // A CPU job can use any worker; a GPU job the GPU workers.
    const bool usable = std::any_of(eligible.begin(), eligible.end(),
                                    [&](const Free* f) { return !waiting.gpu || f->gpu; });
    if (usable) return std::nullopt;
  }
  Growth g;
  g.job_id = job.id;
  g.from = job.world;
  g.to = std::min(job.max_world, job.world + static_cast<int>(eligible.size()));
  for (int i = 0; i < g.to - g.from; ++i) g.joining.push_back(eligible[i]->id);
  g.reason = absl::StrFormat("growing from %d to %d ranks at a snapshot point: idle %s %s",
                             g.from, g.to, g.joining.size() == 1 ? "worker" : "workers",
                             RankList(g.joining));
  return g;
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

absl::Duration RestartDelay(int quick_failures) {
  if (quick_failures <= kFreeQuickRestarts) return absl::ZeroDuration();
  absl::Duration d = kRestartBackoffBase;
  for (int i = kFreeQuickRestarts + 1; i < quick_failures && d < kMaxRestartBackoff; ++i) d *= 2;
  return std::min(d, kMaxRestartBackoff);
}

WorkerStrikes AfterStrike(const WorkerStrikes& s, const std::string& generation,
                          absl::Time now) {
  if (generation == s.last) return s;  // one strike per generation
  WorkerStrikes next = s;
  next.last = generation;
  if (++next.in_a_row < kStrikesBeforeExclusion) return next;
  absl::Duration d = kExclusionBase;
  for (int i = 0; i < s.exclusions && d < kMaxExclusion; ++i) d *= 2;
  next.excluded_until = now + std::min(d, kMaxExclusion);
  next.in_a_row = 0;
  ++next.exclusions;
  return next;
}

WorkerStrikes AfterGoodGeneration(const WorkerStrikes& s) {
  WorkerStrikes next = s;
  next.in_a_row = 0;
  next.exclusions = 0;
  return next;
}

std::vector<std::string> GoneWorkersToForget(std::vector<GoneWorkerView> gone,
                                             const MembershipOptions& options) {
  std::vector<std::string> out;
  if (gone.size() <= options.keep_gone_workers) return out;
  const size_t excess = gone.size() - options.keep_gone_workers;
  std::erase_if(gone, [](const GoneWorkerView& w) { return w.holds_rank; });
  std::sort(gone.begin(), gone.end(), [](const GoneWorkerView& a, const GoneWorkerView& b) {
    if (a.last_seen != b.last_seen) return a.last_seen < b.last_seen;
    return WorkerIdLess(a.id, b.id);
  });
  for (size_t i = 0; i < gone.size() && out.size() < excess; ++i) out.push_back(gone[i].id);
  return out;
}

}  // namespace tagi::coordinator
