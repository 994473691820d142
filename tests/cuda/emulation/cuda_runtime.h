// A host emulation of the part of the CUDA runtime API that the CUDA engine
// (worker/engine/cuda/) uses, so that its real sources (cuda_engine.cc,
// kernels.cu, cublas_gemm.cc, cuda_check.cc, device.cu) compile with g++ and
// run their parity tests against the CPU engine on a machine without a GPU
// (tests/cuda/CMakeLists.txt: cuda_emulated_test). It is a test double of
// the runtime, not a GPU: it proves the engine's orchestration (arena
// offsets, layouts, the order of products and kernels, the reduce buffer,
// host <-> device copies and their synchronisation), not CUDA itself.
//
// Made to find the bugs a GPU would show:
//  - "Device" memory is host memory, but every copy, memset, product and
//    kernel argument is checked against the emulated allocations: a copy of
//    the wrong kind, a device pointer that is not in an allocation, or a
//    product whose extent leaves its allocation fails the call (and is
//    printed), as the real device would fault.
//  - Work queued on a stream runs only when the host waits for it
//    (cudaStreamSynchronize, cudaEventSynchronize, a copy into pageable
//    memory, cudaFree): the most adversarial order CUDA allows, so a host
//    read of a pinned buffer before its copy is waited for sees stale data.
//  - Kernels run their grid-stride loops block by block, thread by thread,
//    with blockIdx/threadIdx/blockDim/gridDim set as on the device.
//  - nccl.h beside this file emulates NCCL between threads of one process,
//    a stream's collective waiting (without blocking the host) until every
//    rank's stream reaches it.
// Runtime state is process-global, as the real runtime's is.
#ifndef TAGI_TESTS_CUDA_EMULATION_CUDA_RUNTIME_H_
#define TAGI_TESTS_CUDA_EMULATION_CUDA_RUNTIME_H_

#include <cstddef>
#include <functional>
#include <mutex>
#include <type_traits>

#define TAGI_CUDA_HOST_EMULATION 1
#define __global__
#define __device__
#define __host__

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
};

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};

struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
};

struct CUstream_st;
struct CUevent_st;
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;

constexpr unsigned cudaStreamNonBlocking = 0x01;
constexpr unsigned cudaEventDefault = 0x00;
constexpr unsigned cudaEventDisableTiming = 0x02;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major;
  int minor;
  int multiProcessorCount;
};

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
extern thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;

const char* cudaGetErrorString(cudaError_t err);
const char* cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetLastError();
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMalloc(void** p, size_t bytes);
// The runtime header's typed overload.
template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
// The stream runs nothing queued after this call until the event's
// recorded work has run (the work recorded when the call was made).
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

namespace tagi::cuda_emulation {

// Whether [p, p + bytes) lies inside one emulated device allocation.
bool InDeviceMemory(const void* p, size_t bytes);

// The number of emulated devices: TAGI_EMULATED_GPUS (1..8), default 2, so
// that tests of several ranks with one GPU each run.
int DeviceCount();

// Queues `work` on `stream` (nullptr: runs it now).
cudaError_t Enqueue(cudaStream_t stream, std::function<void()> work);
// Queues work that may have to wait for other threads (a collective): the
// stream runs `step` whenever it makes progress until it returns true, and
// runs nothing after it before that.
cudaError_t EnqueueBlocking(cudaStream_t stream, std::function<bool()> step);
// The lock every emulated call holds (collectives of several threads).
std::recursive_mutex& Lock();

// A kernel argument that is a pointer must be null or point into device
// memory (what it may touch beyond its first element is the kernel's).
template <typename T>
bool DeviceArgument(const T& arg) {
  if constexpr (std::is_pointer_v<T>) {
    return arg == nullptr || InDeviceMemory(arg, 1);
  } else {
    return true;
  }
}
void ReportBadKernelArgument(int index);

// kernel<<<blocks, threads, 0, stream>>>(args...) on the host: queued, then
// run thread by thread with the built-in indices set.
template <typename... Params, typename... Args>
cudaError_t Launch(cudaStream_t stream, int blocks, int threads, void (*kernel)(Params...),
                   Args... args) {
  int index = 0;
  bool ok = true;
  auto check = [&](const auto& arg) {
    if (!DeviceArgument(arg)) {
      ReportBadKernelArgument(index);
      ok = false;
    }
    ++index;
  };
  (check(args), ...);
  if (!ok || blocks <= 0 || threads <= 0) return cudaErrorInvalidValue;
  return Enqueue(stream, [=]() {
    gridDim = dim3{static_cast<unsigned>(blocks), 1, 1};
    blockDim = dim3{static_cast<unsigned>(threads), 1, 1};
    for (int b = 0; b < blocks; ++b) {
      blockIdx = dim3{static_cast<unsigned>(b), 0, 0};
      for (int t = 0; t < threads; ++t) {
        threadIdx = dim3{static_cast<unsigned>(t), 0, 0};
        kernel(args...);
      }
    }
  });
}

}  // namespace tagi::cuda_emulation

#endif  // TAGI_TESTS_CUDA_EMULATION_CUDA_RUNTIME_H_
