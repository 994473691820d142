#include "worker/engine/cuda/cudnn_api.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/shared_library.h"

namespace tagi::engine::cuda {
namespace {

// The soname of the cuDNN this code was compiled against; TAGI_CUDNN_DIR
// (the folder holding it at configure time) is tried first, then the
// loader's search path.
std::string Soname() { return absl::StrCat("libcudnn.so.", CUDNN_MAJOR); }

absl::StatusOr<CudnnApi> Load() {
#ifdef TAGI_CUDNN_DIR
  const char* dir = TAGI_CUDNN_DIR;
#else
  const char* dir = nullptr;
#endif
  absl::StatusOr<void*> opened =
      OpenSharedLibrary(dir, Soname(), "cuDNN, needed by Conv2d layers on CUDA");
  if (!opened.ok()) return opened.status();
  void* lib = *opened;
  CudnnApi api;
  std::string missing;
  BindSymbol(lib, "cudnnGetVersion", &api.get_version, &missing);
  BindSymbol(lib, "cudnnGetErrorString", &api.error_string, &missing);
  BindSymbol(lib, "cudnnCreate", &api.create, &missing);
  BindSymbol(lib, "cudnnDestroy", &api.destroy, &missing);
  BindSymbol(lib, "cudnnSetStream", &api.set_stream, &missing);
  BindSymbol(lib, "cudnnCreateTensorDescriptor", &api.create_tensor, &missing);
  BindSymbol(lib, "cudnnSetTensor4dDescriptor", &api.set_tensor, &missing);
  BindSymbol(lib, "cudnnDestroyTensorDescriptor", &api.destroy_tensor, &missing);
  BindSymbol(lib, "cudnnCreateFilterDescriptor", &api.create_filter, &missing);
  BindSymbol(lib, "cudnnSetFilter4dDescriptor", &api.set_filter, &missing);
  BindSymbol(lib, "cudnnDestroyFilterDescriptor", &api.destroy_filter, &missing);
  BindSymbol(lib, "cudnnCreateConvolutionDescriptor", &api.create_conv, &missing);
  BindSymbol(lib, "cudnnSetConvolution2dDescriptor", &api.set_conv, &missing);
  BindSymbol(lib, "cudnnSetConvolutionMathType", &api.set_conv_math, &missing);
  BindSymbol(lib, "cudnnDestroyConvolutionDescriptor", &api.destroy_conv, &missing);
  BindSymbol(lib, "cudnnGetConvolutionForwardAlgorithm_v7", &api.forward_algos, &missing);
  BindSymbol(lib, "cudnnGetConvolutionForwardWorkspaceSize", &api.forward_workspace, &missing);
  BindSymbol(lib, "cudnnConvolutionForward", &api.forward, &missing);
  BindSymbol(lib, "cudnnGetConvolutionBackwardDataAlgorithm_v7", &api.data_algos, &missing);
  BindSymbol(lib, "cudnnGetConvolutionBackwardDataWorkspaceSize", &api.data_workspace, &missing);
  BindSymbol(lib, "cudnnConvolutionBackwardData", &api.backward_data, &missing);
  BindSymbol(lib, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", &api.filter_algos, &missing);
  BindSymbol(lib, "cudnnGetConvolutionBackwardFilterWorkspaceSize", &api.filter_workspace, &missing);
  BindSymbol(lib, "cudnnConvolutionBackwardFilter", &api.backward_filter, &missing);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Soname(), " lacks the entry points ", missing));
  }
  // The shim loads its sub-libraries lazily; a version below the headers'
  // would fail later with less clear errors.
  const size_t version = api.get_version();
  if (version / 10000 != CUDNN_MAJOR) {
    return absl::FailedPreconditionError(absl::StrCat(
        Soname(), " reports version ", version, ", this build needs cuDNN ", CUDNN_MAJOR, ".x"));
  }
  return api;
}

}  // namespace

absl::StatusOr<const CudnnApi*> Cudnn() {
  // Process-wide by nature (one loaded library); initialised once, then
  // read-only.
  static const absl::StatusOr<CudnnApi>* const loaded = new absl::StatusOr<CudnnApi>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace tagi::engine::cuda
