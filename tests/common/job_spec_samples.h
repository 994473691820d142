// Sample job specs for the job_spec tests: a valid Fashion-MNIST
// classifier and a valid CSV regression, each test breaking one thing.
#ifndef TAGI_TESTS_COMMON_JOB_SPEC_SAMPLES_H_
#define TAGI_TESTS_COMMON_JOB_SPEC_SAMPLES_H_

#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "tagi/v1/job.pb.h"

namespace tagi::test {

// A valid Fashion-MNIST classifier.
inline constexpr char kValidJson[] = R"json({
  "name": "t",
  "layers": [
    {"kind": "LINEAR", "inFeatures": 784, "outFeatures": 32},
    {"kind": "RELU"},
    {"kind": "LINEAR", "inFeatures": 32, "outFeatures": 11}
  ],
  "head": {"classification": {"numClasses": 10}},
  "data": {"kind": "FASHION_MNIST"},
  "noise": {"sigmaV": 1.0},
  "batchSize": 16,
  "epochs": 2,
  "device": "cpu"
})json";

inline tagi::v1::JobSpec ValidSpec() {
  auto spec = ParseJobSpecJson(kValidJson);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// A valid regression on CSV files with one target.
inline tagi::v1::JobSpec CsvSpec() {
  tagi::v1::JobSpec spec = ValidSpec();
  spec.mutable_head()->mutable_regression();
  spec.mutable_data()->set_kind(tagi::v1::DataSpec::CSV);
  spec.mutable_data()->set_train_csv("train.csv");
  spec.mutable_data()->set_test_csv("test.csv");
  spec.mutable_layers(0)->set_in_features(13);
  spec.mutable_layers(2)->set_out_features(1);
  return spec;
}

}  // namespace tagi::test

#endif  // TAGI_TESTS_COMMON_JOB_SPEC_SAMPLES_H_
