#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/data_files.h"
#include "tests/testing/scratch_dir.h"
#include "worker/data/loader.h"
#include "worker/data/npy.h"
#include "worker/data/npz.h"

namespace tagi::data {
namespace {

using ::tagi::data::testing::Npy;
using ::tagi::data::testing::Raw;
using ::tagi::data::testing::Zip;
using ::tagi::testing::ScratchDir;
using ::tagi::v1::DataSpec;
using ::testing::HasSubstr;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Npy, ParsesTheHeaderAndPointsAtTheData) {
  const std::string file = Npy("<f4", {2, 3}, Raw(std::vector<float>{1, 2, 3, 4, 5, 6}));
  absl::StatusOr<NpyArray> a = ParseNpy(Bytes(file), "a.npy", 1 << 20);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->type, NpyType::kFloat32);
  EXPECT_EQ(a->shape, (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(NpyElement(*a, 4), 5.0);
  // What numpy writes for a 1-d array: (4,).
  const std::string labels = Npy("<i8", {4}, Raw(std::vector<int64_t>{0, 1, 2, 1}));
  absl::StatusOr<NpyArray> b = ParseNpy(Bytes(labels), "b.npy", 1 << 20);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->shape, (std::vector<uint64_t>{4}));
  EXPECT_EQ(NpyElement(*b, 2), 2.0);
  // The library's own writer round-trips.
  const std::vector<float> v = {0.5f, -1.0f};
  absl::StatusOr<NpyArray> c = ParseNpy(Bytes(EncodeNpyFloat32({2}, v)), "c.npy", 1 << 20);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(NpyElement(*c, 1), -1.0);
}

TEST(Npy, RefusesEveryBadFileByNameWithoutQuotingIt) {
  const std::string good = Npy("<f4", {2, 2}, Raw(std::vector<float>{1, 2, 3, 4}));
  const struct {
    std::string bytes;
    std::string fault;
  } cases[] = {
      {"garbage", "no \\x93NUMPY magic"},
      {good.substr(0, good.size() - 3), "truncated NPY file"},
      {good + "xyz", "trailing bytes"},
      {Npy(">f4", {1}, "abcd"), "big-endian"},
      {Npy("<c8", {1}, std::string(8, 0)), "element type is not one of"},
      {Npy("<f4", {1, 1, 1, 1, 1, 1, 1, 1, 1}, std::string(4, 0)), "rank above 8"},
      {Npy("<f4", {uint64_t{1} << 40, 1 << 20}, ""), "more than the"},
      {std::string("\x93NUMPY\x01\x00\x40\x00{'descr': SECRET", 26), "truncated in the header"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<NpyArray> a = ParseNpy(Bytes(c.bytes), "bad.npy", 1 << 30);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(a.status().message()), HasSubstr("bad.npy"));
    EXPECT_THAT(std::string(a.status().message()), HasSubstr(c.fault));
    EXPECT_THAT(std::string(a.status().message()), ::testing::Not(HasSubstr("SECRET")));
  }
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_THAT(std::string(ParseNpy(Bytes(fortran), "f.npy", 1 << 20).status().message()),
              HasSubstr("Fortran-order"));
}

TEST(Npz, ReadsStoredAndDeflatedMembersAndRefusesCorruption) {
  const std::string x = Npy("|u1", {3}, "abc");
  for (bool deflate : {false, true}) {
    const std::string zip = Zip({{"x_train.npy", x}, {"other.npy", x}}, deflate);
    ASSERT_FALSE(zip.empty());
    auto members = ReadNpzMembers(Bytes(zip), "d.npz", {"x_train", "y_train"}, 1 << 20);
    ASSERT_TRUE(members.ok()) << members.status();
    ASSERT_EQ(members->count("x_train"), 1u);
    EXPECT_EQ(members->count("y_train"), 0u);
    EXPECT_EQ(std::string(members->at("x_train").begin(), members->at("x_train").end()), x);
    // A cap below the member's size refuses it before inflating.
    EXPECT_THAT(std::string(ReadNpzMembers(Bytes(zip), "d.npz", {"x_train"}, 4).status().message()),
                HasSubstr("at most 4 are read"));
  }
  const std::string big = Npy("<f4", {1000}, std::string(4000, 'a'));
  const std::string zip = Zip({{"x_train.npy", big}}, true);
  EXPECT_FALSE(
      ReadNpzMembers(Bytes(zip.substr(0, zip.size() / 2)), "t.npz", {"x_train"}, 1 << 20).ok());
  std::string flipped = zip;
  flipped[60] ^= 0x55;  // inside the deflated data: a CRC or inflate error
  auto r = ReadNpzMembers(Bytes(flipped), "c.npz", {"x_train"}, 1 << 20);
  EXPECT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("c.npz"));
  EXPECT_FALSE(ReadNpzMembers(Bytes(std::string("PK\x03\x04junk")), "j.npz", {"x"}, 100).ok());
}

