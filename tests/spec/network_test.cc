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

TEST(Network, ImageLayersInferShapesParametersAndState) {
  // The reference's MNIST CNN (docs/maths.md section 15): 28 -> 27 -> 13 -> 9 -> 4.
  Architecture a = Regression(
      {1, 28, 28}, {Conv(1, 32, 4, 1, 1, false), Act(), BN(), Avg(3, 2), Conv(32, 64, 5, 1, 0, false),
                    Act(), BN(), Avg(3, 2), Lin(1024, 256), Act(), Lin(256, 11)});
  a.head = {HeadKind::kClassification, 10};
  ASSERT_TRUE(ValidateArchitecture(a).ok()) << ValidateArchitecture(a);
  EXPECT_EQ(OutputShape({a.layers.begin(), a.layers.begin() + 1}, a.input), (Shape{32, 27, 27}));
  EXPECT_EQ(OutputShape({a.layers.begin(), a.layers.begin() + 4}, a.input), (Shape{32, 13, 13}));
  EXPECT_EQ(OutputShape({a.layers.begin(), a.layers.begin() + 8}, a.input), (Shape{64, 4, 4}));
  // Convolutions 32*16 + 64*32*25, batch norms 2*(32 + 64), linears.
  EXPECT_EQ(a.num_parameters(), 512u + 51200 + 192 + 1024 * 256 + 256 + 256 * 11 + 11);
  // Running mean, variance and the first-batch flag of each batch norm.
  EXPECT_EQ(a.num_state(), (32u + 32 + 1) + (64 + 64 + 1));
  EXPECT_EQ(a.ToString(),
            "1x28x28-CONV(32,k4,s1,p1)-RELU-BN-AVG(k3,s2)-CONV(64,k5,s1)-RELU-BN-AVG(k3,s2)-256-"
            "RELU-11 hsm(10)");
}

TEST(Network, ResNet18ExampleHasTheReferenceParameterCount) {
  auto job = LoadJobSpecFile(TAGI_SOURCE_DIR "/examples/cifar10_resnet18.json");
  ASSERT_TRUE(job.ok()) << job.status();
  auto arch = JobArchitecture(*job);
  ASSERT_TRUE(arch.ok()) << arch.status();
  // docs/maths.md section 15: 11,690,571 parameter means.
  EXPECT_EQ(arch->num_parameters(), 11690571u);
  EXPECT_EQ(arch->output_width(), 11u);
  // Stride-2 blocks halve the map: 32 -> 16 -> 8 -> 4, then the global pool.
  const LayerSpec& block3 = arch->layers[5];
  EXPECT_EQ(OutputShape({block3}, {64, 32, 32}), (Shape{128, 16, 16}));
}

