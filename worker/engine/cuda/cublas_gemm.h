// The row-major product of blas.h on the GPU: one cublasSgemm call, or for
// a small output with a long inner dimension the split-k kernels of
// kernels.h (gemm_mapping.h's SplitKSlices says when). The mapping to
// cuBLAS's column-major arguments is gemm_mapping.h.
// Internal to worker/engine/cuda.
#ifndef TAGI_WORKER_ENGINE_CUDA_CUBLAS_GEMM_H_
#define TAGI_WORKER_ENGINE_CUDA_CUBLAS_GEMM_H_

#include <cstddef>

#include "absl/status/status.h"
#include "worker/engine/blas.h"
#include "worker/engine/cuda/device_memory.h"

namespace tagi::engine::cuda {

// C[m x n] = op(A)[m x k] * op(B)[k x n] + beta * C, on the handle's stream.
// Leading dimensions are those of the stored (untransposed) row-major
// matrices. InvalidArgument when a size does not fit cuBLAS's int.
absl::Status Gemm(const CublasHandle& handle, Trans ta, Trans tb, size_t m, size_t n, size_t k,
                  const float* a, size_t lda, const float* b, size_t ldb, float beta, float* c,
                  size_t ldc);

}  // namespace tagi::engine::cuda

#endif  // TAGI_WORKER_ENGINE_CUDA_CUBLAS_GEMM_H_
