// Model files: the byte layout documented in model_file.h, bit-exact round
// trips, and detection of every truncation, bit flip and hostile length.
#include "worker/engine/model_file.h"

#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/byte_codec.h"
#include "spec/network_proto.h"
#include "tests/testing/scratch_dir.h"
#include "worker/engine/model.h"

namespace tagi::engine {
namespace {

constexpr size_t kHeaderBytes = 8 + 4 + 8;  // magic, version, body length

using ::tagi::testing::ScratchDir;

Architecture LeakyRegression() {
  return {{3, 1, 1}, {{v1::Layer::LINEAR, 3, 4, 0.0f},
           {v1::Layer::LEAKY_RELU, 0, 0, 0.1f},
           {v1::Layer::LINEAR, 4, 2, 0.0f}},
          {HeadKind::kRegression, 0}};
}

Architecture HsmArchitecture() {
  return {{3, 1, 1}, {{v1::Layer::LINEAR, 3, 5, 0.0f},
           {v1::Layer::RELU, 0, 0, 0.0f},
           {v1::Layer::LINEAR, 5, 3, 0.0f}},
          {HeadKind::kClassification, 3}};
}

Preprocessing SomePreprocessing() {
  return {{1.0f, -2.5f, 3.25f}, {0.5f, 1.5f, 2.0f}, {10.0f, -0.125f}, {3.0f, 0.75f}, {}};
}

// 2N floats with awkward bit patterns: signed zero, a subnormal, infinities,
// a NaN with a payload, and ordinary values.
std::vector<float> AwkwardParameters(size_t n) {
  std::vector<float> p(2 * n);
  for (size_t k = 0; k < p.size(); ++k) p[k] = 0.37f * static_cast<float>(k) - 5.0f;
  p[0] = -0.0f;
  p[1] = std::numeric_limits<float>::denorm_min();
  p[2] = std::numeric_limits<float>::infinity();
  p[3] = -std::numeric_limits<float>::max();
  const uint32_t nan_bits = 0x7fc01234u;
  std::memcpy(&p[4], &nan_bits, sizeof(nan_bits));
  return p;
}

bool BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

uint32_t ReadU32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}
uint64_t ReadU64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}
void WriteU32(std::string& s, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}
uint32_t ZlibCrc(const std::string& s, size_t len) {
  return static_cast<uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(s.data()), static_cast<uInt>(len)));
}
// Rewrites the trailer so that the checksum matches again.
void FixCrc(std::string& s) { WriteU32(s, s.size() - 4, ZlibCrc(s, s.size() - 4)); }

// A version 1 file, as the first format wrote it (a flat layer list, no
// state): such files must keep loading.
std::string EncodeV1(const Architecture& arch, const Preprocessing& prep,
                     const std::vector<float>& parameters) {
  ByteWriter body;
  body.PutU32(static_cast<uint32_t>(arch.layers.size()));
  for (const LayerDesc& d : arch.layers) {
    body.PutU8(static_cast<uint8_t>(d.kind));
    body.PutU32(d.in);
    body.PutU32(d.out);
    body.PutF32(d.slope);
  }
  body.PutU8(static_cast<uint8_t>(arch.head.kind));
  body.PutU32(arch.head.num_classes);
  for (const auto* v : {&prep.input_mean, &prep.input_std, &prep.target_mean, &prep.target_std}) {
    body.PutU32(static_cast<uint32_t>(v->size()));
    body.PutF32Array(*v);
  }
  body.PutU64(parameters.size() / 2);
  body.PutF32Array(parameters);
  ByteWriter file;
  file.PutBytes("TAGIMODL", 8);
  file.PutU32(1);
  file.PutU64(body.data().size());
  file.PutBytes(body.data().data(), body.data().size());
  std::string bytes = file.Release();
  bytes.append(4, '\0');
  FixCrc(bytes);
  return bytes;
}

absl::StatusOr<ModelFile> Decode(const std::string& bytes) {
  return DecodeModelFile(std::span<const char>(bytes.data(), bytes.size()));
}

std::string EncodeStandardFile() {
  const Architecture arch = LeakyRegression();
  return EncodeModelFile(arch, SomePreprocessing(), AwkwardParameters(arch.num_parameters()));
}

