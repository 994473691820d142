#include "worker/engine/cuda/cuda_check.h"

#include "absl/strings/str_format.h"
#include "worker/engine/cuda/cublas_api.h"

namespace tagi::engine::cuda {

absl::Status CublasStatus(cublasStatus_t err, const char* expr, const char* file, int line) {
  absl::StatusOr<const CublasApi*> api = Cublas();
  const std::string message =
      absl::StrFormat("%s:%d: %s failed: %s (cuBLAS status %d)", file, line, expr,
                      api.ok() ? (*api)->status_string(err) : "", static_cast<int>(err));
  if (err == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  if (err == CUBLAS_STATUS_NOT_INITIALIZED) return absl::FailedPreconditionError(message);
  return absl::InternalError(message);
}

}  // namespace tagi::engine::cuda
