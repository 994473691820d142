#include "worker/engine/engine_factory.h"

#include "absl/strings/str_cat.h"
#include "worker/engine/cpu_engine.h"
#ifdef TAGI_HAVE_CUDA
#include "worker/engine/cuda/cuda_engine.h"
#endif

namespace tagi::engine {

bool GpuEnginesCompiledIn() {
#ifdef TAGI_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(const Architecture& arch, size_t max_batch,
                                                     int device) {
  if (device < 0) {
    auto cpu = CpuEngine::Create(arch, max_batch);
    if (!cpu.ok()) return cpu.status();
    return std::unique_ptr<Engine>(std::move(*cpu));
  }
#ifdef TAGI_HAVE_CUDA
  auto gpu = cuda::CudaEngine::Create(arch, max_batch, device);
  if (!gpu.ok()) return gpu.status();
  return std::unique_ptr<Engine>(std::move(*gpu));
#else
  (void)arch;
  (void)max_batch;
  return absl::FailedPreconditionError(absl::StrCat(
      "cuda:", device, ": this build has no CUDA support (nvcc was not found at configure time)"));
#endif
}

}  // namespace tagi::engine
