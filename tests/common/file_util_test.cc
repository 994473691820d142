#include "common/file_util.h"

#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_dir.h"

namespace tagi {
namespace {

using ::tagi::testing::ScratchDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(FileUtil, WriteThenReadRoundTripsBinaryData) {
  ScratchDir dir;
  const std::string path = dir.Path("model.bin");
  std::string data;
  for (int i = 0; i < 100000; ++i) data.push_back(static_cast<char>(i * 31));
  ASSERT_TRUE(WriteFileAtomic(path, data).ok());
  auto back = ReadFile(path, data.size());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, data);
}

TEST(FileUtil, EmptyFileRoundTrips) {
  ScratchDir dir;
  const std::string path = dir.Path("empty");
  ASSERT_TRUE(WriteFileAtomic(path, "").ok());
  auto back = ReadFile(path, 0);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "");
}

TEST(FileUtil, OverwriteReplacesTheWholeFile) {
  ScratchDir dir;
  const std::string path = dir.Path("snapshot");
  ASSERT_TRUE(WriteFileAtomic(path, std::string(1000, 'a')).ok());
  ASSERT_TRUE(WriteFileAtomic(path, "short").ok());
  auto back = ReadFile(path, 1 << 20);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "short");
}

TEST(FileUtil, WriteLeavesNoTemporaryFiles) {
  ScratchDir dir;
  ASSERT_TRUE(WriteFileAtomic(dir.Path("a.json"), "one").ok());
  ASSERT_TRUE(WriteFileAtomic(dir.Path("a.json"), "two").ok());
  ASSERT_TRUE(WriteFileAtomic(dir.Path("b.json"), "three").ok());
  EXPECT_THAT(dir.List(), ElementsAre("a.json", "b.json"));
}

TEST(FileUtil, FailedWriteLeavesTargetAndNoTemporaryFile) {
  ScratchDir dir;
  // The target is a non-empty directory, so the final rename must fail.
  const std::string target = dir.Path("taken");
  std::filesystem::create_directory(target);
  dir.Write("taken/keep", "x");
  const absl::Status s = WriteFileAtomic(target, "data");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(target));
  EXPECT_THAT(dir.List(), ElementsAre("taken"));
  EXPECT_TRUE(std::filesystem::is_directory(target));
}

TEST(FileUtil, WriteIntoAMissingDirectoryIsNotFound) {
  ScratchDir dir;
  const std::string path = dir.Path("no/such/dir/file");
  const absl::Status s = WriteFileAtomic(path, "data");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr(path));
}

TEST(FileUtil, ReadAtExactlyTheLimitSucceeds) {
  ScratchDir dir;
  const std::string path = dir.Write("f", "12345");
  auto back = ReadFile(path, 5);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, "12345");
}

TEST(FileUtil, ReadOverTheLimitIsFailedPrecondition) {
  ScratchDir dir;
  const std::string path = dir.Write("big", std::string(4097, 'z'));
  auto back = ReadFile(path, 4096);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kFailedPrecondition) << back.status();
  EXPECT_THAT(back.status().message(), HasSubstr(path));
  EXPECT_THAT(back.status().message(), HasSubstr("4097"));
}

TEST(FileUtil, ReadOfAMissingFileIsNotFoundNamingThePath) {
  ScratchDir dir;
  const std::string path = dir.Path("missing.json");
  auto back = ReadFile(path, 100);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kNotFound) << back.status();
  EXPECT_THAT(back.status().message(), HasSubstr(path));
}

TEST(FileUtil, ReadOfADirectoryIsRefused) {
  ScratchDir dir;
  auto back = ReadFile(dir.path().string(), 1 << 20);
  EXPECT_EQ(back.status().code(), absl::StatusCode::kFailedPrecondition) << back.status();
  EXPECT_THAT(back.status().message(), HasSubstr("not a regular file"));
}

}  // namespace
}  // namespace tagi
