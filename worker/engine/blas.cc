#include "worker/engine/blas.h"

#include <cblas.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>

#include "worker/engine/thread_team.h"

namespace tagi::engine {
namespace {

// The team size the user asked for (--threads); OpenBLAS runs on one.
std::atomic<int> g_threads{1};

// OpenBLAS's own thread count, set to 1 before the first product of the
// process (call_once: no product runs while it is being set, whatever
// thread or model comes first). OpenBLAS keeps it process-wide, so this is
// too (like g_threads).
void OneBlasThread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void Sgemm(Trans ta, Trans tb, size_t m, size_t n, size_t k, const float* a, size_t lda,
           const float* b, size_t ldb, float beta, float* c, size_t ldc) {
  cblas_sgemm(CblasRowMajor, ta == Trans::kYes ? CblasTrans : CblasNoTrans,
              tb == Trans::kYes ? CblasTrans : CblasNoTrans, static_cast<int>(m),
              static_cast<int>(n), static_cast<int>(k), 1.0f, a, static_cast<int>(lda), b,
              static_cast<int>(ldb), beta, c, static_cast<int>(ldc));
}

}  // namespace

void Gemm(Trans ta, Trans tb, size_t m, size_t n, size_t k, const float* a,
          size_t lda, const float* b, size_t ldb, float beta, float* c, size_t ldc,
          ThreadTeam* team) {
  OneBlasThread();
  const size_t blocks = (n + kGemmColumnBlock - 1) / kGemmColumnBlock;
  if (m * n * k < kGemmSplitWork || blocks <= 1) {
    Sgemm(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Column j of op(B): column j of B stored k x n, or row j of B stored n x k.
  const size_t b_step = tb == Trans::kYes ? ldb : 1;
  auto run = [&](size_t first, size_t last) {
    for (size_t block = first; block < last; ++block) {
      const size_t j = block * kGemmColumnBlock;
      Sgemm(ta, tb, m, std::min(kGemmColumnBlock, n - j), k, a, lda, b + j * b_step, ldb, beta,
            c + j, ldc);
    }
  };
  if (team != nullptr) {
    team->For(blocks, run);
  } else {
    run(0, blocks);
  }
}

void SetBlasThreads(int threads) {
  g_threads.store(threads < 1 ? 1 : threads);
  openblas_set_num_threads(1);
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
