// --set FIELD=VALUE on a job spec: every kind of field, and every kind of
// wrong input refused with a message that names it and changes nothing.
#include "common/job_overrides.h"

#include <string>
#include <vector>

#include "common/flags.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tagi {
namespace {

using ::testing::HasSubstr;

tagi::v1::JobSpec Spec() {
  auto spec = ParseJobSpecJson(R"({"name": "toy",
    "layers": [{"linear": {"inFeatures": 1, "outFeatures": 16}}, {"relu": {}},
               {"linear": {"inFeatures": 16, "outFeatures": 1}}],
    "head": {"regression": {}},
    "data": {"kind": "TOY_CUBIC", "toyTrainSize": 200},
    "noise": {"sigmaV": 0.3}, "batchSize": 10, "epochs": 3, "seed": 9, "worldSize": 1})");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

std::string Error(const std::vector<std::string>& sets) {
  tagi::v1::JobSpec spec = Spec();
  const absl::Status st = ApplyOverrides(spec, sets);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_EQ(spec.SerializeAsString(), Spec().SerializeAsString()) << "changed by a refusal";
  return std::string(st.message());
}

TEST(JobOverrides, SetsEveryKindOfValue) {
  tagi::v1::JobSpec spec = Spec();
  const absl::Status st =
      ApplyOverrides(spec, {"epochs=5", "batch_size=32", "data.trainLimit=100",
                            "noise.sigmaV=0.25", "name=tried", "worldSize=4", "reduction=SUM",
                            "data.kind=CSV", "data.csvHasHeader=true",
                            "layers.0.linear.outFeatures=64", "seed=12"});
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(spec.epochs(), 5u);
  EXPECT_EQ(spec.batch_size(), 32u);
  EXPECT_EQ(spec.data().train_limit(), 100u);
  EXPECT_FLOAT_EQ(spec.noise().sigma_v(), 0.25f);
  EXPECT_EQ(spec.name(), "tried");
  EXPECT_EQ(spec.world_size(), 4u);
  EXPECT_EQ(spec.reduction(), tagi::v1::JobSpec::SUM);
  EXPECT_EQ(spec.data().kind(), tagi::v1::DataSpec::CSV);
  EXPECT_TRUE(spec.data().csv_has_header());
  EXPECT_EQ(spec.layers(0).linear().out_features(), 64u);
  EXPECT_EQ(spec.seed(), 12u);
  // Nothing else moved.
  EXPECT_EQ(spec.layers(2).linear().in_features(), 16u);
  EXPECT_EQ(spec.data().toy_train_size(), 200u);
}

TEST(JobOverrides, AStringMayHoldDotsAndEquals) {
  tagi::v1::JobSpec spec = Spec();
  ASSERT_TRUE(ApplyOverride(spec, "data.trainCsv=/data/a=b.v2.csv").ok());
  EXPECT_EQ(spec.data().train_csv(), "/data/a=b.v2.csv");
}

TEST(JobOverrides, RefusesUnknownFieldsWithTheNearestName) {
  EXPECT_THAT(Error({"epoch=2"}),
              HasSubstr("--set epoch=2: the job has no field \"epoch\" (did you mean \"epochs\"?)"));
  EXPECT_THAT(Error({"data.trainLimt=2"}),
              HasSubstr("data has no field \"trainLimt\" (did you mean \"trainLimit\"?)"));
  EXPECT_THAT(Error({"zzzzzzzzzz=1"}), HasSubstr("its fields: name, "));
}

TEST(JobOverrides, RefusesValuesOfTheWrongType) {
  EXPECT_THAT(Error({"epochs=abc"}),
              HasSubstr("epochs is an unsigned 32-bit integer; \"abc\" is not"));
  EXPECT_THAT(Error({"epochs=-1"}), HasSubstr("unsigned 32-bit integer; \"-1\" is not"));
  EXPECT_THAT(Error({"epochs=4294967296"}), HasSubstr("\"4294967296\" is not"));
  EXPECT_THAT(Error({"epochs=2.5"}), HasSubstr("\"2.5\" is not"));
  EXPECT_THAT(Error({"noise.sigmaV=nan"}), HasSubstr("a finite real number; \"nan\" is not"));
  EXPECT_THAT(Error({"data.csvHasHeader=yes"}), HasSubstr("true or false; \"yes\" is not"));
  EXPECT_THAT(Error({"reduction=MEAN"}),
              HasSubstr("reduction is one of REDUCTION_UNSPECIFIED, SUM, AVERAGE; \"MEAN\""));
}

TEST(JobOverrides, RefusesWhatIsNotOneValue) {
  EXPECT_THAT(Error({"data=3"}), HasSubstr("data is a message; set one of its fields: kind, "));
  EXPECT_THAT(Error({"layers=3"}), HasSubstr("layers is a list; name one entry (layers.0...)"));
  EXPECT_THAT(Error({"layers.3.linear.outFeatures=3"}),
              HasSubstr("layers has 3 entries; \"3\" is not one of 0..2"));
  EXPECT_THAT(Error({"layers.x.linear.outFeatures=3"}), HasSubstr("\"x\" is not one of 0..2"));
  EXPECT_THAT(Error({"epochs.x=3"}), HasSubstr("epochs is an unsigned 32-bit integer; it has no"));
  // Making a layer another kind is an edit of the file, not a value.
  EXPECT_THAT(Error({"layers.1.linear.outFeatures=3"}),
              HasSubstr("layers.1 is a relu, not a linear"));
  EXPECT_THAT(Error({"head.classification.numClasses=3"}),
              HasSubstr("head is a regression, not a classification"));
}

TEST(JobOverrides, RefusesMalformedAssignmentsAndFloods) {
  EXPECT_THAT(Error({"epochs"}), HasSubstr("expected FIELD=VALUE"));
  EXPECT_THAT(Error({"=3"}), HasSubstr("expected FIELD=VALUE"));
  EXPECT_THAT(Error({"data..kind=CSV"}), HasSubstr("data has no field \"\""));
  EXPECT_THAT(Error({std::string(5000, 'a') + "=1"}), HasSubstr("5002 bytes; at most 4096"));
  EXPECT_THAT(Error(std::vector<std::string>(257, "epochs=1")),
              HasSubstr("257 --set overrides; at most 256"));
  // All or nothing: the good one before the bad one is not applied.
  EXPECT_THAT(Error({"epochs=9", "epoch=2"}), HasSubstr("epoch=2"));
}

// The command line's --set: every occurrence, in order, each value whole.
std::vector<std::string> Take(std::vector<std::string> args, std::vector<std::string>* rest,
                              absl::Status* st = nullptr) {
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int argc = static_cast<int>(args.size());
  auto values = TakeRepeatedFlag(argc, argv.data(), "set");
  if (st != nullptr) *st = values.status();
  rest->assign(argv.begin(), argv.begin() + argc);
  EXPECT_EQ(argv[argc], nullptr);
  return values.ok() ? *values : std::vector<std::string>{};
}

TEST(TakeRepeatedFlag, TakesEveryOccurrenceWholeAndLeavesTheRest) {
  std::vector<std::string> rest;
  EXPECT_EQ(Take({"tagi-run", "--nproc", "2", "--set", "a=1,2", "job.json", "--set=b.c=x y",
                  "--set_x", "--SET=z", "-set=w", "--", "--set", "q"},
                 &rest),
            (std::vector<std::string>{"a=1,2", "b.c=x y"}));
  EXPECT_EQ(rest, (std::vector<std::string>{"tagi-run", "--nproc", "2", "job.json", "--set_x",
                                            "--SET=z", "-set=w", "--", "--set", "q"}));
  absl::Status st;
  Take({"tagictl", "submit", "--set"}, &rest, &st);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_EQ(st.message(), "--set needs a value");
}

}  // namespace
}  // namespace tagi
