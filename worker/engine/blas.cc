#include "worker/engine/blas.h"

#include <cblas.h>

namespace tagi::engine {

void Gemm(Trans ta, Trans tb, size_t m, size_t n, size_t k, const float* a,
          size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc) {
  cblas_sgemm(CblasRowMajor, ta == Trans::kYes ? CblasTrans : CblasNoTrans,
              tb == Trans::kYes ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

void SetBlasThreads(int threads) { openblas_set_num_threads(threads < 1 ? 1 : threads); }

int BlasThreads() { return openblas_get_num_threads(); }

}  // namespace tagi::engine