TEST(Network, ImpossibleGeometryIsNamedWithItsSizes) {
  const struct {
    Architecture arch;
    const char* want;
  } cases[] = {
      {Regression({1, 4, 4}, {Conv(1, 2, 5), Lin(2, 1)}),
       "layers[0].kernel_size: 5 is larger than its input's height of 4 (4 with padding)"},
      {Regression({1, 28, 28}, {Conv(1, 2, 3, 2, 1), Lin(2, 1)}),
       "layers[0].stride: height 28 + padding 2 - kernel 3 = 27 is not a multiple of stride 2"},
      {Regression({1, 6, 5}, {Avg(2, 2), Lin(1, 1)}),  // the height divides, the width not
       "layers[0].stride: width 5 + padding 0 - kernel 2 = 3 is not a multiple of stride 2"},
      {Regression({1, 8, 8}, {Avg(2, 2, 1)}), "layers[0].padding_type: padding 1 needs a padding "
                                              "type"},
      {Regression({1, 8, 8}, {Conv(1, 1, 3, 1, 3)}), "layers[0].padding: 3; expected less than "
                                                      "the kernel size 3"},
      {Regression({3, 8, 8}, {Conv(1, 2, 3)}), "layers[0].in_channels: 1 does not match its "
                                                "input, which has 3 channels (shape 3x8x8)"},
      {Regression({3, 8, 8}, {Conv(3, 2, 0)}), "layers[0].kernel_size: 0; expected 1..64"},
      {Regression({3, 8, 8}, {Conv(3, 2, 3, 0)}), "layers[0].stride: 0; expected 1..64"},
      {Regression({3, 8, 8}, {Res({Conv(3, 3, 2, 2)})}),
       "layers[0].residual: the main branch ends in shape 3x4x4 but the identity shortcut in "
       "3x8x8"},
      // 65536 channels of 1x1 through a 64x64 kernel (padding 63): 2^28 units per column.
      {Regression({65536, 1, 1}, {Conv(65536, 1, 64, 1, 63)}),
       "layers[0]: its workspace would take"},
      {Regression({3, 8, 8}, {BN(true, 1.0f)}), "layers[0].momentum: 1; expected a value in [0, 1)"},
      {Regression({3, 8, 8}, {LN(true, 0.0f)}), "layers[0].eps: 0; expected a value in (0, 1]"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(Problems(c.arch), HasSubstr(c.want)) << c.arch.ToString();
  }
  LayerSpec bn = BN();
  bn.in = 4;
  EXPECT_THAT(Problems(Regression({3, 8, 8}, {bn})),
              HasSubstr("layers[0].num_features: 4 does not match its input, which has 3 channels"));
}

TEST(Network, BothPaddingTypesAndStridesPastTheKernel) {
  // ResNet18's stride-2 convolutions: SYMMETRIC p1 does not divide on 32,
  // BOTTOM_RIGHT p1 gives 16; a 1x1 stride-2 projection skips pixels (B6).
  EXPECT_THAT(Problems(Regression({1, 32, 32}, {Conv(1, 1, 3, 2, 1)})), HasSubstr("stride"));
  EXPECT_EQ(OutputShape({Conv(1, 1, 3, 2, 1, true, Layer::BOTTOM_RIGHT)}, {1, 32, 32}),
            (Shape{1, 16, 16}));
  EXPECT_EQ(OutputShape({Conv(2, 3, 1, 2)}, {2, 5, 5}), (Shape{3, 3, 3}));
  // Non-square images (the reference's Q3) and a padded, overlapping pool.
  EXPECT_EQ(OutputShape({Conv(1, 2, 3, 1, 1), Avg(3, 2, 1, Layer::SYMMETRIC)}, {1, 5, 7}),
            (Shape{2, 3, 4}));
  EXPECT_EQ(OutputShape({Max(2, 2, 1, Layer::BOTTOM_RIGHT)}, {1, 5, 3}), (Shape{1, 3, 2}));
}

TEST(Network, BatchNormOverSingleValuesNeedsABatchOfTwo) {
  std::string path;
  EXPECT_EQ(MinTrainBatch(Regression({4, 1, 1}, {Lin(4, 4), BN()}), &path), 2u);
  EXPECT_EQ(path, "layers[1]");
  EXPECT_EQ(MinTrainBatch(Regression({4, 1, 1}, {Res({Lin(4, 4), BN()})}), &path), 2u);
  EXPECT_EQ(path, "layers[0].residual.main[1]");
  EXPECT_EQ(MinTrainBatch(Regression({2, 2, 2}, {Conv(2, 2, 2), BN()}), &path), 2u);  // 1x1 map
  EXPECT_EQ(MinTrainBatch(Regression({2, 2, 2}, {BN(), LN()}), &path), 1u);

  auto job = ParseJobSpecJson(R"({
    "layers": [{"linear": {"inFeatures": 784, "outFeatures": 16}}, {"batchNorm": {}},
               {"linear": {"inFeatures": 16, "outFeatures": 11}}],
    "head": {"classification": {"numClasses": 10}},
    "data": {"kind": "FASHION_MNIST"}, "noise": {"sigmaV": 1}, "batchSize": 1, "epochs": 1
  })");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_THAT(std::string(ValidateJobSpec(*job).message()),
              HasSubstr("batchSize: 1; layers[1] normalises single values over the batch"));
  job->set_batch_size(2);
  EXPECT_TRUE(ValidateJobSpec(*job).ok()) << ValidateJobSpec(*job);
  // Image layers run on CUDA too (issue 13): a cuda device is no reason
  // to refuse them.
  job->set_device("cuda:0");
  EXPECT_TRUE(ValidateJobSpec(*job).ok()) << ValidateJobSpec(*job);
}

