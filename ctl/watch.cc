#include "ctl/watch.h"

#include <unistd.h>

#include <cstdio>
#include <optional>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "common/progress_bar.h"
#include "ctl/format.h"
#include "ctl/watch_policy.h"

namespace tagi {
namespace {

// The newest epoch in the job's history (it keeps only the newest ones).
uint64_t LastEpochOf(const tagi::v1::Job& j) {
  const auto& e = j.progress().epochs();
  return e.empty() ? 0 : e[e.size() - 1].epoch();
}

}  // namespace

bool IsFinal(tagi::v1::JobState state) {
  return state == tagi::v1::SUCCEEDED || state == tagi::v1::FAILED ||
         state == tagi::v1::CANCELLED;
}

absl::StatusOr<tagi::v1::Job> WatchJob(JobsClient& client, const std::string& id,
                                       const WatchOptions& options) {
  const char* program = options.program.c_str();
  const bool tty = ::isatty(STDERR_FILENO);
  RealClock clock;
  ProgressPrinter printer(stderr, clock, absl::Milliseconds(100));
  std::string last_line;
  uint64_t epochs_seen = 0;
  const absl::Time deadline = clock.Now() + options.timeout;
  // An outage of the coordinator: when it began and the retries since.
  std::optional<absl::Time> outage;
  int attempt = 0;
  for (;;) {
    auto job = client.Watch(id, deadline - clock.Now(), [&](const tagi::v1::Job& j) {
      if (outage) {
        std::fprintf(stderr, "%s%s: reconnected to the coordinator after %s\n", tty ? "\n" : "",
                     program,
                     absl::FormatDuration(absl::Trunc(clock.Now() - *outage,
                                                      absl::Milliseconds(1))).c_str());
        outage.reset();
        attempt = 0;
      }
      const std::string line = WatchLine(j);
      if (tty) {
        printer.Update(line);
      } else if (LastEpochOf(j) != epochs_seen || j.state() != tagi::v1::RUNNING) {
        if (line != last_line) std::fprintf(stderr, "%s\n", line.c_str());
        last_line = line;
      }
      epochs_seen = LastEpochOf(j);
    });
    if (job.ok() && IsFinal(job->state())) {
      if (tty) {
        printer.Update(WatchLine(*job), true);
        printer.Finish();
      }
      std::printf("%s %s: %s\n", Printable(job->id()).c_str(),
                  tagi::v1::JobState_Name(job->state()).c_str(), Printable(job->reason()).c_str());
      const std::string metric = LatestMetric(*job);
      if (!metric.empty()) std::printf("final %s\n", metric.c_str());
      std::fflush(stdout);
      return job;
    }
    const absl::Time now = clock.Now();
    const absl::Status why = job.ok() ? absl::OkStatus() : job.status();
    if (!outage && (why.ok() || absl::IsUnavailable(why))) {
      outage = now;
      std::fprintf(stderr, "%s%s: lost the coordinator (%s); reconnecting for up to %s\n",
                   tty ? "\n" : "", program,
                   why.ok() ? "the watch ended before the job" : std::string(why.message()).c_str(),
                   absl::FormatDuration(options.reconnect_for).c_str());
    }
    const WatchRetry retry =
        DecideWatchRetry(why, outage.value_or(now), now, deadline, options.reconnect_for, attempt,
                         static_cast<uint64_t>(absl::ToUnixNanos(now)));
    if (!retry.retry) {
      if (!why.ok() && !absl::IsUnavailable(why)) return why;
      return absl::UnavailableError(retry.why);
    }
    absl::SleepFor(retry.delay);
    ++attempt;
  }
}

}  // namespace tagi
