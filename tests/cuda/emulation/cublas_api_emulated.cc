// Cublas() of worker/engine/cuda/cublas_api.h for the host emulation: the
// entry points are the emulated ones (cublas_v2.h beside this file) instead
// of a dlopen'ed libcublas.
#include "worker/engine/cuda/cublas_api.h"

namespace tagi::engine::cuda {

absl::StatusOr<const CublasApi*> Cublas() {
  static const CublasApi api = {&cublasCreate_v2,   &cublasDestroy_v2, &cublasSetStream_v2,
                                &cublasSetMathMode, &cublasSgemm_v2,   &cublasGetStatusString};
  return &api;
}

}  // namespace tagi::engine::cuda
