// The CUDA kernels of the image layers (image_layers.cc): pooling, the
// statistics and products of BatchNorm and LayerNorm, the per-channel bias
// of a convolution, and the padded copies an asymmetric convolution needs.
// The convolutions themselves are cuDNN calls (cudnn_conv.h).
//
// As kernels.h: each function launches on `stream` and returns the
// launch's error; the per-element formulas are the CPU engine's
// (elementwise.h); tensors are row-major [batch][channels][height][width].
//
// Sums are deterministic (no atomics): a first kernel sums fixed, strided
// parts of each group into partial sums (double), a second adds a group's
// partials in a fixed order. So a step gives the same bits every time, and
// exact resume holds on the GPU as on the CPU. No kernel relies on threads
// of a block cooperating, which keeps them runnable, thread by thread, in
// the host emulation of tests/cuda/emulation.
//
// Internal to worker/engine/cuda; free of project C++20 headers (nvcc).
#ifndef TAGI_WORKER_ENGINE_CUDA_IMAGE_KERNELS_H_
#define TAGI_WORKER_ENGINE_CUDA_IMAGE_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>

namespace tagi::engine::cuda::kernels {

// The geometry of a windowed layer (conv2d.h's WindowGeometry, restated
// here for nvcc): `planes` = batch * channels.
struct Window {
  size_t planes = 0;
  size_t height = 0;
  size_t width = 0;
  size_t out_height = 0;
  size_t out_width = 0;
  size_t kernel = 0;
  size_t stride = 0;
  size_t offset = 0;
};

cudaError_t AvgPoolForward(const Window& g, const float* mu_a, const float* var_a, float* mu_z,
                           float* var_z, cudaStream_t stream);
// Innovations of the input (overwritten: cells no window reads get zero).
cudaError_t AvgPoolBackward(const Window& g, const float* delta_mu, const float* delta_var,
                            float* delta_mu_in, float* delta_var_in, cudaStream_t stream);
// `index` (one float per output cell) receives the in-plane index of the
// cell taken, as the bits of a float (as the CPU layer keeps it).
cudaError_t MaxPoolForward(const Window& g, const float* mu_a, const float* var_a, float* mu_z,
                           float* var_z, float* index, cudaStream_t stream);
cudaError_t MaxPoolBackward(const Window& g, const float* index, const float* delta_mu,
                            const float* delta_var, float* delta_mu_in, float* delta_var_in,
                            cudaStream_t stream);

// dst [planes][out_h][out_w] from src [planes][h][w]: dst[y][x] = src[y][x]
// where y < h and x < w, else 0 (pad at the bottom and right, or crop).
cudaError_t PadOrCrop(const float* src, size_t planes, size_t height, size_t width, float* dst,
                      size_t out_height, size_t out_width, cudaStream_t stream);

// A [batch][channels][positions] tensor.
struct ChannelLayout {
  size_t batch = 0;
  size_t channels = 0;
  size_t positions = 0;
};

// An elementwise activation that a norm runs inside its own passes
// (spec::Step::absorbed; kind < 0: none). Its units are computed from its
// input (mu_z, var_z) by elementwise::ActivateUnit, as its own kernel
// would: the statistics pass writes their means to `mu_a` (the norm's
// input, which its backward reads) and the jcb to `jcb`; the norm's forward
// computes them again instead of reading the norm's input, whose variances
// are then never written; the backward applies the jcb (jcb^2) to the input
// innovations, which then go to the activation's input.
struct AbsorbedActivation {
  int kind = -1;  // elementwise::ActivationKind
  float slope = 0.0f;
  const float* mu_z = nullptr;
  const float* var_z = nullptr;
  float* mu_a = nullptr;
  float* jcb = nullptr;
  __host__ __device__ bool on() const { return kind >= 0; }
};

// Doubles of working memory the sums below need for `groups` groups of
// `count` values (the partials of one pass; they hold up to 4 sums each).
size_t SumWorkspaceDoubles(size_t groups, size_t count);

// z[b][c][p] += bias[c] (mu and var), for a convolution's biases.
cudaError_t AddChannelBias(const ChannelLayout& l, const float* mu_b, const float* var_b,
                           float* mu_z, float* var_z, cudaStream_t stream);
// delta_mu_b[c] = var_b[c] * sum delta_mu[.][c][.], delta_var_b[c] =
// var_b[c]^2 * sum delta_var[.][c][.].
cudaError_t ChannelBiasDeltas(const ChannelLayout& l, const float* delta_mu,
                              const float* delta_var, const float* var_b, float* delta_mu_b,
                              float* delta_var_b, double* work, cudaStream_t stream);

// BatchNorm's batch statistics per channel (norm.cc's Statistics): mean
// and (spread of the means + sum of the variances) / (count - 1) into
// mean[c], var[c].
cudaError_t BatchStatistics(const ChannelLayout& l, const float* mu_a, const float* var_a,
                            float* mean, float* var, double* work, cudaStream_t stream,
                            const AbsorbedActivation& act = {});
// The synchronised statistics (norm.cc's SyncedStatistics) in three
// stages around the two cross-replica sums the caller makes:
//  1. sums[0..C) = sum of the means, sums[C..2C) = sum of the variances;
//  2. (after summing sums[0..2C) across replicas) var_sum[c] = sums[C + c],
//     sums[c] = the mean over `total` values, sums[C + c] = the local
//     spread about it;
//  3. (after summing sums[C..2C)) sums[C + c] = the variance.
cudaError_t SyncedSums(const ChannelLayout& l, const float* mu_a, const float* var_a, float* sums,
                       double* work, cudaStream_t stream, const AbsorbedActivation& act = {});
cudaError_t SyncedSpread(const ChannelLayout& l, const float* mu_a, double total, float* sums,
                         float* var_sum, double* work, cudaStream_t stream);
cudaError_t SyncedVariance(size_t channels, double total, const float* var_sum, float* sums,
                           cudaStream_t stream);
// running = RunningUpdate(running, batch, first > 0 ? 0 : momentum) per
// channel for the mean and the variance, then first = 0.
cudaError_t UpdateRunning(size_t channels, const float* batch_mean, const float* batch_var,
                          float momentum, float* running_mean, float* running_var, float* first,
                          cudaStream_t stream);
// BatchNorm forward: per channel (mean, var); beta when mu_b is not null.
cudaError_t BatchNormForward(const ChannelLayout& l, const float* mu_a, const float* var_a,
                             const float* mean, const float* var, float eps, const float* mu_g,
                             const float* var_g, const float* mu_b, const float* var_b,
                             float* mu_z, float* var_z, cudaStream_t stream,
                             const AbsorbedActivation& act = {});

// LayerNorm's statistics per sample: stats[2b] = mean, stats[2b + 1] =
// variance of sample b's channels * positions values.
cudaError_t SampleStatistics(const ChannelLayout& l, const float* mu_a, const float* var_a,
                             float* stats, double* work, cudaStream_t stream,
                             const AbsorbedActivation& act = {});
cudaError_t LayerNormForward(const ChannelLayout& l, const float* mu_a, const float* var_a,
                             const float* stats, float eps, const float* mu_g, const float* var_g,
                             const float* mu_b, const float* var_b, float* mu_z, float* var_z,
                             cudaStream_t stream, const AbsorbedActivation& act = {});

// Backward of either norm. `per_sample`: the statistics are LayerNorm's
// stats[2b], stats[2b + 1]; else BatchNorm's mean[c], var[c] at `stats`
// and stats + channels. Fills gamma's deltas (and beta's, with var_b's
// factor, when delta_mu_b is not null) and, when delta_mu_in is not null,
// the innovations of the input (with an absorbed activation: of the
// activation's input, jcb applied; only act.jcb is read).
cudaError_t NormBackward(const ChannelLayout& l, bool per_sample, const float* stats, float eps,
                         const float* mu_a, const float* delta_mu, const float* delta_var,
                         const float* mu_g, const float* var_g, const float* var_b,
                         float* delta_mu_g, float* delta_var_g, float* delta_mu_b,
                         float* delta_var_b, float* delta_mu_in, float* delta_var_in,
                         double* work, cudaStream_t stream, const AbsorbedActivation& act = {});

// out[i] = in[i] * scale (the replicas' average of the reduced state).
cudaError_t ScaleInto(const float* in, size_t n, float scale, float* out, cudaStream_t stream);

}  // namespace tagi::engine::cuda::kernels

#endif  // TAGI_WORKER_ENGINE_CUDA_IMAGE_KERNELS_H_
