#include "coordinator/snapshot_store.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/snapshot.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_dir.h"

namespace tagi {
namespace {

namespace fs = std::filesystem;

Snapshot At(const std::string& job_id, uint64_t global_step) {
  Snapshot s;
  s.job_id = job_id;
  s.generation = 1;
  s.global_step = global_step;
  s.parameters = {1.0f, 2.0f, static_cast<float>(global_step), 0.5f};
  s.architecture = "arch";
  return s;
}

std::string Bytes(const std::string& job_id, uint64_t global_step) {
  return EncodeSnapshot(At(job_id, global_step));
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteAll(const fs::path& p, const std::string& data) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

std::vector<std::string> DirEntries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// ---- The pure decision -------------------------------------------------

TEST(ChooseSnapshot, PicksHighestStepWhateverTheOrder) {
  std::vector<SnapshotCandidate> c;
  c.push_back({SnapshotFileName(20), At("j", 20)});
  c.push_back({SnapshotFileName(30), At("j", 30)});
  c.push_back({SnapshotFileName(10), At("j", 10)});
  auto choice = ChooseSnapshot("j", c);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->index, 1u);
  EXPECT_TRUE(choice->skipped.empty());
}

TEST(ChooseSnapshot, OrdersByStepNotByNameBeyondTwelveDigits) {
  std::vector<SnapshotCandidate> c;
  c.push_back({SnapshotFileName(2'000'000'000'000), At("j", 2'000'000'000'000)});
  c.push_back({SnapshotFileName(999'999'999'999), At("j", 999'999'999'999)});
  auto choice = ChooseSnapshot("j", c);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->index, 0u);
}

TEST(ChooseSnapshot, SkipsCorruptWrongJobAndMisnamedNewerOnesWithReasons) {
  std::vector<SnapshotCandidate> c;
  c.push_back({SnapshotFileName(10), At("j", 10)});
  c.push_back({SnapshotFileName(40), absl::DataLossError("checksum mismatch")});
  c.push_back({SnapshotFileName(30), At("other", 30)});
  c.push_back({SnapshotFileName(20), At("j", 25)});
  auto choice = ChooseSnapshot("j", c);
  ASSERT_TRUE(choice.ok()) << choice.status();
  EXPECT_EQ(choice->index, 0u);
  ASSERT_EQ(choice->skipped.size(), 3u);
  EXPECT_NE(choice->skipped[0].find(SnapshotFileName(40)), std::string::npos);
  EXPECT_NE(choice->skipped[0].find("checksum mismatch"), std::string::npos);
  EXPECT_NE(choice->skipped[1].find("other"), std::string::npos);
  EXPECT_NE(choice->skipped[2].find("name says 20"), std::string::npos);
}

TEST(ChooseSnapshot, NotFoundListsEveryRejection) {
  std::vector<SnapshotCandidate> c;
  c.push_back({SnapshotFileName(10), absl::DataLossError("truncated")});
  c.push_back({"notes.txt", At("j", 3)});
  auto choice = ChooseSnapshot("j", c);
  EXPECT_EQ(choice.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(choice.status().message().find("truncated"), std::string::npos);
  EXPECT_NE(choice.status().message().find("notes.txt"), std::string::npos);
  EXPECT_EQ(ChooseSnapshot("j", {}).status().code(), absl::StatusCode::kNotFound);
}

TEST(SnapshotFileName, IsZeroPaddedAndParsesBack) {
  EXPECT_EQ(SnapshotFileName(42), "snapshot-000000000042.tagisnap");
  EXPECT_EQ(ParseSnapshotFileName(SnapshotFileName(42)), 42u);
  EXPECT_EQ(ParseSnapshotFileName(SnapshotFileName(~uint64_t{0})), ~uint64_t{0});
  EXPECT_FALSE(ParseSnapshotFileName("snapshot-42.tagisnap").has_value());
  EXPECT_FALSE(ParseSnapshotFileName("snapshot-0000000000042.tagisnap").has_value());
  EXPECT_FALSE(ParseSnapshotFileName(".snapshot-000000000042.tagisnap.tmp.ab12CD").has_value());
  EXPECT_FALSE(ParseSnapshotFileName("snapshot-00000000004x.tagisnap").has_value());
}

TEST(ValidateSnapshotJobId, RefusesPathCharacters) {
  EXPECT_TRUE(ValidateSnapshotJobId("job-12").ok());
  EXPECT_TRUE(ValidateSnapshotJobId("A_b.c-9").ok());
  const std::vector<std::string> bad_ids = {"",
                                            ".",
                                            "..",
                                            "../x",
                                            "a/b",
                                            "/abs",
                                            ".hidden",
                                            "a\\b",
                                            std::string("a\0b", 3),
                                            std::string(kMaxJobIdBytes + 1, 'a')};
  for (const std::string& bad : bad_ids) {
    EXPECT_EQ(ValidateSnapshotJobId(bad).code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// ---- The directory-backed store ----------------------------------------

TEST(SnapshotStore, PutThenLatestRoundTrips) {
  testing::ScratchDir tmp;
  SnapshotStore store(tmp.path().string(), 3);
  ASSERT_TRUE(store.Put("job-1", 5, Bytes("job-1", 5)).ok());
  auto latest = store.Latest("job-1");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->snapshot.global_step, 5u);
  EXPECT_EQ(latest->snapshot.parameters, At("job-1", 5).parameters);
  EXPECT_EQ(latest->path, (tmp.path() / "job-1" / SnapshotFileName(5)).string());
  EXPECT_TRUE(latest->skipped.empty());
}

TEST(SnapshotStore, LatestOfUnknownJobIsNotFound) {
  testing::ScratchDir tmp;
  SnapshotStore store(tmp.path().string(), 3);
  EXPECT_EQ(store.Latest("job-9").status().code(), absl::StatusCode::kNotFound);
}

TEST(SnapshotStore, KeepsOnlyTheLastN) {
  testing::ScratchDir tmp;
  SnapshotStore store(tmp.path().string(), 2);
  for (uint64_t step : {10, 20, 30, 40}) {
    ASSERT_TRUE(store.Put("j", step, Bytes("j", step)).ok());
  }
  auto names = store.List("j");
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(*names, (std::vector<std::string>{SnapshotFileName(30), SnapshotFileName(40)}));
  EXPECT_EQ(store.Latest("j")->snapshot.global_step, 40u);
}

TEST(SnapshotStore, PruningIsPerJob) {
  testing::ScratchDir tmp;
  SnapshotStore store(tmp.path().string(), 1);
  ASSERT_TRUE(store.Put("a", 1, Bytes("a", 1)).ok());
  ASSERT_TRUE(store.Put("b", 2, Bytes("b", 2)).ok());
  EXPECT_EQ(store.List("a")->size(), 1u);
  EXPECT_EQ(store.List("b")->size(), 1u);
}

TEST(SnapshotStore, CorruptNewestOnDiskFallsBackToPreviousAndSaysWhy) {
  testing::ScratchDir tmp;
  SnapshotStore store(tmp.path().string(), 3);
  ASSERT_TRUE(store.Put("j", 10, Bytes("j", 10)).ok());
  ASSERT_TRUE(store.Put("j", 20, Bytes("j", 20)).ok());
  const fs::path newest = tmp.path() / "j" / SnapshotFileName(20);
  std::string bytes = ReadAll(newest);
  bytes[bytes.size() / 2] ^= 0x10;
  WriteAll(newest, bytes);

  auto latest = store.Latest("j");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->snapshot.global_step, 10u);
  ASSERT_EQ(latest->skipped.size(), 1u);
  EXPECT_NE(latest->skipped[0].find(SnapshotFileName(20)), std::string::npos);
  EXPECT_NE(latest->skipped[0].find("checksum mismatch"), std::string::npos) << latest->skipped[0];
}

TEST(SnapshotStore, TruncatedNewestOnDiskFallsBackToPrevious) {
  testing::ScratchDir tmp;
  SnapshotStore store(tmp.path().string(), 3);
  ASSERT_TRUE(store.Put("j", 10, Bytes("j", 10)).ok());
  ASSERT_TRUE(store.Put("j", 20, Bytes("j", 20)).ok());
  const fs::path newest = tmp.path() / "j" / SnapshotFileName(20);
  fs::resize_file(newest, fs::file_size(newest) - 7);

  auto latest = store.Latest("j");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->snapshot.global_step, 10u);
  ASSERT_EQ(latest->skipped.size(), 1u);
  EXPECT_NE(latest->skipped[0].find(SnapshotFileName(20)), std::string::npos);
  EXPECT_NE(latest->skipped[0].find("DATA_LOSS"), std::string::npos) << latest->skipped[0];
}

TEST(SnapshotStore, AllCorruptIsNotFoundNamingTheFiles) {
  testing::ScratchDir tmp;
  SnapshotStore store(tmp.path().string(), 3);
  ASSERT_TRUE(store.Put("j", 10, Bytes("j", 10)).ok());
  fs::resize_file(tmp.path() / "j" / SnapshotFileName(10), 3);
  auto latest = store.Latest("j");
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(latest.status().message().find(SnapshotFileName(10)), std::string::npos);
}

TEST(SnapshotStore, IgnoresForeignAndTemporaryFiles) {
  testing::ScratchDir tmp;
  SnapshotStore store(tmp.path().string(), 3);
  ASSERT_TRUE(store.Put("j", 10, Bytes("j", 10)).ok());
  WriteAll(tmp.path() / "j" / ".snapshot-000000000099.tagisnap.tmp.AbCdEf", "partial");
  WriteAll(tmp.path() / "j" / "README", "hello");
  auto latest = store.Latest("j");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->snapshot.global_step, 10u);
  EXPECT_TRUE(latest->skipped.empty());
}

TEST(SnapshotStore, AtomicWritesLeaveNoTemporaryFiles) {
  testing::ScratchDir tmp;
  SnapshotStore store(tmp.path().string(), 2);
  for (uint64_t step = 1; step <= 5; ++step) {
    ASSERT_TRUE(store.Put("j", step, Bytes("j", step)).ok());
  }
  EXPECT_EQ(DirEntries(tmp.path()), (std::vector<std::string>{"j"}));
  EXPECT_EQ(DirEntries(tmp.path() / "j"),
            (std::vector<std::string>{SnapshotFileName(4), SnapshotFileName(5)}));
}

TEST(SnapshotStore, RefusesCorruptUploadsAndWritesNothing) {
  testing::ScratchDir tmp;
  SnapshotStore store(tmp.path().string(), 3);
  std::string bytes = Bytes("j", 10);
  bytes[bytes.size() - 9] ^= 1;
  EXPECT_EQ(store.Put("j", 10, bytes).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(store.Put("j", 10, bytes.substr(0, 30)).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(store.Put("j", 10, "").code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(DirEntries(tmp.path()).empty());
}

TEST(SnapshotStore, RefusesUploadsThatDisagreeWithTheirArguments) {
  testing::ScratchDir tmp;
  SnapshotStore store(tmp.path().string(), 3);
  EXPECT_EQ(store.Put("j", 10, Bytes("other", 10)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Put("j", 11, Bytes("j", 10)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(DirEntries(tmp.path()).empty());
}

TEST(SnapshotStore, RefusesBadJobIdsWithoutTouchingTheDisk) {
  testing::ScratchDir tmp;
  const fs::path root = tmp.path() / "store";
  SnapshotStore store(root.string(), 3);
  for (const std::string bad : {"", "..", "../x", "a/b", "/etc"}) {
    EXPECT_EQ(store.Put(bad, 1, Bytes(bad, 1)).code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store.Latest(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(store.List(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(fs::exists(root));
  EXPECT_EQ(DirEntries(tmp.path()), std::vector<std::string>{});
}

}  // namespace
}  // namespace tagi
