// The 16-bit wire formats: rounding to nearest even, NaN and infinity kept,
// FP16 scaled by an exact power of two, and a rounded value unchanged by a
// second rounding (what lets every replica hold the same bits).
#include "worker/collective/wire_precision.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace tagi {
namespace {

uint16_t One(WirePrecision wire, float x, float scale = 1.0f) {
  uint16_t out = 0;
  NarrowTo16(wire, &x, scale, &out, 1);
  return out;
}

float Back(WirePrecision wire, uint16_t code, float scale = 1.0f) {
  float out = 0.0f;
  WidenFrom16(wire, &code, 1.0f / scale, &out, 1);
  return out;
}

TEST(WirePrecision, Bf16RoundsToNearestEvenAndKeepsSpecials) {
  const auto bf = WirePrecision::kBf16;
  EXPECT_EQ(One(bf, 1.0f), 0x3f80);
  EXPECT_EQ(One(bf, -2.0f), 0xc000);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even 1.
  EXPECT_EQ(One(bf, 1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: even is 1 + 2^-6.
  EXPECT_EQ(One(bf, 1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(One(bf, 1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 0x3f81);
  EXPECT_TRUE(std::isnan(Back(bf, One(bf, std::nanf("")))));
  EXPECT_EQ(Back(bf, One(bf, std::numeric_limits<float>::infinity())),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(Back(bf, One(bf, 1e-30f)), Back(bf, One(bf, Back(bf, One(bf, 1e-30f)))));
}

TEST(WirePrecision, Fp16RoundsScalesAndKeepsSubnormals) {
  const auto h = WirePrecision::kFp16;
  EXPECT_EQ(One(h, 1.0f), 0x3c00);
  EXPECT_EQ(One(h, 65504.0f), 0x7bff);
  EXPECT_EQ(One(h, 1e6f), 0x7c00);  // overflow: infinity
  EXPECT_EQ(One(h, std::ldexp(1.0f, -24)), 0x0001);  // the smallest subnormal
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even.
  EXPECT_EQ(One(h, 1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // With a scale of 2^20, 3e-6 keeps 11 bits instead of falling to a
  // subnormal; the scale is undone exactly.
  const float tiny = 3e-6f;
  const float scale = std::ldexp(1.0f, 20);
  const float back = Back(h, One(h, tiny, scale), scale);
  EXPECT_NEAR(back, tiny, tiny * std::ldexp(1.0f, -11));
  EXPECT_GT(std::abs(Back(h, One(h, tiny)) - tiny), std::abs(back - tiny));
}

TEST(WirePrecision, RoundThroughIsIdempotentAndMatchesNarrowThenWiden) {
  for (const auto wire : {WirePrecision::kBf16, WirePrecision::kFp16}) {
    const float scale = wire == WirePrecision::kFp16 ? 8.0f : 1.0f;
    std::vector<float> x;
    for (int i = 0; i < 1000; ++i) x.push_back(std::sin(0.7f * i) * std::exp(0.01f * i));
    std::vector<float> rounded = x;
    RoundThrough16(wire, scale, 1.0f / scale, rounded.data(), rounded.size());
    std::vector<uint16_t> codes(x.size());
    NarrowTo16(wire, x.data(), scale, codes.data(), x.size());
    std::vector<float> widened(x.size());
    WidenFrom16(wire, codes.data(), 1.0f / scale, widened.data(), x.size());
    EXPECT_EQ(rounded, widened) << WirePrecisionName(wire);
    std::vector<float> twice = rounded;
    RoundThrough16(wire, scale, 1.0f / scale, twice.data(), twice.size());
    EXPECT_EQ(twice, rounded) << WirePrecisionName(wire);
    std::vector<float> sum(x.size(), 1.0f);
    WidenAddFrom16(wire, codes.data(), 1.0f / scale, sum.data(), x.size());
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(sum[i], widened[i] + 1.0f);
  }
}

TEST(WirePrecision, Fp16ScaleBringsTheBoundBelowTwoToTheFifteen) {
  for (const float bound : {1e-12f, 3e-6f, 0.5f, 1.0f, 1000.0f, 32767.0f, 32768.0f, 1e9f}) {
    const float s = Fp16Scale(bound);
    EXPECT_LT(bound * s, 32768.0f) << bound;
    EXPECT_GE(bound * s, 16384.0f) << bound;
    int e = 0;
    EXPECT_EQ(std::frexp(s, &e), 0.5f) << "not a power of two: " << s;
  }
  EXPECT_EQ(Fp16Scale(0.0f), 1.0f);
  EXPECT_EQ(Fp16Scale(std::nanf("")), 1.0f);
  EXPECT_EQ(Fp16Scale(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(Fp16Scale(1e-38f), std::ldexp(1.0f, 100));  // clamped
}

// A cluster may mix CPUs with and without F16C: both FP16 paths must give
// the same bits for every code, and for floats of every kind (normal,
// subnormal in FP16, halfway cases, overflow, NaN, signed zeros).
TEST(WirePrecision, Fp16VectorAndSoftwarePathsGiveTheSameBits) {
  if (!wire_internal::HasF16c()) GTEST_SKIP() << "this CPU has no F16C: one path only";
  std::vector<uint16_t> codes(65536);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint16_t>(i);
  for (const float inv_scale : {1.0f, 0.25f, std::ldexp(1.0f, -40)}) {
    for (const bool add : {false, true}) {
      std::vector<float> a(codes.size(), 0.5f), b(codes.size(), 0.5f);
      wire_internal::WidenFp16On(true, codes.data(), inv_scale, a.data(), a.size(), add);
      wire_internal::WidenFp16On(false, codes.data(), inv_scale, b.data(), b.size(), add);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
          << "widen, inv_scale " << inv_scale << (add ? " (add)" : "");
    }
  }
  std::vector<float> x;
  uint32_t bits = 12345;
  for (int i = 0; i < 200000; ++i) {  // random bit patterns: every exponent
    bits = bits * 1664525u + 1013904223u;
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    x.push_back(f);
  }
  for (int e = -30; e <= 17; ++e) {  // halfway cases around FP16's steps
    for (float m : {1.0f + std::ldexp(1.0f, -11), 1.0f + 3 * std::ldexp(1.0f, -11), 1.5f}) {
      x.push_back(std::ldexp(m, e));
      x.push_back(-std::ldexp(m, e));
    }
  }
  x.insert(x.end(), {0.0f, -0.0f, 65504.0f, 65520.0f, 1e30f, std::nanf(""),
                     std::numeric_limits<float>::infinity()});
  for (const float scale : {1.0f, 4.0f, std::ldexp(1.0f, 30)}) {
    std::vector<uint16_t> a(x.size()), b(x.size());
    wire_internal::NarrowFp16On(true, x.data(), scale, a.data(), x.size());
    wire_internal::NarrowFp16On(false, x.data(), scale, b.data(), x.size());
    size_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) differ += a[i] != b[i];
    EXPECT_EQ(differ, 0u) << "narrow, scale " << scale;
  }
}

}  // namespace
}  // namespace tagi
