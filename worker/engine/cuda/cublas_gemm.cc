#include "worker/engine/cuda/cublas_gemm.h"

#include "common/status.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/gemm_mapping.h"
#include "worker/engine/cuda/kernels.h"

namespace tagi::engine::cuda {

absl::Status Gemm(const CublasHandle& handle, Trans ta, Trans tb, size_t m, size_t n, size_t k,
                  const float* a, size_t lda, const float* b, size_t ldb, float beta, float* c,
                  size_t ldc) {
  TAGI_ASSIGN_OR_RETURN(const ColumnMajorGemm g,
                        ToColumnMajor(ta, tb, m, n, k, a, lda, b, ldb, ldc));
  if (const size_t slices = SplitKSlices(m, n, k, CublasHandle::kSplitKFloats); slices > 1) {
    float* partials = handle.split_workspace();
    TAGI_CUDA_RETURN_IF_ERROR(kernels::SplitKPartials(ta == Trans::kYes, tb == Trans::kYes, m, n,
                                                      k, a, lda, b, ldb, slices, partials,
                                                      handle.stream()));
    TAGI_CUDA_RETURN_IF_ERROR(
        kernels::SplitKSum(m, n, slices, partials, beta, c, ldc, handle.stream()));
    return absl::OkStatus();
  }
  const float alpha = 1.0f;
  TAGI_CUBLAS_RETURN_IF_ERROR(handle.api().sgemm(
      handle.get(), g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
      g.m, g.n, g.k, &alpha, g.a, g.lda, g.b, g.ldb, &beta, c, g.ldc));
  return absl::OkStatus();
}

}  // namespace tagi::engine::cuda
