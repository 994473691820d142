#include "worker/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_dir.h"

namespace tagi::data {
namespace {

using ::tagi::testing::ScratchDir;
using ::testing::HasSubstr;
using ::testing::Not;

// Serialises an IDX file of unsigned bytes (type 0x08).
std::string MakeIdx(const std::vector<uint32_t>& dims,
                    const std::vector<uint8_t>& data, uint8_t type = 0x08) {
  std::string out = {0, 0, static_cast<char>(type),
                     static_cast<char>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) {
      out.push_back(static_cast<char>((d >> shift) & 0xff));
    }
  }
  out.append(data.begin(), data.end());
  return out;
}

std::string WriteGzip(const ScratchDir& dir, const std::string& name,
                      const std::string& contents) {
  const std::string path = dir.Path(name);
  gzFile f = gzopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  EXPECT_EQ(gzwrite(f, contents.data(), static_cast<unsigned>(contents.size())),
            static_cast<int>(contents.size()));
  gzclose(f);
  return path;
}

std::vector<uint8_t> Iota(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7);
  return v;
}

TEST(ReadIdx, RawRoundTrip) {
  ScratchDir dir;
  const std::vector<uint8_t> data = Iota(24);
  const std::string path = dir.Write("a.idx", MakeIdx({2, 3, 4}, data));
  absl::StatusOr<IdxArray> idx = ReadIdx(path);
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->dims, (std::vector<uint32_t>{2, 3, 4}));
  EXPECT_EQ(idx->data, data);
}

TEST(ReadIdx, GzipRoundTrip) {
  ScratchDir dir;
  const std::vector<uint8_t> data = Iota(30);
  const std::string path = WriteGzip(dir, "a.idx.gz", MakeIdx({5, 6}, data));
  absl::StatusOr<IdxArray> idx = ReadIdx(path);
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->dims, (std::vector<uint32_t>{5, 6}));
  EXPECT_EQ(idx->data, data);
}

TEST(ReadIdx, MissingFileIsNotFoundNamingPath) {
  ScratchDir dir;
  const std::string path = dir.Path("absent.idx");
  absl::StatusOr<IdxArray> idx = ReadIdx(path);
  EXPECT_EQ(idx.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(idx.status().message()), HasSubstr(path));
}

TEST(ReadIdx, RejectsBadMagic) {
  ScratchDir dir;
  std::string bytes = MakeIdx({2}, {1, 2});
  bytes[1] = 0x01;
  const std::string path = dir.Write("bad.idx", bytes);
  absl::StatusOr<IdxArray> idx = ReadIdx(path);
  EXPECT_EQ(idx.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(idx.status().message()), HasSubstr("not an IDX file"));
  EXPECT_THAT(std::string(idx.status().message()), HasSubstr(path));
  // Inside gzip the magic is checked after decompression.
  const std::string gz = WriteGzip(dir, "bad.idx.gz", bytes);
  EXPECT_THAT(std::string(ReadIdx(gz).status().message()),
              HasSubstr("bad IDX magic (the decompressed data"));
}

TEST(ReadIdx, RejectsFileThatIsNeitherGzipNorIdx) {
  ScratchDir dir;
  const std::string path = dir.Write("text.idx", "root:$6$secret:19000:0:99999:7:::");
  absl::StatusOr<IdxArray> idx = ReadIdx(path);
  const std::string message(idx.status().message());
  EXPECT_THAT(message, HasSubstr("not an IDX file"));
  // Nothing of the file's content: the message reaches every API client.
  EXPECT_THAT(message, Not(HasSubstr("72 6f")));
  EXPECT_THAT(message, Not(HasSubstr("root")));
}

TEST(ReadIdx, RejectsUnsupportedTypeNamingIt) {
  ScratchDir dir;
  const std::string path = dir.Write("f.idx", MakeIdx({1}, {0, 0, 0, 0}, 0x0D));
  absl::StatusOr<IdxArray> idx = ReadIdx(path);
  EXPECT_THAT(std::string(idx.status().message()), HasSubstr("0x0d"));
}

TEST(ReadIdx, RejectsTruncatedRawFile) {
  ScratchDir dir;
  std::string bytes = MakeIdx({10, 10}, Iota(100));
  bytes.resize(bytes.size() - 1);
  const std::string path = dir.Write("short.idx", bytes);
  absl::StatusOr<IdxArray> idx = ReadIdx(path);
  EXPECT_EQ(idx.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(idx.status().message()), HasSubstr("truncated"));
  EXPECT_THAT(std::string(idx.status().message()), HasSubstr(path));
}

TEST(ReadIdx, RejectsTruncatedGzipFile) {
  ScratchDir dir;
  std::string bytes = MakeIdx({10, 10}, Iota(100));
  bytes.resize(bytes.size() - 10);
  const std::string path = WriteGzip(dir, "short.idx.gz", bytes);
  absl::StatusOr<IdxArray> idx = ReadIdx(path);
  EXPECT_THAT(std::string(idx.status().message()), HasSubstr("truncated"));
}

