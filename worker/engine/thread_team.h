// ThreadTeam: a fixed team of threads for the engine's elementwise loops.
//
// A Model with more than one thread (--threads) owns a team of that size,
// started when the model is made (never inside a step). It runs the
// column blocks of large matrix products (blas.h Gemm: OpenBLAS itself on
// one thread) and splits the loops between them (im2col, col2im, batch and
// layer norms, pooling, activations). The helpers sleep on a condition variable
// between calls, so they never spin against OpenBLAS's threads.
//
// Work is split into contiguous ranges of independent items (samples,
// channels, planes): no item's result depends on the split, so the numbers
// are the same for any team size.
//
// For() is called by one thread at a time (the model's); not reentrant.
#ifndef TAGI_WORKER_ENGINE_THREAD_TEAM_H_
#define TAGI_WORKER_ENGINE_THREAD_TEAM_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tagi::engine {

class ThreadTeam {
 public:
  // `threads` >= 2: threads - 1 helpers join the calling thread.
  explicit ThreadTeam(int threads);
  ~ThreadTeam();
  ThreadTeam(const ThreadTeam&) = delete;
  ThreadTeam& operator=(const ThreadTeam&) = delete;

  int size() const { return static_cast<int>(helpers_.size()) + 1; }

  // Runs fn(begin, end) over [0, n) in size() contiguous parts, the first on
  // the calling thread; returns when every part is done.
  void For(size_t n, const std::function<void(size_t, size_t)>& fn);

 private:
  void Help(int index);

  std::vector<std::thread> helpers_;
  std::mutex mu_;
  std::condition_variable start_;
  std::condition_variable done_;
  uint64_t generation_ = 0;  // guarded by mu_
  int pending_ = 0;          // guarded by mu_
  bool stop_ = false;        // guarded by mu_
  const std::function<void(size_t, size_t)>* fn_ = nullptr;
  size_t n_ = 0;
};

// Below this many elements (or this much work) a loop is not worth a
// wake-up of the team (tens of microseconds).
inline constexpr size_t kParallelMinElements = size_t{1} << 15;

// fn(begin, end) over [0, n): on `team` when there is one and the work is
// worth splitting (at least `min_items` items), else inline.
inline void ParallelFor(ThreadTeam* team, size_t n, size_t min_items,
                        const std::function<void(size_t, size_t)>& fn) {
  if (team == nullptr || n < min_items || n < 2) {
    if (n > 0) fn(0, n);
    return;
  }
  team->For(n, fn);
}

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_THREAD_TEAM_H_