TEST(ModelFile, RoundTripIsBitExact) {
  const Architecture arch = LeakyRegression();
  const std::vector<float> params = AwkwardParameters(arch.num_parameters());
  const std::string bytes = EncodeModelFile(arch, SomePreprocessing(), params);
  const auto file = Decode(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->architecture, arch);
  EXPECT_EQ(file->architecture.layers[1].slope, 0.1f);
  EXPECT_EQ(file->preprocessing, SomePreprocessing());
  EXPECT_TRUE(BitIdentical(file->parameters, params));
}

// A snapshot's model header plus its parameters is the model file itself.
TEST(ModelFile, AHeaderAndParametersMakeTheSameFile) {
  const Architecture arch = LeakyRegression();
  const std::vector<float> params = AwkwardParameters(arch.num_parameters());
  const std::string header = EncodeModelHeader(arch, SomePreprocessing());
  auto file = ModelFileFromHeader(header, params, {});
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file, EncodeModelFile(arch, SomePreprocessing(), params));
  Preprocessing named;
  named.class_names = {"zero", "one", "two"};
  const Architecture hsm = HsmArchitecture();
  const std::vector<float> hp = AwkwardParameters(hsm.num_parameters());
  ASSERT_EQ(hsm.head.num_classes, 3u);
  file = ModelFileFromHeader(EncodeModelHeader(hsm, named), hp, {});
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(*file, EncodeModelFile(hsm, named, hp));

  // Parameters that do not fit, a cut or altered header: DataLoss.
  EXPECT_TRUE(absl::IsDataLoss(
      ModelFileFromHeader(header, std::vector<float>(params.size() - 2), {}).status()));
  const std::vector<float> one_state = {1.0f};
  EXPECT_TRUE(absl::IsDataLoss(ModelFileFromHeader(header, params, one_state).status()));
  for (size_t len = 0; len < header.size(); ++len) {
    EXPECT_TRUE(absl::IsDataLoss(
        ModelFileFromHeader(std::span<const char>(header.data(), len), params, {}).status()))
        << len;
  }
  EXPECT_TRUE(absl::IsDataLoss(ModelFileFromHeader(header + "x", params, {}).status()));
  std::string other = header;
  other[3] = 'X';
  EXPECT_TRUE(absl::IsDataLoss(ModelFileFromHeader(other, params, {}).status()));
}

TEST(ModelFile, RoundTripsAClassifierWithoutPreprocessing) {
  const Architecture arch = HsmArchitecture();
  const std::vector<float> params = AwkwardParameters(arch.num_parameters());
  const auto file = Decode(EncodeModelFile(arch, {}, params));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->architecture, arch);
  EXPECT_EQ(file->preprocessing, Preprocessing{});
  EXPECT_TRUE(BitIdentical(file->parameters, params));
}

// Found by tests/fuzz/model_file_fuzz (UBSan: null pointer passed to
// memcpy): decoding an empty preprocessing vector, as every unstandardised
// model has, copied 0 bytes into the null data() of an empty vector, which
// is undefined behaviour. This is the fuzzer's minimised input: an intact
// header and CRC, a valid 4-2-MIXTURE_RELU-3 hsm(3) architecture, an empty
// input mean, then the body ends.
TEST(ModelFile, EmptyPreprocessingVectorThenTruncationIsDataLoss) {
  const std::string bytes(
      "\x54\x41\x47\x49\x4d\x4f\x44\x4c\x01\x00\x00\x00\x34\x00\x00\x00"
      "\x00\x00\x00\x00\x03\x00\x00\x00\x01\x04\x00\x00\x00\x02\x00\x00"
      "\x00\x00\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x01\x02\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x01"
      "\x03\x00\x00\x00\x00\x00\x00\x00\x8d\x9d\x1d\x1a",
      76);
  const auto file = DecodeModelFile(bytes);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(file.status().message().find("input std"), std::string::npos) << file.status();
}

