#include "worker/collective/gloo/gloo_collective.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <thread>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gloo/allreduce.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/math.h"
#include "gloo/rendezvous/context.h"
#include "worker/collective/gloo/abortable_tcp.h"
#include "worker/collective/gloo/store_adapter.h"

namespace tagi {
namespace {

using gloo_internal::AbortableTcpDevice;
using GlooTimeout = std::chrono::milliseconds;

// Gloo's reduction signature; the cast picks the untyped overload of sum.
using ReduceFn = void (*)(void*, const void*, const void*, size_t);
const ReduceFn kSumFloat = static_cast<ReduceFn>(&::gloo::sum<float>);

// Gloo waits with condition_variable::wait_for: keep the duration finite
// and at least 1 ms (0 would time out at once).
GlooTimeout ToGlooTimeout(absl::Duration d) {
  constexpr int64_t kMaxMs = int64_t{7} * 24 * 3600 * 1000;
  return GlooTimeout(std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 1, kMaxMs));
}

bool MentionsTimeout(const char* what) {
  const std::string text = absl::AsciiStrToLower(what);
  return text.find("timed out") != std::string::npos || text.find("timeout") != std::string::npos;
}

// Gloo writes to its sockets without MSG_NOSIGNAL, so a write to a
// connection the peer has reset raises SIGPIPE, whose default action kills
// the process (Gloo's own tests ignore SIGPIPE process-wide). Instead of
// changing the process's disposition, the backend blocks SIGPIPE in the
// threads that write: the calling thread for the duration of each Gloo call
// (a SIGPIPE raised meanwhile is discarded; the write fails with EPIPE and
// Gloo reports the lost peer), and Gloo's event-loop thread, which inherits
// the mask of the thread that creates the device.
class ScopedSigpipeBlock {
 public:
  ScopedSigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~ScopedSigpipeBlock() {
    if (sigismember(&old_, SIGPIPE)) return;  // the caller blocks it anyway
    const timespec zero = {0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  ScopedSigpipeBlock(const ScopedSigpipeBlock&) = delete;
  ScopedSigpipeBlock& operator=(const ScopedSigpipeBlock&) = delete;

 private:
  sigset_t pipe_;
  sigset_t old_;
};

// The boundary: runs code that calls into Gloo and turns every exception
// into a status. Gloo reports its own timeouts and peer losses as
// IoException; only the message tells them apart.
absl::Status CallGloo(absl::FunctionRef<void()> fn) {
  try {
    fn();
    return absl::OkStatus();
  } catch (const StoreError& e) {
    return e.status();
  } catch (const ::gloo::IoException& e) {
    return MentionsTimeout(e.what()) ? absl::DeadlineExceededError(e.what())
                                     : absl::AbortedError(e.what());
  } catch (const ::gloo::EnforceNotMet& e) {
    return absl::InternalError(absl::StrCat("gloo invariant failed: ", e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("gloo: ", e.what()));
  } catch (...) {
    return absl::UnknownError("gloo threw a non-standard exception");
  }
}

class GlooCollective final : public Collective {
 public:
  GlooCollective(int rank, int world, std::shared_ptr<AbortableTcpDevice> device,
                 std::shared_ptr<::gloo::Context> context)
      : rank_(rank), world_(world), device_(std::move(device)), context_(std::move(context)) {}

  int rank() const override { return rank_; }
  int world() const override { return world_; }

  absl::Status AllReduceSum(std::span<float> data, absl::Duration timeout) override {
    if (data.empty()) return Usable();
    return Run("AllReduceSum", timeout, [&](GlooTimeout ms, uint32_t tag) {
      ::gloo::AllreduceOptions opts(context_);
      opts.setOutput(data.data(), data.size());
      opts.setReduceFunction(kSumFloat);
      opts.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
      opts.setTag(tag);
      opts.setTimeout(ms);
      ::gloo::allreduce(opts);
    });
  }

  absl::Status Broadcast(std::span<float> data, int root, absl::Duration timeout) override {
    if (auto st = Usable(); !st.ok()) return st;
    if (root < 0 || root >= world_) {
      return Fail(absl::InvalidArgumentError(
          absl::StrFormat("Broadcast root %d out of range [0, %d)", root, world_)));
    }
    if (data.empty()) return absl::OkStatus();
    return Run("Broadcast", timeout, [&](GlooTimeout ms, uint32_t tag) {
      ::gloo::BroadcastOptions opts(context_);
      opts.setOutput(data.data(), data.size());
      opts.setRoot(root);
      opts.setTag(tag);
      opts.setTimeout(ms);
      ::gloo::broadcast(opts);
    });
  }

  absl::Status Barrier(absl::Duration timeout) override {
    return Run("Barrier", timeout, [&](GlooTimeout ms, uint32_t tag) {
      ::gloo::BarrierOptions opts(context_);
      opts.setTag(tag);
      opts.setTimeout(ms);
      ::gloo::barrier(opts);
    });
  }

  void Abort() override {
    aborted_.store(true);
    device_->FailAll();
  }

 private:
  // OK, or the sticky Aborted error.
  absl::Status Usable() const {
    if (aborted_.load()) return absl::AbortedError("collective aborted (Abort() was called)");
    if (!error_.ok()) {
      return absl::AbortedError(absl::StrCat("collective failed earlier: ", error_.message()));
    }
    return absl::OkStatus();
  }

  // Records the first error and closes every connection, so that peers
  // blocked on this rank fail now rather than at their timeouts.
  absl::Status Fail(absl::Status st) {
    error_ = st;
    device_->FailAll();
    return st;
  }

  absl::Status Run(const char* what, absl::Duration timeout,
                   absl::FunctionRef<void(GlooTimeout, uint32_t)> op) {
    if (auto st = Usable(); !st.ok()) return st;
    // Every rank makes the same calls, so the tags agree across ranks.
    const uint32_t tag = next_tag_++;
    const GlooTimeout ms = ToGlooTimeout(timeout);
    absl::Status st;
    {
      ScopedSigpipeBlock no_sigpipe;
      st = CallGloo([&] { op(ms, tag); });
    }
    if (st.ok()) return st;
    if (aborted_.load()) st = absl::AbortedError("collective aborted (Abort() was called)");
    return Fail(WithContext(st, absl::StrFormat("rank %d of %d, %s", rank_, world_, what)));
  }

  const int rank_;
  const int world_;
  const std::shared_ptr<AbortableTcpDevice> device_;
  const std::shared_ptr<::gloo::Context> context_;
  std::atomic<bool> aborted_{false};
  absl::Status error_;  // sticky; touched only by the calling thread
  uint32_t next_tag_ = 0;
};

// Bounds connectFullMesh by the deadline: when it passes, every pair of
// the device fails (waits for TCP connects wake up and throw).
class ConnectWatchdog {
 public:
  ConnectWatchdog(AbortableTcpDevice& device, absl::Time deadline)
      : thread_([this, &device, deadline] {
          if (!done_.WaitForNotificationWithDeadline(deadline)) {
            fired_.store(true);
            device.FailAll();
          }
        }) {}
  ~ConnectWatchdog() {
    if (thread_.joinable()) Stop();
  }
  // Returns whether the deadline passed (then the pairs are unusable).
  bool Stop() {
    done_.Notify();
    thread_.join();
    return fired_.load();
  }

 private:
  absl::Notification done_;
  std::atomic<bool> fired_{false};
  std::thread thread_;  // last: starts after the fields it uses
};

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> CreateGlooCollective(Store& store, int rank, int world,
                                                                 const GlooOptions& options) {
  if (auto st = ValidateGroupArgs("gloo", rank, world, options); !st.ok()) return st;
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  const std::string where = absl::StrFormat("gloo rendezvous of rank %d of %d", rank, world);

  std::shared_ptr<AbortableTcpDevice> device;
  ::gloo::transport::tcp::attr attr;
  attr.hostname = options.hostname;
  const GlooTimeout connect_ms = ToGlooTimeout(options.connect_timeout);
  absl::Status made;
  {
    ScopedSigpipeBlock no_sigpipe;  // inherited by the device's event-loop thread
    made = CallGloo([&] { device = AbortableTcpDevice::Create(attr, connect_ms); });
  }
  if (!made.ok()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "gloo: cannot bind a TCP device to hostname %s: %s", options.hostname, made.message()));
  }

  auto context = std::make_shared<::gloo::rendezvous::Context>(rank, world);
  // Gloo passes this to the store waits (the adapter's deadline is the
  // tighter bound) and uses it as the default timeout of operations (ours
  // always set their own).
  context->setTimeout(connect_ms);
  GlooStoreAdapter adapter(store, deadline);
  std::shared_ptr<::gloo::transport::Device> transport = device;
  ConnectWatchdog watchdog(*device, deadline);
  absl::Status st = CallGloo([&] { context->connectFullMesh(adapter, transport); });
  const bool late = watchdog.Stop();
  if (late) {
    st = absl::DeadlineExceededError(
        absl::StrFormat("not every rank connected within connect_timeout %s",
                        absl::FormatDuration(options.connect_timeout)));
  } else if (!adapter.first_error().ok()) {
    st = adapter.first_error();
  } else if (absl::IsAborted(st)) {
    st = absl::UnavailableError(st.message());  // a peer refused or dropped the connection
  }
  if (!st.ok()) return WithContext(st, where);
  return std::unique_ptr<Collective>(
      new GlooCollective(rank, world, std::move(device), std::move(context)));
}

}  // namespace tagi
