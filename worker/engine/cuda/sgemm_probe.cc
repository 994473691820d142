#include "worker/engine/cuda/sgemm_probe.h"

#include <algorithm>

#include "common/status.h"
#include "worker/engine/cuda/cublas_gemm.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/device_memory.h"

namespace tagi::engine::cuda {

absl::StatusOr<double> SgemmTflops(int device, size_t m, size_t n, size_t k, double seconds) {
  TAGI_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  TAGI_ASSIGN_OR_RETURN(Stream stream, Stream::Create());
  TAGI_ASSIGN_OR_RETURN(CublasHandle blas, CublasHandle::Create(stream.get()));
  TAGI_ASSIGN_OR_RETURN(DeviceFloats a, DeviceFloats::Allocate(m * k));
  TAGI_ASSIGN_OR_RETURN(DeviceFloats b, DeviceFloats::Allocate(k * n));
  TAGI_ASSIGN_OR_RETURN(DeviceFloats c, DeviceFloats::Allocate(m * n));
  TAGI_ASSIGN_OR_RETURN(Event start, Event::Create(/*timing=*/true));
  TAGI_ASSIGN_OR_RETURN(Event stop, Event::Create(/*timing=*/true));
  // Small finite values: denormals or NaNs could change the speed.
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(a.get(), 0, m * k * sizeof(float), stream.get()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(b.get(), 0, k * n * sizeof(float), stream.get()));
  auto run = [&]() {
    return Gemm(blas, Trans::kNo, Trans::kNo, m, n, k, a.get(), k, b.get(), n, 0.0f, c.get(),
                n);
  };
  TAGI_RETURN_IF_ERROR(run());  // warm-up (kernel selection, first launch)
  TAGI_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream.get()));

  // Time one call, then enough calls for about `seconds`.
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream.get()));
  TAGI_RETURN_IF_ERROR(run());
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream.get()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()));
  float one_ms = 0.0f;
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&one_ms, start.get(), stop.get()));
  const double per_call = one_ms > 0.0f ? one_ms * 1e-3 : 1e-6;
  const int reps = static_cast<int>(std::min(1e5, std::max(3.0, seconds / per_call)));
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream.get()));
  for (int i = 0; i < reps; ++i) TAGI_RETURN_IF_ERROR(run());
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream.get()));
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()));
  float ms = 0.0f;
  TAGI_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  const double flops = 2.0 * static_cast<double>(m) * n * k * reps;
  return flops / (ms * 1e-3) / 1e12;
}

}  // namespace tagi::engine::cuda