TEST(NetworkProto, ImageLayersRoundTripAndTakeTheReferenceDefaults) {
  auto job = ParseJobSpecJson(R"({
    "input": {"channels": 1, "height": 28, "width": 28},
    "layers": [
      {"conv2d": {"inChannels": 1, "outChannels": 4, "kernelSize": 3, "padding": 1}},
      {"batchNorm": {}}, {"layerNorm": {"bias": false}},
      {"maxPool2d": {"kernelSize": 2}}, {"avgPool2d": {"kernelSize": 3, "stride": 2, "padding": 1,
                                                       "paddingType": "BOTTOM_RIGHT"}},
      {"linear": {"inFeatures": 196, "outFeatures": 11}}
    ],
    "head": {"classification": {"numClasses": 10}},
    "data": {"kind": "FASHION_MNIST"}, "noise": {"sigmaV": 1}, "batchSize": 4, "epochs": 1
  })");
  ASSERT_TRUE(job.ok()) << job.status();
  auto arch = JobArchitecture(*job);
  ASSERT_TRUE(arch.ok()) << arch.status();
  const std::vector<LayerSpec>& l = arch->layers;
  EXPECT_EQ(l[0], Conv(1, 4, 3, 1, 1, true, Layer::SYMMETRIC));  // type and bias defaulted
  EXPECT_EQ(l[1], BN(true, 0.9f, 1e-5f));
  EXPECT_EQ(l[2], LN(false));
  EXPECT_EQ(l[3], Max(2, 2));  // stride defaults to the kernel
  EXPECT_EQ(l[4], Avg(3, 2, 1, Layer::BOTTOM_RIGHT));
  auto back = ArchitectureFromProto(ArchitectureToProto(*arch));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, *arch);
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


// ---- Output heads (docs/heads.md) ----

Architecture OneHotNet(LayerKind last, uint32_t width, uint32_t classes) {
  Architecture a = Regression({4, 1, 1}, {Lin(4, 8), Act(), Lin(8, width), Act(last)});
  a.head = {HeadKind::kClassification, classes};
  a.head.one_hot = true;
  return a;
}

Architecture HeteroNet(std::vector<LayerSpec> layers) {
  Architecture a = Regression({2, 1, 1}, std::move(layers));
  a.head.heteroscedastic = true;
  return a;
}

TEST(Heads, TheReferenceHeadsValidate) {
  for (const LayerKind k : {Layer::REMAX, Layer::CLOSED_FORM_SOFTMAX}) {
    const Architecture a = OneHotNet(k, 10, 10);
    EXPECT_TRUE(ValidateArchitecture(a).ok()) << ValidateArchitecture(a);
    EXPECT_THAT(a.ToString(), HasSubstr(" onehot(10)"));
  }
  const Architecture h = HeteroNet({Lin(2, 16), Act(), Lin(16, 2), Act(Layer::EVEN_EXP)});
  EXPECT_TRUE(ValidateArchitecture(h).ok()) << ValidateArchitecture(h);
  EXPECT_EQ(h.ToString(), "2-16-RELU-2-EVEN_EXP heteroscedastic");
  EXPECT_EQ(h.head.units_per_target(), 2u);
}

