#include "worker/engine/thread_team.h"

namespace tagi::engine {
namespace {

// Part `i` of `parts` contiguous parts of [0, n).
std::pair<size_t, size_t> Part(size_t n, size_t i, size_t parts) {
  return {n * i / parts, n * (i + 1) / parts};
}

}  // namespace

ThreadTeam::ThreadTeam(int threads) {
  for (int i = 1; i < threads; ++i) helpers_.emplace_back([this, i] { Help(i); });
}

ThreadTeam::~ThreadTeam() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void ThreadTeam::For(size_t n, const std::function<void(size_t, size_t)>& fn) {
  const size_t parts = static_cast<size_t>(size());
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    pending_ = static_cast<int>(helpers_.size());
    ++generation_;
  }
  start_.notify_all();
  const auto [begin, end] = Part(n, 0, parts);
  if (begin < end) fn(begin, end);
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [this] { return pending_ == 0; });
  fn_ = nullptr;
}

void ThreadTeam::Help(int index) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t, size_t)>* fn;
    size_t n;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
      n = n_;
    }
    const auto [begin, end] = Part(n, static_cast<size_t>(index), helpers_.size() + 1);
    if (begin < end) (*fn)(begin, end);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
    }
    done_.notify_one();
  }
}

}  // namespace tagi::engine
