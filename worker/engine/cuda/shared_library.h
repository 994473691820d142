// Loading a CUDA library at run time (cublas_api.h and cudnn_api.h say why
// it is not linked): the folder the build found it in first, then the
// loader's search path; never closed (an engine may run until the process
// exits). Internal to worker/engine/cuda.
#ifndef TAGI_WORKER_ENGINE_CUDA_SHARED_LIBRARY_H_
#define TAGI_WORKER_ENGINE_CUDA_SHARED_LIBRARY_H_

#include <dlfcn.h>

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace tagi::engine::cuda {

// `dir`/`soname` (when dir is not null), else `soname`; FailedPrecondition
// naming `what` and the loader's errors when neither loads.
absl::StatusOr<void*> OpenSharedLibrary(const char* dir, const std::string& soname,
                                        const std::string& what);

// Sets *fn to symbol `name` of `lib`, or appends the name to `missing`.
template <typename F>
void BindSymbol(void* lib, const char* name, F* fn, std::string* missing) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  if (*fn == nullptr) absl::StrAppend(missing, missing->empty() ? "" : ", ", name);
}

}  // namespace tagi::engine::cuda

#endif  // TAGI_WORKER_ENGINE_CUDA_SHARED_LIBRARY_H_
