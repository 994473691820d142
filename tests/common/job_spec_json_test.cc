#include <google/protobuf/util/message_differencer.h>

#include <string>

#include "absl/status/status.h"
#include "common/job_spec.h"
#include "spec/network_proto.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/job_spec_samples.h"
#include "tests/testing/scratch_dir.h"

namespace tagi {
namespace {

using ::tagi::test::CsvSpec;
using ::tagi::test::kValidJson;
using ::tagi::test::ValidSpec;
using ::tagi::testing::ScratchDir;
using ::tagi::v1::DataSpec;
using ::tagi::v1::JobSpec;
using ::tagi::v1::Layer;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string ParseError(const std::string& json) {
  auto spec = ParseJobSpecJson(json);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  return std::string(spec.status().message());
}

TEST(JobSpecJson, AcceptsSnakeCaseFieldNames) {
  auto spec = ParseJobSpecJson(R"({"batch_size": 8, "noise": {"sigma_v": 0.5}})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->batch_size(), 8u);
  EXPECT_FLOAT_EQ(spec->noise().sigma_v(), 0.5f);
}

TEST(JobSpecJson, RoundTripKeepsEveryField) {
  JobSpec spec = ValidSpec();
  spec.mutable_layers(1)->set_kind(Layer::LEAKY_RELU);
  spec.mutable_layers(1)->set_negative_slope(0.2f);
  spec.mutable_noise()->set_decay(0.9f);
  spec.set_seed(1234567890123ull);
  auto back = ParseJobSpecJson(JobSpecToJson(spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(spec, *back))
      << JobSpecToJson(*back);
}

// --- JSON ---------------------------------------------------------------------

TEST(JobSpecJson, MalformedJsonIsInvalidArgument) {
  EXPECT_THAT(ParseError(R"({"batchSize": 16,)"), HasSubstr("not valid JobSpec JSON"));
  EXPECT_THAT(ParseError("not json at all"), HasSubstr("not valid JobSpec JSON"));
}

TEST(JobSpecJson, UnknownFieldIsNamed) {
  EXPECT_THAT(ParseError(R"({"batchSize": 16, "learningRate": 0.1})"), HasSubstr("learningRate"));
}

TEST(JobSpecJson, WrongTypeIsNamed) {
  EXPECT_THAT(ParseError(R"({"batchSize": "sixteen"})"), HasSubstr("batchSize"));
  EXPECT_THAT(ParseError(R"({"name": 5})"), HasSubstr("name"));
  EXPECT_THAT(ParseError(R"({"epochs": [1]})"), HasSubstr("epochs"));
  EXPECT_THAT(ParseError(R"({"batchSize": -1})"), HasSubstr("batchSize"));
}

TEST(JobSpecJson, UnknownEnumNameIsNamed) {
  EXPECT_THAT(ParseError(R"({"layers": [{"kind": "CONV3D"}]})"), HasSubstr("CONV3D"));
  EXPECT_THAT(ParseError(R"({"reduction": "MEDIAN"})"), HasSubstr("MEDIAN"));
}

TEST(JobSpecJson, OversizedDocumentIsRefusedBeforeParsing) {
  std::string json = kValidJson;
  json.append(kMaxJobSpecBytes + 1 - json.size(), ' ');  // valid JSON, one byte too long
  const std::string msg = ParseError(json);
  EXPECT_THAT(msg, AllOf(HasSubstr(std::to_string(kMaxJobSpecBytes + 1)),
                         HasSubstr(std::to_string(kMaxJobSpecBytes))));
  json.pop_back();
  EXPECT_TRUE(ParseJobSpecJson(json).ok());
}

TEST(JobSpecJson, LoadingAMissingFileIsNotFoundNamingThePath) {
  ScratchDir dir;
  const std::string path = dir.Path("nope.json");
  auto spec = LoadJobSpecFile(path);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kNotFound) << spec.status();
  EXPECT_THAT(spec.status().message(), HasSubstr(path));
}

TEST(JobSpecJson, LoadingABadFileNamesThePathAndTheProblem) {
  ScratchDir dir;
  const std::string path = dir.Write("bad.json", R"({"epochz": 3})");
  auto spec = LoadJobSpecFile(path);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << spec.status();
  EXPECT_THAT(spec.status().message(), AllOf(HasSubstr(path), HasSubstr("epochz")));
}

TEST(JobSpecJson, LoadingAnOversizedFileIsRefused) {
  ScratchDir dir;
  const std::string path = dir.Write("huge.json", std::string(kMaxJobSpecBytes + 1, ' '));
  auto spec = LoadJobSpecFile(path);
  EXPECT_FALSE(spec.ok());
  EXPECT_THAT(spec.status().message(), HasSubstr(path));
}

// --- Devices, schedules and defaults -------------------------------------------

TEST(ParseDevice, AcceptsCpuAndCudaOrdinals) {
  EXPECT_EQ(*ParseDevice(""), -1);
  EXPECT_EQ(*ParseDevice("cpu"), -1);
  EXPECT_EQ(*ParseDevice("cuda:0"), 0);
  EXPECT_EQ(*ParseDevice("cuda:7"), 7);
  EXPECT_EQ(*ParseDevice("cuda:1023"), 1023);
}

TEST(ParseDevice, RefusesEverythingElse) {
  for (const char* device :
       {"gpu", "cuda", "cuda:", "cuda:x", "cuda:-1", "cuda:1024", "cuda:0 ", " cpu", "cuda:+1"}) {
    auto d = ParseDevice(device);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << device;
    EXPECT_THAT(d.status().message(), HasSubstr("cuda:N")) << device;
  }
}

TEST(SigmaVAtEpoch, DecaysGeometricallyDownToTheFloor) {
  tagi::v1::NoiseSchedule noise;
  noise.set_sigma_v(1.0f);
  noise.set_decay(0.5f);
  noise.set_sigma_v_min(0.2f);
  EXPECT_FLOAT_EQ(SigmaVAtEpoch(noise, 0), 1.0f);
  EXPECT_FLOAT_EQ(SigmaVAtEpoch(noise, 1), 0.5f);
  EXPECT_FLOAT_EQ(SigmaVAtEpoch(noise, 2), 0.25f);
  EXPECT_FLOAT_EQ(SigmaVAtEpoch(noise, 3), 0.2f);  // 0.125 is below the floor
  EXPECT_FLOAT_EQ(SigmaVAtEpoch(noise, 1000), 0.2f);
}

TEST(SigmaVAtEpoch, IsConstantWithoutDecay) {
  tagi::v1::NoiseSchedule noise;
  noise.set_sigma_v(0.7f);
  EXPECT_FLOAT_EQ(SigmaVAtEpoch(noise, 0), 0.7f);
  EXPECT_FLOAT_EQ(SigmaVAtEpoch(noise, 50), 0.7f);
}

TEST(JobSpecDefaults, ApplyWhenFieldsAreUnset) {
  google::protobuf::RepeatedPtrField<Layer> layers;
  layers.Add()->set_kind(Layer::LEAKY_RELU);        // first format, slope unset
  layers.Add()->mutable_leaky_relu();               // per-kind form, slope unset
  layers.Add()->mutable_leaky_relu()->set_negative_slope(0.3f);
  std::vector<std::string> problems;
  const std::vector<spec::LayerSpec> specs = spec::LayersFromProto(layers, &problems);
  EXPECT_TRUE(problems.empty());
  EXPECT_FLOAT_EQ(specs[0].slope, 0.1f);
  EXPECT_FLOAT_EQ(specs[1].slope, 0.1f);
  EXPECT_FLOAT_EQ(specs[2].slope, 0.3f);

  tagi::v1::Init init;
  EXPECT_FLOAT_EQ(InitGainWeight(init), 1.0f);
  EXPECT_FLOAT_EQ(InitGainBias(init), 1.0f);
  init.set_gain_weight(0.5f);
  init.set_gain_bias(0.25f);
  EXPECT_FLOAT_EQ(InitGainWeight(init), 0.5f);
  EXPECT_FLOAT_EQ(InitGainBias(init), 0.25f);

  DataSpec data;
  EXPECT_TRUE(StandardizeData(data));
  EXPECT_EQ(TargetColumns(data), 1u);
  data.set_standardize(false);
  data.set_target_columns(4);
  EXPECT_FALSE(StandardizeData(data));
  EXPECT_EQ(TargetColumns(data), 4u);
}

TEST(JobSpecDefaults, UnsetReductionMeansAverage) {
  JobSpec spec;
  EXPECT_FALSE(IsSumReduction(spec));
  spec.set_reduction(JobSpec::AVERAGE);
  EXPECT_FALSE(IsSumReduction(spec));
  spec.set_reduction(JobSpec::SUM);
  EXPECT_TRUE(IsSumReduction(spec));
}

TEST(JobSpecWidths, FollowTheDataAndTheHead) {
  DataSpec data;
  data.set_kind(DataSpec::FASHION_MNIST);
  EXPECT_EQ(ExpectedInputWidth(data), 784);
  data.set_kind(DataSpec::MNIST);
  EXPECT_EQ(ExpectedInputWidth(data), 784);
  data.set_kind(DataSpec::TOY_CUBIC);
  EXPECT_EQ(ExpectedInputWidth(data), 1);
  data.set_kind(DataSpec::CSV);
  EXPECT_EQ(ExpectedInputWidth(data), 0);

  EXPECT_EQ(ExpectedOutputWidth(ValidSpec()), 11);
  JobSpec csv = CsvSpec();
  csv.mutable_data()->set_target_columns(3);
  EXPECT_EQ(ExpectedOutputWidth(csv), 3);
}

TEST(LayerKindName, NamesKnownAndUnknownKinds) {
  EXPECT_EQ(spec::KindName(Layer::LINEAR), "LINEAR");
  EXPECT_EQ(spec::KindName(Layer::RESIDUAL), "RESIDUAL");
  EXPECT_EQ(spec::KindName(static_cast<Layer::Kind>(99)), "KIND_99");
}

}  // namespace
}  // namespace tagi
