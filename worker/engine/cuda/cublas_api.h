// cuBLAS, loaded when the first GPU engine needs it (dlopen), not linked.
//
// Why: libcublasLt carries about 94 KiB of thread-local storage. Linked
// into a program it joins the static TLS block that glibc reserves on every
// thread's stack, and a library that creates threads with small stacks then
// fails: civetweb's threads (prometheus-cpp's metrics endpoint) could no
// longer start in tagi-worker ("Cannot create threads"). Loaded with dlopen
// its TLS is allocated dynamically, so CPU workers never load it and GPU
// workers load it only when a GPU job starts.
//
// Cublas() loads the library once per process (thread-safe) and returns the
// entry points the engine uses, or FailedPrecondition saying why it could
// not be loaded. Internal to worker/engine/cuda.
#ifndef TAGI_WORKER_ENGINE_CUDA_CUBLAS_API_H_
#define TAGI_WORKER_ENGINE_CUDA_CUBLAS_API_H_

#include <cublas_v2.h>

#include "absl/status/statusor.h"

namespace tagi::engine::cuda {

struct CublasApi {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm_v2) sgemm = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

absl::StatusOr<const CublasApi*> Cublas();

}  // namespace tagi::engine::cuda

#endif  // TAGI_WORKER_ENGINE_CUDA_CUBLAS_API_H_
