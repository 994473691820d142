// The model spec: shape inference, validation (every bad network gets a
// message naming the layer's path and the field), the two layer forms of
// the proto and the round trip through tagi.v1.Network.
#include "spec/network.h"

#include <google/protobuf/util/json_util.h>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "spec/network_proto.h"
#include "tests/spec/spec_builders.h"

namespace tagi::spec {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using tagi::v1::Layer;
using namespace tagi::spec::testing;  // NOLINT: builders

std::string Problems(const Architecture& arch) {
  const absl::Status st = ValidateArchitecture(arch);
  return st.ok() ? "" : std::string(st.message());
}

TEST(Network, ResidualMlpInfersShapesAndCountsNestedParameters) {
  const Architecture a = Regression(
      {784, 1, 1}, {Lin(784, 16), Act(), Res({Lin(16, 16), Act(), Lin(16, 16)}),
                    Res({Lin(16, 8), Act(), Lin(8, 16)}, {Lin(16, 16)}), Lin(16, 3)});
  EXPECT_TRUE(ValidateArchitecture(a).ok()) << ValidateArchitecture(a);
  EXPECT_EQ(a.output_width(), 3u);
  const uint64_t want = 785 * 16 + 2 * 17 * 16 + (17 * 8 + 9 * 16 + 17 * 16) + 17 * 3;
  EXPECT_EQ(a.num_parameters(), want);
  EXPECT_EQ(a.num_state(), 0u);
  EXPECT_EQ(a.ToString(),
            "784-16-RELU-RES[16-RELU-16|id]-RES[8-RELU-16|16]-3 regression");
}

TEST(Network, ABlockMayComeFirstAndNest) {
  const Architecture a = Regression(
      {4, 1, 1}, {Res({Res({Lin(4, 4)}), Act(v1::Layer::TANH)}, {Lin(4, 4)}), Lin(4, 2)});
  EXPECT_TRUE(ValidateArchitecture(a).ok()) << ValidateArchitecture(a);
}

TEST(Network, EveryBadNetworkNamesTheLayerPathAndField) {
  const struct {
    Architecture arch;
    std::vector<const char*> want;
  } cases[] = {
      {Regression({4, 1, 1}, {Lin(5, 2)}),
       {"layers[0].in_features: 5 does not match its input, which has 4 features"}},
      {Regression({4, 1, 1}, {Lin(4, 0)}), {"layers[0].out_features: 0; expected 1..65536"}},
      {Regression({4, 1, 1}, {Res({Lin(4, 3), Act(), Lin(4, 4)})}),
       {"layers[0].residual.main[2].in_features: 4 does not match its input, which has 3"}},
      {Regression({4, 1, 1}, {Res({Lin(4, 3)})}),
       {"layers[0].residual: the main branch ends in shape 3 but the identity shortcut in 4"}},
      {Regression({4, 1, 1}, {Res({Lin(4, 3)}, {Lin(4, 5)})}),
       {"layers[0].residual: the main branch ends in shape 3 but the shortcut in 5"}},
      {Regression({4, 1, 1}, {Res({})}), {"layers[0].residual.main: empty"}},
      {Regression({4, 1, 1}, {Lin(4, 4), Act(v1::Layer::LEAKY_RELU, 1.5f)}),
       {"layers[1].negative_slope: 1.5; expected a value in (0, 1)"}},
      {Regression({4, 1, 1}, {Lin(4, 4), Act(static_cast<LayerKind>(99))}),
       {"layers[1].kind: missing or unknown; expected one of LINEAR", "RESIDUAL"}},
      {Regression({4, 1, 1}, {}), {"layers: empty"}},
      {Regression({0, 1, 1}, {Lin(4, 4)}), {"input: shape 0x1x1"}},
  };
  for (const auto& c : cases) {
    const std::string p = Problems(c.arch);
    for (const char* w : c.want) EXPECT_THAT(p, HasSubstr(w)) << c.arch.ToString();
  }
}

TEST(Network, FieldsAKindDoesNotTakeAreRefused) {
  LayerSpec relu = Act();
  relu.in = 4;
  EXPECT_THAT(Problems(Regression({4, 1, 1}, {relu})),
              HasSubstr("layers[0]: holds fields a RELU layer does not take"));
  LayerSpec linear = Lin(4, 4);
  linear.main = {Act()};
  EXPECT_THAT(Problems(Regression({4, 1, 1}, {linear})),
              HasSubstr("layers[0]: holds fields a LINEAR layer does not take"));
}

TEST(Network, NestingAndLayerCountAreBounded) {
  LayerSpec deep = Lin(4, 4);
  for (int i = 0; i <= kMaxNesting; ++i) deep = Res({deep});
  EXPECT_THAT(Problems(Regression({4, 1, 1}, {deep})),
              HasSubstr("residual blocks nest more than 16 deep"));
  std::vector<LayerSpec> many(kMaxLayers, Act());
  EXPECT_THAT(Problems(Regression({4, 1, 1}, {Res(many)})),
              HasSubstr("layers: 257 layers (nested ones included); at most 256"));
}

TEST(Network, HierarchicalSoftmaxNeedsItsWidthAtTheEnd) {
  Architecture a = Regression({4, 1, 1}, {Res({Lin(4, 4)}), Lin(4, 10)});
  a.head = {HeadKind::kClassification, 10};
  EXPECT_THAT(Problems(a), AllOf(HasSubstr("10 outputs"), HasSubstr("need 11")));
}

TEST(NetworkProto, RoundTripsThroughTheOneofForm) {
  Architecture a = Regression({1, 28, 28}, {Lin(784, 8), Act(v1::Layer::LEAKY_RELU, 0.25f),
                                            Res({Lin(8, 8), Act(v1::Layer::MIXTURE_RELU)},
                                                {Lin(8, 8)}),
                                            Res({Act(v1::Layer::SIGMOID)}), Lin(8, 11)});
  a.head = {HeadKind::kClassification, 10};
  ASSERT_TRUE(ValidateArchitecture(a).ok()) << ValidateArchitecture(a);
  const tagi::v1::Network proto = ArchitectureToProto(a);
  EXPECT_TRUE(proto.layers(0).has_linear());
  EXPECT_EQ(proto.layers(0).kind(), Layer::KIND_UNSPECIFIED);  // the first format is not written
  EXPECT_TRUE(proto.layers(2).residual().shortcut(0).has_linear());
  auto back = ArchitectureFromProto(proto);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, a);
}