class NumpyLoad : public ::testing::Test {
 protected:
  DataSpec Pairs(const std::string& x, const std::string& y) {
    DataSpec spec;
    spec.set_kind(DataSpec::NUMPY);
    spec.set_train_x_npy(dir_.Write("x.npy", x));
    spec.set_train_y_npy(dir_.Write("y.npy", y));
    spec.set_holdout_fraction(0.25f);
    spec.set_standardize(false);
    return spec;
  }
  LoadOptions Classes(int k) {
    LoadOptions o;
    o.num_classes = k;
    return o;
  }
  ScratchDir dir_;
};

TEST_F(NumpyLoad, Uint8ImagesInNhwcBecomeChwInUnitRange) {
  // 4 images of 2x2 pixels, 3 channels: pixel p, channel c holds 10 * c + p.
  std::vector<uint8_t> x;
  for (int n = 0; n < 4; ++n) {
    for (int p = 0; p < 4; ++p) {
      for (int c = 0; c < 3; ++c) x.push_back(static_cast<uint8_t>(10 * c + p + n));
    }
  }
  DataSpec spec = Pairs(Npy("|u1", {4, 2, 2, 3}, Raw(x)),
                        Npy("<i8", {4}, Raw(std::vector<int64_t>{0, 1, 2, 1})));
  spec.set_layout(DataSpec::NHWC);
  spec.set_holdout_fraction(0);
  spec.set_test_x_npy(spec.train_x_npy());
  spec.set_test_y_npy(spec.train_y_npy());
  absl::StatusOr<LoadedData> d = LoadData(spec, 7, Classes(3));
  ASSERT_TRUE(d.ok()) << d.status();
  const Dataset& t = d->data.train;
  EXPECT_EQ(t.num_samples, 4u);
  EXPECT_EQ(t.input_dim, 12u);
  EXPECT_EQ(t.channels, 3u);
  EXPECT_EQ(t.height, 2u);
  EXPECT_EQ(t.num_classes, 3);
  // Sample 0, channel 2, pixel 1 (CHW index 2 * 4 + 1) was 21.
  EXPECT_FLOAT_EQ(t.inputs[9], 21.0f / 255.0f);
  EXPECT_EQ(t.labels, (std::vector<int32_t>{0, 1, 2, 1}));
}

TEST_F(NumpyLoad, FloatTargetsMakeARegressionSetAndTheHoldOutDependsOnlyOnTheSeed) {
  std::vector<double> x, y;
  for (int i = 0; i < 20; ++i) {
    x.push_back(i);
    x.push_back(-i);
    y.push_back(2.0 * i);
  }
  DataSpec spec = Pairs(Npy("<f8", {20, 2}, Raw(x)), Npy("<f8", {20, 1}, Raw(y)));
  absl::StatusOr<LoadedData> a = LoadData(spec, 7);
  absl::StatusOr<LoadedData> b = LoadData(spec, 7);
  absl::StatusOr<LoadedData> c = LoadData(spec, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok()) << a.status();
  EXPECT_EQ(a->data.train.num_samples, 15u);
  EXPECT_EQ(a->data.test.num_samples, 5u);
  EXPECT_EQ(a->data.train.output_dim, 1u);
  EXPECT_EQ(a->data.test.inputs, b->data.test.inputs);
  EXPECT_EQ(a->fingerprint, b->fingerprint);
  EXPECT_NE(a->data.test.inputs, c->data.test.inputs);
  // Every sample lands in exactly one part.
  float sum = 0;
  for (float v : a->data.train.targets) sum += v;
  for (float v : a->data.test.targets) sum += v;
  EXPECT_FLOAT_EQ(sum, 2.0f * 190.0f);
}

