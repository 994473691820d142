// allreduce_bench: all-reduce time and bandwidth of a Collective backend,
// ranks as threads of one process (each with its own connections over
// loopback), for the buffer sizes a TAGI step reduces.
//
//   allreduce_bench [--backend gloo] [--world 2] [--iters 200]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/store.h"
#include "worker/collective/gloo/gloo_collective.h"

namespace tagi::bench {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  int world = 2;
  int iters = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--world") == 0) world = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
  }
  // 2 x 89,711 + 1: the 784-100-100-11 delta arena; then larger models.
  const std::vector<size_t> sizes = {1, 1024, 179423, 1 << 20, 3724445};
  InMemoryStore store;
  for (size_t n : sizes) {
    const std::string prefix = "bench/" + std::to_string(n) + "/";
    std::vector<double> times(static_cast<size_t>(iters));
    std::vector<std::thread> ranks;
    for (int r = 0; r < world; ++r) {
      ranks.emplace_back([&, r] {
        PrefixStore scoped(prefix, store);
        auto c = CreateGlooCollective(scoped, r, world, {}).value();
        std::vector<float> buf(n, 1.0f);
        for (int i = 0; i < 5; ++i) (void)c->AllReduceSum(buf, absl::Seconds(10));
        for (int i = 0; i < iters; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          (void)c->AllReduceSum(buf, absl::Seconds(10));
          const double dt =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (r == 0) times[static_cast<size_t>(i)] = dt;
        }
        (void)c->Barrier(absl::Seconds(10));
      });
    }
    for (auto& t : ranks) t.join();
    const double med = Median(times);
    std::printf("gloo world %d  %9zu floats  %9.3f ms  %7.2f GB/s (algorithm bandwidth)\n", world,
                n, 1e3 * med, n * 4.0 / med / 1e9);
  }
  return 0;
}

}  // namespace
}  // namespace tagi::bench

int main(int argc, char** argv) { return tagi::bench::Main(argc, argv); }
