#include "worker/collective/wire_precision.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <immintrin.h>

namespace tagi {
namespace {

uint16_t Bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(u >> 16);
}

float FromBf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

uint16_t Fp16(float x) {
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t u;
  std::memcpy(&u, &h, sizeof(u));
  return u;
}

float FromFp16(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, sizeof(h));
  return static_cast<float>(h);
}

// The FP16 loops: eight values per instruction on CPUs with F16C, else one
// at a time in software. Bit-identical either way: both round to nearest
// even and keep subnormals, and the scale is a power of two (exact).
void WidenFp16Scalar(const uint16_t* in, float inv_scale, float* out, size_t n, bool add) {
  if (add) {
    for (size_t i = 0; i < n; ++i) out[i] = FromFp16(in[i]) * inv_scale + out[i];
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = FromFp16(in[i]) * inv_scale;
  }
}

__attribute__((target("avx,f16c"))) void NarrowFp16Simd(const float* in, float scale,
                                                        uint16_t* out, size_t n) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(in + i), s),
                                      _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < n; ++i) out[i] = Fp16(in[i] * scale);
}

__attribute__((target("avx,f16c"))) void WidenFp16Simd(const uint16_t* in, float inv_scale,
                                                       float* out, size_t n, bool add) {
  const __m256 s = _mm256_set1_ps(inv_scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(h), s);
    if (add) v = _mm256_add_ps(v, _mm256_loadu_ps(out + i));
    _mm256_storeu_ps(out + i, v);
  }
  WidenFp16Scalar(in + i, inv_scale, out + i, n - i, add);
}

}  // namespace

namespace wire_internal {

bool HasF16c() {
  static const bool have = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return have;
}

void NarrowFp16On(bool vector, const float* in, float scale, uint16_t* out, size_t n) {
  if (vector) return NarrowFp16Simd(in, scale, out, n);
  for (size_t i = 0; i < n; ++i) out[i] = Fp16(in[i] * scale);
}

void WidenFp16On(bool vector, const uint16_t* in, float inv_scale, float* out, size_t n,
                 bool add) {
  if (vector) return WidenFp16Simd(in, inv_scale, out, n, add);
  WidenFp16Scalar(in, inv_scale, out, n, add);
}

}  // namespace wire_internal

namespace {

void NarrowFp16(const float* in, float scale, uint16_t* out, size_t n) {
  wire_internal::NarrowFp16On(wire_internal::HasF16c(), in, scale, out, n);
}

void WidenFp16(const uint16_t* in, float inv_scale, float* out, size_t n, bool add) {
  wire_internal::WidenFp16On(wire_internal::HasF16c(), in, inv_scale, out, n, add);
}

}  // namespace

const char* WirePrecisionName(WirePrecision wire) {
  switch (wire) {
    case WirePrecision::kFp32:
      return "FP32";
    case WirePrecision::kBf16:
      return "BF16";
    case WirePrecision::kFp16:
      return "FP16";
  }
  return "unknown";
}

void NarrowTo16(WirePrecision wire, const float* in, float scale, uint16_t* out, size_t n) {
  if (wire == WirePrecision::kFp16) return NarrowFp16(in, scale, out, n);
  for (size_t i = 0; i < n; ++i) out[i] = Bf16(in[i]);
}

void WidenFrom16(WirePrecision wire, const uint16_t* in, float inv_scale, float* out, size_t n) {
  if (wire == WirePrecision::kFp16) return WidenFp16(in, inv_scale, out, n, false);
  for (size_t i = 0; i < n; ++i) out[i] = FromBf16(in[i]);
}

void WidenAddFrom16(WirePrecision wire, const uint16_t* in, float inv_scale, float* out,
                    size_t n) {
  if (wire == WirePrecision::kFp16) return WidenFp16(in, inv_scale, out, n, true);
  for (size_t i = 0; i < n; ++i) out[i] = FromBf16(in[i]) + out[i];
}

void RoundThrough16(WirePrecision wire, float scale, float inv_scale, float* x, size_t n) {
  if (wire == WirePrecision::kFp16) {
    // Through a small buffer, so the vector loops do the work.
    uint16_t codes[256];
    for (size_t i = 0; i < n; i += 256) {
      const size_t k = std::min<size_t>(256, n - i);
      NarrowFp16(x + i, scale, codes, k);
      WidenFp16(codes, inv_scale, x + i, k, false);
    }
  } else {
    for (size_t i = 0; i < n; ++i) x[i] = FromBf16(Bf16(x[i]));
  }
}

float Fp16Scale(float bound) {
  if (!(bound > 0.0f) || !std::isfinite(bound)) return 1.0f;
  int e = 0;
  std::frexp(bound, &e);  // bound in [2^(e-1), 2^e)
  // bound * 2^(15 - e) < 2^15.
  const int k = std::clamp(15 - e, -100, 100);
  return std::ldexp(1.0f, k);
}

}  // namespace tagi
