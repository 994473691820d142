#include "worker/engine/cuda/cublas_gemm.h"

#include <climits>

#include "absl/strings/str_format.h"
#include "worker/engine/cuda/cuda_check.h"

namespace tagi::engine::cuda {

absl::Status Gemm(const CublasHandle& handle, Trans ta, Trans tb, size_t m, size_t n, size_t k,
                  const float* a, size_t lda, const float* b, size_t ldb, float beta, float* c,
                  size_t ldc) {
  for (size_t v : {m, n, k, lda, ldb, ldc}) {
    if (v > static_cast<size_t>(INT_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Gemm: dimension %d exceeds cuBLAS's int range", v));
    }
  }
  const float alpha = 1.0f;
  const cublasOperation_t op_a = ta == Trans::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = tb == Trans::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
  TAGI_CUBLAS_RETURN_IF_ERROR(handle.api().sgemm(
      handle.get(), op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
      &alpha, b, static_cast<int>(ldb), a, static_cast<int>(lda), &beta, c, static_cast<int>(ldc)));
  return absl::OkStatus();
}

}  // namespace tagi::engine::cuda
