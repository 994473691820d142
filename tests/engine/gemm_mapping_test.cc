// The row-major -> column-major mapping of the CUDA engine's products
// (worker/engine/cuda/gemm_mapping.h), run through the column-major CBLAS on
// the CPU: what cuBLAS would be asked to compute must equal the row-major
// product the CPU engine computes, for every transpose combination the
// engine uses, padded leading dimensions and beta = 0 and 1. Runs in every
// build, GPU or not.
#include "worker/engine/cuda/gemm_mapping.h"

#include <cblas.h>

#include <cmath>
#include <vector>

#include "common/rng.h"
#include "gtest/gtest.h"

namespace tagi::engine::cuda {
namespace {

struct Shape {
  size_t m, n, k;
  size_t pad;  // added to every leading dimension
};

// Element (r, c) of op(X) where X is row-major with leading dimension ld.
float At(const std::vector<float>& x, size_t ld, Trans t, size_t r, size_t c) {
  return t == Trans::kYes ? x[c * ld + r] : x[r * ld + c];
}

void CheckMapping(Trans ta, Trans tb, const Shape& s, float beta) {
  SCOPED_TRACE(testing::Message() << "ta=" << (ta == Trans::kYes) << " tb=" << (tb == Trans::kYes)
                                  << " m=" << s.m << " n=" << s.n << " k=" << s.k
                                  << " pad=" << s.pad << " beta=" << beta);
  // Stored shapes: op(A) is m x k, so A is k x m when transposed.
  const size_t a_rows = ta == Trans::kYes ? s.k : s.m;
  const size_t a_cols = ta == Trans::kYes ? s.m : s.k;
  const size_t b_rows = tb == Trans::kYes ? s.n : s.k;
  const size_t b_cols = tb == Trans::kYes ? s.k : s.n;
  const size_t lda = a_cols + s.pad, ldb = b_cols + s.pad, ldc = s.n + s.pad;
  Rng rng(s.m * 131 + s.n * 17 + s.k);
  std::vector<float> a(a_rows * lda), b(b_rows * ldb), c0(s.m * ldc);
  for (float& v : a) v = static_cast<float>(rng.Normal());
  for (float& v : b) v = static_cast<float>(rng.Normal());
  for (float& v : c0) v = static_cast<float>(rng.Normal());

  // Reference in double from the definition.
  std::vector<double> want(s.m * s.n);
  for (size_t r = 0; r < s.m; ++r) {
    for (size_t c = 0; c < s.n; ++c) {
      double sum = beta * static_cast<double>(c0[r * ldc + c]);
      for (size_t i = 0; i < s.k; ++i) {
        sum += static_cast<double>(At(a, lda, ta, r, i)) * At(b, ldb, tb, i, c);
      }
      want[r * s.n + c] = sum;
    }
  }

  auto g = ToColumnMajor(ta, tb, s.m, s.n, s.k, a.data(), lda, b.data(), ldb, ldc);
  ASSERT_TRUE(g.ok()) << g.status();
  std::vector<float> c = c0;
  cblas_sgemm(CblasColMajor, g->trans_a ? CblasTrans : CblasNoTrans,
              g->trans_b ? CblasTrans : CblasNoTrans, g->m, g->n, g->k, 1.0f, g->a, g->lda, g->b,
              g->ldb, beta, c.data(), g->ldc);
  for (size_t r = 0; r < s.m; ++r) {
    for (size_t col = 0; col < s.n; ++col) {
      const double w = want[r * s.n + col];
      ASSERT_NEAR(c[r * ldc + col], w, 1e-4 * (1.0 + std::fabs(w))) << "at " << r << "," << col;
    }
    // The padding of C is not written.
    for (size_t col = s.n; col < ldc; ++col) ASSERT_EQ(c[r * ldc + col], c0[r * ldc + col]);
  }
}

TEST(GemmMapping, ColumnMajorCallComputesTheRowMajorProduct) {
  // The engine's own shapes (forward B x out x in with B^T; parameter deltas
  // out x in x B with A^T; input innovations B x in x out), plus odd sizes.
  const std::vector<Shape> shapes = {
      {16, 100, 784, 0}, {100, 784, 16, 0}, {16, 784, 100, 0}, {7, 5, 3, 0},
      {1, 1, 1, 0},      {3, 11, 9, 5},     {33, 2, 17, 3},    {4, 64, 1, 1}};
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      for (const Shape& s : shapes) {
        for (float beta : {0.0f, 1.0f}) CheckMapping(ta, tb, s, beta);
      }
    }
  }
}

TEST(GemmMapping, OperandsSwapAndDimensionsTranspose) {
  const float a = 0, b = 0;
  auto g = ToColumnMajor(Trans::kNo, Trans::kYes, 2, 3, 4, &a, 5, &b, 6, 7);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->a, &b);
  EXPECT_EQ(g->b, &a);
  EXPECT_TRUE(g->trans_a);
  EXPECT_FALSE(g->trans_b);
  EXPECT_EQ(g->m, 3);
  EXPECT_EQ(g->n, 2);
  EXPECT_EQ(g->k, 4);
  EXPECT_EQ(g->lda, 6);
  EXPECT_EQ(g->ldb, 5);
  EXPECT_EQ(g->ldc, 7);
}

TEST(GemmMapping, SizesBeyondIntAreInvalidArgument) {
  const float x = 0;
  const size_t big = size_t{1} << 31;
  auto g = ToColumnMajor(Trans::kNo, Trans::kNo, big, 1, 1, &x, 1, &x, 1, 1);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("2147483648"), std::string::npos) << g.status();
  EXPECT_TRUE(ToColumnMajor(Trans::kNo, Trans::kNo, 1, 1, 1, &x, big - 1, &x, 1, 1).ok());
}

}  // namespace
}  // namespace tagi::engine::cuda
