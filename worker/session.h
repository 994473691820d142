// Session: the worker's one bidirectional stream to the coordinator.
//
// A background thread keeps the stream open for as long as the worker runs:
// it sends a heartbeat every interval (every report interval, with the
// attempt's progress, while training; at once after an attempt's first
// step) and turns the coordinator's directives into actions on the current
// attempt (AttemptControl). The coordinator sends a keep-alive when it has
// nothing to say; a coordinator silent for `silence_timeout` (hung, or the
// network is gone) is treated like a broken stream. A broken stream is
// reopened with exponential backoff and jitter; a restarted coordinator
// learns the worker from the first message of the new stream.
//
// Job log lines (Log) ride on the messages: at most kLogLinesPerMessage per
// message (a message goes out at once while more wait), at most
// kMaxPendingLogLines waiting (more are dropped and counted), each at most
// kMaxLogLineBytes. Lines in a message whose write fails are lost: logs
// are best effort, the worker's stderr keeps every line.
// Thread-safe.
#ifndef TAGI_WORKER_SESSION_H_
#define TAGI_WORKER_SESSION_H_

#include <atomic>
#include <deque>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "worker/attempt.h"
#include "worker/session_stream.h"

namespace tagi {

inline constexpr size_t kMaxPendingLogLines = 1024;
inline constexpr size_t kLogLinesPerMessage = 64;
inline constexpr size_t kMaxLogLineBytes = 2048;

struct SessionOptions {
  std::string worker_id;
  std::string hostname;
  std::string device = "cpu";
  absl::Duration heartbeat = absl::Seconds(1);
  absl::Duration report_interval = absl::Milliseconds(250);
  absl::Duration silence_timeout = absl::Seconds(3);
  absl::Duration max_backoff = absl::Seconds(5);
  // Told whenever the stream opens and is heard (true) or breaks (false);
  // called from the session's thread, not under its lock. May be empty.
  std::function<void(bool)> on_connected;
};

class Session {
 public:
  // Streams come from `streams` (GrpcSessionStreams in tagi-worker); every
  // wait (heartbeats, silence, backoff) is on `clock`. Both outlive the
  // session.
  Session(SessionStreams& streams, SessionOptions options, Clock& clock);
  ~Session();  // Stop()
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  void Start();
  // Closes the stream (the coordinator sees the worker leave) and joins.
  void Stop();

  // The attempt being trained, or nullptr when idle. The attempt outlives
  // the time it is set. An ABORT that arrived for it before it was set
  // applies at once.
  void SetAttempt(AttemptControl* attempt);
  // Send a message now rather than at the next interval.
  void Poke();
  // Queues a line of the attempt's job log for the coordinator.
  void Log(const std::string& job_id, uint64_t generation, uint32_t rank, std::string text);

  // Streams opened so far (for tests and logs).
  int streams_opened() const { return streams_opened_.load(); }

 private:
  void Loop();
  // Runs one stream until it breaks or Stop(); true when it was opened.
  bool RunStream();
  void Handle(const tagi::v1::SessionDirective& d);
  // Records whether a stream is open and heard, on the attempt too.
  void SetConnected(bool connected);
  tagi::v1::SessionMessage Compose() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  SessionStreams& streams_;
  Clock& clock_;
  const SessionOptions options_;
  std::thread thread_;
  std::atomic<int> streams_opened_{0};

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool poked_ ABSL_GUARDED_BY(mu_) = false;
  AttemptControl* attempt_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;  // a stream is open and heard
  // (job, generation, reason) of the last ABORT, for an attempt set late.
  std::string aborted_job_ ABSL_GUARDED_BY(mu_);
  uint64_t aborted_generation_ ABSL_GUARDED_BY(mu_) = 0;
  std::string aborted_reason_ ABSL_GUARDED_BY(mu_);
  std::deque<tagi::v1::WorkerLogLine> logs_ ABSL_GUARDED_BY(mu_);
  uint64_t logs_dropped_ ABSL_GUARDED_BY(mu_) = 0;  // since the last message
};

}  // namespace tagi

#endif  // TAGI_WORKER_SESSION_H_
