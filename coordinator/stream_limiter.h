// StreamLimiter: at most N concurrent streaming calls per client address.
//
// A client is the host part of gRPC's peer string (ClientOfPeer,
// common/peer.h), so one host cannot hold every server thread with long
// streams (Watch, Session, uploads and downloads). Acquire() hands out a
// lease that gives the slot back when destroyed. Thread-safe.
#ifndef TAGI_COORDINATOR_STREAM_LIMITER_H_
#define TAGI_COORDINATOR_STREAM_LIMITER_H_

#include <map>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/peer.h"

namespace tagi::coordinator {

class StreamLimiter {
 public:
  explicit StreamLimiter(int max_per_client) : max_(max_per_client) {}

  class Lease {
   public:
    Lease(StreamLimiter* owner, std::string client) : owner_(owner), client_(std::move(client)) {}
    Lease(Lease&& o) noexcept : owner_(o.owner_), client_(std::move(o.client_)) {
      o.owner_ = nullptr;
    }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (owner_ != nullptr) owner_->Release(client_);
    }

   private:
    StreamLimiter* owner_;
    std::string client_;
  };

  // ResourceExhausted (naming the client and the limit) when it holds max.
  absl::StatusOr<Lease> Acquire(std::string_view peer) {
    std::string client = ClientOfPeer(peer);
    absl::MutexLock lock(&mu_);
    int& n = open_[client];
    if (n >= max_) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "client %s already holds %d streams, the limit (--max-streams-per-client); close one "
          "and try again",
          client, n));
    }
    ++n;
    return Lease(this, std::move(client));
  }

  int open(std::string_view peer) {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(ClientOfPeer(peer));
    return it == open_.end() ? 0 : it->second;
  }

 private:
  void Release(const std::string& client) {
    absl::MutexLock lock(&mu_);
    auto it = open_.find(client);
    if (it != open_.end() && --it->second <= 0) open_.erase(it);
  }

  const int max_;
  absl::Mutex mu_;
  std::map<std::string, int> open_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tagi::coordinator

#endif  // TAGI_COORDINATOR_STREAM_LIMITER_H_
