// Status from CUDA runtime return codes, with file and line: the one piece
// of CUDA that the CUDA engine (worker/engine/cuda) and the NCCL collective
// (worker/collective/nccl) share, in a library of its own (tagi_cuda_runtime:
// this file and the CUDA runtime, nothing of the engine).
//
// Includes the CUDA runtime's header. Out-of-memory is ResourceExhausted; a
// device that is absent or a driver too old is FailedPrecondition (nothing
// to retry on this host); every other failure is Internal with the
// runtime's own message.
#ifndef TAGI_WORKER_CUDA_RUNTIME_CUDA_STATUS_H_
#define TAGI_WORKER_CUDA_RUNTIME_CUDA_STATUS_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"

namespace tagi::cudart {

absl::Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line);

}  // namespace tagi::cudart

#define TAGI_CUDA_RETURN_IF_ERROR(expr)                                               \
  do {                                                                                \
    const cudaError_t tagi_cuda_err_ = (expr);                                        \
    if (tagi_cuda_err_ != cudaSuccess) {                                              \
      return ::tagi::cudart::CudaStatus(tagi_cuda_err_, #expr, __FILE__, __LINE__);   \
    }                                                                                 \
  } while (0)

#endif  // TAGI_WORKER_CUDA_RUNTIME_CUDA_STATUS_H_
