// Log lines for refused calls (a wrong or missing token), at most one per
// client host and kind of refusal per interval, so that a misconfigured
// worker retrying every few hundred milliseconds, or someone trying tokens,
// cannot flood the coordinator's log. The first refusal of a (host, kind)
// is logged at once; the ones after it within the interval are counted and
// the count rides on the next line logged for that pair. Thread-safe; time
// comes from the injected clock.
#ifndef TAGI_COMMON_REFUSAL_LOG_H_
#define TAGI_COMMON_REFUSAL_LOG_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace tagi {

class RefusalLog {
 public:
  // At most `max_pairs` (host, kind) pairs are remembered; the least
  // recently logged one is forgotten to make room.
  explicit RefusalLog(Clock& clock, absl::Duration interval = absl::Minutes(1),
                      size_t max_pairs = 1024)
      : clock_(clock), interval_(interval), max_pairs_(max_pairs) {}

  // A refusal of `what` (e.g. "Jobs.Submit: invalid API token") from
  // `peer`: the line to log ("refused <what> from <peer>", with the count
  // of refusals not logged since the last line), or nullopt to stay silent.
  std::optional<std::string> Note(const std::string& peer, const std::string& what);

 private:
  struct Entry {
    absl::Time logged;
    uint64_t silent = 0;  // refusals since `logged` that were not logged
  };
  Clock& clock_;
  const absl::Duration interval_;
  const size_t max_pairs_;
  absl::Mutex mu_;
  std::map<std::pair<std::string, std::string>, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// Writes "<program>: refused <what> from <peer>" to stderr: every refusal
// when `log` is null, else the lines `log` lets through.
void LogRefusal(RefusalLog* log, const char* program, const std::string& peer,
                const std::string& what);

}  // namespace tagi

#endif  // TAGI_COMMON_REFUSAL_LOG_H_
