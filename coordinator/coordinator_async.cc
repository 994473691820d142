// The long polls of the asynchronous Cluster service (coordinator.h):
// waits registered with a deadline and a callback instead of a thread
// parked on the mutex. Each is answered by the event it waits for
// (AnswerPollsLocked from placements, AnswerStoreWaitsLocked from store
// writes) or by Tick at its deadline; the callbacks run once mu_ is
// released (Lock).
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/coordinator.h"

namespace tagi::coordinator {

void Coordinator::RendezvousAsync(const std::string& worker_id, absl::Duration wait,
                                  RendezvousDone done) {
  Lock lock(this);
  if (waits_ended_.has_value()) {  // shutting down: no new wait may hold the server
    deferred_.push_back([done = std::move(done), why = *waits_ended_] {
      done(absl::UnavailableError(why));
    });
    return;
  }
  absl::StatusOr<WorkerRecord*> w = CheckInLocked(worker_id);
  if (!w.ok()) {
    deferred_.push_back([done = std::move(done), st = w.status()] { done(st); });
    return;
  }
  // A newer poll of the same worker ends the older one (as a reply with
  // nothing new: the worker has moved on from it).
  if (auto old = polls_.find(worker_id); old != polls_.end()) {
    AnswerPollLocked(old->second.done, **w);
    polls_.erase(old);
  }
  if (!(*w)->job_id.empty()) return AnswerPollLocked(done, **w);
  polls_[worker_id] = {clock_.Now() + std::min(wait, options_.max_wait), jobs_started_,
                       std::move(done)};
}

void Coordinator::AnswerPollLocked(RendezvousDone& done, const WorkerRecord& w) {
  deferred_.push_back([d = std::move(done), r = RendezvousReplyLocked(w)] { d(r); });
}

std::map<uint64_t, Coordinator::StoreWaiter>::iterator Coordinator::FinishStoreWaitLocked(
    std::map<uint64_t, StoreWaiter>::iterator it, absl::StatusOr<std::string> result) {
  StoreWaiter& waiter = it->second;
  deferred_.push_back([d = std::move(waiter.done), r = std::move(result)] { d(r); });
  // Its one index entry, if it still has one (an answered wait's was
  // removed with its key's).
  auto [first, last] = store_waits_by_key_.equal_range(waiter.indexed);
  for (auto k = first; k != last; ++k) {
    if (k->second == it->first) {
      store_waits_by_key_.erase(k);
      break;
    }
  }
  return store_waits_.erase(it);
}

void Coordinator::AnswerPollsLocked() {
  for (auto it = polls_.begin(); it != polls_.end();) {
    const WorkerRecord& w = workers_.at(it->first);
    if (w.job_id.empty() && it->second.jobs_started == jobs_started_) {
      ++it;
      continue;
    }
    AnswerPollLocked(it->second.done, w);
    it = polls_.erase(it);
  }
}

void Coordinator::StoreGetAsync(const std::string& job, uint64_t gen, const std::string& key,
                                absl::Duration wait,
                                std::function<void(absl::StatusOr<std::string>)> done) {
  if (auto st = RunningJob(job, gen); !st.ok()) return done(st);
  const std::string full = JobStorePrefix(job, gen) + key;
  Lock lock(this);
  if (waits_ended_.has_value()) {
    deferred_.push_back([done = std::move(done), why = *waits_ended_] {
      done(absl::UnavailableError(why));
    });
    return;
  }
  // Checked under mu_: a Set that lands after this answers the wait (it
  // takes mu_ after storing the value).
  absl::StatusOr<std::string> now = store_.Get(full, absl::ZeroDuration());
  if (now.ok() || !absl::IsDeadlineExceeded(now.status())) {
    deferred_.push_back([done = std::move(done), now = std::move(now)] { done(now); });
    return;
  }
  if (auto st = AdmitStoreWaitLocked(1); !st.ok()) {
    deferred_.push_back([done = std::move(done), st] { done(st); });
    return;
  }
  const uint64_t id = next_store_wait_++;
  const absl::Duration bounded = std::min(wait, options_.max_wait);
  store_waits_[id] = {{full}, full, true, clock_.Now() + bounded, bounded, std::move(done)};
  store_waits_by_key_.emplace(full, id);
}

void Coordinator::StoreWaitAsync(const std::string& job, uint64_t gen,
                                 const std::vector<std::string>& keys, absl::Duration wait,
                                 std::function<void(absl::Status)> done) {
  if (auto st = RunningJob(job, gen); !st.ok()) return done(st);
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(JobStorePrefix(job, gen) + k);
  Lock lock(this);
  if (waits_ended_.has_value()) {
    deferred_.push_back([done = std::move(done), why = *waits_ended_] {
      done(absl::UnavailableError(why));
    });
    return;
  }
  const absl::Status now = store_.Wait(full, absl::ZeroDuration());
  if (now.ok() || !absl::IsDeadlineExceeded(now)) {
    deferred_.push_back([done = std::move(done), now] { done(now); });
    return;
  }
  if (auto st = AdmitStoreWaitLocked(full.size()); !st.ok()) {
    deferred_.push_back([done = std::move(done), st] { done(st); });
    return;
  }
  // Waits on the keys still missing, one at a time: each arrival moves the
  // wait to the next missing key (so a wait costs one index entry).
  const uint64_t id = next_store_wait_++;
  const absl::Duration bounded = std::min(wait, options_.max_wait);
  StoreWaiter& waiter = store_waits_[id];
  waiter = {std::move(full), "", false, clock_.Now() + bounded, bounded,
            [done = std::move(done)](absl::StatusOr<std::string> r) { done(r.status()); }};
  IndexStoreWaitLocked(id, waiter);
}

absl::Status Coordinator::AdmitStoreWaitLocked(size_t keys) {
  if (keys > options_.max_keys_per_wait) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "a store wait of %d keys; at most %d", keys, options_.max_keys_per_wait));
  }
  if (store_waits_.size() >= options_.max_store_waits) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%d store waits are pending, the most this coordinator holds; try again",
        store_waits_.size()));
  }
  return absl::OkStatus();
}

