#include "common/auth.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include "common/flags.h"
#include "tests/testing/scratch_dir.h"

namespace tagi {
namespace {

using ::tagi::testing::ScratchDir;

TEST(ConstantTimeEquals, MatchesOnlyIdenticalStrings) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("s3cret", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", "s3creT"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", "X3cret"));
  EXPECT_FALSE(ConstantTimeEquals("s3cret", "s3cre"));
  EXPECT_FALSE(ConstantTimeEquals("s3cre", "s3cret"));
  EXPECT_FALSE(ConstantTimeEquals("", "a"));
  // A prefix padded with NUL bytes is still a different token.
  EXPECT_FALSE(ConstantTimeEquals("ab", std::string("ab\0", 3)));
}

TEST(TokenFile, IgnoresBlankLinesAndCommentsAndTrims) {
  auto tokens = ParseTokenFile("# users\n\n  alice-token  \r\n#bob\nbob-token\n\n", "f");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(*tokens, (std::vector<std::string>{"alice-token", "bob-token"}));
  auto last = ParseTokenFile("only", "f");
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, std::vector<std::string>{"only"});
}

TEST(TokenFile, RefusesEmptyFilesAndLinesWithSpaces) {
  auto empty = ParseTokenFile("\n# nothing here\n   \n", "--api-tokens-file x");
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(empty.status().message().find("--api-tokens-file x holds no token"),
            std::string::npos)
      << empty.status();
  auto spaced = ParseTokenFile("good\ntwo words\n", "f");
  EXPECT_EQ(spaced.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(spaced.status().message().find("line 2"), std::string::npos) << spaced.status();
}

TEST(TokenFile, ReadNamesTheFlagAndPathWhenUnreadable) {
  ScratchDir dir;
  const std::string missing = dir.path() / "missing";
  auto r = ReadTokenFile(missing, "--join-token-file");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("--join-token-file " + missing), std::string::npos)
      << r.status();
  const std::string good = dir.path() / "good";
  std::ofstream(good) << "tok\n";
  auto ok = ReadTokenFile(good, "--join-token-file");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, std::vector<std::string>{"tok"});
}

TEST(BearerToken, ExtractsTheCredential) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("bearer  abc "), "abc");
  EXPECT_EQ(BearerToken("Basic abc"), "");
  EXPECT_EQ(BearerToken("Bearer "), "");
  EXPECT_EQ(BearerToken("abc"), "");
}

TEST(TokenSet, AcceptsAnyListedTokenAndEverythingWhenEmpty) {
  EXPECT_FALSE(TokenSet().required());
  EXPECT_TRUE(TokenSet().Accepts(""));
  TokenSet set({"alpha", "beta"});
  EXPECT_TRUE(set.required());
  EXPECT_TRUE(set.Accepts("alpha"));
  EXPECT_TRUE(set.Accepts("beta"));
  EXPECT_FALSE(set.Accepts("gamma"));
  EXPECT_FALSE(set.Accepts(""));
  EXPECT_FALSE(set.Accepts("alph"));
}

TEST(IsLoopbackAddress, OnlyLoopbackHosts) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:0"));
  EXPECT_TRUE(IsLoopbackAddress("127.1.2.3:7070"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:7070"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:7070"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:7070"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:7070"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:7070"));
  EXPECT_FALSE(IsLoopbackAddress("127.0.0.1x:7070"));
  EXPECT_FALSE(IsLoopbackAddress("example.com:7070"));
}

}  // namespace
}  // namespace tagi
