// The cuBLAS API the CUDA engine uses, emulated on the host with the
// column-major CBLAS (see cuda_runtime.h beside this file): cublasSgemm_v2
// checks every operand's extent against the emulated device allocations and
// queues the product on the handle's stream.
#ifndef TAGI_TESTS_CUDA_EMULATION_CUBLAS_V2_H_
#define TAGI_TESTS_CUDA_EMULATION_CUBLAS_V2_H_

#include "cuda_runtime.h"

#define CUBLAS_VER_MAJOR 13

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0 };

struct cublasContext;
using cublasHandle_t = cublasContext*;

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle);
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* a, int lda, const float* b, int ldb, const float* beta,
                              float* c, int ldc);
const char* cublasGetStatusString(cublasStatus_t status);

#endif  // TAGI_TESTS_CUDA_EMULATION_CUBLAS_V2_H_
