#include "common/store.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tagi {

absl::Status InMemoryStore::CheckKey(const std::string& key) const {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrFormat("store key of %d bytes; expected 1..%d", key.size(), kMaxKeyBytes));
  }
  return absl::OkStatus();
}

absl::Status InMemoryStore::Set(const std::string& key, const std::string& value) {
  if (auto st = CheckKey(key); !st.ok()) return st;
  if (value.size() > max_value_bytes_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "store value of %d bytes for key %s exceeds the limit of %d", value.size(), key,
        max_value_bytes_));
  }
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = data_.try_emplace(key);
  if (!inserted) bytes_ -= it->first.size() + it->second.size();
  it->second = value;
  bytes_ += key.size() + value.size();
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::Get(const std::string& key, absl::Duration timeout) {
  if (auto st = CheckKey(key); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  auto present = [this, &key]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return data_.count(key) > 0; };
  if (!mu_.AwaitWithTimeout(absl::Condition(&present), timeout)) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "store key %s did not appear within %s", key, absl::FormatDuration(timeout)));
  }
  return data_.at(key);
}

absl::Status InMemoryStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  for (const auto& key : keys) {
    if (auto st = CheckKey(key); !st.ok()) return st;
  }
  absl::MutexLock lock(&mu_);
  auto all = [this, &keys]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    for (const auto& k : keys) {
      if (data_.count(k) == 0) return false;
    }
    return true;
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&all), timeout)) {
    std::string missing;
    for (const auto& k : keys) {
      if (data_.count(k) == 0) absl::StrAppend(&missing, missing.empty() ? "" : ", ", k);
    }
    return absl::DeadlineExceededError(absl::StrFormat(
        "store keys did not appear within %s: %s", absl::FormatDuration(timeout), missing));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> InMemoryStore::Add(const std::string& key, int64_t delta) {
  if (auto st = CheckKey(key); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  int64_t value = 0;
  auto it = data_.find(key);
  if (it != data_.end()) {
    const std::string& s = it->second;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc() || ptr != s.data() + s.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("store key ", key, " does not hold an integer"));
    }
  }
  // Both operands come from clients: the sum must not overflow (undefined
  // behaviour, and a counter that silently wraps).
  int64_t sum = 0;
  if (__builtin_add_overflow(value, delta, &sum)) {
    return absl::OutOfRangeError(absl::StrCat("store key ", key, " holds ", value,
                                              "; adding ", delta, " overflows int64"));
  }
  if (it != data_.end()) bytes_ -= it->first.size() + it->second.size();
  std::string text = absl::StrCat(sum);
  bytes_ += key.size() + text.size();
  data_[key] = std::move(text);
  return sum;
}

size_t InMemoryStore::DeletePrefix(const std::string& prefix) {
  absl::MutexLock lock(&mu_);
  size_t n = 0;
  for (auto it = data_.lower_bound(prefix); it != data_.end() && it->first.rfind(prefix, 0) == 0;) {
    bytes_ -= it->first.size() + it->second.size();
    it = data_.erase(it);
    ++n;
  }
  return n;
}

size_t InMemoryStore::size() const {
  absl::MutexLock lock(&mu_);
  return data_.size();
}

size_t InMemoryStore::bytes() const {
  absl::MutexLock lock(&mu_);
  return bytes_;
}

absl::Status PrefixStore::Wait(const std::vector<std::string>& keys, absl::Duration timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(prefix_ + k);
  return base_.Wait(full, timeout);
}

std::string JobStorePrefix(const std::string& job_id, uint64_t generation) {
  return absl::StrCat("job/", job_id, "/gen/", generation, "/");
}

}  // namespace tagi
