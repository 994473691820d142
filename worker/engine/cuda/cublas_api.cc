#include "worker/engine/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

#include "absl/strings/str_cat.h"

namespace tagi::engine::cuda {
namespace {

// The soname of the cuBLAS this code was compiled against; TAGI_CUBLAS_DIR
// (the toolkit's library folder at configure time) is tried first, then
// the loader's search path.
std::string Soname() { return absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR); }

template <typename F>
bool Bind(void* lib, const char* name, F* fn, std::string* missing) {
  *fn = reinterpret_cast<F>(dlsym(lib, name));
  if (*fn == nullptr) absl::StrAppend(missing, missing->empty() ? "" : ", ", name);
  return *fn != nullptr;
}

absl::StatusOr<CublasApi> Load() {
  void* lib = nullptr;
  std::string errors;
#ifdef TAGI_CUBLAS_DIR
  lib = dlopen((std::string(TAGI_CUBLAS_DIR) + "/" + Soname()).c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) absl::StrAppend(&errors, dlerror(), "; ");
#endif
  if (lib == nullptr) lib = dlopen(Soname().c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot load cuBLAS (", Soname(), "): ", errors, dlerror()));
  }
  // Never closed: the engine may run until the process exits.
  CublasApi api;
  std::string missing;
  Bind(lib, "cublasCreate_v2", &api.create, &missing);
  Bind(lib, "cublasDestroy_v2", &api.destroy, &missing);
  Bind(lib, "cublasSetStream_v2", &api.set_stream, &missing);
  Bind(lib, "cublasSetMathMode", &api.set_math_mode, &missing);
  Bind(lib, "cublasSgemm_v2", &api.sgemm, &missing);
  Bind(lib, "cublasGetStatusString", &api.status_string, &missing);
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(Soname(), " lacks the entry points ", missing));
  }
  return api;
}

}  // namespace

absl::StatusOr<const CublasApi*> Cublas() {
  // Process-wide by nature (one loaded library); initialised once, then
  // read-only.
  static const absl::StatusOr<CublasApi>* const loaded = new absl::StatusOr<CublasApi>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

}  // namespace tagi::engine::cuda
