// When `tagictl watch` reconnects to its coordinator, as a pure decision.
//
// A watch is a server stream; it ends early when the coordinator goes away
// (killed: UNAVAILABLE; shut down: the stream ends cleanly before the job
// does). Jobs outlive their coordinator (a restarted one reloads them from
// its --state-dir), so the watch tries again, with backoff, for as long as
// the outage lasts up to `reconnect_for`, and never past the watch's own
// deadline. Any other error (an unknown job, a refused token, a bad
// request) ends the watch at once.
#ifndef TAGI_CTL_WATCH_POLICY_H_
#define TAGI_CTL_WATCH_POLICY_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/backoff.h"

namespace tagi {

struct WatchRetry {
  bool retry = false;
  absl::Duration delay;  // before the next attempt, when retry
  std::string why;       // when not retry: why the watch gives up
};

// `ended`: how the last attempt ended (OK: the stream closed before the job
// ended). `outage_start`: when the coordinator first failed to answer in
// this outage; `attempt`: attempts made since then (0 for the first retry).
inline WatchRetry DecideWatchRetry(const absl::Status& ended, absl::Time outage_start,
                                   absl::Time now, absl::Time watch_deadline,
                                   absl::Duration reconnect_for, int attempt, uint64_t seed) {
  WatchRetry r;
  if (!ended.ok() && !absl::IsUnavailable(ended)) {
    r.why = std::string(ended.message());
    return r;
  }
  if (now >= watch_deadline) {
    r.why = "the watch timeout passed";
    return r;
  }
  if (now - outage_start >= reconnect_for) {
    r.why = absl::StrCat("the coordinator did not come back within ",
                         absl::FormatDuration(reconnect_for), " (--reconnect-for)");
    return r;
  }
  r.retry = true;
  r.delay = std::min({BackoffDelay(attempt, absl::Seconds(2), seed), watch_deadline - now,
                      outage_start + reconnect_for - now});
  return r;
}

}  // namespace tagi

#endif  // TAGI_CTL_WATCH_POLICY_H_
