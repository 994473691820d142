// tagi-train on the data kinds a user brings (NUMPY, IMAGE_FOLDER,
// CSV_CLASSIFICATION): small learnable sets written here, trained end to end
// by the real binary; bad files end in a message naming the file and the
// fault, exit code 1, no crash and no model file.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/data_files.h"
#include "tests/testing/subprocess.h"
#include "worker/data/image.h"

namespace tagi {
namespace {

using ::tagi::data::testing::Npy;
using ::tagi::data::testing::Raw;
using ::tagi::data::testing::Zip;
using ::tagi::testing::ProcessResult;
using ::tagi::testing::RunProcess;
using ::tagi::testing::TempDir;
using ::testing::HasSubstr;

constexpr int kSide = 10;

ProcessResult Train(std::vector<std::string> args) {
  args.insert(args.begin(), std::string(TAGI_BIN_DIR) + "/tagi-train");
  return RunProcess(args, absl::Seconds(300));
}

double JsonNumber(const std::string& text, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\":([-0-9.eE+]+)");
  if (!std::regex_search(text, m, re)) return std::nan("");
  return std::stod(m[1]);
}

// n images of kSide x kSide grey pixels whose class c is a bright row c.
struct Bands {
  std::vector<uint8_t> pixels;  // [n][kSide][kSide]
  std::vector<int64_t> labels;
};
Bands MakeBands(int n, int classes, uint32_t seed) {
  std::mt19937 rng(seed);
  Bands b;
  for (int i = 0; i < n; ++i) {
    const int c = static_cast<int>(rng() % classes);
    b.labels.push_back(c);
    for (int p = 0; p < kSide * kSide; ++p) {
      b.pixels.push_back(p / kSide == c ? 220 : static_cast<uint8_t>(rng() % 60));
    }
  }
  return b;
}

// An MLP job over kSide x kSide grey inputs, `data` its "data" object.
std::string Job(const std::string& data, int classes, int out_units, int epochs = 3) {
  return absl::StrCat(R"({"name": "kinds", "input": {"channels": 1, "height": 10, "width": 10},
    "layers": [{"kind": "LINEAR", "inFeatures": 100, "outFeatures": 32}, {"kind": "RELU"},
               {"kind": "LINEAR", "inFeatures": 32, "outFeatures": )",
                      out_units, R"(}],
    "head": {"classification": {"numClasses": )",
                      classes, R"(}},
    "data": )",
                      data, R"(, "noise": {"sigmaV": 1.0}, "batchSize": 16, "epochs": )", epochs,
                      R"(, "seed": 5})");
}

void ExpectCleanFailure(const ProcessResult& r, const std::string& message,
                        const std::string& model) {
  EXPECT_FALSE(r.signaled) << "crashed with signal " << r.signal << "\n" << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(message));
  EXPECT_FALSE(std::filesystem::exists(model));
}

TEST(DataKinds, NpzOfNhwcImagesTrainsAndEvaluatesToTheSameAccuracy) {
  TempDir dir;
  const Bands b = MakeBands(600, 10, 1);
  const std::string npz = dir.Write(
      "bands.npz", Zip({{"x_train.npy", Npy("|u1", {600, kSide, kSide, 1}, Raw(b.pixels))},
                        {"y_train.npy", Npy("<i8", {600}, Raw(b.labels))}},
                       true));
  const std::string job =
      dir.Write("job.json", Job(absl::StrCat(R"({"kind": "NUMPY", "npz": ")", npz,
                                             R"(", "layout": "NHWC", "holdoutFraction": 0.2})"),
                                10, 11));
  const std::string model = dir.File("m.tagi");
  const ProcessResult r = Train({job, "--out", model, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("480 training / 120 test samples"));
  const double acc = JsonNumber(r.out, "test_accuracy");
  EXPECT_GT(acc, 0.6) << r.out;
  const ProcessResult e = Train({"--eval", model, job, "--json"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NEAR(JsonNumber(e.out, "test_accuracy"), acc, 1e-9);
}

TEST(DataKinds, ImageFolderOfPngAndJpegTrainsWithAugmentationAndStoresClassNames) {
  TempDir dir;
  const Bands b = MakeBands(240, 3, 2);
  const char* names[] = {"ant", "bee", "cat"};
  for (int i = 0; i < 240; ++i) {
    // 12 wide: a centre crop of 10 keeps the band.
    data::Image im{12, kSide, 1, {}};
    for (int y = 0; y < kSide; ++y) {
      for (int x = 0; x < 12; ++x) im.pixels.push_back(b.pixels[i * 100 + y * kSide + x % kSide]);
    }
    const std::filesystem::path folder =
        std::filesystem::path(dir.path()) / "images" / names[b.labels[i]];
    std::filesystem::create_directories(folder);
    const bool jpeg = i % 2 == 1;
    std::ofstream(folder / absl::StrCat(i, jpeg ? ".jpg" : ".png"), std::ios::binary)
        << (jpeg ? data::EncodeJpeg(im, 95) : data::EncodePng(im));
  }
  const std::string job = dir.Write(
      "job.json", Job(absl::StrCat(R"({"kind": "IMAGE_FOLDER", "trainDir": ")", dir.File("images"),
                                   R"(", "imageFit": "CENTER_CROP", "holdoutFraction": 0.25,
                          "augment": {"horizontalFlip": true}})"),
                      3, 3, 4));
  const std::string model = dir.File("m.tagi");
  const ProcessResult r = Train({job, "--out", model, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(JsonNumber(r.out, "test_accuracy"), 0.6) << r.out;
  std::ifstream in(model, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(bytes.size(), 12u);
  EXPECT_EQ(bytes[8], 3) << "a model with class names is a version 3 file";
  EXPECT_THAT(bytes, HasSubstr("ant"));
  EXPECT_THAT(bytes, HasSubstr("cat"));
}

TEST(DataKinds, LabelledCsvTrains) {
  TempDir dir;
  const Bands b = MakeBands(500, 4, 3);
  std::string csv = "label";
  for (int p = 0; p < 100; ++p) absl::StrAppend(&csv, ",p", p);
  csv += "\n";
  for (int i = 0; i < 500; ++i) {
    absl::StrAppend(&csv, b.labels[i]);
    for (int p = 0; p < 100; ++p) absl::StrAppend(&csv, ",", b.pixels[i * 100 + p]);
    csv += "\n";
  }
  const std::string path = dir.Write("bands.csv", csv);
  const std::string job = dir.Write(
      "job.json", Job(absl::StrCat(R"({"kind": "CSV_CLASSIFICATION", "trainCsv": ")", path,
                                   R"(", "csvHasHeader": true, "labelColumn": "label",
                                      "holdoutFraction": 0.2})"),
                      4, 3));
  const ProcessResult r = Train({job, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_GT(JsonNumber(r.out, "test_accuracy"), 0.6) << r.out;
}

TEST(DataKinds, BadFilesEndInAMessageNamingTheFileAndTheFault) {
  TempDir dir;
  const std::string model = dir.File("m.tagi");
  const std::string x = Npy("<f4", {4, 100}, std::string(1600, '\0'));
  const std::string y = Npy("<i8", {4}, Raw(std::vector<int64_t>{0, 1, 12, 1}));
  const std::string zip = Zip({{"x_train.npy", x}, {"y_train.npy", y}}, true);
  const std::string truncated = dir.Write("truncated.npz", zip.substr(0, zip.size() - 30));
  const std::string out_of_range = dir.Write("range.npz", zip);
  std::filesystem::create_directories(std::filesystem::path(dir.path()) / "folder/a");
  std::filesystem::create_directories(std::filesystem::path(dir.path()) / "folder/b");
  std::ofstream(std::filesystem::path(dir.path()) / "folder/a/1.png") << "not a png";
  for (const char* cls : {"x", "y"}) {
    const std::filesystem::path folder = std::filesystem::path(dir.path()) / "two" / cls;
    std::filesystem::create_directories(folder);
    for (int i = 0; i < 2; ++i) {
      std::ofstream(folder / absl::StrCat(i, ".png"), std::ios::binary)
          << data::EncodePng(data::Image{10, 10, 1, std::vector<uint8_t>(100, 7)});
    }
  }
  const struct {
    std::string data;
    std::string fault;
  } cases[] = {
      {absl::StrCat(R"({"kind": "NUMPY", "npz": ")", truncated, R"(", "holdoutFraction": 0.5})"),
       absl::StrCat(truncated, ": not a readable NPZ file")},
      {absl::StrCat(R"({"kind": "NUMPY", "npz": ")", out_of_range, R"(", "holdoutFraction": 0.5})"),
       "member y_train.npy: label 12 of sample 2 is out of range"},
      {absl::StrCat(R"({"kind": "IMAGE_FOLDER", "trainDir": ")", dir.File("folder"),
                    R"(", "holdoutFraction": 0.5})"),
       "folder/a/1.png: undecodable image"},
      {absl::StrCat(R"({"kind": "IMAGE_FOLDER", "trainDir": ")", dir.File("two"),
                    R"(", "holdoutFraction": 0.5})"),
       "the data has 2 classes (x, y) but head.classification.num_classes is 10"},
  };
  for (const auto& c : cases) {
    const std::string job = dir.Write("bad.json", Job(c.data, 10, 11));
    ExpectCleanFailure(Train({job, "--out", model}), c.fault, model);
  }
}

}  // namespace
}  // namespace tagi
