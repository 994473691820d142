// One TAGI convolution's cuDNN side: its descriptors, the algorithms it
// runs and the workspace they need (the seven convolutions of a TAGI
// Conv2d are three forward, two backward-data and two backward-filter
// calls of one geometry, docs/maths.md section 10).
//
// Numerics: cross-correlation (as the CPU layer and the reference
// compute), fp32 data and compute, CUDNN_FMA_MATH (no TF32 tensor-core
// rounding: the CPU parity holds to fp32 rounding) and only algorithms
// cuDNN reports as deterministic (so that a step gives the same bits every
// time: exact resume and bit-identical replicas need it). Algorithms are
// chosen by cuDNN's heuristics (_v7) once per batch size, within the
// workspace the engine reserved when it planned for its largest batch.
//
// Internal to worker/engine/cuda. Not thread-safe.
#ifndef TAGI_WORKER_ENGINE_CUDA_CUDNN_CONV_H_
#define TAGI_WORKER_ENGINE_CUDA_CUDNN_CONV_H_

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/engine/cuda/cudnn_api.h"

namespace tagi::engine::cuda {

absl::Status CudnnStatus(const CudnnApi& api, cudnnStatus_t st, const char* expr);

#define TAGI_CUDNN_RETURN_IF_ERROR(api, expr)                                \
  do {                                                                       \
    const cudnnStatus_t tagi_cudnn_st_ = (expr);                             \
    if (tagi_cudnn_st_ != CUDNN_STATUS_SUCCESS) {                            \
      return ::tagi::engine::cuda::CudnnStatus((api), tagi_cudnn_st_, #expr); \
    }                                                                        \
  } while (0)

// A cuDNN handle whose work goes to one stream.
class CudnnHandle {
 public:
  CudnnHandle() = default;
  CudnnHandle(CudnnHandle&& o) noexcept { *this = std::move(o); }
  CudnnHandle& operator=(CudnnHandle&& o) noexcept;
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  ~CudnnHandle();
  // Loads cuDNN (cudnn_api.h) on first use.
  static absl::StatusOr<CudnnHandle> Create(cudaStream_t stream);
  cudnnHandle_t get() const { return h_; }
  const CudnnApi& api() const { return *api_; }

 private:
  cudnnHandle_t h_ = nullptr;
  const CudnnApi* api_ = nullptr;
};

// The geometry cuDNN sees: an input [batch][channels][height][width]
// (already padded at the bottom and right where the layer's padding is
// asymmetric), symmetric zero padding `pad`, square kernels.
struct ConvShape {
  int channels = 0;
  int height = 0;
  int width = 0;
  int out_channels = 0;
  int kernel = 0;
  int stride = 1;
  int pad = 0;
};

class CudnnConvolution {
 public:
  ~CudnnConvolution();
  CudnnConvolution(const CudnnConvolution&) = delete;
  CudnnConvolution& operator=(const CudnnConvolution&) = delete;

  static absl::StatusOr<std::unique_ptr<CudnnConvolution>> Create(const CudnnHandle& handle,
                                                                  const ConvShape& shape);

  // Describes `batch` samples and chooses the three algorithms with at
  // most `workspace_limit` bytes of workspace (the fastest deterministic
  // FMA ones cuDNN proposes). Returns the workspace they need. Cheap when
  // the batch is the one described last.
  absl::StatusOr<size_t> Prepare(size_t batch, size_t workspace_limit);

  // y = conv(x, w) + beta y.
  absl::Status Forward(const float* x, const float* w, float beta, float* y, void* workspace,
                       size_t workspace_bytes);
  // dx = conv^T(dy, w).
  absl::Status BackwardData(const float* w, const float* dy, float* dx, void* workspace,
                            size_t workspace_bytes);
  // dw = the correlation of x with dy, summed over the batch.
  absl::Status BackwardFilter(const float* x, const float* dy, float* dw, void* workspace,
                              size_t workspace_bytes);

 private:
  CudnnConvolution(const CudnnHandle& handle, const ConvShape& shape)
      : handle_(handle), shape_(shape) {}
  const CudnnHandle& handle_;
  ConvShape shape_;
  size_t batch_ = 0;  // described; 0 before the first Prepare
  cudnnTensorDescriptor_t x_ = nullptr;
  cudnnTensorDescriptor_t y_ = nullptr;
  cudnnFilterDescriptor_t w_ = nullptr;
  cudnnConvolutionDescriptor_t conv_ = nullptr;
  cudnnConvolutionFwdAlgo_t forward_{};
  cudnnConvolutionBwdDataAlgo_t data_{};
  cudnnConvolutionBwdFilterAlgo_t filter_{};
  size_t workspace_ = 0;
};

}  // namespace tagi::engine::cuda

#endif  // TAGI_WORKER_ENGINE_CUDA_CUDNN_CONV_H_