// Found by tests/fuzz/model_file_fuzz: the decoder accepted any slope on
// any layer. This input (the fuzzer's, resealed: intact length and CRC) is a
// 4-2-MIXTURE_RELU-3 hsm(3) classifier whose last LINEAR has slope NaN; the
// decoded architecture was not equal to itself, so no job could ever match
// it, and the mismatch message printed two identical architectures.
TEST(ModelFile, NanSlopeOnALinearLayerIsDataLoss) {
  const std::string bytes(
      "\x54\x41\x47\x49\x4d\x4f\x44\x4c\x01\x00\x00\x00\xe0\x00\x00\x00"
      "\x00\x00\x00\x00\x03\x00\x00\x00\x01\x04\x00\x00\x00\x02\x00\x00"
      "\x00\x00\x00\x00\x00\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x01\x02\x00\x00\x00\x03\x00\x00\x00\x00\x00\xc0\x7f\x01"
      "\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
      "\x00\x00\x00\x00\x13\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\xbf"
      "\x00\x00\x40\xbf\x00\x00\x00\xbf\x00\x00\x80\xbe\x00\x00\x00\x00"
      "\x00\x00\x80\x3e\x00\x00\x00\x3f\x00\x00\x40\x3f\x00\x00\x80\x3f"
      "\x00\x00\xa0\x3f\x00\x00\xc0\x3f\x00\x00\xe0\x3f\x00\x00\x00\x40"
      "\x00\x00\x10\x40\x00\x00\x20\x40\x00\x00\x30\x40\x00\x00\x40\x40"
      "\x00\x00\x50\x40\x00\x00\x60\x40\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c"
      "\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c"
      "\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c"
      "\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c"
      "\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c"
      "\x0a\xd7\x23\x3c\xda\x88\x12\xdd",
      248);
  const auto file = DecodeModelFile(bytes);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(file.status().message().find("layers[2]: holds fields a LINEAR layer does not take"),
            std::string::npos)
      << file.status();
}

TEST(ModelFile, SlopesAndWidthsALayerDoesNotUseAreDataLoss) {
  const struct {
    size_t layer;
    LayerDesc desc;
    const char* message;
  } cases[] = {
      {1, {v1::Layer::LEAKY_RELU, 0, 0, 1.5f},
       "layers[1].negative_slope: 1.5; expected a value in (0, 1)"},
      {1, {v1::Layer::LEAKY_RELU, 0, 0, 0.0f}, "layers[1].negative_slope: 0;"},
      {1, {v1::Layer::LEAKY_RELU, 4, 4, 0.1f}, "layers[1]: holds fields a LEAKY_RELU layer"},
      {1, {v1::Layer::RELU, 0, 0, 0.1f}, "layers[1]: holds fields a RELU layer does not take"},
      {0, {v1::Layer::LINEAR, 3, 4, -0.5f}, "layers[0]: holds fields a LINEAR layer"},
  };
  // Version 1 files carry every field for every layer; version 2 files
  // carry only a kind's own (its message of the oneof).
  for (const auto& c : cases) {
    Architecture arch = LeakyRegression();
    arch.layers[c.layer] = c.desc;
    const auto file = Decode(EncodeV1(arch, {}, AwkwardParameters(4 * 3 + 4 + 2 * 4 + 2)));
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << c.message;
    EXPECT_NE(file.status().message().find(c.message), std::string::npos) << file.status();
  }
}

