#include "worker/engine/cuda/shared_library.h"

namespace tagi::engine::cuda {

absl::StatusOr<void*> OpenSharedLibrary(const char* dir, const std::string& soname,
                                        const std::string& what) {
  std::string errors;
  if (dir != nullptr) {
    void* lib = dlopen(absl::StrCat(dir, "/", soname).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) return lib;
    absl::StrAppend(&errors, dlerror(), "; ");
  }
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr) return lib;
  return absl::FailedPreconditionError(
      absl::StrCat("cannot load ", what, " (", soname, "): ", errors, dlerror()));
}

}  // namespace tagi::engine::cuda
