// StreamLimiter: at most N concurrent streaming calls per key, and at most
// T for all keys together.
//
// The coordinator keeps two, so that API clients can never take what
// training needs:
//   - API clients (Watch, DownloadModel) are keyed by the host part of
//     gRPC's peer string (ClientOfPeer, common/peer.h), so one host cannot
//     hold every server thread with long streams;
//   - workers (sessions, snapshot and model transfers) are keyed by worker
//     id, read from the stream's first message, so workers that share a
//     host with API clients (or with each other) have budgets of their own.
// Acquire() hands out a lease that gives the slot back when destroyed.
// Thread-safe.
#ifndef TAGI_COORDINATOR_STREAM_LIMITER_H_
#define TAGI_COORDINATOR_STREAM_LIMITER_H_

#include <climits>
#include <map>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/peer.h"

namespace tagi::coordinator {

struct StreamLimits {
  int per_key = 256;
  int total = INT_MAX;
  std::string noun = "client";                         // what a key is, for messages
  std::string flags = "--max-streams-per-client";      // what sets the limits, for messages
};

class StreamLimiter {
 public:
  explicit StreamLimiter(StreamLimits limits) : limits_(std::move(limits)) {}
  explicit StreamLimiter(int max_per_client) : limits_{.per_key = max_per_client} {}

  class Lease {
   public:
    Lease(StreamLimiter* owner, std::string key) : owner_(owner), key_(std::move(key)) {}
    Lease(Lease&& o) noexcept : owner_(o.owner_), key_(std::move(o.key_)) { o.owner_ = nullptr; }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (owner_ != nullptr) owner_->Release(key_);
    }

   private:
    StreamLimiter* owner_;
    std::string key_;
  };

  // Keyed by the client host of a gRPC peer string. ResourceExhausted
  // (naming the client, the limit and its flag) when it holds per_key, or
  // when all together hold total.
  absl::StatusOr<Lease> Acquire(std::string_view peer) { return AcquireKey(ClientOfPeer(peer)); }

  // Keyed by `key` itself (a worker id).
  absl::StatusOr<Lease> AcquireKey(std::string key) {
    absl::MutexLock lock(&mu_);
    if (total_ >= limits_.total) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "the coordinator already serves %d streams of this kind, the limit (%s); try again "
          "later",
          total_, limits_.flags));
    }
    int& n = open_[key];
    if (n >= limits_.per_key) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "%s %s already holds %d streams, the limit (%s); close one and try again",
          limits_.noun, key, n, limits_.flags));
    }
    ++n;
    ++total_;
    return Lease(this, std::move(key));
  }

  // Streams held by the client host of `peer`.
  int open(std::string_view peer) { return open_key(ClientOfPeer(peer)); }
  int open_key(const std::string& key) {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(key);
    return it == open_.end() ? 0 : it->second;
  }
  int total() {
    absl::MutexLock lock(&mu_);
    return total_;
  }

 private:
  void Release(const std::string& key) {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(key);
    if (it != open_.end() && --it->second <= 0) open_.erase(it);
    --total_;
  }

  const StreamLimits limits_;
  absl::Mutex mu_;
  std::map<std::string, int> open_ ABSL_GUARDED_BY(mu_);
  int total_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_STREAM_LIMITER_H_
