// tagictl validate: the coordinator's validation of a job file, run locally.
#include "ctl/validate.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

using ::testing::HasSubstr;

std::string Write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(ValidateJobFile, AnExampleIsValidAndDescribed) {
  const Validation v = ValidateJobFile(std::string(TAGI_SOURCE_DIR) + "/examples/fmnist_fnn.json");
  ASSERT_TRUE(v.valid) << v.text;
  EXPECT_THAT(v.text, HasSubstr("valid: 784-"));
  EXPECT_THAT(v.text, HasSubstr("parameters"));
  EXPECT_THAT(v.json, HasSubstr("\"valid\": true"));
  EXPECT_THAT(v.json, HasSubstr("\"output\": [11, 1, 1]"));
}

// The memory a training step takes at the job's batch, as the planner lays
// it out: the CNN at batch 128 shares its innovations (90.3 MiB each in
// its own place, 55.9 by lifetime), and the units no backward reads (the
// convolutions' and the first Linear's outputs, read only by activations,
// the norms' outputs, read only by pools, and every variance but the
// input's and the output's) use the same region in the forward.
TEST(ValidateJobFile, ItSaysWhatMemoryATrainingStepTakes) {
  const Validation v = ValidateJobFile(std::string(TAGI_SOURCE_DIR) + "/examples/fmnist_cnn.json");
  ASSERT_TRUE(v.valid) << v.text;
  EXPECT_THAT(v.text, HasSubstr("memory of a training step at batch 128 (CPU engine): 115.3 MiB"));
  EXPECT_THAT(v.text, HasSubstr("units kept for the backward 18.0"));
  EXPECT_THAT(v.text, HasSubstr("shared by lifetime 55.9: units of the forward only 73.1 and "
                                "innovations 90.3 unshared"));
  EXPECT_THAT(v.json, HasSubstr("\"memory\": {\"batch\": 128, \"totalBytes\": "));
  EXPECT_THAT(v.json, HasSubstr("\"sharedBytes\": 58633216"));
}

TEST(ValidateJobFile, AShapeMismatchIsRefusedWithItsPath) {
  const std::string path = Write("bad_width.json", R"({
    "layers": [{"linear": {"inFeatures": 784, "outFeatures": 10}},
               {"linear": {"inFeatures": 9, "outFeatures": 11}}],
    "head": {"classification": {"numClasses": 10}},
    "data": {"kind": "FASHION_MNIST"}, "batchSize": 8, "epochs": 1})");
  const Validation v = ValidateJobFile(path);
  EXPECT_FALSE(v.valid);
  EXPECT_THAT(v.text, HasSubstr("invalid"));
  EXPECT_THAT(v.text, HasSubstr("layers[1].inFeatures"));
  EXPECT_THAT(v.json, HasSubstr("\"valid\": false"));
  std::remove(path.c_str());
}

TEST(ValidateJobFile, UnreadableAndMalformedFilesAreRefused) {
  EXPECT_FALSE(ValidateJobFile(::testing::TempDir() + "/no_such_job.json").valid);
  const std::string path = Write("not_json.json", "{\"layers\": [\n\"quote\\\" and a tab\t");
  const Validation v = ValidateJobFile(path);
  EXPECT_FALSE(v.valid);
  // The error goes into valid JSON: quotes and control bytes escaped.
  EXPECT_THAT(v.json, ::testing::Not(HasSubstr("\t")));
  // Bytes that are not UTF-8 in a field name come back escaped, not raw.
  const std::string latin1 = Write("latin1.json", "{\"na\xefve\": 1}");
  const Validation bad = ValidateJobFile(latin1);
  EXPECT_FALSE(bad.valid);
  EXPECT_THAT(bad.json, ::testing::Not(HasSubstr("\xef")));
  std::remove(latin1.c_str());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tagi
