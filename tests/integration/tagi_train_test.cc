// tagi-train as a user runs it: the real binary, real files, real exit
// codes. Bad inputs must end in a precise message and exit code 1 (2 for
// usage errors), never a crash, and must leave no model file behind.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace tagi {
namespace {

using ::testing::HasSubstr;
using ::tagi::testing::ProcessResult;
using ::tagi::testing::RunProcess;
using ::tagi::testing::TempDir;

const std::string kTrain = std::string(TAGI_BIN_DIR) + "/tagi-train";
const std::string kExamples = std::string(TAGI_SOURCE_DIR) + "/examples";
constexpr char kFmnistDir[] = "/usr/share/datasets/fashion-mnist";

bool HaveFashionMnist() {
  return std::filesystem::exists(std::string(kFmnistDir) + "/train-images-idx3-ubyte.gz");
}

ProcessResult Train(std::vector<std::string> args) {
  args.insert(args.begin(), kTrain);
  return RunProcess(args, absl::Seconds(300));
}

// A small Fashion-MNIST job: 3000 training and 1000 test samples.
std::string SmallFmnistJob(const std::string& extra = "") {
  return absl::StrCat(R"({
    "name": "fmnist-small",
    "layers": [
      {"kind": "LINEAR", "inFeatures": 784, "outFeatures": 64}, {"kind": "RELU"},
      {"kind": "LINEAR", "inFeatures": 64, "outFeatures": 11}],
    "head": {"classification": {"numClasses": 10}},
    "data": {"kind": "FASHION_MNIST", "trainLimit": 3000, "testLimit": 1000},
    "noise": {"sigmaV": 1.0}, "batchSize": 16, "epochs": 2, "seed": 5)",
                      extra, "}");
}

// Pulls "key":number out of the JSON line.
double JsonNumber(const std::string& text, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\":([-0-9.eE+]+)");
  if (!std::regex_search(text, m, re)) return std::nan("");
  return std::stod(m[1]);
}

std::string JsonString(const std::string& text, const std::string& key) {
  std::smatch m;
  const std::regex re("\"" + key + "\":\"([^\"]*)\"");
  return std::regex_search(text, m, re) ? std::string(m[1]) : "";
}

void ExpectCleanFailure(const ProcessResult& r, int code, const std::string& message) {
  EXPECT_FALSE(r.signaled) << "crashed with signal " << r.signal << "\n" << r.err;
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_THAT(r.err, HasSubstr(message));
}

