// JobLog: numbering, the bounds in lines and bytes, reading from a seq, and
// the state-dir encoding (and bad encodings refused).
#include "coordinator/job_log.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tagi::coordinator {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Texts(const tagi::v1::JobLogs& logs) {
  std::vector<std::string> out;
  for (const auto& l : logs.lines()) out.push_back(l.text());
  return out;
}

TEST(JobLog, NumbersLinesAndReadsFromAnySeq) {
  JobLog log;
  log.Append(1000, 0, 1, "w-1", "a");
  log.Append(1001, 1, 1, "w-2", "b");
  log.Append(1002, 0, 2, "w-1", "c");
  tagi::v1::JobLogs all = log.Since(0, 0);
  EXPECT_THAT(Texts(all), ::testing::ElementsAre("a", "b", "c"));
  EXPECT_EQ(all.lines(1).seq(), 2u);
  EXPECT_EQ(all.lines(1).rank(), 1u);
  EXPECT_EQ(all.lines(1).worker_id(), "w-2");
  EXPECT_EQ(all.lines(2).generation(), 2u);
  EXPECT_EQ(all.lines(0).time_ms(), 1000);
  EXPECT_EQ(all.next(), 3u);
  EXPECT_THAT(Texts(log.Since(1, 1)), ::testing::ElementsAre("b"));
  EXPECT_EQ(log.Since(1, 1).next(), 2u);
  EXPECT_TRUE(log.Since(3, 0).lines().empty());
  EXPECT_EQ(log.Since(3, 0).next(), 3u);
  EXPECT_EQ(log.Since(99, 0).next(), 99u);  // a follower ahead stays where it is
}

TEST(JobLog, KeepsTheNewestWithinItsBoundsAndCountsTheRest) {
  JobLog by_lines({.max_lines = 3});
  for (int i = 0; i < 5; ++i) by_lines.Append(0, 0, 1, "w", std::to_string(i));
  EXPECT_THAT(Texts(by_lines.Since(0, 0)), ::testing::ElementsAre("2", "3", "4"));
  EXPECT_EQ(by_lines.dropped(), 2u);
  EXPECT_EQ(by_lines.Since(0, 0).lines(0).seq(), 3u);  // seqs are not reused

  JobLog by_bytes({.max_bytes = 10});
  by_bytes.Append(0, 0, 1, "w", "12345");
  by_bytes.Append(0, 0, 1, "w", "67890");
  by_bytes.Append(0, 0, 1, "w", "x");
  EXPECT_THAT(Texts(by_bytes.Since(0, 0)), ::testing::ElementsAre("67890", "x"));
  EXPECT_EQ(by_bytes.bytes(), 6u);
  by_bytes.AddDropped(7);
  EXPECT_EQ(by_bytes.Since(0, 0).dropped(), 8u);

  JobLog cut({.max_line_bytes = 4});
  cut.Append(0, 0, 1, "w", "abcdefgh");
  EXPECT_EQ(cut.Since(0, 0).lines(0).text(), "abcd [cut]");

  JobLog reads({.max_read_lines = 2});
  for (int i = 0; i < 5; ++i) reads.Append(0, 0, 1, "w", std::to_string(i));
  EXPECT_EQ(reads.Since(0, 0).lines_size(), 2);
  EXPECT_EQ(reads.Since(0, 100).lines_size(), 2);
}

TEST(JobLog, RoundTripsThroughItsEncodingAndRefusesBadOnes) {
  JobLog log({.max_lines = 3});
  for (int i = 0; i < 5; ++i) log.Append(i, i % 2, 1, "w", std::to_string(i));
  auto back = JobLog::Decode(log.Encode());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->Since(0, 0).SerializeAsString(), log.Since(0, 0).SerializeAsString());
  back->Append(9, 0, 1, "w", "next");
  EXPECT_EQ(back->Since(0, 0).lines(3).seq(), 6u);  // numbering goes on
  // Smaller limits trim what is read.
  auto trimmed = JobLog::Decode(log.Encode(), {.max_lines = 1});
  ASSERT_TRUE(trimmed.ok());
  EXPECT_THAT(Texts(trimmed->Since(0, 0)), ::testing::ElementsAre("4"));
  EXPECT_EQ(trimmed->dropped(), 4u);

  EXPECT_TRUE(absl::IsDataLoss(JobLog::Decode("\xff\xff\xff garbage").status()));
  tagi::v1::JobLogs disordered;
  disordered.add_lines()->set_seq(2);
  disordered.add_lines()->set_seq(1);
  disordered.set_next(3);
  auto bad = JobLog::Decode(disordered.SerializeAsString());
  EXPECT_TRUE(absl::IsDataLoss(bad.status()));
  EXPECT_THAT(bad.status().message(), HasSubstr("out of order"));
}

}  // namespace
}  // namespace tagi::coordinator