TEST(NetworkProto, FirstFormatMigratesByOneRule) {
  const auto job = ParseJobSpecJson(R"({
    "layers": [
      {"kind": "LINEAR", "inFeatures": 784, "outFeatures": 16},
      {"kind": "LEAKY_RELU"},
      {"residual": {"main": [{"linear": {"inFeatures": 16, "outFeatures": 16}}, {"relu": {}}]}},
      {"linear": {"inFeatures": 16, "outFeatures": 11}}
    ],
    "head": {"classification": {"numClasses": 10}},
    "data": {"kind": "FASHION_MNIST"}, "noise": {"sigmaV": 1}, "batchSize": 4, "epochs": 1
  })");
  ASSERT_TRUE(job.ok()) << job.status();
  auto arch = JobArchitecture(*job);
  ASSERT_TRUE(arch.ok()) << arch.status();
  EXPECT_EQ(arch->input, (Shape{784, 1, 1}));
  EXPECT_EQ(arch->layers[0], Lin(784, 16));
  EXPECT_EQ(arch->layers[1], Act(v1::Layer::LEAKY_RELU, 0.1f));
  EXPECT_EQ(arch->layers[2], Res({Lin(16, 16), Act()}));
  EXPECT_TRUE(ValidateJobSpec(*job).ok()) << ValidateJobSpec(*job);
}

TEST(NetworkProto, BadLayerFormsAreNamed) {
  tagi::v1::Network n;
  n.mutable_input()->set_channels(4);
  n.mutable_input()->set_height(1);
  n.mutable_input()->set_width(1);
  n.mutable_head()->mutable_regression();
  Layer* both = n.add_layers();
  both->set_kind(Layer::LINEAR);
  both->mutable_relu();
  Layer* res = n.add_layers();
  res->set_kind(Layer::RESIDUAL);
  Layer* relu = n.add_layers();
  relu->set_kind(Layer::RELU);
  relu->set_in_features(3);
  Layer* slope = n.add_layers();
  slope->set_kind(Layer::TANH);
  slope->set_negative_slope(0.2f);
  const absl::Status st = ArchitectureFromProto(n).status();
  EXPECT_THAT(std::string(st.message()),
              AllOf(HasSubstr("layers[0]: give either the per-kind form ({\"relu\": {...}})"),
                    HasSubstr("layers[1].kind: RESIDUAL has only the per-kind form"),
                    HasSubstr("layers[2]: RELU keeps the width of its input"),
                    HasSubstr("layers[3].negative_slope: only LEAKY_RELU takes a slope")));
}

TEST(NetworkProto, JobInputShapeMustMatchTheData) {
  auto job = ParseJobSpecJson(R"({
    "input": {"channels": 1, "height": 28, "width": 27},
    "layers": [{"linear": {"inFeatures": 756, "outFeatures": 11}}],
    "head": {"classification": {"numClasses": 10}},
    "data": {"kind": "FASHION_MNIST"}, "noise": {"sigmaV": 1}, "batchSize": 4, "epochs": 1
  })");
  ASSERT_TRUE(job.ok());
  EXPECT_THAT(std::string(ValidateJobSpec(*job).message()),
              HasSubstr("input: shape 1x28x27 has 756 units per sample but the FASHION_MNIST "
                        "data has 784"));
  job->mutable_input()->set_width(28);
  job->mutable_layers(0)->mutable_linear()->set_in_features(784);
  EXPECT_TRUE(ValidateJobSpec(*job).ok()) << ValidateJobSpec(*job);
}

}  // namespace
}  // namespace tagi::spec
