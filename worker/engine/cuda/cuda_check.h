// Status from CUDA runtime and cuBLAS return codes, with file and line.
//
// Internal to worker/engine/cuda (and worker/collective/nccl): includes the
// CUDA headers. Out-of-memory is ResourceExhausted; every other failure is
// Internal with the runtime's own message. A device that is absent or a
// driver too old is FailedPrecondition (nothing to retry on this host).
#ifndef TAGI_WORKER_ENGINE_CUDA_CUDA_CHECK_H_
#define TAGI_WORKER_ENGINE_CUDA_CUDA_CHECK_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "absl/status/status.h"

namespace tagi::engine::cuda {

absl::Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line);
absl::Status CublasStatus(cublasStatus_t err, const char* expr, const char* file, int line);

}  // namespace tagi::engine::cuda

#define TAGI_CUDA_RETURN_IF_ERROR(expr)                                                   \
  do {                                                                                    \
    const cudaError_t tagi_cuda_err_ = (expr);                                            \
    if (tagi_cuda_err_ != cudaSuccess) {                                                  \
      return ::tagi::engine::cuda::CudaStatus(tagi_cuda_err_, #expr, __FILE__, __LINE__); \
    }                                                                                     \
  } while (0)

#define TAGI_CUBLAS_RETURN_IF_ERROR(expr)                                                     \
  do {                                                                                        \
    const cublasStatus_t tagi_cublas_err_ = (expr);                                           \
    if (tagi_cublas_err_ != CUBLAS_STATUS_SUCCESS) {                                          \
      return ::tagi::engine::cuda::CublasStatus(tagi_cublas_err_, #expr, __FILE__, __LINE__); \
    }                                                                                         \
  } while (0)

#endif  // TAGI_WORKER_ENGINE_CUDA_CUDA_CHECK_H_
