// The elementwise CUDA kernels of the TAGI engine (the matrix products are
// cuBLAS calls, cublas_gemm.h). Each function launches one kernel on
// `stream` and returns the launch's error (cudaGetLastError); the work
// itself runs asynchronously. The per-element formulas are those of the
// CPU engine (worker/engine/elementwise.h, docs/maths.md); sizes
// are element counts; all matrices are row-major. Internal to
// worker/engine/cuda; this header is free of project C++20 headers so that
// nvcc compiles kernels.cu on its own.
#ifndef TAGI_WORKER_ENGINE_CUDA_KERNELS_H_
#define TAGI_WORKER_ENGINE_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tagi::engine::cuda::kernels {

// mu_z[b][o] = mu_b[o], var_z[b][o] = var_b[o]: the biases the forward
// products then accumulate onto (beta = 1).
cudaError_t BroadcastBias(const float* mu_b, const float* var_b, size_t batch, size_t out,
                          float* mu_z, float* var_z, cudaStream_t stream);

// y[i] = x[i]^2.
cudaError_t Square(const float* x, size_t n, float* y, cudaStream_t stream);

// Moments of n units through an activation (elementwise::ActivationKind)
// and its jcb (docs/maths.md section 3).
cudaError_t ActivationForward(int kind, float slope, const float* mu_z, const float* var_z,
                              size_t n, float* mu_a, float* var_a, float* jcb, cudaStream_t stream);

// delta_in = (jcb * delta_mu, jcb^2 * delta_var).
cudaError_t ActivationBackward(const float* jcb, const float* delta_mu, const float* delta_var,
                               size_t n, float* delta_mu_in, float* delta_var_in,
                               cudaStream_t stream);

// Output innovations of Gaussian regression (every output observed; a NaN
// target or a non-finite gain gives zero deltas).
cudaError_t RegressionDeltas(const float* mu, const float* var, const float* targets, size_t n,
                             float var_v, float* delta_mu, float* delta_var, cudaStream_t stream);

// Output innovations of hierarchical softmax at the `levels` observed nodes
// of each label. nodes and node_targets are the HsmTree tables [K][levels].
// REQUIRES: the delta buffers were zeroed; labels in [0, K).
cudaError_t HsmDeltas(const float* mu, const float* var, size_t batch, size_t width,
                      const int32_t* labels, const int32_t* nodes, const float* node_targets,
                      int levels, float var_v, float* delta_mu, float* delta_var,
                      cudaStream_t stream);

// The output activations of the heads (worker/engine/heads.h): REMAX or
// CLOSED_FORM_SOFTMAX (`remax` false) over each of `batch` samples' `width`
// units, one thread per sample; EVEN_EXP over n units (even: mean, odd:
// log-noise).
cudaError_t SoftmaxForward(bool remax, const float* mu_z, const float* var_z, size_t batch,
                           size_t width, float* mu_a, float* var_a, float* jcb,
                           cudaStream_t stream);
cudaError_t EvenExpForward(const float* mu_z, const float* var_z, size_t n, float* mu_a,
                           float* var_a, float* jcb, cudaStream_t stream);

// Output innovations of one-hot classification: every one of the `width`
// units of each of `batch` samples observed (1 for its label, 0 else).
cudaError_t OneHotDeltas(const float* mu, const float* var, size_t batch, size_t width,
                         const int32_t* labels, float var_v, float* delta_mu, float* delta_var,
                         cudaStream_t stream);

// Output innovations of heteroscedastic regression: n targets against the
// n [mean, noise] pairs of mu, var and the output's jcb.
cudaError_t HeteroscedasticDeltas(const float* mu, const float* var, const float* jcb,
                                  const float* targets, size_t n, float* delta_mu,
                                  float* delta_var, cudaStream_t stream);

// delta_mu_w *= var_w, delta_var_w *= var_w^2 (n weights).
cudaError_t ScaleWeightDeltas(const float* var_w, size_t n, float* delta_mu_w, float* delta_var_w,
                              cudaStream_t stream);

// delta_mu_b[o] = var_b[o] * sum_b delta_mu[b][o],
// delta_var_b[o] = var_b[o]^2 * sum_b delta_var[b][o].
cudaError_t BiasDeltas(const float* delta_mu, const float* delta_var, size_t batch, size_t out,
                       const float* var_b, float* delta_mu_b, float* delta_var_b,
                       cudaStream_t stream);

// The capped step with the variance floor over n parameters (docs/maths.md
// section 7), taking each delta as delta * s_mu (means) and delta * s_var
// (variances) where s_mu = var_scale[i] * scale and s_var = var_scale[i]^2
// * scale when var_scale is not null (the weights' deferred var_w factor,
// read before the update), and scale otherwise. When mu_sq and second are
// not null they are refreshed to mu^2 and mu^2 + var (the derived buffers of
// the weights).
cudaError_t CappedStep(float inv_cap_factor, float variance_floor, size_t n, float* mu, float* var,
                       const float* delta_mu, const float* delta_var, const float* var_scale,
                       float scale, float* mu_sq, float* second, cudaStream_t stream);

// mu_sq = mu^2, second = mu^2 + var.
cudaError_t RefreshDerived(const float* mu, const float* var, size_t n, float* mu_sq, float* second,
                           cudaStream_t stream);

// out = a + b for n Gaussian units: means add, variances add (the merge of
// a residual block's independent branches, docs/maths.md section 13). out may
// be neither a nor b.
cudaError_t AddGaussians(const float* a_mu, const float* a_var, const float* b_mu,
                         const float* b_var, size_t n, float* out_mu, float* out_var,
                         cudaStream_t stream);

// dst += src for n Gaussian units (means and variances): the innovations a
// further consumer of a boundary sent back, summed into its delta.
cudaError_t Accumulate(const float* src_mu, const float* src_var, size_t n, float* dst_mu,
                       float* dst_var, cudaStream_t stream);

// x *= scale.
cudaError_t Scale(float* x, size_t n, float scale, cudaStream_t stream);

// *flag = 1 when some x[i] is not finite (left as it was otherwise: the
// caller zeroes it first).
cudaError_t FlagNonFinite(const float* x, size_t n, float* flag, cudaStream_t stream);

// A row-major product C[m x n] = op(A)[m x k] op(B)[k x n] + beta C cut
// along k into `slices` slices of ceil(k / slices) (cublas_gemm.cc says
// when): partials[s][i][j] = the slice-s part of the sum, then C = the
// slices added in order + beta C (C is not read when beta is 0).
// `ta`/`tb`: the operand is stored transposed (lda/ldb as in blas.h).
cudaError_t SplitKPartials(bool ta, bool tb, size_t m, size_t n, size_t k, const float* a,
                           size_t lda, const float* b, size_t ldb, size_t slices,
                           float* partials, cudaStream_t stream);
cudaError_t SplitKSum(size_t m, size_t n, size_t slices, const float* partials, float beta,
                      float* c, size_t ldc, cudaStream_t stream);

}  // namespace tagi::engine::cuda::kernels

#endif  // TAGI_WORKER_ENGINE_CUDA_KERNELS_H_