// Found by tests/fuzz/model_file_fuzz once it applied the statistics as
// tagi-train --eval does: the decoder accepted standardisation statistics
// that do not fit the architecture, and --eval then aborted on a CHECK in
// data::Apply. This input (the fuzzer's, resealed) is a 2-3-LEAKY_RELU-1
// regression with 2 input means but no input standard deviations.
TEST(ModelFile, InputMeansWithoutStandardDeviationsAreDataLoss) {
  const std::string bytes(
      "\x54\x41\x47\x49\x4d\x4f\x44\x4c\x01\x00\x00\x00\xc8\x00\x00\x00"
      "\x00\x00\x00\x00\x03\x00\x00\x00\x01\x02\x00\x00\x00\x03\x00\x00"
      "\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00\xcd\xcc"
      "\xcc\x3d\x01\x03\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x02"
      "\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x3f\x00\x00\x80\xbf"
      "\x00\x00\x00\x00\x03\x00\x00\x00\x01\x02\x00\x3e\x01\x00\x00\x00"
      "\x00\x00\x40\x40\x01\x00\x00\x00\x00\x00\xc0\x3f\x0d\x00\x00\x00"
      "\x00\x00\x00\x00\x00\x00\x80\xbf\x00\x00\x40\xbf\x00\x00\x00\xbf"
      "\x00\x00\x80\xbe\x00\x00\x00\x00\x00\x00\x80\x3e\x00\x00\x00\x3f"
      "\x00\x00\x40\x3f\x00\x00\x80\x3f\x00\x00\xa0\x3f\x00\x00\xc0\x3f"
      "\x00\x00\xe0\x3f\x00\x00\x00\x40\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c"
      "\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c"
      "\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c"
      "\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\x0a\xd7\x23\x3c\xfd\xd6\xd9\x13",
      224);
  const auto file = DecodeModelFile(bytes);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(file.status().message().find("2 input means but 0 input standard deviations"),
            std::string::npos)
      << file.status();
}

TEST(ModelFile, StatisticsMustFitTheArchitecture) {
  const Architecture regression = LeakyRegression();  // 3 inputs, 2 targets
  const Architecture classifier = HsmArchitecture();  // 3 inputs, labels
  const struct {
    const Architecture* arch;
    Preprocessing prep;
    const char* message;  // nullptr: accepted
  } cases[] = {
      {&regression, {{1, 2}, {1, 2}, {}, {}, {}}, "2 input columns but the architecture has 3"},
      {&regression, {{}, {}, {1, 2, 3}, {1, 2, 3}, {}}, "3 target columns but the architecture has 2"},
      {&regression, {{}, {}, {1, 2}, {1}, {}}, "2 target means but 1 target standard deviations"},
      {&classifier, {{}, {}, {1}, {1}, {}}, "target statistics but the architecture has no target"},
      {&classifier, {{0.5f}, {0.25f}, {}, {}, {}}, nullptr},  // images: one scale for every pixel
      {&regression, {{1, 2, 3}, {1, 2, 3}, {4}, {5}, {}}, nullptr},
  };
  for (const auto& c : cases) {
    const auto file =
        Decode(EncodeModelFile(*c.arch, c.prep, AwkwardParameters(c.arch->num_parameters())));
    if (c.message == nullptr) {
      EXPECT_TRUE(file.ok()) << file.status();
      continue;
    }
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << c.message;
    EXPECT_NE(file.status().message().find(c.message), std::string::npos) << file.status();
  }
}

// A heteroscedastic head keeps one pair of target statistics per target,
// not per output (found by the Python model tests: a 2-target model could
// not be read back).
TEST(ModelFile, HeteroscedasticStatisticsArePerTargetAndTheHeadRoundTrips) {
  Architecture arch;
  arch.input = {3, 1, 1};
  arch.layers = {{v1::Layer::LINEAR, 3, 4, 0.0f}, {v1::Layer::EVEN_EXP, 0, 0, 0.0f}};
  arch.head = {HeadKind::kRegression, 0};
  arch.head.heteroscedastic = true;
  const std::vector<float> params = AwkwardParameters(arch.num_parameters());
  const Preprocessing two{{1, 2, 3}, {1, 2, 3}, {4, 5}, {6, 7}};
  const auto file = Decode(EncodeModelFile(arch, two, params));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->architecture, arch);
  EXPECT_TRUE(file->architecture.head.heteroscedastic);
  EXPECT_EQ(file->preprocessing, two);
  const Preprocessing four{{1, 2, 3}, {1, 2, 3}, {4, 5, 6, 7}, {6, 7, 8, 9}};
  EXPECT_THAT(Decode(EncodeModelFile(arch, four, params)).status().message(),
              ::testing::HasSubstr("4 target columns but the architecture has 2"));
}

