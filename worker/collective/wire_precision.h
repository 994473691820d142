// WirePrecision: the number format a collective puts on the wire for an
// all-reduce, and the conversions (round to nearest even) between it and
// float.
//
// 16-bit formats halve the bytes; every rank still accumulates in float
// (what arrives is widened and added to the float buffer), so only what
// travels is rounded: each partial sum once per hop, and the final sum once
// (every rank, its owner included, keeps the rounded value, so the replicas
// agree bit for bit). FP16 has five exponent bits: the values are
// multiplied by a power of two that brings the largest possible sum near
// 2^15 before rounding (exact, and undone after widening), so nothing
// overflows and small values keep the most bits. BF16 has float's exponent
// range and needs no scale, but keeps 8 significant bits to FP16's 11.
#ifndef TAGI_WORKER_COLLECTIVE_WIRE_PRECISION_H_
#define TAGI_WORKER_COLLECTIVE_WIRE_PRECISION_H_

#include <cstddef>
#include <cstdint>

namespace tagi {

enum class WirePrecision : uint8_t { kFp32 = 0, kBf16 = 1, kFp16 = 2 };

const char* WirePrecisionName(WirePrecision wire);

// Bytes of one element on the wire.
inline size_t WireBytes(WirePrecision wire) { return wire == WirePrecision::kFp32 ? 4 : 2; }

// out[i] = the 16-bit code of in[i] * scale (kBf16 or kFp16; NaN stays
// NaN, overflow becomes infinity).
void NarrowTo16(WirePrecision wire, const float* in, float scale, uint16_t* out, size_t n);
// out[i] = value of in[i] / scale.
void WidenFrom16(WirePrecision wire, const uint16_t* in, float inv_scale, float* out, size_t n);
// out[i] = value of in[i] / scale + out[i] (float accumulation).
void WidenAddFrom16(WirePrecision wire, const uint16_t* in, float inv_scale, float* out,
                    size_t n);
// x[i] = value of its own 16-bit rounding (what every other rank receives).
void RoundThrough16(WirePrecision wire, float scale, float inv_scale, float* x, size_t n);

// The power of two FP16 values are multiplied by, given a bound on the
// absolute value of every partial sum (the sum over ranks of each rank's
// largest magnitude): the largest 2^k with bound * 2^k <= 2^15, within
// [2^-100, 2^100]; 1 for a bound of 0 or one that is not finite.
float Fp16Scale(float bound);

namespace wire_internal {
// The FP16 loops on one path, so tests can hold the two to the same bits:
// `vector` uses F16C (REQUIRES: HasF16c()), else software.
bool HasF16c();
void NarrowFp16On(bool vector, const float* in, float scale, uint16_t* out, size_t n);
void WidenFp16On(bool vector, const uint16_t* in, float inv_scale, float* out, size_t n,
                 bool add);
}  // namespace wire_internal

}  // namespace tagi

#endif  // TAGI_WORKER_COLLECTIVE_WIRE_PRECISION_H_
