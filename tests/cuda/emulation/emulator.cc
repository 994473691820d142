// The emulated CUDA runtime and cuBLAS of cuda_runtime.h and cublas_v2.h.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cublas_v2.h"
#include "cuda_runtime.h"

thread_local dim3 blockIdx, threadIdx, blockDim, gridDim;

struct CUstream_st {
  std::deque<std::function<bool()>> queued;  // each: true once done
  uint64_t enqueued = 0;  // operations ever queued
  uint64_t done = 0;      // operations ever run
};

struct CUevent_st {
  CUstream_st* stream = nullptr;
  uint64_t position = 0;  // the stream's `enqueued` when recorded
  bool timing = false;
  // When the marker ran; shared with the queued marker, because an event may
  // be destroyed before its work completes (the runtime then frees it later).
  std::shared_ptr<std::chrono::steady_clock::time_point> when =
      std::make_shared<std::chrono::steady_clock::time_point>();
};

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace tagi::cuda_emulation {
namespace {

struct Runtime {
  std::recursive_mutex mu;
  std::map<const char*, size_t> device;  // start -> bytes
  std::map<const char*, size_t> pinned;
  std::vector<CUstream_st*> streams;
  cudaError_t last_error = cudaSuccess;
};

Runtime& State() {
  static Runtime* r = new Runtime();  // never destroyed: outlives static destructors
  return *r;
}

bool Inside(const std::map<const char*, size_t>& m, const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  auto it = m.upper_bound(c);
  if (it == m.begin()) return false;
  --it;
  return c >= it->first && c + bytes <= it->first + it->second;
}

bool Overlaps(const std::map<const char*, size_t>& m, const void* p) {
  const char* c = static_cast<const char*>(p);
  auto it = m.upper_bound(c);
  if (it == m.begin()) return false;
  --it;
  return c < it->first + it->second;
}

cudaError_t Fail(cudaError_t err, const char* what) {
  std::fprintf(stderr, "cuda emulation: %s\n", what);
  State().last_error = err;
  return err;
}

// Runs queued work of `s` until `until` operations have run or one cannot
// finish yet (a collective waiting for its peers).
void Drain(CUstream_st* s, uint64_t until) {
  while (s->done < until && !s->queued.empty()) {
    if (!s->queued.front()()) return;
    s->queued.pop_front();
    ++s->done;
  }
}

void DrainAll() {
  for (CUstream_st* s : State().streams) Drain(s, s->enqueued);
}

// Waits (letting other threads' streams progress) until `s` has run `until`
// operations.
void WaitFor(CUstream_st* s, uint64_t until, std::unique_lock<std::recursive_mutex>& lock) {
  for (;;) {
    Drain(s, until);
    if (s->done >= until) return;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    lock.lock();
  }
}

}  // namespace

std::recursive_mutex& Lock() { return State().mu; }

int DeviceCount() {
  const char* env = std::getenv("TAGI_EMULATED_GPUS");
  const int n = env == nullptr ? 2 : std::atoi(env);
  return n < 1 ? 1 : (n > 8 ? 8 : n);
}

bool InDeviceMemory(const void* p, size_t bytes) {
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  return Inside(State().device, p, bytes);
}

void ReportBadKernelArgument(int index) {
  char buf[128];
  std::snprintf(buf, sizeof buf, "kernel argument %d is a pointer outside device memory", index);
  Fail(cudaErrorIllegalAddress, buf);
}

cudaError_t Enqueue(cudaStream_t stream, std::function<void()> work) {
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  if (stream == nullptr) {
    work();
    return cudaSuccess;
  }
  stream->queued.push_back([work = std::move(work)] {
    work();
    return true;
  });
  ++stream->enqueued;
  return cudaSuccess;
}

cudaError_t EnqueueBlocking(cudaStream_t stream, std::function<bool()> step) {
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  if (stream == nullptr) return cudaErrorInvalidValue;  // a collective needs a stream
  stream->queued.push_back(std::move(step));
  ++stream->enqueued;
  return cudaSuccess;
}

}  // namespace tagi::cuda_emulation

using tagi::cuda_emulation::Enqueue;
using tagi::cuda_emulation::Fail;
using tagi::cuda_emulation::Runtime;
using tagi::cuda_emulation::State;

