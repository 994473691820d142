#include "common/progress_bar.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The text between the brackets.
std::string BarOf(const std::string& line) {
  const size_t open = line.find('[');
  const size_t close = line.find(']');
  if (open == std::string::npos || close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

TEST(RenderProgressBar, EmptyAtTheStart) {
  const std::string line =
      RenderProgressBar("epoch 1/3", 0, 100, 0.0, absl::InfiniteDuration(), 10);
  EXPECT_THAT(line, StartsWith("epoch 1/3 ["));
  EXPECT_EQ(BarOf(line), ">         ");
  EXPECT_THAT(line, AllOf(HasSubstr("   0%"), HasSubstr(" 0/100 "), HasSubstr("ETA ?")));
}

TEST(RenderProgressBar, NoEtaBeforeTheFirstStepHasARate) {
  // A job reports ETA 0 until its first step; that is not "done in 0 s".
  EXPECT_THAT(RenderProgressBar("x", 0, 100, 0.0, absl::ZeroDuration()), EndsWith("ETA ?"));
  EXPECT_THAT(RenderProgressBar("x", 10, 100, 0.0, absl::ZeroDuration()), EndsWith("ETA ?"));
  EXPECT_THAT(RenderProgressBar("x", 10, 100, 5.0, absl::Seconds(18)), EndsWith("ETA 18.0s"));
}

TEST(RenderProgressBar, HalfFilledHalfWay) {
  const std::string line =
      RenderProgressBar("epoch 2/3", 50, 100, 20100.0, absl::Milliseconds(1400), 10);
  EXPECT_EQ(BarOf(line), "=====>    ");
  EXPECT_THAT(line, AllOf(HasSubstr("  50%"), HasSubstr(" 50/100 "), HasSubstr("20.1k samples/s"),
                          HasSubstr("ETA 1.4s")));
}

TEST(RenderProgressBar, FullAtTheEnd) {
  const std::string line =
      RenderProgressBar("epoch 3/3", 60000, 60000, 1.5e6, absl::ZeroDuration(), 10);
  EXPECT_EQ(BarOf(line), "==========");
  EXPECT_THAT(line, AllOf(HasSubstr(" 100%"), HasSubstr(" 60000/60000 "),
                          HasSubstr("1.50M samples/s"), EndsWith("ETA 0.0s")));
}

TEST(RenderProgressBar, MatchesTheDocumentedLayout) {
  EXPECT_EQ(RenderProgressBar("epoch 1/3", 31200, 60000, 20100.0, absl::Milliseconds(1400)),
            "epoch 1/3 [===============>              ]  52% 31200/60000  20.1k samples/s"
            "  ETA 1.4s");
}

TEST(RenderProgressBar, BarKeepsItsWidthAndFillsProportionally) {
  for (int width : {1, 10, 30, 50}) {
    for (size_t done = 0; done <= 40; ++done) {
      const std::string bar = BarOf(RenderProgressBar("x", done, 40, 1.0, absl::Seconds(1), width));
      ASSERT_EQ(bar.size(), static_cast<size_t>(width)) << done << "/40 width " << width;
      const size_t filled = bar.find_first_not_of('=');
      EXPECT_EQ(filled == std::string::npos ? bar.size() : filled, done * width / 40)
          << done << "/40 width " << width;
    }
  }
}

TEST(RenderProgressBar, OvershootIsClampedToAFullBar) {
  const std::string line = RenderProgressBar("x", 150, 100, 1.0, absl::Seconds(1), 10);
  EXPECT_EQ(BarOf(line), "==========");
  EXPECT_THAT(line, HasSubstr("100%"));
}

// The percentage is the integer part of done/total*100: 29 of 100 is 29%.
TEST(RenderProgressBar, PercentageIsExactForEveryCount) {
  for (size_t total : {100u, 1000u, 60000u}) {
    for (size_t done = 0; done <= total; done += total / 100) {
      const std::string expected = absl::StrFormat("%3d%% %d/%d", done * 100 / total, done, total);
      EXPECT_THAT(RenderProgressBar("x", done, total, 1.0, absl::Seconds(1)), HasSubstr(expected));
    }
  }
}

TEST(RenderProgressBar, UnknownOrNegativeEtaIsAQuestionMark) {
  EXPECT_THAT(RenderProgressBar("x", 1, 2, 1.0, absl::InfiniteDuration()), EndsWith("ETA ?"));
  EXPECT_THAT(RenderProgressBar("x", 1, 2, 1.0, absl::Seconds(-3)), EndsWith("ETA ?"));
  EXPECT_THAT(RenderProgressBar("x", 1, 2, 1.0, absl::Seconds(90)), EndsWith("ETA 90.0s"));
}

TEST(HumanCount, UsesCompactUnits) {
  EXPECT_EQ(HumanCount(0), "0");
  EXPECT_EQ(HumanCount(999), "999");
  EXPECT_EQ(HumanCount(9999), "9999");
  EXPECT_EQ(HumanCount(20100), "20.1k");
  EXPECT_EQ(HumanCount(1.23e6), "1.23M");
  EXPECT_EQ(HumanCount(4.5e9), "4500.00M");
}

TEST(HumanCount, NonFiniteIsAQuestionMark) {
  EXPECT_EQ(HumanCount(std::numeric_limits<double>::infinity()), "?");
  EXPECT_EQ(HumanCount(std::numeric_limits<double>::quiet_NaN()), "?");
}

// A FILE* whose contents a test can read back.
class MemoryFile {
 public:
  MemoryFile() : file_(open_memstream(&buf_, &size_)) {}
  ~MemoryFile() {
    std::fclose(file_);
    std::free(buf_);
  }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  std::FILE* get() const { return file_; }
  std::string contents() {
    std::fflush(file_);
    return std::string(buf_, size_);
  }

 private:
  char* buf_ = nullptr;
  size_t size_ = 0;
  std::FILE* file_;
};

class ProgressPrinterTest : public ::testing::Test {
 protected:
  MemoryFile out_;
  FakeClock clock_;
  ProgressPrinter printer_{out_.get(), clock_, absl::Milliseconds(100)};
};

TEST_F(ProgressPrinterTest, FirstUpdateDrawsWithACarriageReturn) {
  printer_.Update("step 1");
  EXPECT_EQ(out_.contents(), "\rstep 1");
}

TEST_F(ProgressPrinterTest, UpdateWithinTheIntervalDoesNotDraw) {
  printer_.Update("step 1");
  clock_.Advance(absl::Milliseconds(99));
  printer_.Update("step 2");
  EXPECT_EQ(out_.contents(), "\rstep 1");
}

TEST_F(ProgressPrinterTest, UpdateAfterTheIntervalDraws) {
  printer_.Update("step 1");
  clock_.Advance(absl::Milliseconds(50));
  printer_.Update("step 2");  // skipped; does not restart the interval
  clock_.Advance(absl::Milliseconds(50));
  printer_.Update("step 3");
  EXPECT_EQ(out_.contents(), "\rstep 1\rstep 3");
}

TEST_F(ProgressPrinterTest, ForceDrawsWithinTheInterval) {
  printer_.Update("step 1");
  printer_.Update("step 2", /*force=*/true);
  EXPECT_EQ(out_.contents(), "\rstep 1\rstep 2");
}

TEST_F(ProgressPrinterTest, ShorterLineErasesTheTailOfTheLongerOne) {
  printer_.Update("long line!");
  printer_.Update("short", /*force=*/true);
  EXPECT_EQ(out_.contents(), "\rlong line!\rshort     ");
}

TEST_F(ProgressPrinterTest, FinishEndsTheLine) {
  printer_.Update("done");
  printer_.Finish();
  EXPECT_EQ(out_.contents(), "\rdone\n");
}

TEST_F(ProgressPrinterTest, FinishWithoutDrawingWritesNothing) {
  printer_.Finish();
  EXPECT_EQ(out_.contents(), "");
  printer_.Update("a");
  printer_.Finish();
  printer_.Finish();  // the line is already ended
  EXPECT_EQ(out_.contents(), "\ra\n");
}

TEST_F(ProgressPrinterTest, NextLineAfterFinishDrawsAtOnceWithoutPadding) {
  printer_.Update("epoch 1 done, long");
  printer_.Finish();
  printer_.Update("epoch 2");
  EXPECT_EQ(out_.contents(), "\repoch 1 done, long\n\repoch 2");
}

}  // namespace
}  // namespace tagi

namespace tagi {
namespace {

TEST(Counted, PutsTheNounInTheNumberOfTheCount) {
  EXPECT_EQ(Counted(1, "worker"), "1 worker");
  EXPECT_EQ(Counted(2, "idle worker"), "2 idle workers");
  EXPECT_EQ(Counted(0, "epoch"), "0 epochs");
}

}  // namespace
}  // namespace tagi
