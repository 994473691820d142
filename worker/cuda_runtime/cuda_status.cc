#include "worker/cuda_runtime/cuda_status.h"

#include <string>

#include "absl/strings/str_format.h"

namespace tagi::cudart {

absl::Status CudaStatus(cudaError_t err, const char* expr, const char* file, int line) {
  const std::string message = absl::StrFormat("%s:%d: %s failed: %s (%s)", file, line, expr,
                                              cudaGetErrorString(err), cudaGetErrorName(err));
  switch (err) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace tagi::cudart
