#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "common/byte_codec.h"
#include "common/checksum.h"
#include "common/snapshot.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

Snapshot SampleSnapshot(size_t n = 6) {
  Snapshot s;
  s.job_id = "job-7";
  s.generation = 3;
  s.epoch = 2;
  s.step = 17;
  s.global_step = 1234567;
  s.rng_state = {0x0123456789abcdefULL, 0xfedcba9876543210ULL, 1, ~uint64_t{0}};
  s.sigma_v = 0.3f;
  for (size_t i = 0; i < 2 * n; ++i) s.parameters.push_back(0.01f * static_cast<float>(i) - 0.05f);
  s.architecture = std::string("fnn:784-100-11\0binary", 21);
  s.world = 3;
  s.offset = 17 * 3 * 32;
  s.model_header = std::string("TAGIMHDR\0header", 15);
  return s;
}

void ExpectBitIdentical(const Snapshot& a, const Snapshot& b) {
  EXPECT_EQ(a.job_id, b.job_id);
  EXPECT_EQ(a.generation, b.generation);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.global_step, b.global_step);
  EXPECT_EQ(a.rng_state, b.rng_state);
  EXPECT_EQ(std::memcmp(&a.sigma_v, &b.sigma_v, sizeof(float)), 0);
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  // Not memcmp: an empty vector's data() may be null, undefined for memcmp.
  EXPECT_TRUE(std::equal(a.parameters.begin(), a.parameters.end(), b.parameters.begin(),
                         [](float x, float y) {
                           return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y);
                         }));
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.world, b.world);
  EXPECT_EQ(a.offset, b.offset);
  EXPECT_EQ(a.model_header, b.model_header);
}

// Replaces the CRC trailer with the checksum of the (edited) bytes before it.
void Reseal(std::string& bytes) {
  const uint32_t crc = Crc32(bytes.data(), bytes.size() - 4);
  ByteWriter w;
  w.PutU32(crc);
  bytes.replace(bytes.size() - 4, 4, w.data());
}

TEST(SnapshotCodec, RoundTripIsBitExact) {
  Snapshot s = SampleSnapshot();
  s.parameters.push_back(std::numeric_limits<float>::quiet_NaN());
  s.parameters.push_back(-0.0f);
  s.parameters.push_back(std::numeric_limits<float>::denorm_min());
  s.parameters.push_back(std::numeric_limits<float>::infinity());
  const std::string bytes = EncodeSnapshot(s);
  auto decoded = DecodeSnapshot(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectBitIdentical(s, *decoded);
  EXPECT_EQ(EncodeSnapshot(*decoded), bytes);
}

TEST(SnapshotCodec, RoundTripsEmptyFields) {
  const Snapshot s;
  auto decoded = DecodeSnapshot(EncodeSnapshot(s));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ExpectBitIdentical(s, *decoded);
}

// Found by tests/fuzz/snapshot_fuzz (UBSan: null pointer passed to memcpy):
// a snapshot with no parameters copied 0 bytes into the null data() of an
// empty vector, which is undefined behaviour. The fuzzer's minimised input:
// an intact header and CRC, an empty job id, zero parameters, then the body
// ends before the architecture.
TEST(SnapshotCodec, ZeroParametersThenTruncationIsDataLoss) {
  const std::string bytes(
      "\x54\x41\x47\x49\x53\x4e\x41\x50\x01\x00\x00\x00\x50\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x01\x00\x00"
      "\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x0d\x00\x00"
      "\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x0d\xd3\xa8\xab\x7f"
      "\xb9\x79\x37\x9e\x00\x00\x00\x3f\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x2e\xca\x55\x06",
      104);
  auto decoded = DecodeSnapshot(bytes);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(decoded.status().message().find("architecture"), std::string::npos)
      << decoded.status();
}

TEST(SnapshotCodec, EveryTruncationIsDataLoss) {
  const std::string bytes = EncodeSnapshot(SampleSnapshot());
  for (size_t len = 0; len < bytes.size(); ++len) {
    auto decoded = DecodeSnapshot(std::span<const char>(bytes.data(), len));
    ASSERT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss) << "length " << len;
  }
}

TEST(SnapshotCodec, PaddingIsDataLoss) {
  const std::string bytes = EncodeSnapshot(SampleSnapshot()) + std::string(1, '\0');
  EXPECT_EQ(DecodeSnapshot(bytes).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SnapshotCodec, EverySingleBitFlipIsDataLoss) {
  const std::string bytes = EncodeSnapshot(SampleSnapshot());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string flipped = bytes;
      flipped[i] = static_cast<char>(flipped[i] ^ (1 << bit));
      auto decoded = DecodeSnapshot(flipped);
      ASSERT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss)
          << "byte " << i << " bit " << bit << ": " << decoded.status();
    }
  }
}

TEST(SnapshotCodec, UnknownVersionIsFailedPreconditionNamingIt) {
  std::string bytes = EncodeSnapshot(SampleSnapshot());
  ByteWriter w;
  w.PutU32(kSnapshotVersion + 41);
  bytes.replace(8, 4, w.data());
  Reseal(bytes);
  auto decoded = DecodeSnapshot(bytes);
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(decoded.status().message().find(std::to_string(kSnapshotVersion + 41)),
            std::string::npos)
      << decoded.status();
}

TEST(SnapshotCodec, OtherMagicIsDataLoss) {
  std::string bytes = EncodeSnapshot(SampleSnapshot());
  bytes.replace(0, 8, "TAGIMODL");
  Reseal(bytes);
  EXPECT_EQ(DecodeSnapshot(bytes).status().code(), absl::StatusCode::kDataLoss);
}

