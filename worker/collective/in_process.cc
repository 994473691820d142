#include "worker/collective/in_process.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/internal/raw_logging.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace tagi {
namespace in_process_internal {

enum class OpKind { kAllReduce, kBroadcast, kBarrier };

const char* OpName(OpKind kind) {
  switch (kind) {
    case OpKind::kAllReduce:
      return "AllReduceSum";
    case OpKind::kBroadcast:
      return "Broadcast";
    case OpKind::kBarrier:
      return "Barrier";
  }
  return "?";
}

// One call of every rank is a "round": ranks deposit their buffers
// (gathering); the last to arrive combines them into result_ and opens the
// scatter phase; each rank copies the result out and departs; when all have
// departed the next round opens. A rank's k-th call belongs to round k.
class GroupState {
 public:
  explicit GroupState(int world)
      : world_(world),
        claimed_(static_cast<size_t>(world), false),
        inputs_(static_cast<size_t>(world)),
        present_(static_cast<size_t>(world), false) {}

  int world() const { return world_; }

  bool Claim(int rank) {
    absl::MutexLock lock(&mu_);
    if (claimed_[static_cast<size_t>(rank)]) return false;
    claimed_[static_cast<size_t>(rank)] = true;
    return true;
  }

  absl::Status Run(int rank, uint64_t seq, OpKind kind, std::span<float> data, int root,
                   absl::Duration timeout);

  // Fails the group (first reason wins); wakes every waiting rank.
  void Poison(absl::Status why) {
    absl::MutexLock lock(&mu_);
    PoisonLocked(std::move(why));
  }

  bool AwaitArrivals(int count, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto ready = [this, count]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return !poison_.ok() || (!scattering_ && arrived_ >= count);
    };
    mu_.AwaitWithTimeout(absl::Condition(&ready), timeout);
    return poison_.ok() && !scattering_ && arrived_ >= count;
  }

 private:
  void PoisonLocked(absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!poison_.ok()) return;
    poison_ = std::move(why);
    poison_round_ = round_;
  }

  // What a call gets once the group is poisoned: the rank that timed out
  // and those waiting with it in the same round see DeadlineExceeded;
  // everything else is Aborted.
  absl::Status PoisonedStatus(uint64_t seq, bool arrived) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (arrived && poison_round_ == seq && absl::IsDeadlineExceeded(poison_)) return poison_;
    return absl::AbortedError(absl::StrCat("in-process group failed: ", poison_.message()));
  }

  absl::Status CheckMatches(int rank, OpKind kind, size_t size, int root) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (kind == kind_ && size == size_ && (kind != OpKind::kBroadcast || root == root_)) {
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "rank %d called %s(size %d, root %d) but another rank called %s(size %d, root %d); "
        "every rank must make the same calls",
        rank, OpName(kind), size, root, OpName(kind_), size_, root_));
  }

  absl::Status TimedOut(int rank, OpKind kind, absl::Duration timeout)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::string missing;
    for (int r = 0; r < world_; ++r) {
      if (!present_[static_cast<size_t>(r)] && r != rank) {
        absl::StrAppend(&missing, missing.empty() ? "" : ", ", r);
      }
    }
    PoisonLocked(absl::DeadlineExceededError(
        absl::StrFormat("rank %d waited %s in %s; ranks not arrived: [%s]", rank,
                        absl::FormatDuration(timeout), OpName(kind), missing)));
    return poison_;
  }

  // Sums in rank order (the documented, deterministic order) or copies.
  void Combine() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (kind_ == OpKind::kBarrier) return;
    const auto& first = inputs_[static_cast<size_t>(kind_ == OpKind::kBroadcast ? root_ : 0)];
    result_.assign(first.begin(), first.end());
    if (kind_ == OpKind::kBroadcast) return;
    for (size_t r = 1; r < inputs_.size(); ++r) {
      const float* in = inputs_[r].data();
      for (size_t i = 0; i < result_.size(); ++i) result_[i] += in[i];
    }
  }

  void Depart(std::span<float> data) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (kind_ != OpKind::kBarrier) std::copy(result_.begin(), result_.end(), data.begin());
    if (++departed_ < world_) return;
    std::fill(inputs_.begin(), inputs_.end(), std::span<float>());
    std::fill(present_.begin(), present_.end(), false);
    arrived_ = 0;
    departed_ = 0;
    scattering_ = false;
    ++round_;
  }

  const int world_;
  absl::Mutex mu_;
  std::vector<bool> claimed_ ABSL_GUARDED_BY(mu_);
  absl::Status poison_ ABSL_GUARDED_BY(mu_);
  uint64_t poison_round_ ABSL_GUARDED_BY(mu_) = 0;
  // The open round.
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  bool scattering_ ABSL_GUARDED_BY(mu_) = false;
  OpKind kind_ ABSL_GUARDED_BY(mu_) = OpKind::kBarrier;
  size_t size_ ABSL_GUARDED_BY(mu_) = 0;
  int root_ ABSL_GUARDED_BY(mu_) = -1;
  std::vector<std::span<float>> inputs_ ABSL_GUARDED_BY(mu_);  // by rank
  std::vector<bool> present_ ABSL_GUARDED_BY(mu_);             // arrived, by rank
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int departed_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<float> result_ ABSL_GUARDED_BY(mu_);
};

