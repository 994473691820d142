#include "worker/data/cifar10.h"

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_dir.h"
#include "worker/data/loader.h"

namespace tagi::data {
namespace {

using ::tagi::testing::ScratchDir;
using ::tagi::v1::DataSpec;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// The pixel byte of record `r` (of a file numbered `file`) at channel c,
// row y, column x: distinct enough that a wrong order or offset shows.
uint8_t Pixel(int file, int r, size_t c, size_t y, size_t x) {
  return static_cast<uint8_t>(file * 37 + r * 11 + c * 83 + y * 7 + x * 3);
}

// Records in the data set's binary layout: label, then R, G, B planes.
std::string Records(int file, int count, int first_label = 0) {
  std::string out;
  for (int r = 0; r < count; ++r) {
    out.push_back(static_cast<char>((first_label + r) % kCifar10Classes));
    for (size_t c = 0; c < kCifar10Channels; ++c) {
      for (size_t y = 0; y < kCifar10Side; ++y) {
        for (size_t x = 0; x < kCifar10Side; ++x) {
          out.push_back(static_cast<char>(Pixel(file, r, c, y, x)));
        }
      }
    }
  }
  return out;
}

// A directory with `per_file` records in each training file (file k's
// labels start at k) and `test` records in test_batch.bin.
void WriteDataSet(const ScratchDir& dir, int per_file, int test) {
  for (int k = 1; k <= 5; ++k) {
    dir.Write("data_batch_" + std::to_string(k) + ".bin", Records(k, per_file, k));
  }
  dir.Write("test_batch.bin", Records(0, test, 0));
}

DataSpec Cifar10Spec(const ScratchDir& dir) {
  DataSpec spec;
  spec.set_kind(DataSpec::CIFAR10);
  spec.set_cifar10_dir(dir.path().string());
  return spec;
}

std::string Message(const absl::Status& s) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(Cifar10, ReadsLabelsAndPixelsInFileOrderScaledToOne) {
  ScratchDir dir;
  WriteDataSet(dir, 3, 2);
  absl::StatusOr<TrainTest> d = LoadCifar10(dir.path().string(), 0, 0);
  ASSERT_TRUE(d.ok()) << d.status();
  const Dataset& train = d->train;
  ASSERT_EQ(train.num_samples, 15u);
  EXPECT_EQ(train.input_dim, 3072u);
  EXPECT_EQ(train.num_classes, 10);
  EXPECT_TRUE(train.is_classification());
  ASSERT_EQ(train.inputs.size(), 15u * 3072);
  // Files in order 1..5, records in order within each.
  for (int k = 1; k <= 5; ++k) {
    for (int r = 0; r < 3; ++r) {
      const size_t sample = static_cast<size_t>((k - 1) * 3 + r);
      EXPECT_EQ(train.labels[sample], (k + r) % 10) << "sample " << sample;
      // CHW: channel c, row y, column x at c*1024 + y*32 + x.
      for (const auto [c, y, x] :
           {std::array<size_t, 3>{0, 0, 0}, {0, 5, 17}, {1, 31, 0}, {2, 12, 31}, {2, 31, 31}}) {
        EXPECT_FLOAT_EQ(train.inputs[sample * 3072 + c * 1024 + y * 32 + x],
                        Pixel(k, r, c, y, x) / 255.0f)
            << "sample " << sample << " c " << c << " y " << y << " x " << x;
      }
    }
  }
  ASSERT_EQ(d->test.num_samples, 2u);
  EXPECT_EQ(d->test.labels, (std::vector<int32_t>{0, 1}));
  EXPECT_FLOAT_EQ(d->test.inputs[3071], Pixel(0, 0, 2, 31, 31) / 255.0f);
}

TEST(Cifar10, ExtremePixelValuesMapToZeroAndOne) {
  ScratchDir dir;
  std::string record(kCifar10RecordBytes, '\0');
  record[0] = 9;
  record[1] = static_cast<char>(255);
  const std::string path = dir.Write("one.bin", record);
  absl::StatusOr<Dataset> d = ReadCifar10({path}, 0);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->labels[0], 9);
  EXPECT_EQ(d->inputs[0], 1.0f);
  EXPECT_EQ(d->inputs[1], 0.0f);
}

TEST(Cifar10, LimitsKeepTheFirstRecordsAcrossFiles) {
  ScratchDir dir;
  WriteDataSet(dir, 4, 5);
  absl::StatusOr<TrainTest> d = LoadCifar10(dir.path().string(), 6, 3);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->train.num_samples, 6u);
  EXPECT_EQ(d->train.inputs.size(), 6u * 3072);
  // Samples 4 and 5 are the first two records of data_batch_2.bin.
  EXPECT_EQ(d->train.labels[4], 2);
  EXPECT_FLOAT_EQ(d->train.inputs[5 * 3072 + 1], Pixel(2, 1, 0, 0, 1) / 255.0f);
  EXPECT_EQ(d->test.num_samples, 3u);
}