// Builds a correctly framed and sealed file around an arbitrary body, so the
// body decoder itself meets the hostile values.
std::string Frame(const std::string& body, uint32_t version = kSnapshotVersion) {
  ByteWriter w;
  w.PutBytes("TAGISNAP", 8);
  w.PutU32(version);
  w.PutU64(body.size());
  w.PutBytes(body.data(), body.size());
  w.PutU32(0);
  std::string bytes = w.Release();
  Reseal(bytes);
  return bytes;
}

ByteWriter FixedFields(const std::string& job_id) {
  ByteWriter w;
  w.PutString(job_id);
  for (int i = 0; i < 4 + 4; ++i) w.PutU64(i);
  w.PutF32(1.0f);
  return w;
}

TEST(SnapshotCodec, SealedFramingRoundTripsThroughFrame) {
  ByteWriter w = FixedFields("j");
  w.PutU64(0);
  w.PutString("arch");
  w.PutU64(0);  // state count
  w.PutU32(2);  // world
  w.PutU64(64);  // offset
  auto decoded = DecodeSnapshot(Frame(w.data(), 3));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->architecture, "arch");
  EXPECT_EQ(decoded->world, 2u);
  EXPECT_EQ(decoded->offset, 64u);
  EXPECT_EQ(decoded->model_header, "");  // version 3: none
  // Version 4 adds the model header; the version 3 body lacks it.
  EXPECT_EQ(DecodeSnapshot(Frame(w.data())).status().code(), absl::StatusCode::kDataLoss);
  w.PutString("header");
  decoded = DecodeSnapshot(Frame(w.data(), 4));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->model_header, "header");
  EXPECT_EQ(decoded->epoch_samples, 0u);  // version 4: the epoch starts there
  // Version 5 adds the epoch so far; the version 4 body lacks it.
  EXPECT_EQ(DecodeSnapshot(Frame(w.data())).status().code(), absl::StatusCode::kDataLoss);
  ByteWriter v5 = w;
  v5.PutU64(2'500'000);
  v5.PutU64(90);
  v5.PutU64(128);
  decoded = DecodeSnapshot(Frame(v5.data()));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->epoch_micros, 2'500'000u);
  EXPECT_EQ(decoded->epoch_correct, 90u);
  EXPECT_EQ(decoded->epoch_samples, 128u);
  // More correct predictions than samples: refused, naming both.
  ByteWriter bad = w;
  bad.PutU64(0);
  bad.PutU64(129);
  bad.PutU64(128);
  const absl::Status st = DecodeSnapshot(Frame(bad.data())).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(st.message().find("129 correct predictions out of 128 samples"), std::string::npos)
      << st;
  // A model header longer than its limit is refused without reading it.
  ByteWriter big = FixedFields("j");
  big.PutU64(0);
  big.PutString("arch");
  big.PutU64(0);
  big.PutU32(1);
  big.PutU64(0);
  big.PutU32(static_cast<uint32_t>(kMaxSnapshotModelHeaderBytes + 1));
  EXPECT_EQ(DecodeSnapshot(Frame(big.data())).status().code(), absl::StatusCode::kDataLoss);
}

// A version 2 snapshot (written before elastic jobs) has no world and
// offset: it decodes with world 0, which the restorer reads as "the job's
// fixed world"; the same body framed as version 3 lacks 12 bytes.
TEST(SnapshotCodec, VersionTwoDecodesWithUnknownWorld) {
  ByteWriter w = FixedFields("j");
  w.PutU64(0);
  w.PutString("arch");
  w.PutU64(0);  // state count
  auto decoded = DecodeSnapshot(Frame(w.data(), 2));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->world, 0u);
  EXPECT_EQ(decoded->offset, 0u);
  EXPECT_EQ(DecodeSnapshot(Frame(w.data(), 3)).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SnapshotCodec, HugeParameterCountIsDataLossWithoutAllocating) {
  for (const uint64_t n : {~uint64_t{0}, uint64_t{1} << 62, uint64_t{1} << 40, uint64_t{3}}) {
    ByteWriter w = FixedFields("j");
    w.PutU64(n);
    w.PutF32(1.0f);  // fewer bytes than announced
    auto decoded = DecodeSnapshot(Frame(w.data()));
    EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss) << n;
  }
}

TEST(SnapshotCodec, HugeStringLengthsAreDataLoss) {
  {
    ByteWriter w;
    w.PutU32(0xffffffffu);  // job id length
    EXPECT_EQ(DecodeSnapshot(Frame(w.data())).status().code(), absl::StatusCode::kDataLoss);
  }
  {
    // Longer than the limit, even though the bytes are present.
    ByteWriter w;
    w.PutString(std::string(kMaxSnapshotJobIdBytes + 1, 'x'));
    EXPECT_EQ(DecodeSnapshot(Frame(w.data())).status().code(), absl::StatusCode::kDataLoss);
  }
  {
    ByteWriter w = FixedFields("j");
    w.PutU64(0);
    w.PutU32(0xfffffff0u);  // architecture length
    EXPECT_EQ(DecodeSnapshot(Frame(w.data())).status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(SnapshotCodec, HugeBodyLengthIsDataLoss) {
  std::string bytes = EncodeSnapshot(SampleSnapshot());
  ByteWriter w;
  w.PutU64(~uint64_t{0});
  bytes.replace(12, 8, w.data());
  Reseal(bytes);
  EXPECT_EQ(DecodeSnapshot(bytes).status().code(), absl::StatusCode::kDataLoss);
}

TEST(SnapshotCodec, TrailingBodyBytesAreDataLoss) {
  ByteWriter w = FixedFields("j");
  w.PutU64(0);
  w.PutString("arch");
  w.PutU8(0);
  EXPECT_EQ(DecodeSnapshot(Frame(w.data())).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace tagi
