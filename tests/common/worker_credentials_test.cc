// Worker credentials (common/worker_credentials.h): secrets bound to ids
// under a key, keys read back from their file text.
#include "common/worker_credentials.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace tagi {
namespace {

TEST(WorkerKey, SecretsAreBoundToTheirIdAndTheKey) {
  auto key = WorkerKey::Generate();
  ASSERT_TRUE(key.ok()) << key.status();
  const std::string secret = key->SecretFor("w-1");
  EXPECT_EQ(secret.size(), 64u);
  EXPECT_EQ(secret, key->SecretFor("w-1"));  // deterministic
  EXPECT_TRUE(key->Verify("w-1", secret));
  EXPECT_FALSE(key->Verify("w-2", secret));
  EXPECT_FALSE(key->Verify("w-1", ""));
  EXPECT_FALSE(key->Verify("w-1", secret.substr(1)));
  auto other = WorkerKey::Generate();
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->SecretFor("w-1"), secret);
  // The file text reads back as the same key.
  auto again = WorkerKey::FromHex(key->ToFileText());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->SecretFor("w-1"), secret);
}

// Under mutual TLS the secret is bound to the certificate's name too.
TEST(WorkerKey, ASecretBoundToACertificateNeedsThatCertificate) {
  auto key = WorkerKey::Generate();
  ASSERT_TRUE(key.ok()) << key.status();
  const std::string bound = key->SecretFor("w-1", "host-a");
  EXPECT_NE(bound, key->SecretFor("w-1"));
  EXPECT_TRUE(key->Verify("w-1", bound, "host-a"));
  EXPECT_FALSE(key->Verify("w-1", bound, "host-b"));
  EXPECT_FALSE(key->Verify("w-1", bound));  // without a certificate
  EXPECT_FALSE(key->Verify("w-1", key->SecretFor("w-1"), "host-a"));
  // An id can not smuggle a certificate name in.
  EXPECT_FALSE(key->Verify("w-1\ncert:host-a", bound));
}

TEST(WorkerKey, FromHexRefusesAnythingButThirtyTwoBytesOfHex) {
  for (const std::string& bad : {std::string(), std::string(63, 'a'), std::string(65, 'a'),
                                 std::string(63, 'a') + "g", std::string(64, ' ')}) {
    auto key = WorkerKey::FromHex(bad);
    EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument) << "\"" << bad << "\"";
  }
  EXPECT_TRUE(WorkerKey::FromHex(std::string(64, 'A') + "\n").ok());
}

TEST(RandomHex, GivesDistinctHexOfTheLengthAsked) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    auto hex = RandomHex(16);
    ASSERT_TRUE(hex.ok());
    EXPECT_EQ(hex->size(), 32u);
    EXPECT_EQ(hex->find_first_not_of("0123456789abcdef"), std::string::npos);
    seen.insert(*hex);
  }
  EXPECT_EQ(seen.size(), 100u);
}

}  // namespace
}  // namespace tagi
