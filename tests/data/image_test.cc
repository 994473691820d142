#include "worker/data/image.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/scratch_dir.h"
#include "worker/data/data_file.h"
#include "worker/data/image_folder.h"
#include "worker/data/loader.h"

namespace tagi::data {
namespace {

using ::tagi::testing::ScratchDir;
using ::tagi::v1::DataSpec;
using ::testing::HasSubstr;

std::span<const uint8_t> Bytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// A w x h image of `channels` whose pixel (y, x), channel c is `value`
// (+ 40 * c when colour).
Image Flat(uint32_t w, uint32_t h, uint32_t channels, uint8_t value) {
  Image im{w, h, channels, {}};
  for (uint32_t i = 0; i < w * h; ++i) {
    for (uint32_t c = 0; c < channels; ++c)
      im.pixels.push_back(static_cast<uint8_t>(value + 40 * c));
  }
  return im;
}

TEST(Image, PngRoundTripsExactlyAndJpegClosely) {
  Image im = Flat(5, 3, 3, 100);
  im.pixels[0] = 7;
  absl::StatusOr<Image> png = DecodeImage(Bytes(EncodePng(im)), "a.png");
  ASSERT_TRUE(png.ok()) << png.status();
  EXPECT_EQ(png->width, 5u);
  EXPECT_EQ(png->height, 3u);
  EXPECT_EQ(png->channels, 3u);
  EXPECT_EQ(png->pixels, im.pixels);
  absl::StatusOr<Image> jpeg = DecodeImage(Bytes(EncodeJpeg(Flat(16, 8, 1, 90), 95)), "a.jpg");
  ASSERT_TRUE(jpeg.ok()) << jpeg.status();
  EXPECT_EQ(jpeg->channels, 1u);
  EXPECT_NEAR(jpeg->pixels[37], 90, 3);
}

TEST(Image, CorruptTruncatedOrHugeImagesAreErrorsNotCrashes) {
  const std::string png = EncodePng(Flat(32, 32, 3, 50));
  const std::string jpeg = EncodeJpeg(Flat(32, 32, 3, 50), 90);
  for (const std::string& bad :
       {png.substr(0, png.size() / 2), jpeg.substr(0, jpeg.size() / 2), std::string("nope"),
        png.substr(0, 8) + std::string(200, '\xff'), jpeg.substr(0, 3) + std::string(100, 0)}) {
    absl::StatusOr<Image> im = DecodeImage(Bytes(bad), "dir/bad.img");
    ASSERT_FALSE(im.ok());
    EXPECT_EQ(im.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(im.status().message()), HasSubstr("dir/bad.img: undecodable"));
  }
  // A PNG header claiming 20000 x 20000 pixels is refused before decoding.
  std::string huge = EncodePng(Flat(1, 1, 1, 0));
  const unsigned char dims[8] = {0, 0, 0x4e, 0x20, 0, 0, 0x4e, 0x20};
  huge.replace(16, 8, reinterpret_cast<const char*>(dims), 8);
  absl::StatusOr<Image> im = DecodeImage(Bytes(huge), "huge.png");
  ASSERT_FALSE(im.ok());
  EXPECT_THAT(std::string(im.status().message()),
              ::testing::AnyOf(HasSubstr("at most"), HasSubstr("undecodable")));
}

TEST(Image, FitResizesOrCentreCropsAndConvertsChannels) {
  // 4 wide, 2 tall: left half 0, right half 255.
  Image im{4, 2, 1, {0, 0, 255, 255, 0, 0, 255, 255}};
  const std::vector<float> resized = FitImage(im, 1, 2, 2, DataSpec::RESIZE);
  EXPECT_NEAR(resized[0], 0.0f, 1e-6);
  EXPECT_NEAR(resized[1], 1.0f, 1e-6);
  // Centre crop 2x2 of the 4x2 image: the middle columns, 0 then 255.
  const std::vector<float> cropped = FitImage(im, 3, 2, 2, DataSpec::CENTER_CROP);
  ASSERT_EQ(cropped.size(), 12u);
  EXPECT_NEAR(cropped[0], 0.0f, 1e-6);
  EXPECT_NEAR(cropped[1], 1.0f, 1e-6);
  EXPECT_NEAR(cropped[8 + 1], 1.0f, 1e-6);  // grey copied into the blue plane
  const Image rgb{1, 1, 3, {255, 0, 0}};
  EXPECT_NEAR(FitImage(rgb, 1, 1, 1, DataSpec::RESIZE)[0], 0.299f, 1e-5);
}

class ImageFolderTest : public ::testing::Test {
 protected:
  void WriteImage(const std::string& rel, const std::string& bytes) {
    const std::filesystem::path p = dir_.path() / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << bytes;
  }
  DataSpec Spec() {
    DataSpec spec;
    spec.set_kind(DataSpec::IMAGE_FOLDER);
    spec.set_train_dir((dir_.path() / "train").string());
    spec.set_holdout_fraction(0.5f);
    spec.set_standardize(false);
    return spec;
  }
  LoadOptions Grey8() {
    LoadOptions o;
    o.channels = 1;
    o.height = 8;
    o.width = 8;
    o.num_classes = 2;
    return o;
  }
  ScratchDir dir_;
};

TEST_F(ImageFolderTest, SortedClassFoldersGiveLabelsAndNames) {
  WriteImage("train/dog/1.png", EncodePng(Flat(8, 8, 1, 200)));
  WriteImage("train/dog/2.JPG", EncodeJpeg(Flat(16, 16, 3, 180), 95));
  WriteImage("train/cat/a.png", EncodePng(Flat(12, 8, 3, 10)));
  WriteImage("train/cat/b.png", EncodePng(Flat(8, 8, 1, 20)));
  WriteImage("train/cat/notes.txt", "not an image, skipped");
  WriteImage("train/README", "skipped");
  WriteImage("test/dog/x.png", EncodePng(Flat(8, 8, 1, 200)));
  DataSpec spec = Spec();
  spec.set_holdout_fraction(0);
  spec.set_test_dir((dir_.path() / "test").string());
  absl::StatusOr<LoadedData> d = LoadData(spec, 3, Grey8());
  ASSERT_TRUE(d.ok()) << d.status();
  const Dataset& t = d->data.train;
  EXPECT_EQ(t.class_names, (std::vector<std::string>{"cat", "dog"}));
  EXPECT_EQ(t.labels, (std::vector<int32_t>{0, 0, 1, 1}));
  EXPECT_EQ(t.input_dim, 64u);
  EXPECT_NEAR(t.inputs[64], 20.0f / 255.0f, 1e-6);            // cat/b.png, second in sorted order
  EXPECT_EQ(d->data.test.labels, (std::vector<int32_t>{1}));  // dog keeps the training label
}

TEST_F(ImageFolderTest, EmptyClassUndecodableImageAndStrangersAreNamed) {
  WriteImage("train/a/1.png", EncodePng(Flat(8, 8, 1, 1)));
  WriteImage("train/a/2.png", EncodePng(Flat(8, 8, 1, 1)));
  std::filesystem::create_directories(dir_.path() / "train/b");
  EXPECT_THAT(std::string(LoadData(Spec(), 1, Grey8()).status().message()),
              HasSubstr("train/b: empty class folder"));
  WriteImage("train/b/1.png", "\x89PNG\r\n\x1a\n but not really");
  EXPECT_THAT(std::string(LoadData(Spec(), 1, Grey8()).status().message()),
              HasSubstr("train/b/1.png: undecodable PNG image"));
  WriteImage("train/b/1.png", EncodePng(Flat(8, 8, 1, 1)));
  WriteImage("test/c/1.png", EncodePng(Flat(8, 8, 1, 1)));
  DataSpec spec = Spec();
  spec.set_holdout_fraction(0);
  spec.set_test_dir((dir_.path() / "test").string());
  EXPECT_THAT(std::string(LoadData(spec, 1, Grey8()).status().message()),
              HasSubstr("test/c: a class the training folder does not have"));
  // A symlinked image is refused, not followed.
  std::filesystem::create_symlink("/etc/passwd", dir_.path() / "train/a/3.png");
  EXPECT_THAT(std::string(LoadData(Spec(), 1, Grey8()).status().message()),
              HasSubstr("is a symlink"));
}

TEST(DataFile, RootsConfineOpensAndSymlinksOutOfARootAreRefused) {
  ScratchDir root, outside;
  const std::string secret = outside.Write("secret.npy", "SECRET");
  const std::string inside = root.Write("ok.npy", "fine");
  std::filesystem::create_symlink(secret, root.path() / "link.npy");
  std::filesystem::create_directories(root.path() / "sub");
  std::filesystem::create_symlink(outside.path(), root.path() / "sub/out");
  for (const bool walk : {false, true}) {
    SCOPED_TRACE(walk ? "O_PATH walk" : "openat2");
    const DataAccess access{{root.path().string()}, walk};
    EXPECT_TRUE(OpenUnderRoots("f", inside, access, false).ok());
    for (const std::string& path :
         {secret, root.Path("link.npy"), root.Path("sub/out/secret.npy"),
          root.Path("sub/../../") + outside.path().filename().string() + "/secret.npy"}) {
      absl::StatusOr<UniqueFd> fd = OpenUnderRoots("data.npz", path, access, false);
      ASSERT_FALSE(fd.ok()) << path;
      EXPECT_EQ(fd.status().code(), absl::StatusCode::kPermissionDenied) << fd.status();
      EXPECT_THAT(std::string(fd.status().message()), HasSubstr("data.npz"));
      EXPECT_THAT(std::string(fd.status().message()), ::testing::Not(HasSubstr("SECRET")));
    }
    // A relative link that stays inside the root is followed by openat2 (an
    // absolute one is not: the kernel resolves it from /, outside the root);
    // the walk follows no link at all.
    std::filesystem::create_symlink("ok.npy", root.path() / "alias.npy");
    EXPECT_EQ(OpenUnderRoots("f", root.Path("alias.npy"), access, false).ok(), !walk);
    std::filesystem::remove(root.path() / "alias.npy");
    EXPECT_EQ(OpenUnderRoots("f", root.Path("missing.npy"), access, false).status().code(),
              absl::StatusCode::kNotFound);
    std::filesystem::create_directories(root.path() / "d/e");
    root.Write("d/e/f.npy", "deep");
    EXPECT_TRUE(OpenUnderRoots("f", root.Path("d/e/f.npy"), access, false).ok());
    EXPECT_TRUE(OpenUnderRoots("f", root.Path("d/e"), access, true).ok());
  }
}

// A pinned file is the one the roots check admitted: replacing its path
// with a link out of the root afterwards (the race a reader opening by path
// lost) changes nothing that is read through the pinned name, and errors
// name the user's path.
TEST(DataFile, APinnedFileIsReadAsOpenedWhateverItsPathBecomes) {
  ScratchDir root, outside;
  const std::string secret = outside.Write("secret.csv", "SECRET");
  const std::string path = root.Write("train.csv", "x,y\n1,2\n");
  const DataAccess access{{root.path().string()}};
  absl::StatusOr<PinnedFile> pinned = PinnedFile::Open("data.train_csv", path, access);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_NE(pinned->name(), path);
  std::filesystem::remove(path);
  std::filesystem::create_symlink(secret, path);
  std::ifstream in(pinned->name());
  const std::string read((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(read, "x,y\n1,2\n");
  EXPECT_THAT(std::string(pinned->Restore(absl::InvalidArgumentError(
                                              absl::StrCat(pinned->name(), ": bad row 3")))
                              .message()),
              HasSubstr(path + ": bad row 3"));
  // Opened now, the link is refused; without roots the path is used as is.
  EXPECT_EQ(PinnedFile::Open("data.train_csv", path, access).status().code(),
            absl::StatusCode::kPermissionDenied);
  absl::StatusOr<PinnedFile> open = PinnedFile::Open("f", path, DataAccess{});
  ASSERT_TRUE(open.ok());
  EXPECT_EQ(open->name(), path);
}

// The kinds whose readers open by name (IDX, CIFAR-10, CSV regression) go
// through the pins: a file linked out of the root is refused with the
// field's name, and a bad file's error names its real path.
TEST(DataFile, CsvRegressionUnderRootsIsPinnedAndNamesTheRealPath) {
  ScratchDir root, outside;
  const std::string secret = outside.Write("secret.csv", "SECRET,1\n");
  const std::string train = root.Write("train.csv", "1,2\n3,4\nfive,6\n");
  const std::string test = root.Write("test.csv", "1,2\n");
  DataSpec spec;
  spec.set_kind(DataSpec::CSV);
  spec.set_train_csv(train);
  spec.set_test_csv(test);
  LoadOptions options;
  options.roots = {root.path().string()};
  const absl::Status bad = LoadData(spec, 1, options).status();
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.message()), HasSubstr(train));
  EXPECT_THAT(std::string(bad.message()), ::testing::Not(HasSubstr("/proc/self/fd")));
  std::filesystem::remove(train);
  std::filesystem::create_symlink(secret, train);
  const absl::Status out = LoadData(spec, 1, options).status();
  EXPECT_EQ(out.code(), absl::StatusCode::kPermissionDenied) << out;
  EXPECT_THAT(std::string(out.message()), ::testing::Not(HasSubstr("SECRET")));
}

}  // namespace
}  // namespace tagi::data