bool Coordinator::IndexStoreWaitLocked(uint64_t id, StoreWaiter& waiter) {
  for (const std::string& k : waiter.keys) {
    if (!store_.Get(k, absl::ZeroDuration()).ok()) {
      waiter.indexed = k;
      store_waits_by_key_.emplace(k, id);
      return true;
    }
  }
  return false;
}

void Coordinator::AnswerStoreWaitsLocked(const std::string& full_key) {
  auto [first, last] = store_waits_by_key_.equal_range(full_key);
  std::vector<uint64_t> ids;
  for (auto it = first; it != last; ++it) ids.push_back(it->second);
  store_waits_by_key_.erase(first, last);
  for (const uint64_t id : ids) {
    auto it = store_waits_.find(id);
    if (it == store_waits_.end()) continue;
    StoreWaiter& waiter = it->second;
    if (waiter.want_value) {
      FinishStoreWaitLocked(it, store_.Get(full_key, absl::ZeroDuration()));
      continue;
    }
    if (!IndexStoreWaitLocked(id, waiter)) FinishStoreWaitLocked(it, std::string());
  }
}

void Coordinator::EndStoreWaitsLocked(const std::string& job_id, const absl::Status& why) {
  // Every key of a wait lies under one job's prefix (StoreGetAsync,
  // StoreWaitAsync); the waits are few (max_store_waits).
  const std::string prefix = absl::StrCat("job/", job_id, "/");
  for (auto it = store_waits_.begin(); it != store_waits_.end();) {
    const std::vector<std::string>& keys = it->second.keys;
    if (!keys.empty() && keys.front().compare(0, prefix.size(), prefix) == 0) {
      it = FinishStoreWaitLocked(it, why);
    } else {
      ++it;
    }
  }
}

void Coordinator::ExpireWaits() {
  Lock lock(this);
  ExpireWaitsLocked(clock_.Now());
}

void Coordinator::ExpireWaitsLocked(absl::Time now) {
  for (auto it = polls_.begin(); it != polls_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    AnswerPollLocked(it->second.done, workers_.at(it->first));
    it = polls_.erase(it);
  }
  for (auto it = store_waits_.begin(); it != store_waits_.end();) {
    StoreWaiter& waiter = it->second;
    if (waiter.deadline > now) {
      ++it;
      continue;
    }
    std::string missing;
    for (const std::string& k : waiter.keys) {
      if (!store_.Get(k, absl::ZeroDuration()).ok()) {
        absl::StrAppend(&missing, missing.empty() ? "" : ", ", k);
      }
    }
    absl::StatusOr<std::string> result =
        missing.empty()
            ? store_.Get(waiter.keys.front(), absl::ZeroDuration())
            : absl::StatusOr<std::string>(absl::DeadlineExceededError(absl::StrFormat(
                  "store %s did not appear within %s: %s", waiter.keys.size() == 1 ? "key" : "keys",
                  absl::FormatDuration(waiter.wait), missing)));
    it = FinishStoreWaitLocked(it, std::move(result));
  }
}

void Coordinator::EndWaits(const std::string& why) {
  Lock lock(this);
  waits_ended_ = why;  // and every later one at once
  for (auto& [id, poll] : polls_) AnswerPollLocked(poll.done, workers_.at(id));
  polls_.clear();
  while (!store_waits_.empty()) {
    FinishStoreWaitLocked(store_waits_.begin(), absl::UnavailableError(why));
  }
}

size_t Coordinator::PendingWaits() {
  Lock lock(this);
  return polls_.size() + store_waits_.size();
}

}  // namespace tagi::coordinator
