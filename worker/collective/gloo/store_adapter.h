// GlooStoreAdapter: Gloo's rendezvous Store interface over a tagi::Store.
//
// Gloo's connectFullMesh exchanges the ranks' addresses through a
// gloo::rendezvous::Store; this adapter lets it use any tagi::Store (the
// in-memory one in tests, the coordinator-backed one in the worker), so the
// caller scopes the keys with a PrefixStore per (job, generation).
//
// Deadline: nothing here waits past `deadline`. get() waits for its key
// until the deadline; wait(keys, timeout) waits min(timeout, deadline) (a
// zero timeout, Gloo's "no timeout", means the deadline); wait(keys) waits
// until the deadline.
//
// Errors: Gloo's interface has no status, so a failing tagi::Store call
// throws StoreError (a gloo::IoException, which Gloo lets pass). Code that
// calls into Gloo catches it at our boundary and uses first_error(), which
// keeps the original absl::Status (e.g. DeadlineExceeded for a key that did
// not appear in time). No exception leaves the Gloo backend.
//
// Thread-compatible: one connecting thread uses an adapter; `store` must
// outlive it.
#ifndef TAGI_WORKER_COLLECTIVE_GLOO_STORE_ADAPTER_H_
#define TAGI_WORKER_COLLECTIVE_GLOO_STORE_ADAPTER_H_

#include <chrono>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/store.h"
#include "gloo/common/error.h"
#include "gloo/rendezvous/store.h"

namespace tagi {

// Thrown into Gloo (only) when the tagi::Store fails.
class StoreError : public ::gloo::IoException {
 public:
  explicit StoreError(absl::Status status)
      : ::gloo::IoException(status.ToString()), status_(std::move(status)) {}
  const absl::Status& status() const { return status_; }

 private:
  absl::Status status_;
};

class GlooStoreAdapter final : public ::gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(::tagi::Store& store, absl::Time deadline)
      : store_(store), deadline_(deadline) {}

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The status of the first failed store call; OK if none failed.
  const absl::Status& first_error() const { return first_error_; }

 private:
  // Records the first error and throws StoreError(status).
  [[noreturn]] void Fail(absl::Status status);
  absl::Duration Remaining() const;

  ::tagi::Store& store_;
  const absl::Time deadline_;
  absl::Status first_error_;
};

}  // namespace tagi

#endif  // TAGI_WORKER_COLLECTIVE_GLOO_STORE_ADAPTER_H_
