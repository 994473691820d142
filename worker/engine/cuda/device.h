// CUDA device discovery, behind an interface free of CUDA headers.
//
// ListCudaDevices asks the CUDA runtime which GPUs this process can use.
// A machine without a GPU or driver is not an error: the list is empty and
// `reason` says why (the runtime's own message), so callers and tests can
// skip with that message. Built only where nvcc exists (TAGI_HAVE_CUDA);
// elsewhere the stub in device_none.cc reports that CUDA was not compiled in.
// Thread-safe.
#ifndef TAGI_WORKER_ENGINE_CUDA_DEVICE_H_
#define TAGI_WORKER_ENGINE_CUDA_DEVICE_H_

#include <cstddef>
#include <string>
#include <vector>

namespace tagi::engine::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  size_t total_memory_bytes = 0;
  int multiprocessors = 0;
};

struct DeviceList {
  std::vector<DeviceInfo> devices;
  std::string reason;  // why the list is empty, when it is
};

DeviceList ListCudaDevices();

// True when this binary was built with CUDA support.
bool CudaCompiledIn();

// Bytes of device `ordinal`'s memory in use by every process on it (total
// minus free, as the driver counts them), or 0 where that cannot be read.
// Makes `ordinal` the calling thread's current device. For benchmarks: the
// difference of two readings is what a process allocated in between.
size_t DeviceMemoryInUse(int ordinal);

}  // namespace tagi::engine::cuda

#endif  // TAGI_WORKER_ENGINE_CUDA_DEVICE_H_