TEST_F(NumpyLoad, NpzWithATestSetLoadsFromOneArchive) {
  const std::string x = Npy("<f4", {3, 2}, Raw(std::vector<float>{1, 2, 3, 4, 5, 6}));
  const std::string y = Npy("<i4", {3}, Raw(std::vector<int32_t>{1, 0, 1}));
  DataSpec spec;
  spec.set_kind(DataSpec::NUMPY);
  spec.set_npz(dir_.Write(
      "d.npz",
      Zip({{"x_train.npy", x}, {"y_train.npy", y}, {"x_test.npy", x}, {"y_test.npy", y}}, true)));
  absl::StatusOr<LoadedData> d = LoadData(spec, 1, Classes(2));
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->data.test.num_samples, 3u);
  EXPECT_EQ(d->data.test.labels, (std::vector<int32_t>{1, 0, 1}));
  // The same archive without a test set and no holdout: told what to do.
  spec.set_npz(dir_.Write("e.npz", Zip({{"x_train.npy", x}, {"y_train.npy", y}}, false)));
  EXPECT_THAT(std::string(LoadData(spec, 1, Classes(2)).status().message()),
              HasSubstr("holdout_fraction"));
  spec.set_npz(dir_.Write("f.npz", Zip({{"x_train.npy", x}}, false)));
  EXPECT_THAT(std::string(LoadData(spec, 1, Classes(2)).status().message()),
              HasSubstr("has no y_train.npy"));
}

TEST_F(NumpyLoad, BadArraysAreNamedWithTheirFault) {
  const std::string x4 = Npy("<f4", {4, 1}, Raw(std::vector<float>{1, 2, 3, 4}));
  const std::string labels = Npy("<i8", {4}, Raw(std::vector<int64_t>{0, 1, 5, 1}));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const struct {
    std::string x, y;
    int classes;
    std::string fault;
  } cases[] = {
      {x4, labels, 3, "label 5 of sample 2 is out of range"},
      {x4, Npy("<f4", {4}, Raw(std::vector<float>{0, 1, 0, 1})), 3,
       "y has dtype float32; a classification job needs integer class labels"},
      {Npy("<i4", {4, 1}, Raw(std::vector<int32_t>{1, 2, 3, 4})), labels, 9,
       "x has dtype int32; expected float32, float64 or uint8"},
      {Npy("<f4", {4, 1}, Raw(std::vector<float>{1, nan, 3, 4})), labels, 9,
       "non-finite value (or one beyond float range) in sample 1"},
      {Npy("<f4", {3, 1}, Raw(std::vector<float>{1, 2, 3})), labels, 9, "holds 3 samples but"},
      {x4, Npy("<i8", {4, 2}, std::string(64, 0)), 9, "y has rank 2; class labels are [N]"},
      {x4, Npy("<f4", {4, 1, 1}, std::string(16, 0)), 0, "regression targets are [N] or [N, k]"},
      {x4.substr(0, x4.size() - 1), labels, 9, "truncated NPY file"},
  };
  for (const auto& c : cases) {
    DataSpec spec = Pairs(c.x, c.y);
    absl::StatusOr<LoadedData> d = LoadData(spec, 1, Classes(c.classes));
    ASSERT_FALSE(d.ok()) << c.fault;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(d.status().message()), HasSubstr(c.fault));
    EXPECT_THAT(std::string(d.status().message()), HasSubstr(dir_.path().string()));
  }
}

}  // namespace
}  // namespace tagi::data
