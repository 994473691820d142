// StateWriter: the coordinator's disk writes (job records, final models,
// snapshots, file removals), done by one thread off the coordinator's lock,
// so that a slow fsync never delays a heartbeat.
//
// Writes are grouped (a group is a job id, or "" for the coordinator's own
// files). Within a group they happen in the order queued, so a job's model
// is on disk before the record that says the job SUCCEEDED. A group holds
// at most one write per key: a newer one removes an older one not started
// yet and goes last, so a disk that fails for hours holds one job record
// and one snapshot per job, not one per epoch.
//
// A failed write stays at the head of its group and is retried with a
// backoff (1 s doubling to 10 s, on the injected clock) when Kick() runs;
// the group's later writes wait behind it, so nothing is written out of
// order. While any write is failing, Health() is Unavailable naming the
// newest failure; every failed attempt is counted per kind. Each write's
// `done` callback runs on the writer thread, with no lock of the writer
// held, after every attempt (OK or not).
//
// Destruction stops the thread after one more attempt at each write that
// has not failed yet; writes that still fail are dropped (as a crash would).
// Thread-safe.
#ifndef TAGI_COORDINATOR_STATE_WRITER_H_
#define TAGI_COORDINATOR_STATE_WRITER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace tagi::coordinator {

struct StateWrite {
  std::string group;  // job id, or "" for the coordinator's own files
  std::string key;    // what it writes ("job", "model", "snapshot", "remove", ...)
  std::string kind;   // for the failure counter: job, model, snapshot, counter, remove
  std::function<absl::Status()> op;
  std::function<void(const absl::Status&)> done;  // may be empty
};

class StateWriter {
 public:
  explicit StateWriter(Clock& clock);
  ~StateWriter();
  StateWriter(const StateWriter&) = delete;
  StateWriter& operator=(const StateWriter&) = delete;

  void Queue(StateWrite write);
  // Makes failed writes whose backoff has passed eligible again.
  void Kick();
  // Waits until no write is due: the queue is empty or holds only failed
  // writes waiting for their backoff (each write is attempted at least once).
  void Flush();
  // OK, or Unavailable naming the newest failure while any write is failing.
  absl::Status Health();
  // Failed attempts, ever, by kind.
  std::map<std::string, uint64_t> Failures();
  size_t Pending();

 private:
  struct Group {
    std::deque<StateWrite> queue;
    bool busy = false;             // its head is being written
    bool failed = false;           // its head failed; waits for not_before
    absl::Time not_before;
    absl::Duration backoff;
    absl::Status error;            // of the head's last attempt
  };
  bool Ready(const Group& g, absl::Time now) const;
  bool AnyReadyLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Loop();

  Clock& clock_;
  absl::Mutex mu_;
  std::map<std::string, Group> groups_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> failures_ ABSL_GUARDED_BY(mu_);
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
  uint64_t kicks_ ABSL_GUARDED_BY(mu_) = 0;
  int callbacks_ ABSL_GUARDED_BY(mu_) = 0;  // done callbacks running
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_STATE_WRITER_H_
