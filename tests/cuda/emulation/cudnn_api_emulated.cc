// Cudnn() of worker/engine/cuda/cudnn_api.h for the host emulation: the
// entry points are the emulated ones (cudnn.h beside this file) instead of
// a dlopen'ed libcudnn.
#include "worker/engine/cuda/cudnn_api.h"

namespace tagi::engine::cuda {

absl::StatusOr<const CudnnApi*> Cudnn() {
  static const CudnnApi api = {
      &cudnnGetVersion,
      &cudnnGetErrorString,
      &cudnnCreate,
      &cudnnDestroy,
      &cudnnSetStream,
      &cudnnCreateTensorDescriptor,
      &cudnnSetTensor4dDescriptor,
      &cudnnDestroyTensorDescriptor,
      &cudnnCreateFilterDescriptor,
      &cudnnSetFilter4dDescriptor,
      &cudnnDestroyFilterDescriptor,
      &cudnnCreateConvolutionDescriptor,
      &cudnnSetConvolution2dDescriptor,
      &cudnnSetConvolutionMathType,
      &cudnnDestroyConvolutionDescriptor,
      &cudnnGetConvolutionForwardAlgorithm_v7,
      &cudnnGetConvolutionForwardWorkspaceSize,
      &cudnnConvolutionForward,
      &cudnnGetConvolutionBackwardDataAlgorithm_v7,
      &cudnnGetConvolutionBackwardDataWorkspaceSize,
      &cudnnConvolutionBackwardData,
      &cudnnGetConvolutionBackwardFilterAlgorithm_v7,
      &cudnnGetConvolutionBackwardFilterWorkspaceSize,
      &cudnnConvolutionBackwardFilter,
  };
  return &api;
}

}  // namespace tagi::engine::cuda
