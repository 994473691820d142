#include "worker/collective/failing_collective.h"

#include <utility>

#include "absl/base/internal/raw_logging.h"
#include "absl/strings/str_format.h"

namespace tagi {

FailingCollective::FailingCollective(std::unique_ptr<Collective> inner, int fail_on_call)
    : inner_(std::move(inner)), fail_on_call_(fail_on_call) {
  ABSL_RAW_CHECK(inner_ != nullptr, "FailingCollective needs an inner collective");
}

absl::Status FailingCollective::Admit() {
  ++calls_;
  if (failed_.load()) {
    return absl::AbortedError("collective failed earlier (injected failure or Abort)");
  }
  if (calls_ == fail_on_call_) {
    failed_.store(true);
    inner_->Abort();
    return absl::UnavailableError(
        absl::StrFormat("injected failure on collective call %d (rank %d)", calls_, rank()));
  }
  return absl::OkStatus();
}

absl::Status FailingCollective::Record(absl::Status status) {
  if (!status.ok()) failed_.store(true);
  return status;
}

absl::Status FailingCollective::AllReduceSum(std::span<float> data, absl::Duration timeout) {
  if (auto st = Admit(); !st.ok()) return st;
  return Record(inner_->AllReduceSum(data, timeout));
}

absl::Status FailingCollective::AllReduceSumOnWire(std::span<float> data, WirePrecision wire,
                                                  absl::Duration timeout) {
  if (auto st = Admit(); !st.ok()) return st;
  return Record(inner_->AllReduceSumOnWire(data, wire, timeout));
}

absl::Status FailingCollective::Broadcast(std::span<float> data, int root, absl::Duration timeout) {
  if (auto st = Admit(); !st.ok()) return st;
  return Record(inner_->Broadcast(data, root, timeout));
}

absl::Status FailingCollective::Barrier(absl::Duration timeout) {
  if (auto st = Admit(); !st.ok()) return st;
  return Record(inner_->Barrier(timeout));
}

void FailingCollective::Abort() {
  failed_.store(true);
  inner_->Abort();
}

}  // namespace tagi