constexpr size_t kEmulatedDeviceBytes = size_t{8} << 30;

const char* cudaGetErrorString(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "unknown error";
  }
}
const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown";
  }
}

cudaError_t cudaGetLastError() {
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  const cudaError_t err = State().last_error;
  State().last_error = cudaSuccess;
  return err;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = tagi::cuda_emulation::DeviceCount();
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= tagi::cuda_emulation::DeviceCount()) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "tagi host emulation (no GPU)");
  prop->totalGlobalMem = kEmulatedDeviceBytes;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  return cudaSuccess;
}

// The device's memory as the emulation counts it: its size less the bytes
// cudaMalloc holds.
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  size_t held = 0;
  for (const auto& [p, bytes] : State().device) held += bytes;
  *total_bytes = kEmulatedDeviceBytes;
  *free_bytes = held < kEmulatedDeviceBytes ? kEmulatedDeviceBytes - held : 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device >= 0 && device < tagi::cuda_emulation::DeviceCount() ? cudaSuccess
                                                                      : cudaErrorInvalidDevice;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  using tagi::cuda_emulation::Overlaps;
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  *attr = cudaPointerAttributes{};
  if (Overlaps(State().device, p)) {
    attr->type = cudaMemoryTypeDevice;
  } else if (Overlaps(State().pinned, p)) {
    attr->type = cudaMemoryTypeHost;
  } else {
    attr->type = cudaMemoryTypeUnregistered;
  }
  return cudaSuccess;
}

namespace {

cudaError_t Allocate(std::map<const char*, size_t>& m, void** p, size_t bytes) {
  // Poisoned, as fresh device memory holds garbage.
  char* mem = static_cast<char*>(std::malloc(bytes == 0 ? 1 : bytes));
  if (mem == nullptr) return cudaErrorMemoryAllocation;
  std::memset(mem, 0x7f, bytes);
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  m[mem] = bytes;
  *p = mem;
  return cudaSuccess;
}

cudaError_t Release(std::map<const char*, size_t>& m, void* p) {
  if (p == nullptr) return cudaSuccess;
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  tagi::cuda_emulation::DrainAll();  // freeing synchronises the device
  auto it = m.find(static_cast<const char*>(p));
  if (it == m.end()) return Fail(cudaErrorInvalidValue, "free of a pointer never allocated");
  m.erase(it);
  std::free(p);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMalloc(void** p, size_t bytes) { return Allocate(State().device, p, bytes); }
cudaError_t cudaFree(void* p) { return Release(State().device, p); }
cudaError_t cudaMallocHost(void** p, size_t bytes) { return Allocate(State().pinned, p, bytes); }
cudaError_t cudaFreeHost(void* p) { return Release(State().pinned, p); }

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  using tagi::cuda_emulation::Inside;
  using tagi::cuda_emulation::Overlaps;
  std::unique_lock<std::recursive_mutex> lock(State().mu);
  Runtime& rt = State();
  if (bytes == 0) return cudaSuccess;
  const bool dst_device = Inside(rt.device, dst, bytes);
  const bool src_device = Inside(rt.device, src, bytes);
  const bool dst_host = !Overlaps(rt.device, dst);
  const bool src_host = !Overlaps(rt.device, src);
  bool ok = false;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = dst_device && src_host; break;
    case cudaMemcpyDeviceToHost: ok = src_device && dst_host; break;
    case cudaMemcpyDeviceToDevice: ok = src_device && dst_device; break;
    case cudaMemcpyHostToHost: ok = src_host && dst_host; break;
  }
  if (!ok) {
    return Fail(cudaErrorInvalidValue,
                "cudaMemcpyAsync: a pointer is not where its kind says, or the range leaves "
                "its device allocation");
  }
  const bool src_pinned = Inside(rt.pinned, src, bytes);
  const bool dst_pinned = Inside(rt.pinned, dst, bytes);
  if (kind == cudaMemcpyHostToDevice && !src_pinned) {
    // From pageable memory the copy takes the data before returning.
    auto data = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                    static_cast<const char*>(src) + bytes);
    return Enqueue(stream, [dst, data] { std::memcpy(dst, data->data(), data->size()); });
  }
  if (kind == cudaMemcpyDeviceToHost && !dst_pinned) {
    // Into pageable memory it returns once the copy (and the work before it) is done.
    if (stream != nullptr) tagi::cuda_emulation::WaitFor(stream, stream->enqueued, lock);
    std::memcpy(dst, src, bytes);
    return cudaSuccess;
  }
  return Enqueue(stream, [dst, src, bytes] { std::memcpy(dst, src, bytes); });
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!tagi::cuda_emulation::InDeviceMemory(p, bytes)) {
    return Fail(cudaErrorInvalidValue, "cudaMemsetAsync outside device memory");
  }
  return Enqueue(stream, [p, value, bytes] { std::memset(p, value, bytes); });
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned /*flags*/) {
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  *stream = new CUstream_st();
  State().streams.push_back(*stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  auto& v = State().streams;
  auto it = std::find(v.begin(), v.end(), stream);
  if (it == v.end()) return cudaErrorInvalidResourceHandle;
  tagi::cuda_emulation::Drain(stream, stream->enqueued);  // queued work still completes
  v.erase(it);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  std::unique_lock<std::recursive_mutex> lock(State().mu);
  if (stream == nullptr) {
    tagi::cuda_emulation::DrainAll();
  } else {
    tagi::cuda_emulation::WaitFor(stream, stream->enqueued, lock);
  }
  return State().last_error;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  *event = new CUevent_st();
  (*event)->timing = (flags & cudaEventDisableTiming) == 0;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  event->stream = stream;
  event->position = stream == nullptr ? 0 : stream->enqueued + 1;
  return Enqueue(stream, [when = event->when] { *when = std::chrono::steady_clock::now(); });
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::unique_lock<std::recursive_mutex> lock(State().mu);
  if (event->stream != nullptr) tagi::cuda_emulation::WaitFor(event->stream, event->position, lock);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  if (event->stream == nullptr) return cudaSuccess;
  tagi::cuda_emulation::Drain(event->stream, event->position);  // the device makes progress
  return event->stream->done >= event->position ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  std::lock_guard<std::recursive_mutex> lock(State().mu);
  if (stream == nullptr || event == nullptr || flags != 0) return cudaErrorInvalidValue;
  CUstream_st* source = event->stream;
  const uint64_t position = event->position;
  if (source == nullptr || source == stream) return cudaSuccess;  // nothing, or already ordered
  // Whenever `stream` reaches this point it lets `source` make progress up
  // to the recorded position, and goes on only once that has run.
  return tagi::cuda_emulation::EnqueueBlocking(stream, [source, position] {
    tagi::cuda_emulation::Drain(source, position);
    return source->done >= position;
  });
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->timing || !end->timing) return cudaErrorInvalidResourceHandle;
  *ms = std::chrono::duration<float, std::milli>(*end->when - *start->when).count();
  return cudaSuccess;
}

