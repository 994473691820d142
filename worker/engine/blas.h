// Thin, typed wrappers over CBLAS (OpenBLAS) for the engine's matrix
// products. All matrices are row-major; "T" means the operand is used
// transposed. Thread-safe to call; the thread count is a process-wide
// OpenBLAS setting, so only main() (or a benchmark) calls SetBlasThreads.
#ifndef TAGI_WORKER_ENGINE_BLAS_H_
#define TAGI_WORKER_ENGINE_BLAS_H_

#include <cstddef>

namespace tagi::engine {

enum class Trans { kNo, kYes };

// C[m x n] = op(A)[m x k] * op(B)[k x n] + beta * C.
// Leading dimensions are those of the stored (untransposed) matrices.
void Gemm(Trans ta, Trans tb, size_t m, size_t n, size_t k, const float* a,
          size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc);

void SetBlasThreads(int threads);
int BlasThreads();

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_BLAS_H_
