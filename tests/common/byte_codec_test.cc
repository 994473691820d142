#include "common/byte_codec.h"

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/allocation_probe.h"

namespace tagi {
namespace {

using ::tagi::test::AllocationProbe;
using ::testing::HasSubstr;

ByteReader ReaderOf(const std::string& bytes) { return ByteReader(std::span(bytes)); }

TEST(ByteCodec, RoundTripsEveryType) {
  ByteWriter w;
  w.PutU8(0xAB);
  w.PutU32(0xDEADBEEFu);
  w.PutU64(0x0123456789ABCDEFull);
  w.PutF32(-3.25f);
  w.PutString("hello, world");
  w.PutString("");
  const std::vector<float> floats = {1.5f, -0.0f, 1e-40f, 3.4e38f};
  w.PutF32Array(floats);
  w.PutBytes("xyz", 3);
  const std::string bytes = w.Release();

  ByteReader r = ReaderOf(bytes);
  EXPECT_EQ(*r.GetU8("u8"), 0xAB);
  EXPECT_EQ(*r.GetU32("u32"), 0xDEADBEEFu);
  EXPECT_EQ(*r.GetU64("u64"), 0x0123456789ABCDEFull);
  EXPECT_EQ(*r.GetF32("f32"), -3.25f);
  EXPECT_EQ(*r.GetString("s", 100), "hello, world");
  EXPECT_EQ(*r.GetString("empty", 100), "");
  std::vector<float> back(floats.size());
  ASSERT_TRUE(r.GetF32Array("floats", std::span(back)).ok());
  for (size_t i = 0; i < floats.size(); ++i) {
    EXPECT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(floats[i])) << i;
  }
  ASSERT_TRUE(r.Skip("tail", 3).ok());
  EXPECT_EQ(r.remaining(), 0u);
  EXPECT_EQ(r.position(), bytes.size());
}

TEST(ByteCodec, FloatsKeepTheirExactBits) {
  const std::vector<float> specials = {
      std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
      std::numeric_limits<float>::quiet_NaN(), -0.0f, std::numeric_limits<float>::denorm_min()};
  ByteWriter w;
  for (float v : specials) w.PutF32(v);
  ByteReader r = ReaderOf(w.data());
  for (float v : specials) {
    auto got = r.GetF32("special");
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(std::bit_cast<uint32_t>(*got), std::bit_cast<uint32_t>(v));
  }
}

TEST(ByteCodec, EncodesLittleEndian) {
  ByteWriter w;
  w.PutU32(0x01020304u);
  EXPECT_EQ(w.data(), std::string("\x04\x03\x02\x01", 4));

  ByteWriter w64;
  w64.PutU64(0x0102030405060708ull);
  EXPECT_EQ(w64.data(), std::string("\x08\x07\x06\x05\x04\x03\x02\x01", 8));

  ByteWriter wf;
  wf.PutF32(1.0f);  // 0x3f800000
  EXPECT_EQ(wf.data(), std::string("\x00\x00\x80\x3f", 4));

  ByteWriter ws;
  ws.PutString("ab");
  EXPECT_EQ(ws.data(), std::string("\x02\x00\x00\x00"
                                   "ab",
                                   6));
}

TEST(ByteCodec, DecodesLittleEndianBytes) {
  const std::string bytes("\x04\x03\x02\x01", 4);
  ByteReader r = ReaderOf(bytes);
  EXPECT_EQ(*r.GetU32("word"), 0x01020304u);
}

TEST(ByteCodec, ReadingPastTheEndIsDataLossNamingTheField) {
  const std::string three("\x01\x02\x03", 3);
  {
    ByteReader r = ReaderOf(three);
    auto v = r.GetU32("layer 2 kind");
    EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(v.status().message(), HasSubstr("layer 2 kind"));
  }
  {
    ByteReader r = ReaderOf(three);
    EXPECT_EQ(r.GetU64("step").status().code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(r.GetF32("mean").status().code(), absl::StatusCode::kDataLoss);
  }
  {
    const std::string empty;
    ByteReader r = ReaderOf(empty);
    auto v = r.GetU8("magic");
    EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(v.status().message(), HasSubstr("magic"));
  }
  {
    ByteReader r = ReaderOf(three);
    std::vector<float> out(1);
    const absl::Status s = r.GetF32Array("weights of layer 0", std::span(out));
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(s.message(), HasSubstr("weights of layer 0"));
  }
  {
    ByteReader r = ReaderOf(three);
    const absl::Status s = r.Skip("padding", 4);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(s.message(), HasSubstr("padding"));
    EXPECT_TRUE(r.Skip("padding", 3).ok());
  }
}

// The root of the model file and snapshot reports of tests/fuzz: reading
// into an empty span whose data() is null (an empty vector) called memcpy
// with a null pointer, undefined even for 0 bytes (UBSan nonnull-attribute).
TEST(ByteCodec, EmptyFloatArrayReadsNothing) {
  const std::string bytes("\x01\x02\x03\x04", 4);
  for (const std::string* data : {&bytes, static_cast<const std::string*>(nullptr)}) {
    ByteReader r = data ? ReaderOf(*data) : ByteReader(std::span<const char>());
    std::vector<float> none;
    EXPECT_TRUE(r.GetF32Array("no floats", std::span(none)).ok());
    EXPECT_EQ(r.position(), 0u);
  }
}

TEST(ByteCodec, StringLongerThanItsBufferIsDataLoss) {
  ByteWriter w;
  w.PutU32(10);
  w.PutBytes("abc", 3);
  ByteReader r = ReaderOf(w.data());
  auto s = r.GetString("name", 100);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.status().message(), HasSubstr("name"));
}

TEST(ByteCodec, StringAtTheLimitIsAccepted) {
  ByteWriter w;
  w.PutString("12345");
  ByteReader r = ReaderOf(w.data());
  auto s = r.GetString("name", 5);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, "12345");
}

