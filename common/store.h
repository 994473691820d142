// Store: the key-value store that bootstraps collectives.
//
// Ranks of one job attempt exchange addresses (Gloo) or the NCCL unique id
// through it. Values are opaque bytes. Get and Wait block until the keys
// exist or the timeout passes (DeadlineExceeded); nothing waits forever.
//
// Implementations: InMemoryStore (tests, and the coordinator's own table),
// PrefixStore (scopes keys, e.g. under job/<id>/gen/<n>/), and the
// coordinator-backed store of the worker (worker/coordinator_store.h).
// All implementations are thread-safe.
#ifndef TAGI_COMMON_STORE_H_
#define TAGI_COMMON_STORE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tagi {

class Store {
 public:
  virtual ~Store() = default;
  virtual absl::Status Set(const std::string& key, const std::string& value) = 0;
  // Waits up to `timeout` for the key to exist.
  virtual absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) = 0;
  // Waits up to `timeout` for every key to exist.
  virtual absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) = 0;
  // Adds delta to the integer at key (missing keys count as 0); returns the
  // new value. A key holding a non-integer is FailedPrecondition; a sum
  // outside int64 is OutOfRange (the key keeps its value).
  virtual absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
};

class InMemoryStore final : public Store {
 public:
  // Refuses keys longer than this and values larger than max_value_bytes.
  static constexpr size_t kMaxKeyBytes = 512;
  explicit InMemoryStore(size_t max_value_bytes = 1 << 20) : max_value_bytes_(max_value_bytes) {}

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override;
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

  // Removes every key that starts with prefix; returns how many.
  size_t DeletePrefix(const std::string& prefix);
  size_t size() const;
  size_t bytes() const;

 private:
  absl::Status CheckKey(const std::string& key) const;
  const size_t max_value_bytes_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::string> data_ ABSL_GUARDED_BY(mu_);
  size_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

// Prepends a prefix to every key; `base` must outlive it.
class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, Store& base) : prefix_(std::move(prefix)), base_(base) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    return base_.Set(prefix_ + key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    return base_.Get(prefix_ + key, timeout);
  }
  absl::Status Wait(const std::vector<std::string>& keys, absl::Duration timeout) override;
  absl::StatusOr<int64_t> Add(const std::string& key, int64_t delta) override {
    return base_.Add(prefix_ + key, delta);
  }

 private:
  const std::string prefix_;
  Store& base_;
};

// "job/<id>/gen/<n>/": the scope of one job attempt's keys.
std::string JobStorePrefix(const std::string& job_id, uint64_t generation);

}  // namespace tagi

#endif  // TAGI_COMMON_STORE_H_