TEST(ModelFile, LayoutIsLittleEndianWithMagicVersionLengthAndCrc) {
  const Architecture arch = LeakyRegression();
  const std::vector<float> params = AwkwardParameters(arch.num_parameters());
  const std::string bytes = EncodeModelFile(arch, SomePreprocessing(), params);
  EXPECT_EQ(bytes.substr(0, 8), "TAGIMODL");
  EXPECT_EQ(ReadU32(bytes, 8), kModelFileVersion);
  EXPECT_EQ(kModelFileVersion, 2u);
  EXPECT_EQ(ReadU64(bytes, 12), bytes.size() - kHeaderBytes - 4);
  EXPECT_EQ(ReadU32(bytes, bytes.size() - 4), ZlibCrc(bytes, bytes.size() - 4));
  // Body: the architecture as a length-prefixed tagi.v1.Network.
  const uint32_t arch_len = ReadU32(bytes, 20);
  tagi::v1::Network network;
  ASSERT_TRUE(network.ParseFromString(bytes.substr(24, arch_len)));
  EXPECT_EQ(network.input().channels(), 3u);
  ASSERT_EQ(network.layers_size(), 3);
  EXPECT_EQ(network.layers(0).linear().in_features(), 3u);
  EXPECT_EQ(network.layers(0).linear().out_features(), 4u);
  EXPECT_FLOAT_EQ(network.layers(1).leaky_relu().negative_slope(), 0.1f);
  EXPECT_TRUE(network.head().has_regression());
  // The arena, preceded by N as a u64, then the state count S = 0 close the body.
  const size_t n = arch.num_parameters();
  EXPECT_EQ(ReadU64(bytes, bytes.size() - 4 - 8), 0u);
  const size_t arena_at = bytes.size() - 4 - 8 - 2 * n * sizeof(float);
  EXPECT_EQ(ReadU64(bytes, arena_at - 8), n);
  for (size_t k = 0; k < 2 * n; ++k) {
    uint32_t bits;
    std::memcpy(&bits, &params[k], sizeof(bits));
    ASSERT_EQ(ReadU32(bytes, arena_at + 4 * k), bits) << k;
  }
}

TEST(ModelFile, EveryTruncationIsDataLoss) {
  const std::string bytes = EncodeStandardFile();
  for (size_t len = 0; len < bytes.size(); ++len) {
    const auto file = Decode(bytes.substr(0, len));
    EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << "length " << len;
  }
}

TEST(ModelFile, TrailingBytesAreDataLoss) {
  const auto file = Decode(EncodeStandardFile() + '\0');
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ModelFile, EverySingleBitFlipIsDetected) {
  const std::string bytes = EncodeStandardFile();
  for (size_t at = 0; at < bytes.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ (1 << bit));
      const auto file = Decode(bad);
      // A changed version number reads as an unsupported version, except
      // 2 -> 3, a known one, whose body then lacks the class names.
      const bool in_version = at >= 8 && at < 12 && !(at == 8 && bit == 0);
      EXPECT_EQ(file.status().code(), in_version ? absl::StatusCode::kFailedPrecondition
                                                 : absl::StatusCode::kDataLoss)
          << "byte " << at << " bit " << bit;
    }
  }
}

TEST(ModelFile, WrongMagicIsDataLoss) {
  std::string bytes = EncodeStandardFile();
  bytes[7] = 'X';
  FixCrc(bytes);
  const auto file = Decode(bytes);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(file.status().message().find("magic"), std::string::npos) << file.status();
}

TEST(ModelFile, UnsupportedVersionIsFailedPreconditionNamingIt) {
  std::string bytes = EncodeStandardFile();
  WriteU32(bytes, 8, 7);
  FixCrc(bytes);
  const auto file = Decode(bytes);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(file.status().message().find("version 7"), std::string::npos) << file.status();
}

TEST(ModelFile, ParameterCountNotMatchingTheArchitectureIsDataLoss) {
  const Architecture arch = LeakyRegression();
  const std::string bytes =
      EncodeModelFile(arch, {}, AwkwardParameters(arch.num_parameters() + 1));
  const auto file = Decode(bytes);  // the checksum is right, the contents are not
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ModelFile, InvalidArchitectureIsDataLoss) {
  Architecture arch = LeakyRegression();
  arch.layers[2].in = 5;  // does not chain with the 4 outputs of layer 0
  const auto file = Decode(EncodeModelFile(arch, {}, AwkwardParameters(arch.num_parameters())));
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ModelFile, HostileVectorLengthIsDataLoss) {
  // Body: the architecture (u32 length + bytes), then the length of the
  // input mean.
  std::string bytes = EncodeStandardFile();
  const size_t at = kHeaderBytes + 4 + ReadU32(bytes, kHeaderBytes);
  ASSERT_EQ(ReadU32(bytes, at), 3u);
  for (uint32_t hostile : {4u, 1000u, 0xffffff00u}) {
    std::string bad = bytes;
    WriteU32(bad, at, hostile);
    FixCrc(bad);
    EXPECT_EQ(Decode(bad).status().code(), absl::StatusCode::kDataLoss) << hostile;
  }
}

