// allreduce_bench: all-reduce time and bandwidth of the CPU Collective
// backends side by side, ranks as threads of one process (each with its
// own connections over loopback), for the buffer sizes a TAGI step reduces.
//
//   allreduce_bench [--backend gloo|ring] [--world 2] [--iters 200]
//
// Without --backend both run. Each cell is the median over --iters calls
// as timed on rank 0, and the algorithm bandwidth (buffer bytes / time).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/store.h"
#include "worker/collective/gloo/gloo_collective.h"
#include "worker/collective/tcp/ring_collective.h"

namespace tagi::bench {
namespace {

using Factory =
    std::function<absl::StatusOr<std::unique_ptr<Collective>>(Store&, int rank, int world)>;

struct Backend {
  std::string name;
  Factory create;
};

struct Options {
  std::vector<Backend> backends;
  int world = 2;
  int iters = 200;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds per all-reduce of n floats, or a negative value when the
// backend failed (the error is printed).
double TimeAllReduce(const Backend& backend, int world, int iters, size_t n, Store& store) {
  std::vector<double> times(static_cast<size_t>(iters));
  std::vector<int> failed(static_cast<size_t>(world), 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      auto made = backend.create(store, r, world);
      if (!made.ok()) {
        std::fprintf(stderr, "%s rank %d: %s\n", backend.name.c_str(), r,
                     made.status().ToString().c_str());
        failed[r] = 1;
        return;
      }
      Collective& c = **made;
      std::vector<float> buf(n, 1.0f);
      for (int i = 0; i < iters + 5; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        const absl::Status st = c.AllReduceSum(buf, absl::Seconds(10));
        const double dt =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!st.ok()) {
          std::fprintf(stderr, "%s rank %d: %s\n", backend.name.c_str(), r, st.ToString().c_str());
          failed[r] = 1;
          return;
        }
        if (r == 0 && i >= 5) times[static_cast<size_t>(i - 5)] = dt;  // 5 warm-up calls
      }
      (void)c.Barrier(absl::Seconds(10));
    });
  }
  for (auto& t : ranks) t.join();
  if (std::count(failed.begin(), failed.end(), 1) > 0) return -1.0;
  return Median(times);
}

bool ParseFlags(int argc, char** argv, Options* options) {
  std::string backend = "both";
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) return false;
    const std::string flag = argv[i];
    if (flag == "--world") {
      options->world = std::atoi(argv[i + 1]);
    } else if (flag == "--iters") {
      options->iters = std::atoi(argv[i + 1]);
    } else if (flag == "--backend") {
      backend = argv[i + 1];
    } else {
      return false;
    }
  }
  if (options->world < 1 || options->iters < 1) return false;
  if (backend == "gloo" || backend == "both") {
    options->backends.push_back({"gloo", [](Store& s, int r, int w) {
                                   return CreateGlooCollective(s, r, w, GlooOptions{});
                                 }});
  }
  if (backend == "ring" || backend == "both") {
    options->backends.push_back({"ring", [](Store& s, int r, int w) {
                                   return CreateRingCollective(s, r, w, RingOptions{});
                                 }});
  }
  return !options->backends.empty();
}

int Main(int argc, char** argv) {
  Options options;
  if (!ParseFlags(argc, argv, &options)) {
    std::fprintf(stderr,
                 "usage: allreduce_bench [--backend gloo|ring] [--world N>=1] [--iters N>=1]\n");
    return 2;
  }
  // 2 x 89,711 + 1: the 784-100-100-11 delta arena; 4 MiB; a larger model.
  const std::vector<size_t> sizes = {1, 1024, 179423, 1 << 20, 3724445};
  std::printf("world %d, median of %d calls on rank 0\n%10s", options.world, options.iters,
              "floats");
  for (const Backend& b : options.backends) {
    std::printf(" | %11s %13s", (b.name + " ms").c_str(), (b.name + " GB/s").c_str());
  }
  std::printf("\n");
  InMemoryStore store;
  for (size_t n : sizes) {
    std::printf("%10zu", n);
    for (const Backend& b : options.backends) {
      PrefixStore scoped(b.name + "/" + std::to_string(n) + "/", store);
      const double t = TimeAllReduce(b, options.world, options.iters, n, scoped);
      if (t < 0) {
        std::printf(" | %11s %13s", "failed", "");
      } else {
        std::printf(" | %11.3f %8.2f GB/s", 1e3 * t, n * 4.0 / t / 1e9);
      }
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace tagi::bench

int main(int argc, char** argv) { return tagi::bench::Main(argc, argv); }
