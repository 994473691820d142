// Status from cuBLAS return codes, with file and line, beside the CUDA
// runtime's (worker/cuda_runtime/cuda_status.h, TAGI_CUDA_RETURN_IF_ERROR).
//
// Internal to worker/engine/cuda: includes the CUDA headers. Out-of-memory
// is ResourceExhausted, an uninitialised library FailedPrecondition, every
// other failure Internal.
#ifndef TAGI_WORKER_ENGINE_CUDA_CUDA_CHECK_H_
#define TAGI_WORKER_ENGINE_CUDA_CUDA_CHECK_H_

#include <cublas_v2.h>

#include "absl/status/status.h"
#include "worker/cuda_runtime/cuda_status.h"

namespace tagi::engine::cuda {

using ::tagi::cudart::CudaStatus;
absl::Status CublasStatus(cublasStatus_t err, const char* expr, const char* file, int line);

}  // namespace tagi::engine::cuda

#define TAGI_CUBLAS_RETURN_IF_ERROR(expr)                                                     \
  do {                                                                                        \
    const cublasStatus_t tagi_cublas_err_ = (expr);                                           \
    if (tagi_cublas_err_ != CUBLAS_STATUS_SUCCESS) {                                          \
      return ::tagi::engine::cuda::CublasStatus(tagi_cublas_err_, #expr, __FILE__, __LINE__); \
    }                                                                                         \
  } while (0)

#endif  // TAGI_WORKER_ENGINE_CUDA_CUDA_CHECK_H_