TEST(ModelFile, SaveAndLoadRoundTripThroughAModel) {
  ScratchDir dir;
  const Architecture arch = LeakyRegression();
  auto model = Model::Create(arch, 2);
  ASSERT_TRUE(model.ok());
  (*model)->Initialize(31, {});
  const std::string path = dir.Path("model.tagi");
  ASSERT_TRUE(SaveModelFile(path, arch, SomePreprocessing(), (*model)->parameters()).ok());

  const auto file = LoadModelFile(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_TRUE(CheckSameArchitecture(arch, file->architecture).ok());
  EXPECT_EQ(file->preprocessing, SomePreprocessing());
  auto loaded = Model::Create(file->architecture, 2);
  ASSERT_TRUE(loaded.ok());
  ASSERT_EQ(file->parameters.size(), (*loaded)->parameters().size());
  std::copy(file->parameters.begin(), file->parameters.end(), (*loaded)->parameters().begin());
  (*loaded)->ParametersChanged();
  EXPECT_EQ((*loaded)->ParameterFingerprint(), (*model)->ParameterFingerprint());
  const float x[] = {0.5f, -1.0f, 2.0f, 1.5f, 0.0f, -0.5f};
  (*model)->Forward(x, 2);
  (*loaded)->Forward(x, 2);
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ((*loaded)->output().mu[k], (*model)->output().mu[k]);
    EXPECT_EQ((*loaded)->output().var[k], (*model)->output().var[k]);
  }
}

TEST(ModelFile, LoadingAMissingFileNamesThePath) {
  ScratchDir dir;
  const std::string path = dir.Path("no_such_model.tagi");
  const auto file = LoadModelFile(path);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status();
}

TEST(ModelFile, LoadingACorruptFileNamesThePath) {
  ScratchDir dir;
  std::string bytes = EncodeStandardFile();
  bytes[bytes.size() / 2] ^= 0x10;
  const std::string path = dir.Path("corrupt.tagi");
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<long>(bytes.size()));
  const auto file = LoadModelFile(path);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status();
}

TEST(ModelFile, SavingIntoAMissingDirectoryFails) {
  ScratchDir dir;
  const Architecture arch = LeakyRegression();
  const absl::Status st = SaveModelFile(dir.Path("missing/model.tagi"), arch, {},
                                        AwkwardParameters(arch.num_parameters()));
  EXPECT_FALSE(st.ok());
}

TEST(CheckSameArchitecture, AcceptsEqualArchitectures) {
  EXPECT_TRUE(CheckSameArchitecture(LeakyRegression(), LeakyRegression()).ok());
}

TEST(CheckSameArchitecture, NamesBothArchitecturesOnMismatch) {
  const Architecture expected = HsmArchitecture();
  Architecture found = HsmArchitecture();
  found.layers[0].out = 4;
  found.layers[2].in = 4;
  const absl::Status st = CheckSameArchitecture(expected, found);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("3-5-RELU-3 hsm(3)"), std::string::npos) << st;
  EXPECT_NE(st.message().find("3-4-RELU-3 hsm(3)"), std::string::npos) << st;
}

TEST(CheckSameArchitecture, RejectsADifferentHeadOrSlope) {
  Architecture regression = HsmArchitecture();
  regression.head = {HeadKind::kRegression, 0};
  EXPECT_EQ(CheckSameArchitecture(HsmArchitecture(), regression).code(),
            absl::StatusCode::kFailedPrecondition);
  Architecture steeper = LeakyRegression();
  steeper.layers[1].slope = 0.2f;
  const absl::Status st = CheckSameArchitecture(LeakyRegression(), steeper);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  // The message shows the slopes, so the two sides differ visibly.
  EXPECT_NE(st.message().find("LEAKY_RELU(0.2)"), std::string::npos) << st;
}

}  // namespace
}  // namespace tagi::engine

