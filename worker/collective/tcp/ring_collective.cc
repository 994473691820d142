#include "worker/collective/tcp/ring_collective.h"

#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cerrno>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "worker/collective/tcp/ring_bootstrap.h"
#include "worker/collective/tcp/ring_transfer.h"
#include "worker/collective/tcp/socket.h"
#include "worker/collective/tcp/wire.h"

namespace tagi {
namespace {

using ring_internal::CallHeader;
using ring_internal::Fd;
using ring_internal::Plan;
using ring_internal::RingLinks;
using ring_internal::Segment;

class RingCollective final : public Collective {
 public:
  RingCollective(int rank, int world, RingLinks links, Fd wake)
      : rank_(rank), world_(world), links_(std::move(links)), wake_(std::move(wake)) {}

  int rank() const override { return rank_; }
  int world() const override { return world_; }

  absl::Status AllReduceSum(std::span<float> data, absl::Duration timeout) override {
    if (auto st = Usable(); !st.ok() || world_ == 1) return st;
    plan_.Clear(Header(CallHeader::kAllReduceSum, data.size(), 0));
    PlanAllReduce(data);
    return Run("AllReduceSum", timeout);
  }

  // 16-bit wires: the payload travels as codes (wire_precision.h); FP16
  // first agrees on its scale through a one-float FP32 all-reduce of each
  // rank's largest magnitude (their sum bounds every partial sum). A bound
  // that is not finite (a NaN or Inf in some rank's data) makes every rank
  // send this call in FP32, so the value reaches the sum as it is.
  absl::Status AllReduceSumOnWire(std::span<float> data, WirePrecision wire,
                                  absl::Duration timeout) override {
    if (wire == WirePrecision::kFp32) return AllReduceSum(data, timeout);
    if (auto st = Usable(); !st.ok() || world_ == 1) return st;
    const absl::Time deadline = absl::Now() + timeout;
    float scale = 1.0f;
    if (wire == WirePrecision::kFp16) {
      float most = 0.0f;
      for (const float v : data) most = std::isnan(v) ? v : std::max(most, std::abs(v));
      bound_[0] = most;
      if (auto st = AllReduceSum(bound_, timeout); !st.ok()) return st;
      if (!std::isfinite(bound_[0])) wire = WirePrecision::kFp32;
      scale = Fp16Scale(bound_[0]);
    }
    plan_.Clear(Header(CallHeader::kAllReduceSum, data.size(), 0, wire));
    plan_.scale = scale;
    PlanAllReduce(data);
    return Run("AllReduceSum", deadline - absl::Now());
  }

  absl::Status Broadcast(std::span<float> data, int root, absl::Duration timeout) override {
    if (auto st = Usable(); !st.ok()) return st;
    if (root < 0 || root >= world_) {
      return Fail(absl::InvalidArgumentError(
          absl::StrFormat("Broadcast root %d out of range [0, %d)", root, world_)));
    }
    if (world_ == 1) return absl::OkStatus();
    plan_.Clear(Header(CallHeader::kBroadcast, data.size(), root));
    const Segment all{data.data(), data.size()};
    if (rank_ == root) {
      plan_.send.push_back(all);
      plan_.send_ready_at_start = data.size_bytes();
    } else {
      plan_.recv.push_back(all);
      if ((rank_ + 1) % world_ != root) plan_.send.push_back(all);  // forward what arrives
    }
    return Run("Broadcast", timeout);
  }

  absl::Status Barrier(absl::Duration timeout) override {
    if (auto st = Usable(); !st.ok() || world_ == 1) return st;
    // One float per chunk, so that every chunk's reduction visits every
    // rank: no rank can finish before all have arrived.
    barrier_.assign(static_cast<size_t>(world_), 0.0f);
    plan_.Clear(Header(CallHeader::kBarrier, barrier_.size(), 0));
    PlanAllReduce(barrier_);
    return Run("Barrier", timeout);
  }

  void Abort() override {
    aborted_.store(true);
    const uint64_t one = 1;
    if (wake_.valid()) (void)!::write(wake_.get(), &one, sizeof(one));
    ShutdownLinks();
  }

 private:
  CallHeader Header(CallHeader::Op op, size_t count, int root,
                    WirePrecision wire = WirePrecision::kFp32) {
    CallHeader h;
    h.op = op;
    h.seq = seq_++;
    h.count = count;
    h.root = static_cast<uint32_t>(root);
    h.wire = static_cast<uint32_t>(wire);
    return h;
  }

