// gpu_bench: training throughput of the CUDA TAGI engine.
//
// Times full training steps (upload of the batch, forward, output update,
// backward, capped step; no all-reduce) of 784-4096-4096-11 (ReLU,
// hierarchical softmax over 10 classes) at B = 128 on one GPU, and prints
// samples/s and the achieved TFLOP/s, counting seven matrix products of
// 2*in*out*B flops per LINEAR layer per step (the convention of
// engine_bench), next to cuBLAS SGEMM's TFLOP/s measured in the same run:
// on the engine's largest product (B x 4096 x 4096) and on a square 4096^3
// product (the device's fp32 peak as cuBLAS reaches it).
// Without a CUDA device it says why and exits 0 (nothing to measure).
//
//   gpu_bench [--device N] [--seconds S] [--batch B] [--hidden H] [--json]
// --hidden H (default 4096) times 784-H-H-11 instead; the SGEMM probes then
// use H too.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/rng.h"
#include "bench/bench_mlp.h"
#include "worker/engine/cuda/cuda_engine.h"
#include "worker/engine/cuda/device.h"
#include "worker/engine/cuda/sgemm_probe.h"

namespace tagi::bench {
namespace {

using Clock = std::chrono::steady_clock;


template <typename T>
T OrDie(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) {
    std::fprintf(stderr, "gpu_bench: %s: %s\n", what, std::string(v.status().message()).c_str());
    std::exit(1);
  }
  return *std::move(v);
}

void OrDie(const absl::Status& st, const char* what) {
  if (!st.ok()) {
    std::fprintf(stderr, "gpu_bench: %s: %s\n", what, std::string(st.message()).c_str());
    std::exit(1);
  }
}

// Samples per second of full training steps.
double TimeTraining(const engine::Architecture& arch, size_t batch, int device, double seconds) {
  auto model = OrDie(engine::cuda::CudaEngine::Create(arch, batch, device), "create");
  OrDie(model->Initialize(1, {}), "initialize");
  constexpr size_t kPool = 16;  // distinct batches
  Rng rng(7);
  std::vector<float> x(kPool * batch * 784);
  for (float& v : x) v = static_cast<float>(rng.Normal());
  std::vector<int32_t> labels(kPool * batch);
  for (int32_t& l : labels) l = static_cast<int32_t>(rng.Below(10));
  const float cap = engine::CapFactor(batch);
  auto step = [&](size_t i) {
    const size_t k = i % kPool;
    OrDie(model->TrainStep(x.data() + k * batch * 784, labels.data() + k * batch, nullptr, batch,
                           1.0f),
          "train step");
    OrDie(model->ApplyStep(cap), "apply step");
  };
  // Output() waits for the stream: every queued step has finished.
  auto sync = [&] { OrDie(model->Output(batch), "sync"); };
  for (size_t i = 0; i < 5; ++i) step(i);  // warm-up
  sync();
  size_t steps = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (int i = 0; i < 20; ++i) step(steps++);
    sync();
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return static_cast<double>(steps * batch) / elapsed;
}

int Main(int argc, char** argv) {
  BenchArgs args;
  args.hidden = 4096;
  if (!ParseBenchArgs(argc, argv, "gpu_bench",
                      "[--device N] [--seconds S] [--batch B] [--hidden H] [--json]",
                      /*with_device=*/true, /*min_hidden=*/1, args)) {
    return 2;
  }
  const double seconds = args.seconds;
  const bool json = args.json;
  const int device = args.device;
  const size_t batch = static_cast<size_t>(args.batch);
  const size_t h = static_cast<size_t>(args.hidden);
  const std::string net = MlpName(args.hidden);
  const engine::cuda::DeviceList gpus = engine::cuda::ListCudaDevices();
  if (device < 0 || static_cast<size_t>(device) >= gpus.devices.size()) {
    std::printf("gpu_bench: no CUDA device %d (%s): nothing to measure\n", device,
                gpus.devices.empty() ? gpus.reason.c_str() : "ordinal out of range");
    return 0;
  }
  const std::string name = gpus.devices[static_cast<size_t>(device)].name;
  const engine::Architecture arch = Mlp(static_cast<uint32_t>(h));
  const double sps = TimeTraining(arch, batch, device, seconds);
  const double tflops = FlopsPerStep(arch, batch) / batch * sps / 1e12;
  const double sgemm_layer =
      OrDie(engine::cuda::SgemmTflops(device, batch, h, h, seconds), "sgemm");
  const double sgemm_square = OrDie(engine::cuda::SgemmTflops(device, h, h, h, seconds), "sgemm");
  if (json) {
    // The SGEMM keys keep their names (B x H x H, H cubed) whatever H is.
    std::printf(
        "{\"bench\":\"%s\",\"device\":\"%s\",\"batch\":%zu,\"hidden\":%zu,"
        "\"samples_per_second\":%.1f,\"tflops\":%.3f,\"sgemm_tflops_layer\":%.3f,"
        "\"sgemm_tflops_square\":%.3f}\n",
        net.c_str(), name.c_str(), batch, h, sps, tflops, sgemm_layer, sgemm_square);
  } else {
    std::printf("%s  B %zu  on %s\n", net.c_str(), batch, name.c_str());
    std::printf("  TAGI training   %10.0f samples/s  %6.2f TFLOP/s\n", sps, tflops);
    std::printf(
        "  cuBLAS SGEMM    %zux%zux%zu: %6.2f TFLOP/s (engine at %.0f%%)   "
        "%zu^3: %6.2f TFLOP/s (engine at %.0f%%)\n",
        batch, h, h, sgemm_layer, 100.0 * tflops / sgemm_layer, h, sgemm_square,
        100.0 * tflops / sgemm_square);
  }
  return 0;
}

}  // namespace
}  // namespace tagi::bench

int main(int argc, char** argv) { return tagi::bench::Main(argc, argv); }
