// The device side of the NCCL backend's 16-bit wires (wire_precision.h):
// narrowing the float deltas to BF16 or FP16 codes before ncclAllReduce
// sums them in that type, widening the sums back, and the largest
// magnitude that picks the FP16 scale. Each rounds to nearest even, keeps
// subnormals and NaN, and overflows to infinity, as NarrowTo16 and
// WidenFrom16 do on the host (tests hold the two to the same bits).
// Internal to worker/collective/nccl; plain C++17 (nvcc), and compiled by
// g++ against the CUDA host emulation in tests.
#ifndef TAGI_WORKER_COLLECTIVE_NCCL_WIRE_KERNELS_H_
#define TAGI_WORKER_COLLECTIVE_NCCL_WIRE_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tagi::nccl_wire {

// How many partial maxima MaxAbsPartials writes.
inline constexpr size_t kPartials = 4096;

// out[i] = 16-bit code of in[i] * scale (bf16: BF16, which takes no scale;
// else FP16).
cudaError_t Narrow(bool bf16, const float* in, float scale, uint16_t* out, size_t n,
                   cudaStream_t stream);
// out[i] = value of in[i] * inv_scale (BF16: of in[i]).
cudaError_t Widen(bool bf16, const uint16_t* in, float inv_scale, float* out, size_t n,
                  cudaStream_t stream);
// partials[k] = the largest |in[i]| over the i with i % kPartials == k (0
// where there is none; NaN where one is NaN). n may be 0.
cudaError_t MaxAbsPartials(const float* in, size_t n, float* partials, cudaStream_t stream);

}  // namespace tagi::nccl_wire

#endif  // TAGI_WORKER_COLLECTIVE_NCCL_WIRE_KERNELS_H_
