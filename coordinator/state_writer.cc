#include "coordinator/state_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tagi::coordinator {
namespace {

constexpr absl::Duration kFirstBackoff = absl::Seconds(1);
constexpr absl::Duration kMaxBackoff = absl::Seconds(10);

}  // namespace

StateWriter::StateWriter(Clock& clock) : clock_(clock) {
  thread_ = std::thread([this] { Loop(); });
}

StateWriter::~StateWriter() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void StateWriter::Queue(StateWrite write) {
  absl::MutexLock lock(&mu_);
  Group& g = groups_[write.group];
  // One write per key: the newer content supersedes an older one not yet
  // started (a failed one waiting for its retry included), and goes last.
  for (auto it = g.queue.begin(); it != g.queue.end();) {
    const bool started = it == g.queue.begin() && g.busy;
    it = !started && it->key == write.key ? g.queue.erase(it) : it + 1;
  }
  g.queue.push_back(std::move(write));
}

bool StateWriter::Ready(const Group& g, absl::Time now) const {
  return !g.queue.empty() && !g.busy && (!g.failed || now >= g.not_before);
}

bool StateWriter::AnyReadyLocked() {
  const absl::Time now = clock_.Now();
  for (const auto& [name, g] : groups_) {
    if (Ready(g, now)) return true;
  }
  return false;
}

void StateWriter::Kick() {
  absl::MutexLock lock(&mu_);
  ++kicks_;  // releasing the lock re-evaluates the writer's condition
}

void StateWriter::Loop() {
  while (true) {
    std::string group;
    StateWrite write;
    {
      absl::MutexLock lock(&mu_);
      auto work = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        if (stop_) return true;
        return AnyReadyLocked();
      };
      mu_.Await(absl::Condition(&work));
      const absl::Time now = clock_.Now();
      auto it = groups_.begin();
      for (; it != groups_.end(); ++it) {
        // Stopping: one last attempt for what has not failed yet.
        if (Ready(it->second, now) && !(stop_ && it->second.failed)) break;
      }
      if (it == groups_.end()) {
        if (stop_) return;
        continue;
      }
      group = it->first;
      it->second.busy = true;
      write = it->second.queue.front();  // a copy: the queued one may be read by Queue
    }
    const absl::Status st = write.op();
    {
      absl::MutexLock lock(&mu_);
      Group& g = groups_[group];
      g.busy = false;
      if (st.ok()) {
        g.queue.pop_front();
        g.failed = false;
        g.backoff = absl::ZeroDuration();
        g.error = absl::OkStatus();
        if (g.queue.empty()) groups_.erase(group);
      } else {
        ++failures_[write.kind];
        g.failed = true;
        g.backoff = g.backoff == absl::ZeroDuration() ? kFirstBackoff
                                                      : std::min(2 * g.backoff, kMaxBackoff);
        g.not_before = clock_.Now() + g.backoff;
        g.error = st;
        last_error_ = st;
      }
      ++callbacks_;  // Flush waits for the callback too
    }
    if (write.done) write.done(st);
    absl::MutexLock lock(&mu_);
    --callbacks_;
  }
}

void StateWriter::Flush() {
  absl::MutexLock lock(&mu_);
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (callbacks_ > 0) return false;
    const absl::Time now = clock_.Now();
    for (const auto& [name, g] : groups_) {
      if (g.busy || Ready(g, now)) return false;
    }
    return true;
  };
  mu_.Await(absl::Condition(&idle));
}

absl::Status StateWriter::Health() {
  absl::MutexLock lock(&mu_);
  size_t failing = 0;
  size_t waiting = 0;
  for (const auto& [name, g] : groups_) {
    failing += g.failed;
    waiting += g.queue.size();
  }
  if (failing == 0) return absl::OkStatus();
  return absl::UnavailableError(absl::StrFormat(
      "the state dir cannot be written: %s (%d writes waiting to be retried)",
      last_error_.message(), waiting));
}

std::map<std::string, uint64_t> StateWriter::Failures() {
  absl::MutexLock lock(&mu_);
  return failures_;
}

size_t StateWriter::Pending() {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (const auto& [name, g] : groups_) n += g.queue.size();
  return n;
}

}  // namespace tagi::coordinator