// Control for the two tests below: the probe does see a large allocation.
TEST(ByteCodec, AllocationProbeSeesLargeAllocations) {
  AllocationProbe probe;
  std::string big(size_t{1} << 20, 'x');
  EXPECT_EQ(big[12345], 'x');
  EXPECT_GE(probe.largest(), big.size());
}

TEST(ByteCodec, StringLengthAboveMaxSizeIsRefusedWithoutAllocating) {
  ByteWriter w;
  w.PutU32(0xFFFFFFFFu);  // a hostile 4 GiB length
  w.PutBytes("abc", 3);
  ByteReader r = ReaderOf(w.data());
  absl::StatusOr<std::string> s;
  size_t largest = 0;
  {
    AllocationProbe probe;
    s = r.GetString("job name", 1 << 20);
    largest = probe.largest();
  }
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.status().message(), HasSubstr("job name"));
  EXPECT_LT(largest, size_t{1} << 16) << "GetString allocated for the hostile length";
}

TEST(ByteCodec, TruncatedStringWithinMaxSizeIsRefusedWithoutAllocating) {
  ByteWriter w;
  w.PutU32(0x7FFFFFFFu);
  w.PutBytes("abc", 3);
  ByteReader r = ReaderOf(w.data());
  absl::StatusOr<std::string> s;
  size_t largest = 0;
  {
    AllocationProbe probe;
    s = r.GetString("blob", std::numeric_limits<size_t>::max());
    largest = probe.largest();
  }
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_LT(largest, size_t{1} << 16) << "GetString allocated before checking the buffer";
}

TEST(ByteCodec, PositionAndRemainingTrackReads) {
  ByteWriter w;
  w.PutU32(1);
  w.PutU8(2);
  ByteReader r = ReaderOf(w.data());
  EXPECT_EQ(r.remaining(), 5u);
  ASSERT_TRUE(r.GetU32("a").ok());
  EXPECT_EQ(r.position(), 4u);
  EXPECT_EQ(r.remaining(), 1u);
  ASSERT_TRUE(r.GetU8("b").ok());
  EXPECT_EQ(r.remaining(), 0u);
}

}  // namespace
}  // namespace tagi
