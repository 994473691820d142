// engine_bench: training throughput of the CPU TAGI engine.
//
// Prints samples/s of full training steps (forward, output update,
// backward, capped step) for
//   (a) 784-100-100-11 (ReLU, hierarchical softmax over 10 classes), B = 16
//   (b) 784-1024-1024-11, B = 128
// at 1 and 2 BLAS threads, and for (b) the achieved GFLOP/s, counting seven
// matrix products of 2*in*out*B flops per LINEAR layer per step (the
// convention of the issue), next to cblas_sgemm's GFLOP/s measured in the
// same run. Inputs are N(0, 1) draws and labels uniform: the work per step
// does not depend on the data.
//
//   engine_bench [--seconds S] [--json] [--hidden H --batch B]
// With --hidden (and --batch, default 128) it times only 784-H-H-11 at B,
// named "784-H-H-11" (bench/pytagi_compare.py uses it for 784-4096-4096-11).
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/rng.h"
#include "bench/bench_mlp.h"
#include "worker/engine/blas.h"
#include "worker/engine/model.h"
#include "worker/engine/thread_team.h"

namespace tagi::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  std::string name;
  int threads;
  size_t batch;
  double samples_per_second;
  double gflops;
};


Result TimeTraining(const std::string& name, const engine::Architecture& arch, size_t batch,
                    int threads, double seconds) {
  engine::SetBlasThreads(threads);
  auto model = engine::Model::Create(arch, batch).value();
  model->Initialize(1, {});
  // A pool of distinct batches so the caches see fresh inputs.
  constexpr size_t kPool = 64;
  Rng rng(7);
  std::vector<float> x(kPool * batch * 784);
  for (float& v : x) v = static_cast<float>(rng.Normal());
  std::vector<int32_t> labels(kPool * batch);
  for (int32_t& l : labels) l = static_cast<int32_t>(rng.Below(10));
  const float cap = engine::CapFactor(batch);
  auto step = [&](size_t i) {
    const size_t k = i % kPool;
    model->TrainStepLocal(x.data() + k * batch * 784, labels.data() + k * batch, nullptr, batch,
                          1.0f);
    model->ApplyStep(cap);
  };
  for (size_t i = 0; i < 5; ++i) step(i);  // warm-up
  size_t steps = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (int i = 0; i < 10; ++i) step(steps++);
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  const double sps = static_cast<double>(steps * batch) / elapsed;
  return {name, threads, batch, sps, FlopsPerStep(arch, batch) * steps / elapsed / 1e9};
}

// cblas_sgemm on square n x n matrices.
double SgemmGflops(int threads, size_t n, double seconds) {
  engine::SetBlasThreads(threads);
  // As a model runs its products: on a team of `threads` (blas.h Gemm).
  std::unique_ptr<engine::ThreadTeam> team;
  if (threads > 1) team = std::make_unique<engine::ThreadTeam>(threads);
  std::vector<float> a(n * n, 0.5f), b(n * n, 0.25f), c(n * n, 0.0f);
  auto once = [&] {
    engine::Gemm(engine::Trans::kNo, engine::Trans::kYes, n, n, n, a.data(), n, b.data(), n,
                 0.0f, c.data(), n, team.get());
  };
  once();
  size_t calls = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    once();
    ++calls;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return 2.0 * n * n * n * calls / elapsed / 1e9;
}

int Main(int argc, char** argv) {
  BenchArgs args;  // hidden 0: networks (a) and (b)
  if (!ParseBenchArgs(argc, argv, "engine_bench", "[--seconds S] [--json] [--hidden H --batch B]",
                      /*with_device=*/false, /*min_hidden=*/0, args)) {
    return 2;
  }
  const double seconds = args.seconds;
  const bool json = args.json;
  std::vector<Result> results;
  double sgemm[3] = {0, 0, 0};
  for (int t : {1, 2}) {
    if (args.hidden > 0) {
      results.push_back(TimeTraining(MlpName(args.hidden), Mlp(static_cast<uint32_t>(args.hidden)),
                                     static_cast<size_t>(args.batch), t, seconds));
    } else {
      results.push_back(TimeTraining("a: 784-100-100-11", Mlp(100), 16, t, seconds));
      results.push_back(TimeTraining("b: 784-1024-1024-11", Mlp(1024), 128, t, seconds));
    }
    sgemm[t] = SgemmGflops(t, 1024, seconds);
  }
  for (const Result& r : results) {
    const int t = r.threads;
    if (json) {
      std::printf("{\"bench\":\"%s\",\"threads\":%d,\"batch\":%zu,\"samples_per_second\":%.1f,"
                  "\"gflops\":%.2f,\"sgemm_gflops\":%.2f,\"epoch_seconds_60k\":%.3f}\n",
                  r.name.c_str(), t, r.batch, r.samples_per_second, r.gflops, sgemm[t],
                  60000.0 / r.samples_per_second);
    } else {
      std::printf("%-22s threads %d  B %4zu  %10.0f samples/s  (60k-sample epoch %.2f s)  "
                  "%6.1f GFLOP/s = %4.1f%% of sgemm %6.1f GFLOP/s\n",
                  r.name.c_str(), t, r.batch, r.samples_per_second,
                  60000.0 / r.samples_per_second, r.gflops, 100.0 * r.gflops / sgemm[t],
                  sgemm[t]);
    }
  }
  return 0;
}

}  // namespace
}  // namespace tagi::bench

int main(int argc, char** argv) {
  tagi::engine::ReexecWithShortBlasSpin(argv);  // as tagi-train and tagi-worker run
  return tagi::bench::Main(argc, argv);
}
