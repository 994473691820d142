// SgemmTflops: the fp32 throughput cuBLAS reaches on one GPU, as the
// yardstick that benchmarks print next to the engine's own figure.
// Free of CUDA headers. Thread-safe (it makes `device` current in the
// calling thread).
#ifndef TAGI_WORKER_ENGINE_CUDA_SGEMM_PROBE_H_
#define TAGI_WORKER_ENGINE_CUDA_SGEMM_PROBE_H_

#include <cstddef>

#include "absl/status/statusor.h"

namespace tagi::engine::cuda {

// TFLOP/s of C[m x n] = A[m x k] B[k x n] (2mnk flops each), in the same
// math mode as the engine (plain fp32), repeated for about `seconds` after
// a warm-up and timed with CUDA events. Inputs are constant (the time does
// not depend on the values).
absl::StatusOr<double> SgemmTflops(int device, size_t m, size_t n, size_t k, double seconds);

}  // namespace tagi::engine::cuda

#endif  // TAGI_WORKER_ENGINE_CUDA_SGEMM_PROBE_H_