TEST(TagiTrain, TrainsSavesAndEvaluatesToTheSameAccuracy) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const std::string job = dir.Write("job.json", SmallFmnistJob());
  const std::string model = dir.File("model.tagi");
  const ProcessResult r = Train({job, "--out", model, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("epoch 2/2"));
  const double acc = JsonNumber(r.out, "test_accuracy");
  EXPECT_GT(acc, 0.70) << r.out;
  ASSERT_TRUE(std::filesystem::exists(model));

  const ProcessResult e = Train({"--eval", model, job, "--json"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NEAR(JsonNumber(e.out, "test_accuracy"), acc, 1e-9);
  EXPECT_NEAR(JsonNumber(e.out, "test_log_likelihood"), JsonNumber(r.out, "test_log_likelihood"),
              1e-6);
  EXPECT_EQ(JsonString(e.out, "parameter_checksum"), JsonString(r.out, "parameter_checksum"));
}

TEST(TagiTrain, SameJobTwiceGivesTheSameModel) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const std::string job = dir.Write("job.json", SmallFmnistJob());
  const ProcessResult a = Train({job, "--epochs", "1", "--json"});
  const ProcessResult b = Train({job, "--epochs", "1", "--json"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(JsonString(a.out, "parameter_checksum").size(), 16u);
  EXPECT_EQ(JsonString(a.out, "parameter_checksum"), JsonString(b.out, "parameter_checksum"));
  // A different seed gives a different model.
  const std::string job2 = dir.Write("job2.json", absl::StrReplaceAll(SmallFmnistJob(),
                                                                      {{"\"seed\": 5", "\"seed\": 6"}}));
  const ProcessResult c = Train({job2, "--epochs", "1", "--json"});
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(JsonString(a.out, "parameter_checksum"), JsonString(c.out, "parameter_checksum"));
}

// The acceptance figure of the engine: the full data set, the example job.
TEST(TagiTrain, FashionMnistExampleReachesTheReferenceAccuracy) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const ProcessResult one = Train({kExamples + "/fmnist_fnn.json", "--epochs", "1", "--json"});
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_GE(JsonNumber(one.out, "test_accuracy"), 0.845) << one.err;
  const ProcessResult three = Train({kExamples + "/fmnist_fnn.json", "--epochs", "3", "--json"});
  ASSERT_EQ(three.exit_code, 0) << three.err;
  EXPECT_GE(JsonNumber(three.out, "test_accuracy"), 0.860) << three.err;
}

// The reference's MNIST CNN (examples/fmnist_cnn.json) on a subset: it
// learns, and a saved model (batch-norm running statistics included)
// evaluates to exactly the accuracy training reported.
// examples/fmnist_cnn.json on the first `train` and `test` images.
std::string CnnSubsetJob(int train, int test) {
  std::ifstream in(kExamples + "/fmnist_cnn.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string limited = absl::StrReplaceAll(
      text, {{R"("data": {"kind": "FASHION_MNIST"})",
              absl::StrCat(R"("data": {"kind": "FASHION_MNIST", "trainLimit": )", train,
                           R"(, "testLimit": )", test, "}")}});
  EXPECT_NE(limited, text) << "the example's data line changed";
  return limited;
}

TEST(TagiTrain, CnnExampleLearnsOnASubsetAndEvaluatesFromItsFile) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const std::string job = dir.Write("cnn.json", CnnSubsetJob(12800, 1000));
  const std::string model = dir.File("cnn.tagi");
  const ProcessResult r = Train({job, "--epochs", "1", "--threads", "2", "--out", model, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 100 steps of B = 128 (the full epoch gives about 84 %). So few steps
  // are still a lottery for the test accuracy: in evaluation the batch
  // norms use running statistics that trail the fast-moving network, so
  // the last bits of the products move it a lot. With seed 1, when
  // OpenBLAS still split the products by thread count: 68.0 % at 1 thread
  // and 50.8 % at 2 (training accuracy 56 % for both); after 50 steps it
  // ranged 22-61 % over seeds. So this asserts learning (four times
  // chance), not a figure; the test above pins 1 and 2 threads to one model.
  EXPECT_GE(JsonNumber(r.out, "test_accuracy"), 0.40) << r.err;
  const ProcessResult e = Train({"--eval", model, job, "--json"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NEAR(JsonNumber(e.out, "test_accuracy"), JsonNumber(r.out, "test_accuracy"), 1e-9);
  EXPECT_EQ(JsonString(e.out, "parameter_checksum"), JsonString(r.out, "parameter_checksum"));
}

// The same bits for any --threads (issue 28): the CNN, whose convolutions
// are products large enough to be split over the team, trains to one
// checksum at 1 and 2 threads, and evaluates to one accuracy.
TEST(TagiTrain, TheCnnTrainsToTheSameBitsAtOneAndTwoThreads) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  const std::string job = dir.Write("cnn.json", CnnSubsetJob(2560, 500));
  std::string checksum, accuracy;
  for (const char* threads : {"1", "2"}) {
    const ProcessResult r = Train({job, "--epochs", "1", "--threads", threads, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const std::string c = JsonString(r.out, "parameter_checksum");
    const std::string a = absl::StrCat(JsonNumber(r.out, "test_accuracy"));
    ASSERT_EQ(c.size(), 16u) << r.out;
    if (checksum.empty()) {
      checksum = c;
      accuracy = a;
      continue;
    }
    EXPECT_EQ(c, checksum) << "--threads " << threads << " trained another model";
    EXPECT_EQ(a, accuracy);
  }
}

TEST(TagiTrain, ToyRegressionExampleFitsTheCubic) {
  const ProcessResult r = Train({kExamples + "/toy_cubic.json", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The noise has standard deviation 3 around x^3 on [-4, 4] (range about
  // 128): a fitted model is within a few noise widths.
  EXPECT_LT(JsonNumber(r.out, "test_rmse"), 9.0) << r.out;
  EXPECT_GT(JsonNumber(r.out, "test_log_likelihood"), -4.5) << r.out;
}

TEST(TagiTrain, CsvRegressionEndToEnd) {
  TempDir dir;
  // y = 2 x1 - x2 + 0.5, no noise.
  std::string train = "x1,x2,y\n";
  std::string test = "x1,x2,y\n";
  for (int i = 0; i < 400; ++i) {
    const double x1 = (i % 20) / 10.0 - 1.0;
    const double x2 = (i / 20) / 10.0 - 1.0;
    absl::StrAppend(i % 4 == 0 ? &test : &train, x1, ",", x2, ",", 2 * x1 - x2 + 0.5, "\n");
  }
  const std::string job = dir.Write("job.json", absl::StrCat(R"({
    "layers": [{"kind": "LINEAR", "inFeatures": 2, "outFeatures": 32}, {"kind": "RELU"},
               {"kind": "LINEAR", "inFeatures": 32, "outFeatures": 1}],
    "head": {"regression": {}},
    "data": {"kind": "CSV", "trainCsv": ")", dir.Write("train.csv", train), R"(",
             "testCsv": ")", dir.Write("test.csv", test), R"(", "csvHasHeader": true},
    "noise": {"sigmaV": 0.1}, "batchSize": 8, "epochs": 20, "seed": 3})"));
  const ProcessResult r = Train({job, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // The target's standard deviation is about 1.3; a fit is far below it.
  EXPECT_LT(JsonNumber(r.out, "test_rmse"), 0.3) << r.out;
}

// The heads of docs/heads.md through the real binary, with their
// calibration figures in the --json line.

std::string ReadExample(const std::string& name) {
  std::ifstream in(kExamples + "/" + name);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// examples/fmnist_cnn_remax.json is a valid job (its network under --eval
// of a one-epoch subset run), and a one-hot Remax MLP learns Fashion-MNIST:
// its accuracy, NLL, ECE and Brier come back and --eval reproduces them.
TEST(TagiTrain, OneHotRemaxHeadLearnsAndReportsCalibration) {
  if (!HaveFashionMnist()) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  TempDir dir;
  for (const char* output : {"remax", "closedFormSoftmax"}) {
    SCOPED_TRACE(output);
    const std::string job = dir.Write("onehot.json", absl::StrCat(R"({
      "layers": [{"linear": {"inFeatures": 784, "outFeatures": 64}}, {"relu": {}},
                 {"linear": {"inFeatures": 64, "outFeatures": 10}}, {")", output, R"(": {}}],
      "head": {"classification": {"numClasses": 10, "output": "ONE_HOT"}},
      "data": {"kind": "FASHION_MNIST", "trainLimit": 3000, "testLimit": 1000},
      "noise": {"sigmaV": 0.1}, "batchSize": 16, "epochs": 2, "seed": 5})"));
    const std::string model = dir.File("onehot.tagi");
    const ProcessResult r = Train({job, "--out", model, "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_GE(JsonNumber(r.out, "test_accuracy"), 0.5) << r.out;  // five times chance
    const double ece = JsonNumber(r.out, "test_ece");
    EXPECT_GT(ece, 0.0) << r.out;
    EXPECT_LT(ece, 0.3) << r.out;
    EXPECT_NEAR(JsonNumber(r.out, "test_nll"), -JsonNumber(r.out, "test_log_likelihood"), 1e-6);
    const double brier = JsonNumber(r.out, "test_brier");
    EXPECT_GT(brier, 0.0);
    EXPECT_LT(brier, 1.0);
    const ProcessResult e = Train({"--eval", model, job, "--json"});
    ASSERT_EQ(e.exit_code, 0) << e.err;
    for (const char* key : {"test_accuracy", "test_ece", "test_brier", "test_nll"}) {
      EXPECT_NEAR(JsonNumber(e.out, key), JsonNumber(r.out, key), 1e-9) << key;
    }
  }
  // The example's CNN with its Remax head validates and runs (a few steps).
  const std::string limited = absl::StrReplaceAll(
      ReadExample("fmnist_cnn_remax.json"),
      {{R"("data": {"kind": "FASHION_MNIST"})",
        R"("data": {"kind": "FASHION_MNIST", "trainLimit": 256, "testLimit": 128})"}});
  const ProcessResult cnn = Train({dir.Write("cnn.json", limited), "--epochs", "1", "--json"});
  ASSERT_EQ(cnn.exit_code, 0) << cnn.err;
  EXPECT_FALSE(std::isnan(JsonNumber(cnn.out, "test_ece"))) << cnn.out;
}

// examples/heteroscedastic.json on the data tools/heteroscedastic_data.py
// writes (noise sd from 0.05 to 1.05 across the input): the learned noise
// gives intervals near their nominal coverage, and the mean predictive sd
// is of the data's noise, not of one sigma_v.
TEST(TagiTrain, HeteroscedasticExampleCoversItsIntervals) {
  TempDir dir;
  const ProcessResult made =
      RunProcess({TAGI_PYTHON, std::string(TAGI_SOURCE_DIR) + "/tools/heteroscedastic_data.py",
                  dir.File("data"), "--train", "1000", "--test", "2000"},
                 absl::Seconds(60));
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::string text = absl::StrReplaceAll(
      ReadExample("heteroscedastic.json"), {{"build/heteroscedastic", dir.File("data")}});
  const ProcessResult r = Train({dir.Write("job.json", text), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const double c68 = JsonNumber(r.out, "test_coverage_68");
  const double c95 = JsonNumber(r.out, "test_coverage_95");
  EXPECT_GT(c68, 0.58) << r.out;
  EXPECT_LT(c68, 0.78) << r.out;
  EXPECT_GT(c95, 0.88) << r.out;
  EXPECT_LT(c95, 0.99) << r.out;
  // The noise's sd averages 0.05 + 0.25 E[(x + 1)^2] = 0.38 over x ~ U[-1, 1].
  const double sd = JsonNumber(r.out, "test_mean_std");
  EXPECT_GT(sd, 0.25) << r.out;
  EXPECT_LT(sd, 0.55) << r.out;
}

// The same data under a homoscedastic head with one sigma_v: a refusal of
// the heteroscedastic example's network names both, and the plain head
// trains (its coverage is reported too).
TEST(TagiTrain, HomoscedasticHeadOnEvenExpIsRefusedNamingBoth) {
  TempDir dir;
  const std::string text = absl::StrReplaceAll(
      ReadExample("heteroscedastic.json"),
      {{R"("heteroscedastic": true)", R"("heteroscedastic": false)"},
       {"build/heteroscedastic", dir.File("data")}});
  const ProcessResult r = Train({dir.Write("job.json", text)});
  ExpectCleanFailure(r, 1, "layers[5] (EVEN_EXP) needs {\"regression\": {\"heteroscedastic\": true}}");
}

// CIFAR-10 files in the data set's binary layout: class k is a colour
// (red 24 k, green 216 - 24 k, blue 96) plus noise in 0..31, so a small network can
// tell the classes apart.
void WriteCifar10(const TempDir& dir, int per_file) {
  uint32_t state = 12345;
  auto noise = [&state] {
    state = state * 1664525u + 1013904223u;
    return static_cast<int>(state >> 27);  // 0..31
  };
  auto file = [&](int records) {
    std::string out;
    for (int r = 0; r < records; ++r) {
      const int k = noise() % 10;
      out.push_back(static_cast<char>(k));
      const int base[3] = {k * 24, 216 - k * 24, 96};
      for (int c = 0; c < 3; ++c) {
        for (int i = 0; i < 1024; ++i) out.push_back(static_cast<char>(base[c] + noise()));
      }
    }
    return out;
  };
  for (int i = 1; i <= 5; ++i) dir.Write(absl::StrCat("data_batch_", i, ".bin"), file(per_file));
  dir.Write("test_batch.bin", file(200));
}

// A CIFAR10 job trains with crops and flips (the input defaults to
// 3x32x32), and its model file carries the per-channel normalisation:
// --eval reproduces the accuracy exactly. The augmented run is repeatable.
TEST(TagiTrain, Cifar10WithAugmentationTrainsAndEvaluatesFromItsFile) {
  TempDir dir;
  WriteCifar10(dir, 100);
  const std::string job = dir.Write("cifar.json", absl::StrCat(R"({
    "layers": [{"linear": {"inFeatures": 3072, "outFeatures": 32}}, {"relu": {}},
               {"linear": {"inFeatures": 32, "outFeatures": 11}}],
    "head": {"classification": {"numClasses": 10}},
    "data": {"kind": "CIFAR10", "cifar10Dir": ")", dir.path(), R"(",
             "augment": {"randomCropPadding": 4, "horizontalFlip": true}},
    "noise": {"sigmaV": 1.0}, "batchSize": 10, "epochs": 3, "seed": 9})"));
  const std::string model = dir.File("cifar.tagi");
  const ProcessResult r = Train({job, "--out", model, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("500 training / 200 test samples"));
  // It learns (45-60 % after 150 steps here, with or without augmentation;
  // chance is 10 %).
  EXPECT_GE(JsonNumber(r.out, "test_accuracy"), 0.3) << r.err;
  const ProcessResult e = Train({"--eval", model, job, "--json"});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NEAR(JsonNumber(e.out, "test_accuracy"), JsonNumber(r.out, "test_accuracy"), 1e-9);
  EXPECT_NEAR(JsonNumber(e.out, "test_log_likelihood"), JsonNumber(r.out, "test_log_likelihood"),
              1e-6);
  const ProcessResult again = Train({job, "--json"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(JsonString(again.out, "parameter_checksum"), JsonString(r.out, "parameter_checksum"));
}

TEST(TagiTrain, Cifar10BadFileIsAClearError) {
  TempDir dir;
  WriteCifar10(dir, 2);
  dir.Write("data_batch_3.bin", std::string(3073 * 2 + 7, '\1'));
  const std::string job = dir.Write("cifar.json", absl::StrCat(R"({
    "layers": [{"linear": {"inFeatures": 3072, "outFeatures": 11}}],
    "head": {"classification": {"numClasses": 10}},
    "data": {"kind": "CIFAR10", "cifar10Dir": ")", dir.path(), R"("},
    "noise": {"sigmaV": 1.0}, "batchSize": 4, "epochs": 1})"));
  ExpectCleanFailure(Train({job}), 1,
                     dir.File("data_batch_3.bin") +
                         ": 6153 bytes is not a whole number of 3073-byte records");
}

TEST(TagiTrain, MissingJobFileIsAClearError) {
  TempDir dir;
  ExpectCleanFailure(Train({dir.File("nope.json")}), 1, "nope.json");
}

TEST(TagiTrain, MalformedJsonIsAClearError) {
  TempDir dir;
  ExpectCleanFailure(Train({dir.Write("job.json", "{\"layers\": [")}), 1,
                     "not valid JobSpec JSON");
}

TEST(TagiTrain, InvalidJobNamesEveryWrongField) {
  TempDir dir;
  const std::string job = dir.Write("job.json", R"({
    "layers": [{"kind": "LINEAR", "inFeatures": 784, "outFeatures": 100}, {"kind": "RELU"},
               {"kind": "LINEAR", "inFeatures": 50, "outFeatures": 10}],
    "head": {"classification": {"numClasses": 10}},
    "data": {"kind": "FASHION_MNIST"},
    "noise": {"sigmaV": -1}, "batchSize": 0, "epochs": 1})");
  const ProcessResult r = Train({job, "--out", dir.File("m.tagi")});
  ExpectCleanFailure(r, 1, "layers[2].inFeatures: 50 does not match");
  EXPECT_THAT(r.err, HasSubstr("need 11"));
  EXPECT_THAT(r.err, HasSubstr("noise.sigmaV"));
  EXPECT_THAT(r.err, HasSubstr("batchSize: 0"));
  EXPECT_FALSE(std::filesystem::exists(dir.File("m.tagi")));
}

TEST(TagiTrain, MissingDataFileIsAClearError) {
  TempDir dir;
  const std::string job = dir.Write("job.json", absl::StrCat(R"({
    "layers": [{"kind": "LINEAR", "inFeatures": 784, "outFeatures": 11}],
    "head": {"classification": {"numClasses": 10}},
    "data": {"kind": "MNIST", "trainImages": ")", dir.File("missing-images"), R"(",
             "trainLabels": "/nonexistent/l", "testImages": "/nonexistent/ti",
             "testLabels": "/nonexistent/tl"},
    "noise": {"sigmaV": 1}, "batchSize": 4, "epochs": 1})"));
  const ProcessResult r = Train({job});
  ExpectCleanFailure(r, 1, "missing-images");
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/tl"));
}

TEST(TagiTrain, CorruptDataFileIsAClearError) {
  TempDir dir;
  const std::string junk = dir.Write("junk.idx", "this is not an IDX file at all");
  const std::string job = dir.Write("job.json", absl::StrCat(R"({
    "layers": [{"kind": "LINEAR", "inFeatures": 784, "outFeatures": 11}],
    "head": {"classification": {"numClasses": 10}},
    "data": {"kind": "MNIST", "trainImages": ")", junk, R"(", "trainLabels": ")", junk,
             R"(", "testImages": ")", junk, R"(", "testLabels": ")", junk, R"("},
    "noise": {"sigmaV": 1}, "batchSize": 4, "epochs": 1})"));
  ExpectCleanFailure(Train({job}), 1, "junk.idx");
}

TEST(TagiTrain, EvalRefusesCorruptAndMismatchedModels) {
  TempDir dir;
  const std::string job = dir.Write("toy.json", R"({
    "layers": [{"kind": "LINEAR", "inFeatures": 1, "outFeatures": 8}, {"kind": "RELU"},
               {"kind": "LINEAR", "inFeatures": 8, "outFeatures": 1}],
    "head": {"regression": {}}, "data": {"kind": "TOY_CUBIC"},
    "noise": {"sigmaV": 0.3}, "batchSize": 4, "epochs": 1, "seed": 1})");
  const std::string model = dir.File("m.tagi");
  ASSERT_EQ(Train({job, "--out", model}).exit_code, 0);

  // Flip one bit in the middle of the file.
  std::string bytes;
  {
    std::ifstream in(model, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  ExpectCleanFailure(Train({"--eval", dir.Write("flip.tagi", flipped), job}), 1, "checksum");
  ExpectCleanFailure(Train({"--eval", dir.Write("cut.tagi", bytes.substr(0, bytes.size() - 7)),
                            job}),
                     1, "truncated");

  const std::string other = dir.Write("other.json", R"({
    "layers": [{"kind": "LINEAR", "inFeatures": 1, "outFeatures": 16}, {"kind": "RELU"},
               {"kind": "LINEAR", "inFeatures": 16, "outFeatures": 1}],
    "head": {"regression": {}}, "data": {"kind": "TOY_CUBIC"},
    "noise": {"sigmaV": 0.3}, "batchSize": 4, "epochs": 1, "seed": 1})");
  ExpectCleanFailure(Train({"--eval", model, other}), 1, "architecture mismatch");
}

// Every binary's --help lists its own flags (absl's default filter matched
// none of ours and printed "No flags matched.").
TEST(Binaries, HelpListsTheProgramsOwnFlags) {
  const struct {
    const char* binary;
    const char* flag;
  } cases[] = {{"tagi-train", "--epochs"},
               {"tagi-coordinator", "--world"},
               {"tagi-worker", "--coord"},
               {"tagictl", "--coord"}};
  for (const auto& c : cases) {
    const ProcessResult r =
        RunProcess({std::string(TAGI_BIN_DIR) + "/" + c.binary, "--help"}, absl::Seconds(30));
    const std::string text = r.out + r.err;
    EXPECT_THAT(text, HasSubstr(std::string(c.flag) + " (")) << c.binary;
    EXPECT_THAT(text, ::testing::Not(HasSubstr("No flags matched"))) << c.binary;
  }
}

TEST(TagiTrain, UsageErrorsExitWithTwo) {
  ExpectCleanFailure(Train({}), 2, "expected exactly one job file");
  ExpectCleanFailure(Train({"a.json", "b.json"}), 2, "expected exactly one job file");
  ExpectCleanFailure(Train({kExamples + "/toy_cubic.json", "--threads", "0"}), 2, "--threads");
}

// No host has 1024 GPUs: whether the build has CUDA and the host a GPU or
// not, the message names the device and the run fails cleanly.
TEST(TagiTrain, AbsentCudaDeviceFailsCleanly) {
  TempDir dir;
  const std::string job = dir.Write("job.json", R"({
    "layers": [{"kind": "LINEAR", "inFeatures": 1, "outFeatures": 1}],
    "head": {"regression": {}}, "data": {"kind": "TOY_CUBIC"},
    "noise": {"sigmaV": 1}, "batchSize": 4, "epochs": 1, "device": "cuda:1023"})");
  ExpectCleanFailure(Train({job}), 1, "cuda:1023");
  const std::string cpu_job = dir.Write("cpu.json", R"({
    "layers": [{"kind": "LINEAR", "inFeatures": 1, "outFeatures": 1}],
    "head": {"regression": {}}, "data": {"kind": "TOY_CUBIC"},
    "noise": {"sigmaV": 1}, "batchSize": 4, "epochs": 1})");
  ExpectCleanFailure(Train({cpu_job, "--device", "cuda:1023"}), 1, "cuda:1023");
}

}  // namespace
}  // namespace tagi
