#include "worker/engine/blas.h"

#include <cblas.h>

#include <unistd.h>

#include <atomic>
#include <cstdlib>

namespace tagi::engine {
namespace {

// OpenBLAS's thread count is process-wide state of the library itself; this
// mirrors the count the user asked for so that small products can run on
// one thread without forgetting it.
std::atomic<int> g_threads{1};

// Below this many multiply-adds a product runs on one thread: splitting
// e.g. 16x784x100 across threads costs more than it saves (measured with
// bench/engine_bench: the 784-100-100-11 network at B = 16 ran slower on 2
// threads than on 1).
constexpr size_t kThreadedMinWork = size_t{1} << 23;

void UseThreads(int threads) {
  if (openblas_get_num_threads() != threads) openblas_set_num_threads(threads);
}

}  // namespace

void Gemm(Trans ta, Trans tb, size_t m, size_t n, size_t k, const float* a,
          size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc) {
  const int wanted = g_threads.load(std::memory_order_relaxed);
  if (wanted > 1) UseThreads(m * n * k < kThreadedMinWork ? 1 : wanted);
  cblas_sgemm(CblasRowMajor, ta == Trans::kYes ? CblasTrans : CblasNoTrans,
              tb == Trans::kYes ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

void SetBlasThreads(int threads) {
  const int t = threads < 1 ? 1 : threads;
  g_threads.store(t);
  openblas_set_num_threads(t);
}

int BlasThreads() { return g_threads.load(); }

void ReexecWithShortBlasSpin(char** argv) {
  constexpr char kVariable[] = "OPENBLAS_THREAD_TIMEOUT";
  if (std::getenv(kVariable) != nullptr) return;
  if (setenv(kVariable, "4", /*overwrite=*/0) != 0) return;
  execv("/proc/self/exe", argv);
  // exec failed: run on as we are (the variable now set is harmless).
}

}  // namespace tagi::engine
