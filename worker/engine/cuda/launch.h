// How the engine's kernels are launched: grid-stride loops of kThreads
// threads per block, on a stream, returning the launch's error. Under the
// host emulation of tests/cuda/emulation (g++, TAGI_CUDA_HOST_EMULATION) the
// launch is the emulator's, which runs the grid thread by thread.
// Internal to the .cu files of worker/engine/cuda; plain C++17 (nvcc).
#ifndef TAGI_WORKER_ENGINE_CUDA_LAUNCH_H_
#define TAGI_WORKER_ENGINE_CUDA_LAUNCH_H_

#include <cuda_runtime.h>

#include <cstddef>

namespace tagi::engine::cuda::kernels {

inline constexpr int kThreads = 256;
inline constexpr size_t kMaxBlocks = size_t{1} << 16;

inline int Blocks(size_t n) {
  const size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < kMaxBlocks ? b : kMaxBlocks);
}

#define TAGI_GRID_STRIDE(i, n)                                                         \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

// Launches kernel<<<Blocks(n), kThreads, 0, stream>>>(args...) unless n is 0.
template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), size_t n, cudaStream_t stream, Args... args) {
  if (n == 0) return cudaSuccess;
#if defined(TAGI_CUDA_HOST_EMULATION)
  return tagi::cuda_emulation::Launch(stream, Blocks(n), kThreads, kernel, args...);
#else
  kernel<<<Blocks(n), kThreads, 0, stream>>>(args...);
  return cudaGetLastError();
#endif
}

}  // namespace tagi::engine::cuda::kernels

#endif  // TAGI_WORKER_ENGINE_CUDA_LAUNCH_H_