TEST(Heads, AHeadThatDoesNotFitTheLastLayerIsRefusedNamingBoth) {
  Architecture hsm_on_remax = OneHotNet(Layer::REMAX, 11, 10);
  hsm_on_remax.head.one_hot = false;
  Architecture one_hot_on_linear = Regression({4, 1, 1}, {Lin(4, 10)});
  one_hot_on_linear.head = {HeadKind::kClassification, 10};
  one_hot_on_linear.head.one_hot = true;
  Architecture regression_on_even_exp =
      Regression({2, 1, 1}, {Lin(2, 2), Act(Layer::EVEN_EXP)});
  Architecture regression_on_remax = Regression({2, 1, 1}, {Lin(2, 2), Act(Layer::REMAX)});
  const struct {
    Architecture arch;
    const char* want;
  } cases[] = {
      {hsm_on_remax,
       "head.classification.output: HIERARCHICAL_SOFTMAX reads the last layer's units as tree "
       "nodes, but layers[3] (REMAX) is an output activation"},
      {one_hot_on_linear,
       "head.classification.output: ONE_HOT needs REMAX or CLOSED_FORM_SOFTMAX as the last "
       "layer, but layers[0] (LINEAR) is"},
      {OneHotNet(Layer::CLOSED_FORM_SOFTMAX, 9, 10),
       "layers: the last layer gives 9 outputs but 10 classes one-hot need 10"},
      {OneHotNet(Layer::EVEN_EXP, 10, 10),
       "ONE_HOT needs REMAX or CLOSED_FORM_SOFTMAX as the last layer, but layers[3] (EVEN_EXP)"},
      {HeteroNet({Lin(2, 2)}),
       "head.regression.heteroscedastic: needs EVEN_EXP as the last layer (two outputs per "
       "target: mean and noise), but layers[0] (LINEAR) is"},
      {HeteroNet({Lin(2, 2), Act(Layer::TANH), Act(Layer::EVEN_EXP)}),
       "layers[2] (EVEN_EXP): EVEN_EXP must follow a layer with parameters"},
      {HeteroNet({Lin(2, 3), Act(Layer::EVEN_EXP)}),
       "layers[1]: EVEN_EXP takes [mean, log-noise] pairs; its input has 3 units, an odd number"},
      {regression_on_even_exp,
       "head.regression: layers[1] (EVEN_EXP) needs {\"regression\": {\"heteroscedastic\": "
       "true}}"},
      {regression_on_remax,
       "head.regression: layers[1] (REMAX) needs a classification head with output ONE_HOT"},
  };
  for (const auto& c : cases) {
    EXPECT_THAT(Problems(c.arch), HasSubstr(c.want)) << c.arch.ToString();
  }
}

TEST(Heads, OutputActivationsOnlyEndTheNetwork) {
  Architecture middle = OneHotNet(Layer::REMAX, 4, 4);
  middle.layers.insert(middle.layers.begin() + 2, Act(Layer::REMAX));
  EXPECT_THAT(Problems(middle),
              HasSubstr("layers[2]: REMAX is an output activation; it may only be the "
                        "network's last layer"));
  Architecture in_block = Regression({4, 1, 1}, {Res({Lin(4, 4), Act(Layer::EVEN_EXP)}),
                                                 Lin(4, 2), Act(Layer::EVEN_EXP)});
  in_block.head.heteroscedastic = true;
  EXPECT_THAT(Problems(in_block),
              HasSubstr("layers[0].residual.main[1]: EVEN_EXP is an output activation"));
}

TEST(Heads, TheHeadOptionsRoundTripThroughTheNetworkProto) {
  for (Architecture a : {OneHotNet(Layer::REMAX, 5, 5),
                         HeteroNet({Lin(2, 4), Act(), Lin(4, 4), Act(Layer::EVEN_EXP)})}) {
    const tagi::v1::Network proto = ArchitectureToProto(a);
    auto back = ArchitectureFromProto(proto);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, a);
  }
  tagi::v1::Network unknown = ArchitectureToProto(OneHotNet(Layer::REMAX, 5, 5));
  unknown.mutable_head()->mutable_classification()->set_output(
      static_cast<tagi::v1::Head::ClassOutput>(9));
  EXPECT_THAT(ArchitectureFromProto(unknown).status().message(),
              HasSubstr("head.classification.output: 9 is not a class output"));
}

TEST(Heads, JobFilesNameTheHeadOptionsInJson) {
  tagi::v1::Network n;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(
                  R"({"input": {"channels": 2, "height": 1, "width": 1},
                      "layers": [{"linear": {"inFeatures": 2, "outFeatures": 6}},
                                 {"closedFormSoftmax": {}}],
                      "head": {"classification": {"numClasses": 6, "output": "ONE_HOT"}}})",
                  &n)
                  .ok());
  auto a = ArchitectureFromProto(n);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->head.one_hot);
  EXPECT_EQ(a->layers.back().kind, Layer::CLOSED_FORM_SOFTMAX);
}

}  // namespace
}  // namespace tagi::spec
