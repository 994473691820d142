#include "worker/collective/nccl/wire_kernels.h"

#include <math.h>
#include <string.h>

namespace tagi::nccl_wire {
namespace {

constexpr int kThreads = 256;
constexpr size_t kMaxBlocks = size_t{1} << 16;

#if defined(__CUDACC__)
#define TAGI_WIRE_DEVICE __device__ inline
#else
#define TAGI_WIRE_DEVICE inline
#endif

TAGI_WIRE_DEVICE uint32_t Bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

TAGI_WIRE_DEVICE float FromBits(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

TAGI_WIRE_DEVICE uint16_t ToBf16(float x) {
  uint32_t u = Bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

TAGI_WIRE_DEVICE float FromBf16(uint16_t b) { return FromBits(static_cast<uint32_t>(b) << 16); }

// IEEE binary16: 1 sign bit, 5 exponent bits (bias 15), 10 fraction bits.
TAGI_WIRE_DEVICE uint16_t ToFp16(float x) {
  const uint32_t u = Bits(x);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  if (a < 0x38800000u) {
    // Below 2^-14: a multiple of 2^-24 (subnormal or zero). |x| * 2^24 is
    // exact and below 2^10; adding and taking away 2^23 rounds it to an
    // integer, to nearest even (1024 is the smallest normal's code).
    const float scaled = FromBits(a) * 16777216.0f;
    const float rounded = (scaled + 8388608.0f) - 8388608.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(rounded));
  }
  // Normal: round the 23 fraction bits to 10 (a carry moves the exponent),
  // then take the exponent from bias 127 to bias 15.
  const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((r >> 13) - (112u << 10)));
}

TAGI_WIRE_DEVICE float FromFp16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t fraction = h & 0x3ffu;
  if (exponent == 0) {
    const float value = static_cast<float>(fraction) * (1.0f / 16777216.0f);
    return sign != 0 ? -value : value;
  }
  if (exponent == 31) return FromBits(sign | 0x7f800000u | (fraction << 13));
  return FromBits(sign | ((exponent + 112u) << 23) | (fraction << 13));
}

#define TAGI_WIRE_GRID_STRIDE(i, n)                                                    \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<size_t>(gridDim.x) * blockDim.x)

__global__ void NarrowKernel(bool bf16, const float* in, float scale, uint16_t* out, size_t n) {
  TAGI_WIRE_GRID_STRIDE(i, n) { out[i] = bf16 ? ToBf16(in[i]) : ToFp16(in[i] * scale); }
}

__global__ void WidenKernel(bool bf16, const uint16_t* in, float inv_scale, float* out,
                            size_t n) {
  TAGI_WIRE_GRID_STRIDE(i, n) { out[i] = bf16 ? FromBf16(in[i]) : FromFp16(in[i]) * inv_scale; }
}

// One thread per partial: the same result whatever the launch shape.
__global__ void MaxAbsPartialsKernel(const float* in, size_t n, float* partials) {
  TAGI_WIRE_GRID_STRIDE(k, kPartials) {
    float most = 0.0f;
    for (size_t i = k; i < n; i += kPartials) {
      const float a = fabsf(in[i]);
      most = (a > most || a != a) ? a : most;  // a NaN stays
      if (most != most) break;
    }
    partials[k] = most;
  }
}

template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), size_t n, cudaStream_t stream, Args... args) {
  if (n == 0) return cudaSuccess;
  const size_t b = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(b < kMaxBlocks ? b : kMaxBlocks);
#if defined(TAGI_CUDA_HOST_EMULATION)
  return tagi::cuda_emulation::Launch(stream, blocks, kThreads, kernel, args...);
#else
  kernel<<<blocks, kThreads, 0, stream>>>(args...);
  return cudaGetLastError();
#endif
}

}  // namespace

cudaError_t Narrow(bool bf16, const float* in, float scale, uint16_t* out, size_t n,
                   cudaStream_t stream) {
  return Launch(NarrowKernel, n, stream, bf16, in, scale, out, n);
}

cudaError_t Widen(bool bf16, const uint16_t* in, float inv_scale, float* out, size_t n,
                  cudaStream_t stream) {
  return Launch(WidenKernel, n, stream, bf16, in, inv_scale, out, n);
}

cudaError_t MaxAbsPartials(const float* in, size_t n, float* partials, cudaStream_t stream) {
  return Launch(MaxAbsPartialsKernel, kPartials, stream, in, n, partials);
}

}  // namespace tagi::nccl_wire
