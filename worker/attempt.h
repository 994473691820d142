// AttemptControl: what the training thread of one job attempt shares with
// the worker's session thread.
//
// The training thread publishes progress and lends its collective; the
// session thread sends the progress to the coordinator and turns directives
// into actions: CANCEL sets the stop vote (every rank stops after the same
// step), ABORT aborts the collective so that a rank blocked in an
// all-reduce with a dead or hung peer returns at once.
// Thread-safe.
#ifndef TAGI_WORKER_ATTEMPT_H_
#define TAGI_WORKER_ATTEMPT_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "tagi/v1/cluster.pb.h"
#include "tagi/v1/jobs.pb.h"
#include "worker/collective/collective.h"

namespace tagi {

class AttemptControl {
 public:
  explicit AttemptControl(const tagi::v1::Assignment& a)
      : job_id_(a.job_id()), generation_(a.generation()), rank_(a.rank()) {}

  const std::string& job_id() const { return job_id_; }
  uint64_t generation() const { return generation_; }
  uint32_t rank() const { return rank_; }

  void SetProgress(const tagi::v1::JobProgress& p) {
    std::function<void()> poke;
    {
      absl::MutexLock lock(&mu_);
      progress_ = p;
      if (p.first_step_ms() > 0 && !first_step_sent_) {
        first_step_sent_ = true;
        poke = poke_;
      }
    }
    if (poke) poke();  // the first step is reported at once, not at the next interval
  }
  // SetProgress, and the session sends it now rather than at its next
  // interval (an epoch's metrics, before that epoch's snapshot).
  void SetProgressNow(const tagi::v1::JobProgress& p) {
    std::function<void()> poke;
    {
      absl::MutexLock lock(&mu_);
      progress_ = p;
      poke = poke_;
    }
    if (poke) poke();
  }
  tagi::v1::JobProgress progress() {
    absl::MutexLock lock(&mu_);
    return progress_;
  }
  // Called (outside the lock) when progress should be sent now.
  void SetPoke(std::function<void()> poke) {
    absl::MutexLock lock(&mu_);
    poke_ = std::move(poke);
  }

  // Where the attempt's job log lines go besides stderr (the session,
  // which sends them to the coordinator); may be left empty.
  void SetLogSink(std::function<void(const std::string&)> sink) {
    absl::MutexLock lock(&mu_);
    log_sink_ = std::move(sink);
  }
  // A line of the job's log: on stderr (tagged with the job, generation
  // and rank) and to the sink.
  void Log(const std::string& text) {
    std::function<void(const std::string&)> sink;
    {
      absl::MutexLock lock(&mu_);
      sink = log_sink_;
    }
    std::fprintf(stderr, "job %s generation %llu rank %u: %s\n", job_id_.c_str(),
                 static_cast<unsigned long long>(generation_), rank_, text.c_str());
    if (sink) sink(text);
  }

  void SetCollective(Collective* c) {
    absl::MutexLock lock(&mu_);
    collective_ = c;
    if (aborted_ && c != nullptr) c->Abort();
  }
  void Abort(const std::string& reason) {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    abort_reason_ = reason;
    if (collective_ != nullptr) collective_->Abort();
  }
  bool aborted(std::string* reason = nullptr) {
    absl::MutexLock lock(&mu_);
    if (aborted_ && reason != nullptr) *reason = abort_reason_;
    return aborted_;
  }

  std::atomic<bool> stop_vote{false};
  // True while the worker's session has lost the coordinator (set by the
  // session): rank 0 then holds at its next snapshot point (job_runner.cc).
  std::atomic<bool> coordinator_lost{false};

 private:
  const std::string job_id_;
  const uint64_t generation_;
  const uint32_t rank_;
  absl::Mutex mu_;
  tagi::v1::JobProgress progress_ ABSL_GUARDED_BY(mu_);
  std::function<void()> poke_ ABSL_GUARDED_BY(mu_);
  std::function<void(const std::string&)> log_sink_ ABSL_GUARDED_BY(mu_);
  bool first_step_sent_ ABSL_GUARDED_BY(mu_) = false;
  Collective* collective_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tagi

#endif  // TAGI_WORKER_ATTEMPT_H_