// ---------------------------------------------------------------- cuBLAS

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  *handle = new cublasContext();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t /*handle*/, cublasMath_t mode) {
  return mode == CUBLAS_DEFAULT_MATH ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

namespace {

// Whether a column-major rows x cols matrix with leading dimension ld at p
// lies in device memory.
bool MatrixInDevice(const float* p, int rows, int cols, int ld) {
  if (rows == 0 || cols == 0) return true;
  if (ld < rows) return false;
  const size_t count = static_cast<size_t>(cols - 1) * static_cast<size_t>(ld) + rows;
  return tagi::cuda_emulation::InDeviceMemory(p, count * sizeof(float));
}

}  // namespace

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                              cublasOperation_t transb, int m, int n, int k, const float* alpha,
                              const float* a, int lda, const float* b, int ldb, const float* beta,
                              float* c, int ldc) {
  if (m < 0 || n < 0 || k < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const bool ta = transa == CUBLAS_OP_T;
  const bool tb = transb == CUBLAS_OP_T;
  if (!MatrixInDevice(a, ta ? k : m, ta ? m : k, lda) ||
      !MatrixInDevice(b, tb ? n : k, tb ? k : n, ldb) || !MatrixInDevice(c, m, n, ldc)) {
    Fail(cudaErrorIllegalAddress, "cublasSgemm: an operand leaves its device allocation");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float al = *alpha;  // pointer mode host: read at the call
  const float be = *beta;
  Enqueue(handle->stream, [=] {
    cblas_sgemm(CblasColMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m,
                n, k, al, a, lda, b, ldb, be, c, ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