namespace tagi::engine {
namespace {

// Found by model_file_fuzz: a version 1 regression head carrying a class
// count decoded, then re-encoded (v2 drops the count) to another model.
TEST(ModelFile, RegressionHeadWithAClassCountIsDataLoss) {
  Architecture arch = LeakyRegression();
  arch.head.num_classes = 3;
  const auto file = Decode(EncodeV1(arch, {}, AwkwardParameters(26)));
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(file.status().message().find("regression head takes no class count"),
            std::string::npos)
      << file.status();
}

// One architecture, one encoding: a record with an unknown field (or any
// other non-canonical encoding of the same network) is refused.
TEST(ModelFile, NonCanonicalArchitectureRecordIsDataLoss) {
  const Architecture arch = LeakyRegression();
  // Field 99 (varint 1), which this version does not know: it parses, and
  // the network it describes is valid.
  const std::string record =
      spec::ArchitectureToProto(arch).SerializeAsString() + std::string("\x98\x06\x01", 3);
  tagi::v1::Network parsed;
  ASSERT_TRUE(parsed.ParseFromString(record));
  ASSERT_TRUE(spec::ArchitectureFromProto(parsed).ok());
  ByteWriter body;
  body.PutString(record);
  const std::string good = EncodeModelFile(arch, {}, AwkwardParameters(arch.num_parameters()));
  ASSERT_TRUE(Decode(good).ok());
  // Splice the altered record in place of the canonical one.
  const size_t old_len = ReadU32(good, kHeaderBytes);
  std::string bad = good.substr(0, kHeaderBytes) + body.data() +
                    good.substr(kHeaderBytes + 4 + old_len);
  const uint64_t body_len = bad.size() - kHeaderBytes - 4;
  for (int i = 0; i < 8; ++i) bad[12 + i] = static_cast<char>((body_len >> (8 * i)) & 0xff);
  FixCrc(bad);
  const auto file = Decode(bad);
  EXPECT_EQ(file.status().code(), absl::StatusCode::kDataLoss) << file.status();
  EXPECT_NE(file.status().message().find("not in its canonical form"), std::string::npos)
      << file.status();
}

}  // namespace
}  // namespace tagi::engine

namespace tagi::engine {
namespace {

TEST(ModelFile, ClassNamesRoundTripInVersion3AndNamelessModelsStayVersion2) {
  const Architecture arch = HsmArchitecture();
  const std::vector<float> params = AwkwardParameters(arch.num_parameters());
  Preprocessing prep;
  prep.class_names = {"ant", "bee", "cat"};
  const std::string named = EncodeModelFile(arch, prep, params);
  EXPECT_EQ(ReadU32(named, 8), kModelFileVersionWithClassNames);
  const auto file = Decode(named);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->preprocessing.class_names, prep.class_names);
  EXPECT_EQ(ReadU32(EncodeModelFile(arch, {}, params), 8), kModelFileVersion);

  // As many names as classes, none empty or long, nothing after them.
  for (const std::vector<std::string>& names :
       {std::vector<std::string>{"a", "b"}, std::vector<std::string>{"a", "", "c"},
        std::vector<std::string>{"a", "b", std::string(kMaxClassNameBytes + 1, 'x')}}) {
    prep.class_names = names;
    const auto bad = Decode(EncodeModelFile(arch, prep, params));
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss) << names.size();
  }
  std::string padded = named;
  padded.insert(padded.size() - 4, "x");
  // Fix the body length and CRC so only the extra byte is wrong.
  const uint64_t body = padded.size() - kHeaderBytes - 4;
  for (int i = 0; i < 8; ++i) padded[12 + i] = static_cast<char>((body >> (8 * i)) & 0xff);
  FixCrc(padded);
  EXPECT_NE(std::string(Decode(padded).status().message()).find("after its class names"),
            std::string::npos)
      << Decode(padded).status();
}

}  // namespace
}  // namespace tagi::engine
