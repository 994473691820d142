// Test helpers: run one function per rank on its own thread.
#ifndef TAGI_TESTS_COLLECTIVE_RANK_THREADS_H_
#define TAGI_TESTS_COLLECTIVE_RANK_THREADS_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tagi::testing {

// Runs fn(rank) for rank in [0, world) on `world` threads; returns when
// all have finished.
inline void RunRanks(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

// Wall time of fn().
inline absl::Duration Timed(const std::function<void()>& fn) {
  const absl::Time start = absl::Now();
  fn();
  return absl::Now() - start;
}

}  // namespace tagi::testing

#endif  // TAGI_TESTS_COLLECTIVE_RANK_THREADS_H_