TEST(ReadIdx, RejectsCutGzipStream) {
  ScratchDir dir;
  const std::string full =
      WriteGzip(dir, "full.gz", MakeIdx({4096}, std::vector<uint8_t>(4096, 3)));
  std::string compressed;
  {
    std::ifstream in(full, std::ios::binary);
    compressed.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string path =
      dir.Write("cut.gz", compressed.substr(0, compressed.size() / 2));
  EXPECT_FALSE(ReadIdx(path).ok());
}

TEST(ReadIdx, RejectsTrailingBytes) {
  ScratchDir dir;
  const std::string bytes = MakeIdx({3}, Iota(5));
  const std::string raw = dir.Write("long.idx", bytes);
  EXPECT_THAT(std::string(ReadIdx(raw).status().message()),
              HasSubstr("imply a 11-byte file but it has 13 bytes"));
  const std::string gz = WriteGzip(dir, "long.idx.gz", bytes);
  EXPECT_THAT(std::string(ReadIdx(gz).status().message()),
              HasSubstr("longer than its dimensions say"));
}

TEST(ReadIdx, RejectsDimsWhoseProductOverflows) {
  ScratchDir dir;
  const std::string path =
      dir.Write("huge.idx", MakeIdx({0xffffffff, 0xffffffff, 0xffffffff}, {}));
  absl::StatusOr<IdxArray> idx = ReadIdx(path);
  EXPECT_THAT(std::string(idx.status().message()), HasSubstr("too large"));
}

TEST(ReadIdx, HugeGzipHeaderDoesNotAllocateTheClaimedSize) {
  // 4 GiB claimed (exactly the cap) with 3 real bytes: must fail as
  // truncated, quickly, instead of allocating 4 GiB first.
  ScratchDir dir;
  const std::string path =
      WriteGzip(dir, "huge.idx.gz", MakeIdx({65536, 65536}, {1, 2, 3}));
  absl::StatusOr<IdxArray> idx = ReadIdx(path);
  EXPECT_THAT(std::string(idx.status().message()), HasSubstr("truncated"));
  const std::string raw = dir.Write("huge.idx", MakeIdx({65536, 65536}, {1}));
  EXPECT_THAT(std::string(ReadIdx(raw).status().message()),
              HasSubstr("truncated"));
}

TEST(LoadIdxClassification, FlattensAndScalesImages) {
  ScratchDir dir;
  const std::vector<uint8_t> pixels = {0, 255, 51, 102, 10, 20, 30, 40};
  const std::string images = dir.Write("i.idx", MakeIdx({2, 2, 2}, pixels));
  const std::string labels = WriteGzip(dir, "l.idx.gz", MakeIdx({2}, {3, 0}));
  absl::StatusOr<Dataset> data = LoadIdxClassification(images, labels, 10, 0);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_samples, 2u);
  EXPECT_EQ(data->input_dim, 4u);
  EXPECT_EQ(data->num_classes, 10);
  EXPECT_TRUE(data->is_classification());
  EXPECT_EQ(data->labels, (std::vector<int32_t>{3, 0}));
  ASSERT_EQ(data->inputs.size(), 8u);
  EXPECT_FLOAT_EQ(data->inputs[1], 1.0f);
  EXPECT_FLOAT_EQ(data->inputs[2], 0.2f);
  EXPECT_FLOAT_EQ(data->inputs[7], 40.0f / 255.0f);
}

TEST(LoadIdxClassification, LimitKeepsTheFirstSamples) {
  ScratchDir dir;
  const std::string images = dir.Write("i.idx", MakeIdx({3, 2}, Iota(6)));
  const std::string labels = dir.Write("l.idx", MakeIdx({3}, {1, 2, 99}));
  absl::StatusOr<Dataset> data = LoadIdxClassification(images, labels, 3, 2);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_samples, 2u);
  EXPECT_EQ(data->inputs.size(), 4u);
  EXPECT_EQ(data->labels, (std::vector<int32_t>{1, 2}));
}

TEST(LoadIdxClassification, RejectsCountMismatch) {
  ScratchDir dir;
  const std::string images = dir.Write("i.idx", MakeIdx({3, 2}, Iota(6)));
  const std::string labels = dir.Write("l.idx", MakeIdx({2}, {1, 2}));
  absl::StatusOr<Dataset> data = LoadIdxClassification(images, labels, 10, 0);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(data.status().message()),
              HasSubstr("sample counts differ"));
  EXPECT_THAT(std::string(data.status().message()), HasSubstr(images));
  EXPECT_THAT(std::string(data.status().message()), HasSubstr(labels));
}

TEST(LoadIdxClassification, RejectsLabelOutOfRangeNamingIndexAndValue) {
  ScratchDir dir;
  const std::string images = dir.Write("i.idx", MakeIdx({3, 2}, Iota(6)));
  const std::string labels = dir.Write("l.idx", MakeIdx({3}, {1, 2, 12}));
  absl::StatusOr<Dataset> data = LoadIdxClassification(images, labels, 10, 0);
  EXPECT_THAT(std::string(data.status().message()),
              HasSubstr("label of sample 2 is 12"));
}

TEST(LoadIdxClassification, ReadsRealFashionMnist) {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  const std::string files[] = {
      "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
      "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
  for (const std::string& f : files) {
    if (!std::filesystem::exists(dir + f)) {
      GTEST_SKIP() << "Fashion-MNIST not installed (" << dir + f
                   << " missing; apt install dataset-fashion-mnist)";
    }
  }
  absl::StatusOr<Dataset> train =
      LoadIdxClassification(dir + files[0], dir + files[1], 10, 0);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->num_samples, 60000u);
  EXPECT_EQ(train->input_dim, 784u);
  absl::StatusOr<Dataset> test =
      LoadIdxClassification(dir + files[2], dir + files[3], 10, 0);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->num_samples, 10000u);
  std::vector<int> counts(10, 0);
  for (int32_t label : test->labels) {
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++counts[label];
  }
  for (int c : counts) EXPECT_EQ(c, 1000);  // Fashion-MNIST test is balanced
  float max_pixel = 0.0f;
  for (float v : train->inputs) max_pixel = std::max(max_pixel, v);
  EXPECT_FLOAT_EQ(max_pixel, 1.0f);
}

}  // namespace
}  // namespace tagi::data
