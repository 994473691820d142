// How a row-major product of blas.h becomes one column-major cuBLAS SGEMM,
// as a pure function free of CUDA headers, so that every build can test the
// mapping by running it through the column-major CBLAS on the CPU
// (tests/engine/gemm_mapping_test.cc).
//
// A row-major matrix is the column-major view of its transpose, so
// C = op(A) op(B) (row-major) is computed as the column-major
// C^T = op(B)^T op(A)^T: the operands swap places, each keeps its own
// transpose flag, and m and n swap. Leading dimensions are unchanged.
#ifndef TAGI_WORKER_ENGINE_CUDA_GEMM_MAPPING_H_
#define TAGI_WORKER_ENGINE_CUDA_GEMM_MAPPING_H_

#include <climits>
#include <cstddef>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "worker/engine/blas.h"

namespace tagi::engine::cuda {

// The arguments of cublasSgemm(handle, transa, transb, m, n, k, alpha, A,
// lda, B, ldb, beta, C, ldc), column-major.
struct ColumnMajorGemm {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0, n = 0, k = 0;
  const float* a = nullptr;
  int lda = 0;
  const float* b = nullptr;
  int ldb = 0;
  int ldc = 0;
};

// C[m x n] = op(A)[m x k] * op(B)[k x n] (+ beta * C), row-major, as
// column-major arguments. InvalidArgument when a size does not fit int.
inline absl::StatusOr<ColumnMajorGemm> ToColumnMajor(Trans ta, Trans tb, size_t m, size_t n,
                                                     size_t k, const float* a, size_t lda,
                                                     const float* b, size_t ldb, size_t ldc) {
  for (size_t v : {m, n, k, lda, ldb, ldc}) {
    if (v > static_cast<size_t>(INT_MAX)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("Gemm: dimension %d exceeds cuBLAS's int range", v));
    }
  }
  ColumnMajorGemm g;
  g.trans_a = tb == Trans::kYes;
  g.trans_b = ta == Trans::kYes;
  g.m = static_cast<int>(n);
  g.n = static_cast<int>(m);
  g.k = static_cast<int>(k);
  g.a = b;
  g.lda = static_cast<int>(ldb);
  g.b = a;
  g.ldb = static_cast<int>(lda);
  g.ldc = static_cast<int>(ldc);
  return g;
}

// How many slices of k a product C[m x n] with inner dimension k is cut
// into, 1 meaning one cuBLAS call. cuBLAS gives a small output few thread
// blocks, each looping over all of k: the 784-100 layer at batch 16 ran as
// one block for 55 us on an H100, most of its training step. Cut along k,
// every slice of about 32 runs on its own threads, and the slices are then
// added in a fixed order (deterministic). Only outputs of at most
// kSplitKMaxOutputs and k of at least kSplitKMinInner are cut, into at most
// 64 slices and no more than `workspace_floats` / (m n) of them.
inline constexpr size_t kSplitKMaxOutputs = size_t{1} << 14;
inline constexpr size_t kSplitKMinInner = 256;
inline size_t SplitKSlices(size_t m, size_t n, size_t k, size_t workspace_floats) {
  const size_t outputs = m * n;
  if (outputs == 0 || outputs > kSplitKMaxOutputs || k < kSplitKMinInner) return 1;
  size_t slices = k / 32;
  if (slices > 64) slices = 64;
  if (slices > workspace_floats / outputs) slices = workspace_floats / outputs;
  return slices >= 2 ? slices : 1;
}

}  // namespace tagi::engine::cuda

#endif  // TAGI_WORKER_ENGINE_CUDA_GEMM_MAPPING_H_
