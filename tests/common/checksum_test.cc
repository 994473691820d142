#include "common/checksum.h"

#include <cctype>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace tagi {
namespace {

TEST(Crc32, MatchesTheStandardCheckValue) {
  const std::string check = "123456789";
  EXPECT_EQ(Crc32(check.data(), check.size()), 0xCBF43926u);
}

TEST(Crc32, EmptyInputIsZero) { EXPECT_EQ(Crc32("", 0), 0u); }

TEST(Crc32, ChainsAcrossPieces) {
  const std::string all = "The quick brown fox jumps over the lazy dog";
  const uint32_t whole = Crc32(all.data(), all.size());
  const uint32_t first = Crc32(all.data(), 10);
  EXPECT_EQ(Crc32(all.data() + 10, all.size() - 10, first), whole);
  EXPECT_EQ(whole, 0x414FA339u);
}

TEST(Fingerprint64, IsDeterministic) {
  const std::string data = "parameters of a small network, 37 byte";
  EXPECT_EQ(Fingerprint64(data.data(), data.size()), Fingerprint64(data.data(), data.size()));
  const std::string copy = data;
  EXPECT_EQ(Fingerprint64(copy.data(), copy.size()), Fingerprint64(data.data(), data.size()));
}

// Users compare fingerprints between runs and builds, so the function must
// not change silently: these values pin the documented algorithm.
// The golden values come from an independent re-implementation of the
// algorithm described in checksum.cc (multiply-mix over little-endian words,
// then a length-dependent finaliser).
TEST(Fingerprint64, IsStableAcrossBuilds) {
  const std::string check = "123456789";
  EXPECT_EQ(Fingerprint64(check.data(), check.size()), 0x14609c5ca80d6a74ull);
  EXPECT_EQ(Fingerprint64(nullptr, 0), 0x5cf93e010172cd2eull);
}

TEST(Fingerprint64, ChangesOnEverySingleBitFlip) {
  std::string data = "weights: 0123456789abcdef0123456789abcdef!";  // not a multiple of 8
  const uint64_t original = Fingerprint64(data.data(), data.size());
  std::set<uint64_t> seen = {original};
  for (size_t byte = 0; byte < data.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      data[byte] = static_cast<char>(data[byte] ^ (1 << bit));
      const uint64_t flipped = Fingerprint64(data.data(), data.size());
      EXPECT_NE(flipped, original) << "byte " << byte << " bit " << bit;
      seen.insert(flipped);
      data[byte] = static_cast<char>(data[byte] ^ (1 << bit));
    }
  }
  EXPECT_EQ(seen.size(), 1 + 8 * data.size());
}

TEST(Fingerprint64, ChangesWithLengthEvenForTrailingZeros) {
  const std::string zeros(32, '\0');
  std::set<uint64_t> seen;
  for (size_t n = 0; n <= zeros.size(); ++n) seen.insert(Fingerprint64(zeros.data(), n));
  EXPECT_EQ(seen.size(), zeros.size() + 1);
  const std::string abc = "abc";
  const std::string abc0("abc\0", 4);
  EXPECT_NE(Fingerprint64(abc.data(), abc.size()), Fingerprint64(abc0.data(), abc0.size()));
}

TEST(Fingerprint64, DependsOnWordOrder) {
  const std::string ab = "AAAAAAAABBBBBBBB";
  const std::string ba = "BBBBBBBBAAAAAAAA";
  EXPECT_NE(Fingerprint64(ab.data(), ab.size()), Fingerprint64(ba.data(), ba.size()));
}

TEST(FingerprintHex, IsSixteenLowercaseHexDigits) {
  EXPECT_EQ(FingerprintHex(0), "0000000000000000");
  EXPECT_EQ(FingerprintHex(1), "0000000000000001");
  EXPECT_EQ(FingerprintHex(0xDEADBEEFCAFEF00Dull), "deadbeefcafef00d");
  EXPECT_EQ(FingerprintHex(~uint64_t{0}), "ffffffffffffffff");
  const std::string data = "x";
  const std::string hex = FingerprintHex(Fingerprint64(data.data(), data.size()));
  ASSERT_EQ(hex.size(), 16u);
  for (char c : hex) EXPECT_TRUE(std::isxdigit(c) && !std::isupper(c)) << hex;
}

}  // namespace
}  // namespace tagi
