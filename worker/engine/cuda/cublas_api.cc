#include "worker/engine/cuda/cublas_api.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "worker/engine/cuda/shared_library.h"

namespace tagi::engine::cuda {
namespace {

// The soname of the cuBLAS this code was compiled against; TAGI_CUBLAS_DIR
// (the toolkit's library folder at configure time) is tried first, then
// the loader's search path.
std::string Soname() { return absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR); }

absl::StatusOr<CublasApi> Load() {
#ifdef TAGI_CUBLAS_DIR
  const char* dir = TAGI_CUBLAS_DIR;
#else
  const char* dir = nullptr;
#endif
  absl::StatusOr<void*> opened = OpenSharedLibrary(dir, Soname(), "cuBLAS");
  if (!opened.ok()) return opened.status();
  void* lib = *opened;
  CublasApi api;
  std::string missing;
  BindSymbol(lib, "cublasCreate_v2", &api.create, &missing);
  BindSymbol(lib, "cublasDestroy_v2", &api.destroy, &missing);
  BindSymbol(lib, "cublasSetStream_v2", &api.set_stream, &missing);
  BindSymbol(lib, "cublasSetMathMode", &api.set_math_mode, &missing);
  BindSymbol(lib, "cublasSgemm_v2", &api.sgemm, &missing);
  BindSymbol(lib, "cublasGetStatusString", &api.status_string, &missing);
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
