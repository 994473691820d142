// cuDNN, loaded when the first GPU engine with a convolution needs it
// (dlopen), not linked: for the reasons cublas_api.h gives, and because
// cuDNN's libraries are about 500 MB that a CPU worker or a GPU worker
// training an MLP never touches.
//
// Only the legacy convolution API is used (descriptors, the _v7 algorithm
// heuristics, the three convolution calls); cuDNN 9 keeps it in
// libcudnn_cnn, which the libcudnn.so.9 shim loads from its own folder.
//
// Cudnn() loads the library once per process (thread-safe) and returns the
// entry points, or FailedPrecondition saying why it could not be loaded.
// Internal to worker/engine/cuda.
#ifndef TAGI_WORKER_ENGINE_CUDA_CUDNN_API_H_
#define TAGI_WORKER_ENGINE_CUDA_CUDNN_API_H_

#include <cudnn.h>

#include "absl/status/statusor.h"

namespace tagi::engine::cuda {

struct CudnnApi {
  decltype(&cudnnGetVersion) get_version = nullptr;
  decltype(&cudnnGetErrorString) error_string = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnDestroy) destroy = nullptr;
  decltype(&cudnnSetStream) set_stream = nullptr;
  decltype(&cudnnCreateTensorDescriptor) create_tensor = nullptr;
  decltype(&cudnnSetTensor4dDescriptor) set_tensor = nullptr;
  decltype(&cudnnDestroyTensorDescriptor) destroy_tensor = nullptr;
  decltype(&cudnnCreateFilterDescriptor) create_filter = nullptr;
  decltype(&cudnnSetFilter4dDescriptor) set_filter = nullptr;
  decltype(&cudnnDestroyFilterDescriptor) destroy_filter = nullptr;
  decltype(&cudnnCreateConvolutionDescriptor) create_conv = nullptr;
  decltype(&cudnnSetConvolution2dDescriptor) set_conv = nullptr;
  decltype(&cudnnSetConvolutionMathType) set_conv_math = nullptr;
  decltype(&cudnnDestroyConvolutionDescriptor) destroy_conv = nullptr;
  decltype(&cudnnGetConvolutionForwardAlgorithm_v7) forward_algos = nullptr;
  decltype(&cudnnGetConvolutionForwardWorkspaceSize) forward_workspace = nullptr;
  decltype(&cudnnConvolutionForward) forward = nullptr;
  decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) data_algos = nullptr;
  decltype(&cudnnGetConvolutionBackwardDataWorkspaceSize) data_workspace = nullptr;
  decltype(&cudnnConvolutionBackwardData) backward_data = nullptr;
  decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) filter_algos = nullptr;
  decltype(&cudnnGetConvolutionBackwardFilterWorkspaceSize) filter_workspace = nullptr;
  decltype(&cudnnConvolutionBackwardFilter) backward_filter = nullptr;
};

absl::StatusOr<const CudnnApi*> Cudnn();

}  // namespace tagi::engine::cuda

#endif  // TAGI_WORKER_ENGINE_CUDA_CUDNN_API_H_
