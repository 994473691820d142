#include "worker/engine/cuda/cudnn_api.h"

#include <dlfcn.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace tagi::engine::cuda {
namespace {

// The soname of the cuDNN this code was compiled against; TAGI_CUDNN_DIR
// (the folder holding it at configure time) is tried first, then the
// loader's search path.
std::string Soname() { return absl::StrCat("libcudnn.so.", CUDNN_MAJOR); }

template <typename F>
void Bind(void* lib, const char* name, F* fn, std::string* missing) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  if (*fn == nullptr) absl::StrAppend(missing, missing->empty() ? "" : ", ", name);
}

absl::StatusOr<CudnnApi> Load() {
  void* lib = nullptr;
  std::string errors;
#ifdef TAGI_CUDNN_DIR
  lib = dlopen((std::string(TAGI_CUDNN_DIR) + "/" + Soname()).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) absl::StrAppend(&errors, dlerror(), "; ");
#endif
  if (lib == nullptr) lib = dlopen(Soname().c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load cuDNN (", Soname(), ", needed by Conv2d layers on CUDA): ", errors,
        dlerror()));
  }
  // Never closed: the engine may run until the process exits.
  CudnnApi api;
  std::string missing;
  Bind(lib, "cudnnGetVersion", &api.get_version, &missing);
  Bind(lib, "cudnnGetErrorString", &api.error_string, &missing);
  Bind(lib, "cudnnCreate", &api.create, &missing);
  Bind(lib, "cudnnDestroy", &api.destroy, &missing);
  Bind(lib, "cudnnSetStream", &api.set_stream, &missing);
  Bind(lib, "cudnnCreateTensorDescriptor", &api.create_tensor, &missing);
  Bind(lib, "cudnnSetTensor4dDescriptor", &api.set_tensor, &missing);
  Bind(lib, "cudnnDestroyTensorDescriptor", &api.destroy_tensor, &missing);
  Bind(lib, "cudnnCreateFilterDescriptor", &api.create_filter, &missing);
  Bind(lib, "cudnnSetFilter4dDescriptor", &api.set_filter, &missing);
  Bind(lib, "cudnnDestroyFilterDescriptor", &api.destroy_filter, &missing);
  Bind(lib, "cudnnCreateConvolutionDescriptor", &api.create_conv, &missing);
  Bind(lib, "cudnnSetConvolution2dDescriptor", &api.set_conv, &missing);
  Bind(lib, "cudnnSetConvolutionMathType", &api.set_conv_math, &missing);
  Bind(lib, "cudnnDestroyConvolutionDescriptor", &api.destroy_conv, &missing);
  Bind(lib, "cudnnGetConvolutionForwardAlgorithm_v7", &api.forward_algos, &missing);
  Bind(lib, "cudnnGetConvolutionForwardWorkspaceSize", &api.forward_workspace, &missing);
  Bind(lib, "cudnnConvolutionForward", &api.forward, &missing);
  Bind(lib, "cudnnGetConvolutionBackwardDataAlgorithm_v7", &api.data_algos, &missing);
  Bind(lib, "cudnnGetConvolutionBackwardDataWorkspaceSize", &api.data_workspace, &missing);
  Bind(lib, "cudnnConvolutionBackwardData", &api.backward_data, &missing);
  Bind(lib, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", &api.filter_algos, &missing);
  Bind(lib, "cudnnGetConvolutionBackwardFilterWorkspaceSize", &api.filter_workspace, &missing);
  Bind(lib, "cudnnConvolutionBackwardFilter", &api.backward_filter, &missing);
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
