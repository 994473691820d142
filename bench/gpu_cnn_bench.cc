// gpu_cnn_bench: training throughput of the CUDA engine on image networks
// (issue 13's figures): samples/s of full training steps (upload, forward,
// output update, backward, capped step; no all-reduce) of a job file's
// architecture on N(0, 1) inputs and uniform labels, one GPU. Each run is
// measured with the activations that only a norm reads fused into the
// norm's kernels (the engine's default) and without (fused/plain ratio),
// unless --fused-only.
//
//   gpu_cnn_bench [--device N] [--seconds S] [--json] [--fused-only] [JOB.json:BATCH ...]
// Default: examples/fmnist_cnn.json at B = 128, examples/cifar10_resnet18.json
// at B = 64 and 128 (paths relative to the working directory). Without a
// CUDA device it says why and exits 0 (nothing to measure).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/job_spec.h"
#include "common/rng.h"
#include "worker/engine/cuda/cuda_engine.h"
#include "worker/engine/cuda/device.h"
#include "worker/engine/output.h"

namespace tagi::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Run {
  std::string path;
  size_t batch = 0;
};

struct Measured {
  double samples_per_second = 0;
  // Device memory the engine holds after the timed steps (its buffers, the
  // cuDNN workspace, cuBLAS's): the GPU's bytes in use then, less those in
  // use before it was created (the CUDA context included in neither).
  size_t device_memory_bytes = 0;
};

// Samples/s and memory, or the reason nothing was measured.
absl::StatusOr<Measured> Time(const spec::Architecture& arch, size_t batch, int device,
                            double seconds, bool fuse) {
  const size_t memory_before = engine::cuda::DeviceMemoryInUse(device);
  auto created = engine::cuda::CudaEngine::Create(arch, batch, device, {.fuse_activations = fuse});
  if (!created.ok()) return created.status();
  engine::cuda::CudaEngine& model = **created;
  if (auto st = model.Initialize(1, {}); !st.ok()) return st;
  constexpr size_t kPool = 8;  // distinct batches
  const size_t in = arch.input_width();
  Rng rng(7);
  std::vector<float> x(kPool * batch * in);
  for (float& v : x) v = static_cast<float>(rng.Normal());
  const bool hsm = arch.head.kind == engine::HeadKind::kClassification;
  std::vector<int32_t> labels(kPool * batch);
  for (int32_t& l : labels) l = static_cast<int32_t>(rng.Below(hsm ? arch.head.num_classes : 1));
  std::vector<float> targets(kPool * batch * arch.output_width());
  for (float& v : targets) v = static_cast<float>(rng.Normal());
  const float cap = engine::CapFactor(batch);
  auto step = [&](size_t i) -> absl::Status {
    const size_t k = i % kPool;
    if (auto st = model.TrainStep(x.data() + k * batch * in, hsm ? labels.data() + k * batch : nullptr,
                                  hsm ? nullptr : targets.data() + k * batch * arch.output_width(),
                                  batch, 1.0f);
        !st.ok()) {
      return st;
    }
    return model.ApplyStep(cap);
  };
  // Output() waits for the stream: every queued step has finished.
  auto sync = [&]() -> absl::Status { return model.Output(batch).status(); };
  for (size_t i = 0; i < 3; ++i) {
    if (auto st = step(i); !st.ok()) return st;
  }
  if (auto st = sync(); !st.ok()) return st;
  size_t steps = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    for (int i = 0; i < 5; ++i) {
      if (auto st = step(steps++); !st.ok()) return st;
    }
    if (auto st = sync(); !st.ok()) return st;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  Measured m;
  m.samples_per_second = static_cast<double>(steps * batch) / elapsed;
  const size_t memory_after = engine::cuda::DeviceMemoryInUse(device);
  m.device_memory_bytes = memory_after > memory_before ? memory_after - memory_before : 0;
  return m;
}

int Main(int argc, char** argv) {
  int device = 0;
  double seconds = 5.0;
  bool json = false;
  bool fused_only = false;
  std::vector<Run> runs;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc) {
      device = std::atoi(argv[++i]);
    } else if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--json") {
      json = true;
    } else if (a == "--fused-only") {
      fused_only = true;
    } else if (a.find(':') != std::string::npos && a[0] != '-') {
      const size_t colon = a.rfind(':');
      runs.push_back({a.substr(0, colon), static_cast<size_t>(std::atol(a.c_str() + colon + 1))});
      if (runs.back().batch == 0) {
        std::fprintf(stderr, "gpu_cnn_bench: %s: the batch must be a positive number\n", a.c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr,
                   "usage: gpu_cnn_bench [--device N] [--seconds S] [--json] [--fused-only] "
                   "[JOB.json:BATCH ...]\n");
      return 2;
    }
  }
  if (runs.empty()) {
    runs = {{"examples/fmnist_cnn.json", 128},
            {"examples/cifar10_resnet18.json", 64},
            {"examples/cifar10_resnet18.json", 128}};
  }
  const engine::cuda::DeviceList gpus = engine::cuda::ListCudaDevices();
  if (device < 0 || static_cast<size_t>(device) >= gpus.devices.size()) {
    std::printf("gpu_cnn_bench: no CUDA device %d (%s): nothing to measure\n", device,
                gpus.devices.empty() ? gpus.reason.c_str() : "ordinal out of range");
    return 0;
  }
  const std::string name = gpus.devices[static_cast<size_t>(device)].name;
  int failures = 0;
  for (const Run& run : runs) {
    auto job = LoadJobSpecFile(run.path);
    if (!job.ok()) {
      std::fprintf(stderr, "gpu_cnn_bench: %s\n", job.status().ToString().c_str());
      return 1;
    }
    auto arch = JobArchitecture(*job);
    if (!arch.ok()) {
      std::fprintf(stderr, "gpu_cnn_bench: %s\n", arch.status().ToString().c_str());
      return 1;
    }
    double fused_rate = 0;
    for (const bool fuse : {true, false}) {
      if (!fuse && fused_only) break;
      const char* variant = fuse ? "fused" : "plain";
      const absl::StatusOr<Measured> sps = Time(*arch, run.batch, device, seconds, fuse);
      if (!sps.ok()) {
        ++failures;
        std::fprintf(stderr, "gpu_cnn_bench: %s at B %zu (%s): %s\n", job->name().c_str(),
                     run.batch, variant, sps.status().ToString().c_str());
        continue;
      }
      if (fuse) fused_rate = sps->samples_per_second;
      const double ratio = fuse || fused_rate == 0 ? 1.0 : fused_rate / sps->samples_per_second;
      if (json) {
        std::printf(
            "{\"bench\":\"%s\",\"device\":\"%s\",\"batch\":%zu,\"variant\":\"%s\","
            "\"samples_per_second\":%.1f,\"device_memory_mib\":%.1f,\"fused_over_plain\":%.3f}\n",
            job->name().c_str(), name.c_str(), run.batch, variant, sps->samples_per_second,
            static_cast<double>(sps->device_memory_bytes) / (1 << 20), ratio);
      } else {
        std::printf("%-16s B %4zu %s on %s: %10.1f samples/s, %8.1f MiB of device memory%s\n",
                    job->name().c_str(), run.batch, variant, name.c_str(),
                    sps->samples_per_second,
                    static_cast<double>(sps->device_memory_bytes) / (1 << 20),
                    fuse ? "" : (", fused/plain " + std::to_string(ratio)).c_str());
      }
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tagi::bench

int main(int argc, char** argv) { return tagi::bench::Main(argc, argv); }