  // Chunk c (mod world) of data: the balanced split [n*c/W, n*(c+1)/W).
  Segment Chunk(std::span<float> data, int c) const {
    const uint64_t w = static_cast<uint64_t>(world_);
    const uint64_t i = static_cast<uint64_t>(((c % world_) + world_) % world_);
    const size_t begin = static_cast<size_t>(data.size() * i / w);
    const size_t end = static_cast<size_t>(data.size() * (i + 1) / w);
    return Segment{data.data() + begin, end - begin};
  }

  // Reduce-scatter: step t receives chunk r-t-1 and adds it in, so after
  // world-1 steps this rank holds the full sum of chunk r+1. All-gather:
  // step t receives the finished chunk r-t. What this rank sends is chunk
  // r, then each chunk it received, right after it arrived.
  // The last reduce-scatter step completes the chunk this rank owns: on a
  // 16-bit wire it keeps that sum as the wire rounds it.
  void PlanAllReduce(std::span<float> data) {
    plan_.send.push_back(Chunk(data, rank_));
    plan_.send_ready_at_start = plan_.send.back().count * WireBytes(plan_.wire);
    for (int t = 0; t + 1 < world_; ++t) {
      Segment s = Chunk(data, rank_ - t - 1);
      s.reduce = true;
      s.keep_rounded = plan_.wire != WirePrecision::kFp32 && t + 2 == world_;
      plan_.recv.push_back(s);
    }
    for (int t = 0; t + 1 < world_; ++t) plan_.recv.push_back(Chunk(data, rank_ - t));
    for (size_t t = 0; t + 1 < plan_.recv.size(); ++t) {
      plan_.send.push_back(Segment{plan_.recv[t].data, plan_.recv[t].count});
    }
  }

  absl::Status Run(const char* what, absl::Duration timeout) {
    const ring_internal::Links links{links_.to_successor.get(), links_.from_predecessor.get(),
                                     wake_.get(), (rank_ + 1) % world_,
                                     (rank_ + world_ - 1) % world_};
    absl::Status st = ring_internal::RunTransfer(links, plan_, scratch_, absl::Now() + timeout);
    if (st.ok()) return st;
    if (aborted_.load()) st = absl::AbortedError("collective aborted (Abort() was called)");
    return Fail(WithContext(st, absl::StrFormat("ring rank %d of %d, %s", rank_, world_, what)));
  }

  // OK, or the sticky Aborted error.
  absl::Status Usable() const {
    if (aborted_.load()) return absl::AbortedError("collective aborted (Abort() was called)");
    if (!error_.ok()) {
      return absl::AbortedError(absl::StrCat("collective failed earlier: ", error_.message()));
    }
    return absl::OkStatus();
  }

  // Records the first error and shuts the links down, so that the
  // neighbours fail now rather than at their timeouts.
  absl::Status Fail(absl::Status st) {
    error_ = st;
    ShutdownLinks();
    return st;
  }

  void ShutdownLinks() {
    if (links_.to_successor.valid()) ::shutdown(links_.to_successor.get(), SHUT_RDWR);
    if (links_.from_predecessor.valid()) ::shutdown(links_.from_predecessor.get(), SHUT_RDWR);
  }

  const int rank_;
  const int world_;
  const RingLinks links_;  // descriptors fixed for life: Abort() may use them
  const Fd wake_;          // eventfd, written by Abort()
  std::atomic<bool> aborted_{false};
  // Touched only by the calling thread.
  absl::Status error_;
  uint64_t seq_ = 0;
  Plan plan_;
  ring_internal::Scratch scratch_;
  std::vector<float> barrier_;
  float bound_[1] = {0.0f};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Collective>> CreateRingCollective(Store& store, int rank, int world,
                                                                 const RingOptions& options) {
  if (auto st = ValidateGroupArgs("ring", rank, world, options); !st.ok()) return st;
  Fd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!wake.valid()) return ring_internal::ErrnoStatus(errno, "ring: eventfd");
  RingLinks links;
  if (world > 1) {
    auto made = ring_internal::ConnectRing(store, rank, world, options.hostname,
                                           absl::Now() + options.connect_timeout);
    if (!made.ok()) {
      return WithContext(made.status(),
                         absl::StrFormat("ring rendezvous of rank %d of %d", rank, world));
    }
    links = std::move(*made);
  }
  return std::unique_ptr<Collective>(
      new RingCollective(rank, world, std::move(links), std::move(wake)));
}

}  // namespace tagi
