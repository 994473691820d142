// Built where nvcc does not exist: CUDA is reported as absent.
#include "worker/engine/cuda/device.h"

namespace tagi::engine::cuda {

bool CudaCompiledIn() { return false; }

DeviceList ListCudaDevices() {
  return {{}, "this build has no CUDA support (nvcc was not found at configure time)"};
}

size_t DeviceMemoryInUse(int /*ordinal*/) { return 0; }

}  // namespace tagi::engine::cuda
