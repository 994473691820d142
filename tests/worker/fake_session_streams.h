// An in-process SessionStreams for the Session's tests: every stream the
// session opens is kept, with what the session wrote and a queue of
// directives the test sends; the test closes or breaks a stream at will.
#ifndef TAGI_TESTS_WORKER_FAKE_SESSION_STREAMS_H_
#define TAGI_TESTS_WORKER_FAKE_SESSION_STREAMS_H_

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "worker/session_stream.h"

namespace tagi::test {

// The coordinator's end of one stream.
class FakeStreamEnd {
 public:
  void Send(tagi::v1::SessionDirective d) {
    absl::MutexLock lock(&mu_);
    inbox_.push_back(std::move(d));
  }
  void Close() {  // the coordinator ends the stream
    absl::MutexLock lock(&mu_);
    closed_ = true;
  }
  std::vector<tagi::v1::SessionMessage> written() {
    absl::MutexLock lock(&mu_);
    return written_;
  }
  bool writes_done() {
    absl::MutexLock lock(&mu_);
    return writes_done_;
  }
  bool cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }

 private:
  friend class FakeSessionStream;
  absl::Mutex mu_;
  std::vector<tagi::v1::SessionMessage> written_ ABSL_GUARDED_BY(mu_);
  std::deque<tagi::v1::SessionDirective> inbox_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool writes_done_ ABSL_GUARDED_BY(mu_) = false;
};

class FakeSessionStream final : public SessionStream {
 public:
  explicit FakeSessionStream(std::shared_ptr<FakeStreamEnd> end) : end_(std::move(end)) {}
  bool Write(const tagi::v1::SessionMessage& m) override {
    absl::MutexLock lock(&end_->mu_);
    if (end_->closed_ || end_->cancelled_) return false;
    end_->written_.push_back(m);
    return true;
  }
  bool Read(tagi::v1::SessionDirective* d) override {
    absl::MutexLock lock(&end_->mu_);
    FakeStreamEnd* e = end_.get();
    auto ready = [e]() ABSL_SHARED_LOCKS_REQUIRED(e->mu_) {
      return !e->inbox_.empty() || e->closed_ || e->cancelled_;
    };
    // Real time, bounded: a test that forgets to end a stream fails, not hangs.
    if (!end_->mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(60))) return false;
    if (end_->inbox_.empty()) return false;
    *d = std::move(end_->inbox_.front());
    end_->inbox_.pop_front();
    return true;
  }
  void WritesDone() override {
    absl::MutexLock lock(&end_->mu_);
    end_->writes_done_ = true;
    end_->closed_ = true;  // the coordinator answers a clean leave by ending the stream
  }
  void Cancel() override {
    absl::MutexLock lock(&end_->mu_);
    end_->cancelled_ = true;
  }
  absl::Status Finish() override {
    absl::MutexLock lock(&end_->mu_);
    return end_->cancelled_ && !end_->writes_done_ ? absl::CancelledError("cancelled")
                                                   : absl::OkStatus();
  }

 private:
  std::shared_ptr<FakeStreamEnd> end_;
};

class FakeSessionStreams final : public SessionStreams {
 public:
  std::unique_ptr<SessionStream> Open() override {
    auto end = std::make_shared<FakeStreamEnd>();
    absl::MutexLock lock(&mu_);
    ends_.push_back(end);
    return std::make_unique<FakeSessionStream>(std::move(end));
  }
  std::string target() const override { return "fake-coordinator"; }
  size_t opened() {
    absl::MutexLock lock(&mu_);
    return ends_.size();
  }
  // The coordinator's end of the i-th stream opened (REQUIRES: i < opened()).
  std::shared_ptr<FakeStreamEnd> end(size_t i) {
    absl::MutexLock lock(&mu_);
    return ends_.at(i);
  }

 private:
  absl::Mutex mu_;
  std::vector<std::shared_ptr<FakeStreamEnd>> ends_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tagi::test

#endif  // TAGI_TESTS_WORKER_FAKE_SESSION_STREAMS_H_
