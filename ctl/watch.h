// Following a job to its end, as `tagictl watch` and tagi-run show it: a
// progress bar on a terminal (one line per epoch otherwise) on stderr, then
// "ID STATE: reason" and the final metric on stdout. A coordinator that
// stops answering is reconnected to for a while (a restarted coordinator
// resumes its jobs).
#ifndef TAGI_CTL_WATCH_H_
#define TAGI_CTL_WATCH_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "ctl/jobs_client.h"
#include "tagi/v1/jobs.pb.h"

namespace tagi {

struct WatchOptions {
  std::string program = "tagictl";  // names the messages on stderr
  absl::Duration timeout = absl::Hours(24 * 7);
  absl::Duration reconnect_for = absl::Seconds(60);
};

// The job in its final state. Unavailable (its message says why) when the
// coordinator stayed away longer than reconnect_for or the timeout passed;
// the watch's own error (e.g. NotFound) otherwise.
absl::StatusOr<tagi::v1::Job> WatchJob(JobsClient& client, const std::string& id,
                                       const WatchOptions& options);

bool IsFinal(tagi::v1::JobState state);

}  // namespace tagi

#endif  // TAGI_CTL_WATCH_H_
