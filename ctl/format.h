// Text for tagictl: one-line job summaries, the watch line with its
// progress bar, and the job table. Pure functions; thread-safe.
// Everything that came from the coordinator (names, reasons, ids, worker
// addresses, error messages) is untrusted: it goes through Printable, so
// that no escape sequence reaches the terminal.
#ifndef TAGI_CTL_FORMAT_H_
#define TAGI_CTL_FORMAT_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tagi/v1/jobs.pb.h"

namespace tagi {

// `text` with every control character (C0, DEL, C1) written as \n, \t,
// \r, \e or \xNN, a backslash as \\, and bytes that are not UTF-8 as
// \xNN; printable UTF-8 is kept.
std::string Printable(absl::string_view text);

// One log line as `tagictl logs` prints it: "2026-11-27 21:05:03.120 rank 1
// gen 2 w-3: text" (local time; the text through Printable).
std::string LogLineText(const tagi::v1::JobLogLine& line);

// "job-3  RUNNING  epoch 2/3  [=====>    ]  61%  38.2k samples/s  ETA 4.1s  test accuracy 85.34%"
std::string WatchLine(const tagi::v1::Job& job);
// The latest test metric: "test accuracy 85.34%" or "test RMSE 3.2100"; "" before the first
// epoch ends.
std::string LatestMetric(const tagi::v1::Job& job);
// A table with a header: ID, NAME, STATE, WORLD, PROGRESS, METRIC, REASON.
std::string JobTable(const std::vector<tagi::v1::Job>& jobs);
// A multi-line human description of one job.
std::string JobDetails(const tagi::v1::Job& job);
std::string WorkerTable(const std::vector<tagi::v1::WorkerInfo>& workers);

}  // namespace tagi

#endif  // TAGI_CTL_FORMAT_H_
