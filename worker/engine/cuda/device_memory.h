// RAII owners of CUDA resources: device and pinned host buffers, a stream,
// an event, a cuBLAS handle. Each is created by a factory that returns a
// Status (never throws), frees its resource in the destructor (errors there
// are ignored: nothing useful can be done with them), and is move-only.
// Internal to worker/engine/cuda. Not thread-safe.
#ifndef TAGI_WORKER_ENGINE_CUDA_DEVICE_MEMORY_H_
#define TAGI_WORKER_ENGINE_CUDA_DEVICE_MEMORY_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "absl/status/statusor.h"
#include "worker/engine/cuda/cublas_api.h"
#include "worker/engine/cuda/cuda_check.h"

namespace tagi::engine::cuda {

// Where a FloatBuffer's memory comes from.
struct DeviceAllocation {  // device memory (cudaMalloc)
  static cudaError_t Allocate(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
  static void Free(void* p) { cudaFree(p); }
};
struct PinnedAllocation {  // page-locked host memory (cudaMallocHost): the only host
                           // memory an asynchronous copy overlaps with
  static cudaError_t Allocate(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }
  static void Free(void* p) { cudaFreeHost(p); }
};

// An owned array of floats from `Allocation`; count 0 holds nothing.
template <typename Allocation>
class FloatBuffer {
 public:
  FloatBuffer() = default;
  FloatBuffer(FloatBuffer&& o) noexcept { *this = std::move(o); }
  FloatBuffer& operator=(FloatBuffer&& o) noexcept {
    std::swap(ptr_, o.ptr_);
    std::swap(count_, o.count_);
    return *this;
  }
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
  ~FloatBuffer() {
    if (ptr_ != nullptr) Allocation::Free(ptr_);
  }
  static absl::StatusOr<FloatBuffer> Allocate(size_t count) {
    FloatBuffer b;
    if (count == 0) return b;
    void* p = nullptr;
    TAGI_CUDA_RETURN_IF_ERROR(Allocation::Allocate(&p, count * sizeof(float)));
    b.ptr_ = static_cast<float*>(p);
    b.count_ = count;
    return b;
  }
  float* get() const { return ptr_; }
  size_t size() const { return count_; }

 private:
  float* ptr_ = nullptr;
  size_t count_ = 0;
};

using DeviceFloats = FloatBuffer<DeviceAllocation>;
using PinnedFloats = FloatBuffer<PinnedAllocation>;

// A non-blocking stream (no implicit synchronisation with stream 0).
class Stream {
 public:
  Stream() = default;
  Stream(Stream&& o) noexcept { std::swap(s_, o.s_); }
  Stream& operator=(Stream&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  static absl::StatusOr<Stream> Create() {
    Stream s;
    TAGI_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&s.s_, cudaStreamNonBlocking));
    return s;
  }
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event() = default;
  Event(Event&& o) noexcept { std::swap(e_, o.e_); }
  Event& operator=(Event&& o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() {
    if (e_ != nullptr) cudaEventDestroy(e_);
  }
  // timing: whether cudaEventElapsedTime may be used (slower to record).
  static absl::StatusOr<Event> Create(bool timing = false) {
    Event e;
    TAGI_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&e.e_, timing ? cudaEventDefault : cudaEventDisableTiming));
    return e;
  }
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

class CublasHandle {
 public:
  CublasHandle() = default;
  CublasHandle(CublasHandle&& o) noexcept { *this = std::move(o); }
  CublasHandle& operator=(CublasHandle&& o) noexcept {
    std::swap(h_, o.h_);
    std::swap(api_, o.api_);
    std::swap(stream_, o.stream_);
    std::swap(split_, o.split_);
    return *this;
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle() {
    if (h_ != nullptr) api_->destroy(h_);
  }
  // A handle whose work goes to `stream`. CUBLAS_DEFAULT_MATH: plain fp32
  // products (TF32 only with CUBLAS_TF32_TENSOR_OP_MATH, which we never
  // set), so results match the CPU's within fp32 rounding. Loads cuBLAS
  // (cublas_api.h) on first use.
  // It also owns the workspace of the split-k products (cublas_gemm.cc):
  // kSplitKFloats floats of device memory.
  static constexpr size_t kSplitKFloats = size_t{1} << 20;
  static absl::StatusOr<CublasHandle> Create(cudaStream_t stream) {
    absl::StatusOr<const CublasApi*> api = Cublas();
    if (!api.ok()) return api.status();
    CublasHandle h;
    h.api_ = *api;
    h.stream_ = stream;
    absl::StatusOr<FloatBuffer<DeviceAllocation>> split =
        FloatBuffer<DeviceAllocation>::Allocate(kSplitKFloats);
    if (!split.ok()) return split.status();
    h.split_ = std::move(*split);
    TAGI_CUBLAS_RETURN_IF_ERROR(h.api_->create(&h.h_));
    TAGI_CUBLAS_RETURN_IF_ERROR(h.api_->set_stream(h.h_, stream));
    TAGI_CUBLAS_RETURN_IF_ERROR(h.api_->set_math_mode(h.h_, CUBLAS_DEFAULT_MATH));
    return h;
  }
  cublasHandle_t get() const { return h_; }
  const CublasApi& api() const { return *api_; }
  cudaStream_t stream() const { return stream_; }
  // Scratch for work queued on stream() only (one product at a time).
  float* split_workspace() const { return split_.get(); }

 private:
  cublasHandle_t h_ = nullptr;
  const CublasApi* api_ = nullptr;
  cudaStream_t stream_ = nullptr;
  FloatBuffer<DeviceAllocation> split_;
};

}  // namespace tagi::engine::cuda

#endif  // TAGI_WORKER_ENGINE_CUDA_DEVICE_MEMORY_H_