absl::Status GroupState::Run(int rank, uint64_t seq, OpKind kind, std::span<float> data, int root,
                             absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;

  absl::MutexLock lock(&mu_);
  auto open = [this, seq]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !poison_.ok() || (round_ == seq && !scattering_);
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&open), deadline)) {
    return TimedOut(rank, kind, timeout);
  }
  if (!poison_.ok()) return PoisonedStatus(seq, /*arrived=*/false);
  if (kind == OpKind::kBroadcast && (root < 0 || root >= world_)) {
    PoisonLocked(absl::AbortedError(absl::StrFormat("rank %d broadcast from root %d", rank, root)));
    return absl::InvalidArgumentError(
        absl::StrFormat("Broadcast root %d out of range [0, %d)", root, world_));
  }
  if (arrived_ == 0) {
    kind_ = kind;
    size_ = data.size();
    root_ = root;
  } else if (auto st = CheckMatches(rank, kind, data.size(), root); !st.ok()) {
    PoisonLocked(absl::AbortedError(st.message()));
    return st;
  }
  inputs_[static_cast<size_t>(rank)] = data;
  present_[static_cast<size_t>(rank)] = true;
  if (++arrived_ == world_) {
    Combine();
    scattering_ = true;
  } else {
    auto combined = [this]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return scattering_ || !poison_.ok(); };
    // The round cannot move on without this rank, so scattering_ means
    // this round's result is ready (even if a poison came after it).
    if (!mu_.AwaitWithDeadline(absl::Condition(&combined), deadline)) {
      return TimedOut(rank, kind, timeout);
    }
    if (!scattering_) return PoisonedStatus(seq, /*arrived=*/true);
  }
  Depart(data);
  return absl::OkStatus();
}

namespace {

class Member final : public Collective {
 public:
  Member(std::shared_ptr<GroupState> state, int rank) : state_(std::move(state)), rank_(rank) {}
  ~Member() override {
    state_->Poison(absl::AbortedError(absl::StrFormat("rank %d left the group", rank_)));
  }

  int rank() const override { return rank_; }
  int world() const override { return state_->world(); }

  absl::Status AllReduceSum(std::span<float> data, absl::Duration timeout) override {
    return state_->Run(rank_, seq_++, OpKind::kAllReduce, data, -1, timeout);
  }
  absl::Status Broadcast(std::span<float> data, int root, absl::Duration timeout) override {
    return state_->Run(rank_, seq_++, OpKind::kBroadcast, data, root, timeout);
  }
  absl::Status Barrier(absl::Duration timeout) override {
    return state_->Run(rank_, seq_++, OpKind::kBarrier, {}, -1, timeout);
  }
  void Abort() override {
    state_->Poison(absl::AbortedError(absl::StrFormat("rank %d called Abort()", rank_)));
  }

 private:
  const std::shared_ptr<GroupState> state_;
  const int rank_;
  uint64_t seq_ = 0;  // calls made: the round of the next call
};

}  // namespace
}  // namespace in_process_internal

InProcessGroup::InProcessGroup(int world) {
  ABSL_RAW_CHECK(world >= 1, "InProcessGroup needs at least one rank");
  state_ = std::make_shared<in_process_internal::GroupState>(world);
}

InProcessGroup::~InProcessGroup() = default;

int InProcessGroup::world() const { return state_->world(); }

std::unique_ptr<Collective> InProcessGroup::Member(int rank) {
  ABSL_RAW_CHECK(rank >= 0 && rank < state_->world(), "InProcessGroup::Member: rank out of range");
  const bool first_claim = state_->Claim(rank);
  ABSL_RAW_CHECK(first_claim, "InProcessGroup::Member: rank already handed out");
  return std::make_unique<in_process_internal::Member>(state_, rank);
}

bool InProcessGroup::AwaitArrivals(int count, absl::Duration timeout) {
  return state_->AwaitArrivals(count, timeout);
}

}  // namespace tagi
