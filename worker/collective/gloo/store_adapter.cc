#include "worker/collective/gloo/store_adapter.h"

#include <algorithm>
#include <utility>

#include "absl/time/clock.h"

namespace tagi {

void GlooStoreAdapter::Fail(absl::Status status) {
  if (first_error_.ok()) first_error_ = status;
  throw StoreError(std::move(status));
}

absl::Duration GlooStoreAdapter::Remaining() const {
  return std::max(deadline_ - absl::Now(), absl::ZeroDuration());
}

void GlooStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  if (auto st = store_.Set(key, std::string(data.begin(), data.end())); !st.ok()) {
    Fail(std::move(st));
  }
}

std::vector<char> GlooStoreAdapter::get(const std::string& key) {
  auto value = store_.Get(key, Remaining());
  if (!value.ok()) Fail(value.status());
  return std::vector<char>(value->begin(), value->end());
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys) {
  if (auto st = store_.Wait(keys, Remaining()); !st.ok()) Fail(std::move(st));
}

void GlooStoreAdapter::wait(const std::vector<std::string>& keys,
                            const std::chrono::milliseconds& timeout) {
  absl::Duration wait = Remaining();
  // Gloo's kNoTimeout (zero) means "no timeout": the deadline still holds.
  if (timeout.count() > 0) wait = std::min(wait, absl::FromChrono(timeout));
  if (auto st = store_.Wait(keys, wait); !st.ok()) Fail(std::move(st));
}

}  // namespace tagi
