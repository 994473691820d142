#include "worker/session.h"

#include <algorithm>
#include <cstdio>

#include "common/backoff.h"
#include "common/clock.h"

namespace tagi {
namespace {

// How long a closing stream waits for the coordinator to end it.
constexpr absl::Duration kCloseWait = absl::Seconds(1);

const char* DirectiveName(tagi::v1::Directive d) {
  switch (d) {
    case tagi::v1::CANCEL:
      return "cancel";
    case tagi::v1::ABORT:
      return "abort";
    default:
      return "continue";
  }
}

}  // namespace

Session::Session(SessionStreams& streams, SessionOptions options, Clock& clock)
    : streams_(streams), clock_(clock), options_(std::move(options)) {}

Session::~Session() { Stop(); }

void Session::Start() { thread_ = std::thread([this] { Loop(); }); }

void Session::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void Session::SetAttempt(AttemptControl* attempt) {
  absl::MutexLock lock(&mu_);
  attempt_ = attempt;
  poked_ = true;  // tell the coordinator what we are doing now
  if (attempt != nullptr) attempt->coordinator_lost = !connected_;
  if (attempt != nullptr && attempt->job_id() == aborted_job_ &&
      attempt->generation() == aborted_generation_) {
    attempt->Abort(aborted_reason_);
  }
}

void Session::SetConnected(bool connected) {
  {
    absl::MutexLock lock(&mu_);
    connected_ = connected;
    if (attempt_ != nullptr) attempt_->coordinator_lost = !connected;
  }
  if (options_.on_connected) options_.on_connected(connected);
}

void Session::Poke() {
  absl::MutexLock lock(&mu_);
  poked_ = true;
}

void Session::Log(const std::string& job_id, uint64_t generation, uint32_t rank,
                  std::string text) {
  if (text.size() > kMaxLogLineBytes) {
    text.resize(kMaxLogLineBytes - 3);
    text += "...";
  }
  const int64_t now_ms = absl::ToUnixMillis(clock_.WallNow());
  absl::MutexLock lock(&mu_);
  if (logs_.size() >= kMaxPendingLogLines) {
    ++logs_dropped_;
    return;
  }
  tagi::v1::WorkerLogLine& line = logs_.emplace_back();
  line.set_job_id(job_id);
  line.set_generation(generation);
  line.set_rank(rank);
  line.set_time_ms(now_ms);
  line.set_text(std::move(text));
  poked_ = true;  // logs go out promptly, not at the next heartbeat
}

tagi::v1::SessionMessage Session::Compose() {
  tagi::v1::SessionMessage m;
  m.set_worker_id(options_.worker_id);
  m.set_hostname(options_.hostname);
  m.set_device(options_.device);
  if (attempt_ != nullptr) {
    m.set_job_id(attempt_->job_id());
    m.set_generation(attempt_->generation());
    m.set_rank(attempt_->rank());
    *m.mutable_progress() = attempt_->progress();
  }
  for (size_t i = 0; i < kLogLinesPerMessage && !logs_.empty(); ++i) {
    *m.add_logs() = std::move(logs_.front());
    logs_.pop_front();
  }
  m.set_logs_dropped(logs_dropped_);
  logs_dropped_ = 0;
  if (!logs_.empty()) poked_ = true;  // the rest in the next message, at once
  return m;
}

void Session::Handle(const tagi::v1::SessionDirective& d) {
  std::fprintf(stderr, "tagi-worker %s: directive %s for job %s generation %d: %s\n",
               options_.worker_id.c_str(), DirectiveName(d.directive()), d.job_id().c_str(),
               static_cast<int>(d.generation()), d.reason().c_str());
  absl::MutexLock lock(&mu_);
  if (d.directive() == tagi::v1::ABORT) {
    aborted_job_ = d.job_id();
    aborted_generation_ = d.generation();
    aborted_reason_ = d.reason();
  }
  if (attempt_ == nullptr || attempt_->job_id() != d.job_id() ||
      attempt_->generation() != d.generation()) {
    return;
  }
  if (d.directive() == tagi::v1::CANCEL) attempt_->stop_vote = true;
  if (d.directive() == tagi::v1::ABORT) attempt_->Abort(d.reason());
}

bool Session::RunStream() {
  std::unique_ptr<SessionStream> stream = streams_.Open();  // liveness: silence_timeout
  tagi::v1::SessionMessage first;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return false;
    poked_ = false;  // the first message carries what a pending poke wanted sent
    first = Compose();  // (it pokes again when log lines are left)
  }
  std::atomic<bool> reader_done{false};
  std::atomic<bool> heard{false};
  // On the injected (steady) clock: a wall-clock step on this host (NTP, an
  // operator) must not look like a silent coordinator.
  Clock& steady = clock_;
  std::atomic<int64_t> last_heard_ns{absl::ToUnixNanos(steady.Now())};
  std::thread reader;
  bool clean = false;
  tagi::v1::SessionMessage last;  // what a clean stop still sends
  if (stream->Write(first)) {
    reader = std::thread([&] {
      tagi::v1::SessionDirective d;
      while (stream->Read(&d)) {
        last_heard_ns = absl::ToUnixNanos(steady.Now());
        if (!heard.exchange(true)) {
          ++streams_opened_;
          SetConnected(true);
        }
        if (d.directive() != tagi::v1::CONTINUE) Handle(d);
      }
      reader_done = true;
      Poke();  // wake the writer
    });
    while (true) {
      tagi::v1::SessionMessage m;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this, &reader_done]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return stop_ || poked_ || reader_done.load();
        };
        const absl::Duration every =
            attempt_ != nullptr ? options_.report_interval : options_.heartbeat;
        clock_.AwaitWithTimeout(mu_, absl::Condition(&ready), every);
        if (stop_) {
          clean = true;
          // Log lines still queued (a worker's last job's end) go out first.
          if (!logs_.empty()) last = Compose();
          break;
        }
        poked_ = false;
        m = Compose();
      }
      if (reader_done.load()) break;
      const absl::Duration silent =
          absl::Nanoseconds(absl::ToUnixNanos(steady.Now()) - last_heard_ns.load());
      if (silent > options_.silence_timeout) {
        std::fprintf(stderr, "tagi-worker %s: the coordinator has been silent for %s; "
                     "reconnecting\n", options_.worker_id.c_str(),
                     absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(1))).c_str());
        break;
      }
      if (!stream->Write(m)) break;
    }
  }
  if (clean) {
    if (last.logs_size() > 0) (void)stream->Write(last);
    stream->WritesDone();  // the coordinator sees the worker leave
    absl::MutexLock lock(&mu_);  // the reader pokes once it is done
    auto done = [&reader_done]() { return reader_done.load(); };
    clock_.AwaitWithTimeout(mu_, absl::Condition(&done), kCloseWait);
  }
  stream->Cancel();
  if (reader.joinable()) reader.join();
  const absl::Status st = stream->Finish();
  SetConnected(false);
  if (!clean && heard.load()) {
    std::fprintf(stderr, "tagi-worker %s: session with %s lost (%s); reconnecting\n",
                 options_.worker_id.c_str(), streams_.target().c_str(),
                 st.ok() ? "closed by the coordinator" : std::string(st.message()).c_str());
  }
  return heard.load();
}

void Session::Loop() {
  int failures = 0;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
    }
    failures = RunStream() ? 0 : failures + 1;
    const absl::Duration wait = BackoffDelay(
        failures, options_.max_backoff, static_cast<uint64_t>(absl::ToUnixNanos(clock_.WallNow())));
    absl::MutexLock lock(&mu_);
    auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
    clock_.AwaitWithTimeout(mu_, absl::Condition(&stopping), wait);
  }
}

}  // namespace tagi
