// FailingCollective: a fault-injecting wrapper for tests of callers.
//
// Forwards every call to an inner Collective, except the Nth collective
// call (1-based, counting AllReduceSum, Broadcast and Barrier alike): that
// one is not forwarded; instead the inner collective is aborted (so its
// peers see the failure promptly, as they would a lost host) and the call
// returns Unavailable. Every later call returns Aborted without touching
// the inner collective, as the Collective contract's sticky errors demand.
// fail_on_call <= 0 never injects.
//
// Owns the inner collective. Like any Collective: one thread makes the
// calls; Abort() may come from any thread.
#ifndef TAGI_WORKER_COLLECTIVE_FAILING_COLLECTIVE_H_
#define TAGI_WORKER_COLLECTIVE_FAILING_COLLECTIVE_H_

#include <atomic>
#include <memory>

#include "worker/collective/collective.h"

namespace tagi {

class FailingCollective final : public Collective {
 public:
  // REQUIRES: inner != nullptr (checked).
  FailingCollective(std::unique_ptr<Collective> inner, int fail_on_call);

  int rank() const override { return inner_->rank(); }
  int world() const override { return inner_->world(); }
  absl::Status AllReduceSum(std::span<float> data, absl::Duration timeout) override;
  absl::Status AllReduceSumOnWire(std::span<float> data, WirePrecision wire,
                                  absl::Duration timeout) override;
  absl::Status Broadcast(std::span<float> data, int root, absl::Duration timeout) override;
  absl::Status Barrier(absl::Duration timeout) override;
  void Abort() override;

  // Collective calls made so far, including failed ones.
  int calls() const { return calls_; }

 private:
  // OK when the call may be forwarded; otherwise the injected or sticky error.
  absl::Status Admit();
  absl::Status Record(absl::Status status);

  const std::unique_ptr<Collective> inner_;
  const int fail_on_call_;
  int calls_ = 0;
  std::atomic<bool> failed_{false};  // sticky: set by a failure or Abort()
};

}  // namespace tagi

#endif  // TAGI_WORKER_COLLECTIVE_FAILING_COLLECTIVE_H_
