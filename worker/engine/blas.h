// Thin, typed wrappers over CBLAS (OpenBLAS) for the engine's matrix
// products. All matrices are row-major; "T" means the operand is used
// transposed. Gemm is thread-safe.
//
// The BLAS thread count is the one piece of process-wide state here, and it
// cannot be made otherwise: OpenBLAS keeps it (and its thread pool) in the
// library itself, shared by every caller in the process. So it is set in
// one place: main() of tagi-train and tagi-worker (their --threads flag),
// or a benchmark's main, once, before any engine runs. Libraries, the job
// runner and tests do not call SetBlasThreads; a per-job setting would
// change the count under any other engine in the process.
#ifndef TAGI_WORKER_ENGINE_BLAS_H_
#define TAGI_WORKER_ENGINE_BLAS_H_

#include <cstddef>

namespace tagi::engine {

enum class Trans { kNo, kYes };

class ThreadTeam;

// C[m x n] = op(A)[m x k] * op(B)[k x n] + beta * C.
// Leading dimensions are those of the stored (untransposed) matrices.
//
// The same bits for any thread count: OpenBLAS always runs on one thread.
// A large product (kGemmSplitWork multiply-adds or more) is cut into
// blocks of kGemmColumnBlock columns of C, a fixed cut whatever the team,
// each block one single-threaded product over the whole inner dimension;
// `team` (when given) runs the blocks side by side. Every element of C is
// so computed by the same call with the same operands on 1 thread or 16.
// (OpenBLAS's own threading split products differently with the thread
// count, and the sums' rounding with them: a run could not be resumed
// bit-exactly on a worker with another --threads.)
inline constexpr size_t kGemmSplitWork = size_t{1} << 23;
inline constexpr size_t kGemmColumnBlock = 256;
void Gemm(Trans ta, Trans tb, size_t m, size_t n, size_t k, const float* a,
          size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc,
          ThreadTeam* team = nullptr);

// Sets the process-wide thread count (the size of a model's ThreadTeam,
// which runs the blocks of large products and the elementwise loops);
// OpenBLAS itself is set to one thread. Values below 1 mean 1. Called only
// from main(), before any engine runs (see above).
void SetBlasThreads(int threads);
// OpenBLAS's idle threads yield-spin for a while after each product
// (OPENBLAS_THREAD_TIMEOUT, read once when the library loads), which takes
// the other cores from the model's own threads between products: on the
// Fashion-MNIST CNN at 2 threads, 530 samples/s against 833 with a short
// spin. So main() of the programs that train calls this first: when the
// variable is unset it sets it to 4 (the shortest) and re-executes the
// program (/proc/self/exe, same pid and descriptors) so that OpenBLAS
// loads with it; a user's own setting is kept. Returns only when no
// re-execution happened (it was set, or exec failed: then nothing changes).
void ReexecWithShortBlasSpin(char** argv);

// The count last set; 1 before any call (OpenBLAS itself then runs with
// its own default, OPENBLAS_NUM_THREADS or the number of cores).
int BlasThreads();

}  // namespace tagi::engine

#endif  // TAGI_WORKER_ENGINE_BLAS_H_