TEST(Cifar10, AWrongSizedFileIsNamedWithItsSize) {
  ScratchDir dir;
  WriteDataSet(dir, 2, 1);
  // Five bytes short of 10 records, as in a truncated download.
  dir.Write("data_batch_3.bin", Records(3, 10).substr(0, 10 * 3073 - 5));
  const std::string msg = Message(LoadCifar10(dir.path().string(), 0, 0).status());
  EXPECT_THAT(msg, HasSubstr(dir.Path("data_batch_3.bin") +
                             ": 30725 bytes is not a whole number of 3073-byte records"));
  EXPECT_THAT(msg, Not(HasSubstr("data_batch_2.bin")));
}

TEST(Cifar10, ABadFileIsReportedEvenBeyondTheLimit) {
  ScratchDir dir;
  WriteDataSet(dir, 2, 1);
  dir.Write("data_batch_5.bin", Records(5, 2) + "xyz");
  const std::string msg = Message(LoadCifar10(dir.path().string(), 1, 1).status());
  EXPECT_THAT(msg, HasSubstr(dir.Path("data_batch_5.bin") + ": 6149 bytes is not a whole number"));
}

TEST(Cifar10, AnEmptyFileIsRefused) {
  ScratchDir dir;
  WriteDataSet(dir, 2, 1);
  dir.Write("test_batch.bin", "");
  EXPECT_THAT(Message(LoadCifar10(dir.path().string(), 0, 0).status()),
              HasSubstr(dir.Path("test_batch.bin") + ": empty file; expected one or more "
                                                     "3073-byte records"));
}

TEST(Cifar10, AFileLargerThanTheLimitIsRefusedBeforeReading) {
  ScratchDir dir;
  const std::string path = dir.Path("huge.bin");
  // A sparse file: its size is checked, its bytes are never read.
  {
    std::ofstream out(path, std::ios::binary);
    out.seekp(static_cast<std::streamoff>(kMaxCifar10FileBytes + kCifar10RecordBytes - 1));
    out.put('\0');
  }
  EXPECT_THAT(Message(ReadCifar10({path}, 1).status()),
              AllOf(HasSubstr(path + ": "), HasSubstr("at most 67108864")));
}

TEST(Cifar10, ALabelAboveNineNamesTheRecord) {
  ScratchDir dir;
  WriteDataSet(dir, 3, 1);
  std::string records = Records(2, 3);
  records[2 * kCifar10RecordBytes] = 10;
  dir.Write("data_batch_2.bin", records);
  EXPECT_THAT(Message(LoadCifar10(dir.path().string(), 0, 0).status()),
              HasSubstr(dir.Path("data_batch_2.bin") +
                        ": record 2 (byte offset 6146) has a label above 9; CIFAR-10 labels are 0..9"));
}

TEST(Cifar10, EveryMissingFileIsNamed) {
  ScratchDir dir;
  dir.Write("data_batch_1.bin", Records(1, 1));
  dir.Write("data_batch_4.bin", Records(4, 1));
  const std::string msg = Message(LoadCifar10(dir.path().string(), 0, 0).status());
  for (const char* name :
       {"data_batch_2.bin", "data_batch_3.bin", "data_batch_5.bin", "test_batch.bin"}) {
    EXPECT_THAT(msg, HasSubstr(dir.Path(name) + ": file does not exist")) << name;
  }
  EXPECT_THAT(msg, AllOf(Not(HasSubstr("data_batch_1.bin")), Not(HasSubstr("data_batch_4.bin"))));
}

// --- Through LoadData and CheckDataFiles ---------------------------------------

