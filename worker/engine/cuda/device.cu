#include <cuda_runtime.h>

#include <string>

#include "worker/engine/cuda/device.h"

namespace tagi::engine::cuda {

bool CudaCompiledIn() { return true; }

DeviceList ListCudaDevices() {
  DeviceList list;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // No driver, an old driver or no GPU: "no device", not a failure.
    list.reason = std::string("CUDA runtime reports: ") + cudaGetErrorString(err);
    return list;
  }
  if (count == 0) {
    list.reason = "the CUDA runtime sees no GPU";
    return list;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.ordinal = i;
    d.name = prop.name;
    d.compute_major = prop.major;
    d.compute_minor = prop.minor;
    d.total_memory_bytes = prop.totalGlobalMem;
    d.multiprocessors = prop.multiProcessorCount;
    list.devices.push_back(d);
  }
  return list;
}

size_t DeviceMemoryInUse(int ordinal) {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (cudaSetDevice(ordinal) != cudaSuccess || cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    return 0;
  }
  return total_bytes - free_bytes;
}

}  // namespace tagi::engine::cuda