TEST(Cifar10Loader, CheckDataFilesNamesEveryMissingFile) {
  ScratchDir dir;
  WriteDataSet(dir, 1, 1);
  std::filesystem::remove(dir.Path("data_batch_2.bin"));
  std::filesystem::remove(dir.Path("test_batch.bin"));
  const std::string msg = Message(CheckDataFiles(Cifar10Spec(dir)));
  EXPECT_THAT(
      msg, HasSubstr("data.cifar10_dir: file " + dir.Path("data_batch_2.bin") + " does not exist"));
  EXPECT_THAT(
      msg, HasSubstr("data.cifar10_dir: file " + dir.Path("test_batch.bin") + " does not exist"));
  EXPECT_THAT(msg, Not(HasSubstr("data_batch_1.bin")));
  EXPECT_EQ(LoadData(Cifar10Spec(dir), 0).status(), CheckDataFiles(Cifar10Spec(dir)));
}

TEST(Cifar10Loader, AMissingOrWrongDirectoryIsOneProblem) {
  DataSpec spec;
  spec.set_kind(DataSpec::CIFAR10);
  EXPECT_EQ(Message(CheckDataFiles(spec)),
            "data.cifar10_dir: no path given (required for CIFAR10)");
  ScratchDir dir;
  spec.set_cifar10_dir(dir.Path("nowhere"));
  EXPECT_EQ(Message(CheckDataFiles(spec)),
            "data.cifar10_dir: " + dir.Path("nowhere") + " does not exist");
  spec.set_cifar10_dir(dir.Write("a-file", "x"));
  EXPECT_EQ(Message(CheckDataFiles(spec)),
            "data.cifar10_dir: " + dir.Path("a-file") + " is not a directory");
}

TEST(Cifar10Loader, StandardisesBothSplitsWithTheFixedPerChannelValues) {
  ScratchDir dir;
  WriteDataSet(dir, 2, 2);
  DataSpec spec = Cifar10Spec(dir);
  spec.set_train_limit(7);
  spec.set_test_limit(1);
  absl::StatusOr<LoadedData> d = LoadData(spec, 0);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->data.train.num_samples, 7u);
  EXPECT_EQ(d->data.test.num_samples, 1u);
  EXPECT_TRUE(d->target.empty());
  // One entry per column (stored so in model files), constant per channel.
  ASSERT_EQ(d->input.mean.size(), 3072u);
  ASSERT_EQ(d->input.stddev.size(), 3072u);
  const float mean[3] = {0.4914f, 0.4822f, 0.4465f};
  const float stddev[3] = {0.2470f, 0.2435f, 0.2616f};
  for (size_t c = 0; c < 3; ++c) {
    for (size_t col : {c * 1024, c * 1024 + 513, c * 1024 + 1023}) {
      EXPECT_EQ(d->input.mean[col], mean[c]) << col;
      EXPECT_EQ(d->input.stddev[col], stddev[c]) << col;
    }
  }
  // Both splits, each value (pixel / 255 - mean_c) / std_c, not fitted.
  for (const auto [sample, file, record, c, y, x] :
       {std::array<size_t, 6>{0, 1, 0, 0, 0, 0}, {3, 2, 1, 1, 9, 30}, {6, 4, 0, 2, 31, 31}}) {
    const float raw = Pixel(static_cast<int>(file), static_cast<int>(record), c, y, x) / 255.0f;
    EXPECT_NEAR(d->data.train.inputs[sample * 3072 + c * 1024 + y * 32 + x],
                (raw - mean[c]) / stddev[c], 1e-5)
        << "train sample " << sample;
  }
  const float raw = Pixel(0, 0, 1, 2, 3) / 255.0f;
  EXPECT_NEAR(d->data.test.inputs[1024 + 2 * 32 + 3], (raw - mean[1]) / stddev[1], 1e-5);

  spec.set_standardize(false);
  absl::StatusOr<LoadedData> raw_data = LoadData(spec, 0);
  ASSERT_TRUE(raw_data.ok()) << raw_data.status();
  EXPECT_TRUE(raw_data->input.empty());
  EXPECT_FLOAT_EQ(raw_data->data.test.inputs[1024 + 2 * 32 + 3], raw);
}

TEST(Cifar10Loader, TheUnknownKindMessageListsCifar10) {
  DataSpec spec;
  EXPECT_THAT(Message(CheckDataFiles(spec)), HasSubstr("TOY_CUBIC, CIFAR10"));
}

}  // namespace
}  // namespace tagi::data
