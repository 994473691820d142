#include "common/job_spec.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/job_spec_samples.h"

namespace tagi {
namespace {

using ::tagi::test::CsvSpec;
using ::tagi::test::ValidSpec;
using ::tagi::v1::DataSpec;
using ::tagi::v1::JobSpec;
using ::tagi::v1::Layer;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kExampleJob[] = TAGI_SOURCE_DIR "/examples/fmnist_fnn.json";

// The message of ValidateJobSpec, which must be InvalidArgument.

std::string Problems(const JobSpec& spec) {
  const absl::Status s = ValidateJobSpec(spec);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  return std::string(s.message());
}

TEST(JobSpec, ExampleFileParsesAndValidates) {
  auto spec = LoadJobSpecFile(kExampleJob);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name(), "fmnist-fnn");
  EXPECT_EQ(spec->layers_size(), 5);
  EXPECT_EQ(spec->head().classification().num_classes(), 10u);
  EXPECT_TRUE(IsSumReduction(*spec));
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
}

TEST(JobSpec, ValidBaseSpecsValidate) {
  EXPECT_TRUE(ValidateJobSpec(ValidSpec()).ok()) << ValidateJobSpec(ValidSpec());
  EXPECT_TRUE(ValidateJobSpec(CsvSpec()).ok()) << ValidateJobSpec(CsvSpec());
  JobSpec toy = CsvSpec();
  toy.mutable_data()->Clear();
  toy.mutable_data()->set_kind(DataSpec::TOY_CUBIC);
  toy.mutable_layers(0)->set_in_features(1);
  EXPECT_TRUE(ValidateJobSpec(toy).ok()) << ValidateJobSpec(toy);
}

// --- Layers -----------------------------------------------------------------

TEST(JobSpec, LayerSizesMustChain) {
  JobSpec spec = ValidSpec();
  spec.mutable_layers(2)->set_in_features(64);
  EXPECT_THAT(Problems(spec),
              AllOf(HasSubstr("layers[2].inFeatures"), HasSubstr("64"), HasSubstr("32")));
}

TEST(JobSpec, UnknownLayerKindIsNamed) {
  JobSpec spec = ValidSpec();
  spec.mutable_layers(1)->set_kind(static_cast<Layer::Kind>(42));
  EXPECT_THAT(Problems(spec),
              AllOf(HasSubstr("layers[1].kind"), HasSubstr("LINEAR"), HasSubstr("LEAKY_RELU")));
}

TEST(JobSpec, MissingLayerKindIsNamed) {
  JobSpec spec = ValidSpec();
  spec.mutable_layers(1)->clear_kind();
  EXPECT_THAT(Problems(spec), HasSubstr("layers[1].kind: missing"));
}

// The input's width comes from the data (784 for the IDX sets), so any
// layer may come first, a residual block too; where only the files know
// the width, a first layer that is not LINEAR needs an explicit input.
TEST(JobSpec, AnActivationFirstNeedsAKnownInputWidth) {
  JobSpec spec = ValidSpec();
  Layer* first = spec.mutable_layers()->Add();
  for (int i = spec.layers_size() - 1; i > 0; --i) spec.mutable_layers()->SwapElements(i, i - 1);
  first = spec.mutable_layers(0);
  first->Clear();
  first->set_kind(Layer::TANH);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);

  JobSpec csv = ValidSpec();
  csv.mutable_data()->set_kind(tagi::v1::DataSpec::CSV);
  csv.mutable_data()->set_train_csv("train.csv");
  csv.mutable_data()->set_test_csv("test.csv");
  csv.mutable_head()->mutable_regression();
  csv.mutable_layers(0)->Clear();
  csv.mutable_layers(0)->set_kind(Layer::TANH);
  EXPECT_THAT(Problems(csv), AllOf(HasSubstr("input: missing"), HasSubstr("not LINEAR")));
  csv.mutable_input()->set_channels(784);
  csv.mutable_input()->set_height(1);
  csv.mutable_input()->set_width(1);
  // Now the shapes are inferred from it: TANH keeps 784, which layer 2 does not take.
  EXPECT_THAT(Problems(csv), AllOf(Not(HasSubstr("input: ")),
                                   HasSubstr("layers[2].inFeatures: 32 does not match its "
                                             "input, which has 784 features")));
}

// Every field in range, but 256 layers of 65536 units at batch 65536 would
// need terabytes on each worker: refused at submission, naming the size.
TEST(JobSpec, AModelTooLargeForOneRankIsRefused) {
  JobSpec spec = ValidSpec();
  spec.set_batch_size(kMaxBatchSize);
  spec.mutable_layers(0)->set_out_features(kMaxLayerWidth);
  spec.mutable_layers(2)->set_in_features(kMaxLayerWidth);
  EXPECT_THAT(Problems(spec), AllOf(HasSubstr("layers: the model needs"),
                                    HasSubstr("MiB per rank at batchSize 65536")));
  spec.set_batch_size(16);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobSpec, EmptyLayerListIsRefused) {
  JobSpec spec = ValidSpec();
  spec.clear_layers();
  EXPECT_THAT(Problems(spec), HasSubstr("layers: empty"));
}

TEST(JobSpec, ActivationWithInFeaturesIsRefused) {
  JobSpec spec = ValidSpec();
  spec.mutable_layers(1)->set_in_features(32);
  EXPECT_THAT(Problems(spec), AllOf(HasSubstr("layers[1]"), HasSubstr("inFeatures")));
}

TEST(JobSpec, NegativeSlopeOnANonLeakyLayerIsRefused) {
  JobSpec spec = ValidSpec();
  spec.mutable_layers(1)->set_negative_slope(0.2f);  // layer 1 is RELU
  EXPECT_THAT(Problems(spec), HasSubstr("layers[1].negativeSlope"));
  JobSpec linear = ValidSpec();
  linear.mutable_layers(0)->set_negative_slope(0.2f);
  EXPECT_THAT(Problems(linear), HasSubstr("layers[0].negativeSlope"));
}

TEST(JobSpec, LeakySlopeMustLieInTheOpenUnitInterval) {
  JobSpec spec = ValidSpec();
  spec.mutable_layers(1)->set_kind(Layer::LEAKY_RELU);
  spec.mutable_layers(1)->set_negative_slope(0.2f);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_layers(1)->set_negative_slope(1.5f);
  EXPECT_THAT(Problems(spec), HasSubstr("layers[1].negativeSlope: 1.5"));
}

TEST(JobSpec, LinearWidthsOutsideLimitsAreRefused) {
  JobSpec spec = ValidSpec();
  spec.mutable_layers(2)->set_out_features(0);
  EXPECT_THAT(Problems(spec), HasSubstr("layers[2].outFeatures: 0"));
}

TEST(JobSpec, TooManyParametersAreRefused) {
  JobSpec spec = ValidSpec();
  spec.mutable_layers(0)->set_out_features(kMaxLayerWidth);
  spec.mutable_layers(2)->set_in_features(kMaxLayerWidth);
  // 785 * 65536 + 65537 * 11 parameters is fine; two 65536-wide layers are not.
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  Layer* wide = spec.mutable_layers()->Add();
  *wide = spec.layers(2);
  spec.mutable_layers(2)->set_out_features(kMaxLayerWidth);
  wide->set_in_features(kMaxLayerWidth);
  EXPECT_THAT(Problems(spec), HasSubstr("parameters"));
}

TEST(JobSpec, TooManyLayersAreRefused) {
  JobSpec spec = ValidSpec();
  while (spec.layers_size() <= kMaxLayers) *spec.add_layers() = spec.layers(1);
  EXPECT_THAT(Problems(spec), HasSubstr("layers: 257 layers"));
}

// --- Widths against head and data -----------------------------------------

TEST(JobSpec, LastLinearMustMatchTheHierarchicalSoftmaxWidth) {
  JobSpec spec = ValidSpec();
  spec.mutable_layers(2)->set_out_features(10);  // K = 10 needs 11
  EXPECT_THAT(Problems(spec),
              AllOf(HasSubstr("layers"), HasSubstr("10 outputs"), HasSubstr("need 11")));
}

TEST(JobSpec, LastLinearMustMatchTheRegressionTargets) {
  JobSpec spec = CsvSpec();
  spec.mutable_data()->set_target_columns(3);
  EXPECT_THAT(Problems(spec), AllOf(HasSubstr("1 outputs"), HasSubstr("needs 3")));
  spec.mutable_layers(2)->set_out_features(3);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobSpec, FirstLayerMustTakeTheImageWidth) {
  JobSpec spec = ValidSpec();
  spec.mutable_layers(0)->set_in_features(100);
  EXPECT_THAT(Problems(spec), AllOf(HasSubstr("layers[0].inFeatures: 100"), HasSubstr("784")));
}

// --- Head and data ------------------------------------------------------------

TEST(JobSpec, MissingHeadIsRefused) {
  JobSpec spec = ValidSpec();
  spec.clear_head();
  EXPECT_THAT(Problems(spec), HasSubstr("head: missing"));
}

TEST(JobSpec, OneClassIsRefused) {
  JobSpec spec = ValidSpec();
  spec.mutable_head()->mutable_classification()->set_num_classes(1);
  EXPECT_THAT(Problems(spec), HasSubstr("head.classification.numClasses: 1"));
}

TEST(JobSpec, ImageDataHasTenClasses) {
  JobSpec spec = ValidSpec();
  spec.mutable_head()->mutable_classification()->set_num_classes(16);
  spec.mutable_layers(2)->set_out_features(15);
  EXPECT_THAT(Problems(spec), HasSubstr("head.classification.numClasses: 16"));
}

TEST(JobSpec, ClassificationNeedsLabelledData) {
  JobSpec spec = CsvSpec();
  spec.mutable_head()->mutable_classification()->set_num_classes(2);
  EXPECT_THAT(Problems(spec), AllOf(HasSubstr("head"), HasSubstr("CSV")));
}

TEST(JobSpec, RegressionNeedsNumericData) {
  JobSpec spec = ValidSpec();
  spec.mutable_head()->mutable_regression();
  EXPECT_THAT(Problems(spec), AllOf(HasSubstr("head: regression"), HasSubstr("FASHION_MNIST")));
}

TEST(JobSpec, MissingDataKindIsRefused) {
  JobSpec spec = ValidSpec();
  spec.mutable_data()->clear_kind();
  EXPECT_THAT(Problems(spec), HasSubstr("data.kind: missing"));
}

TEST(JobSpec, MnistNeedsItsPaths) {
  JobSpec spec = ValidSpec();
  spec.mutable_data()->set_kind(DataSpec::MNIST);
  spec.mutable_data()->set_train_images("/d/train-images");
  const std::string msg = Problems(spec);
  EXPECT_THAT(msg, Not(HasSubstr("data.trainImages")));
  EXPECT_THAT(msg, AllOf(HasSubstr("data.trainLabels"), HasSubstr("data.testImages"),
                         HasSubstr("data.testLabels")));
}

TEST(JobSpec, CsvNeedsItsPaths) {
  JobSpec spec = CsvSpec();
  spec.mutable_data()->clear_train_csv();
  spec.mutable_data()->clear_test_csv();
  EXPECT_THAT(Problems(spec), AllOf(HasSubstr("data.trainCsv"), HasSubstr("data.testCsv")));
}

TEST(JobSpec, CsvNeedsAtLeastOneTargetColumn) {
  JobSpec spec = CsvSpec();
  spec.mutable_data()->set_target_columns(0);
  EXPECT_THAT(Problems(spec), HasSubstr("data.targetColumns"));
}

// Found by tests/fuzz/job_spec_fuzz (its check that a valid job yields an
// engine architecture of the widths ExpectedOutputWidth names): a target
// count above INT_MAX became a negative expected width, the head check was
// skipped, and this job validated although its last LINEAR has 1 output.
TEST(JobSpec, TargetColumnsBeyondTheLayerWidthLimitAreRefused) {
  auto spec = ParseJobSpecJson(R"json({"name": "x",
      "layers": [{"kind": "LINEAR", "inFeatures": 13, "outFeatures": 1}],
      "head": {"regression": {}},
      "data": {"kind": "CSV", "trainCsv": "a", "testCsv": "b", "targetColumns": 4294967295},
      "noise": {"sigmaV": 1}, "batchSize": 1, "epochs": 1})json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(Problems(*spec), HasSubstr("data.targetColumns: 4294967295; expected 1..65536"));
  EXPECT_EQ(ExpectedOutputWidth(*spec), 0);

  spec->mutable_data()->set_target_columns(kMaxLayerWidth + 1);
  EXPECT_THAT(Problems(*spec), HasSubstr("data.targetColumns: 65537; expected 1..65536"));
  spec->mutable_data()->set_target_columns(1);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok());
}

// --- CIFAR-10 and augmentation ---------------------------------------------------

// ValidSpec on CIFAR-10: a first LINEAR over the 3072 inputs.
JobSpec Cifar10Spec() {
  JobSpec spec = ValidSpec();
  spec.mutable_data()->set_kind(DataSpec::CIFAR10);
  spec.mutable_data()->set_cifar10_dir("/data/cifar-10-batches-bin");
  spec.mutable_layers(0)->set_in_features(3072);
  return spec;
}

void SetInput(JobSpec& spec, uint32_t c, uint32_t h, uint32_t w) {
  spec.mutable_input()->set_channels(c);
  spec.mutable_input()->set_height(h);
  spec.mutable_input()->set_width(w);
}

TEST(JobSpec, Cifar10InputDefaultsTo3x32x32AndOtherKindsStayFlat) {
  const JobSpec spec = Cifar10Spec();
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(ExpectedInputWidth(spec.data()), 3072);
  auto arch = JobArchitecture(spec);
  ASSERT_TRUE(arch.ok()) << arch.status();
  EXPECT_EQ(arch->input, (spec::Shape{3, 32, 32}));
  auto flat = JobArchitecture(ValidSpec());
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(flat->input, (spec::Shape{784, 1, 1}));
}

TEST(JobSpec, Cifar10ExampleValidatesWithItsAugmentation) {
  auto spec = LoadJobSpecFile(TAGI_SOURCE_DIR "/examples/cifar10_resnet18.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->data().kind(), DataSpec::CIFAR10);
  EXPECT_GT(spec->data().augment().random_crop_padding(), 0u);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
}

TEST(JobSpec, Cifar10NeedsItsDirectoryTenClassesAndItsWidth) {
  JobSpec spec = Cifar10Spec();
  spec.mutable_data()->clear_cifar10_dir();
  EXPECT_THAT(Problems(spec), HasSubstr("data.cifar10Dir: missing; CIFAR10 needs the directory "
                                        "holding data_batch_1.bin .. data_batch_5.bin and "
                                        "test_batch.bin"));
  spec = Cifar10Spec();
  SetInput(spec, 1, 28, 28);
  spec.mutable_layers(0)->set_in_features(784);
  EXPECT_THAT(Problems(spec),
              HasSubstr("input: shape 1x28x28 has 784 units per sample but the CIFAR10 data has "
                        "3072"));
  spec = Cifar10Spec();
  spec.mutable_head()->mutable_classification()->set_num_classes(16);
  spec.mutable_layers(2)->set_out_features(15);
  EXPECT_THAT(Problems(spec),
              HasSubstr("head.classification.numClasses: 16; the CIFAR10 data set has 10"));
  spec = Cifar10Spec();
  spec.mutable_head()->mutable_regression();
  EXPECT_THAT(Problems(spec), HasSubstr("head: regression needs CSV, TOY_CUBIC or NUMPY data, not CIFAR10"));
}

TEST(JobSpec, TheUnknownDataKindMessageListsCifar10) {
  JobSpec spec = ValidSpec();
  spec.mutable_data()->clear_kind();
  EXPECT_THAT(Problems(spec), HasSubstr("TOY_CUBIC, CIFAR10"));
}

TEST(JobSpec, AugmentationOfImagesValidates) {
  JobSpec spec = Cifar10Spec();
  spec.mutable_data()->mutable_augment()->set_random_crop_padding(kMaxCropPadding);
  spec.mutable_data()->mutable_augment()->set_horizontal_flip(true);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  JobSpec fmnist = ValidSpec();
  SetInput(fmnist, 1, 28, 28);
  fmnist.mutable_data()->mutable_augment()->set_random_crop_padding(4);
  EXPECT_TRUE(ValidateJobSpec(fmnist).ok()) << ValidateJobSpec(fmnist);
  // An augmentation that asks for nothing is no augmentation, on any data.
  JobSpec csv = CsvSpec();
  csv.mutable_data()->mutable_augment();
  EXPECT_TRUE(ValidateJobSpec(csv).ok()) << ValidateJobSpec(csv);
}

TEST(JobSpec, AugmentationIsForImageDataOnly) {
  JobSpec spec = CsvSpec();
  spec.mutable_data()->mutable_augment()->set_horizontal_flip(true);
  EXPECT_THAT(Problems(spec), HasSubstr("data.augment: crops and flips are for image data "
                                        "(FASHION_MNIST, MNIST, CIFAR10, NUMPY or "
                                        "IMAGE_FOLDER), not CSV"));
}

TEST(JobSpec, AugmentationNeedsAnImageShapedInput) {
  JobSpec spec = ValidSpec();  // Fashion-MNIST, flat by default
  spec.mutable_data()->mutable_augment()->set_horizontal_flip(true);
  EXPECT_THAT(Problems(spec),
              HasSubstr("data.augment: crops and flips need an image input (height and width > "
                        "1), but the input is 784; give input"));
  SetInput(spec, 28, 28, 1);
  EXPECT_THAT(Problems(spec), HasSubstr("but the input is 28x28x1"));
  SetInput(spec, 1, 28, 28);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobSpec, CropPaddingIsBounded) {
  JobSpec spec = Cifar10Spec();
  spec.mutable_data()->mutable_augment()->set_random_crop_padding(kMaxCropPadding + 1);
  EXPECT_THAT(Problems(spec), HasSubstr("data.augment.randomCropPadding: 17; expected at most 16"));
  // Within 16 but beyond a small image's side.
  SetInput(spec, 48, 8, 8);
  spec.mutable_data()->mutable_augment()->set_random_crop_padding(9);
  EXPECT_THAT(Problems(spec), HasSubstr("data.augment.randomCropPadding: 9; expected at most the "
                                        "image's height and width (input 48x8x8)"));
  spec.mutable_data()->mutable_augment()->set_random_crop_padding(8);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

// --- Training -----------------------------------------------------------------

TEST(JobSpec, ZeroBatchSizeIsRefused) {
  JobSpec spec = ValidSpec();
  spec.set_batch_size(0);
  EXPECT_THAT(Problems(spec), HasSubstr("batchSize: 0"));
}

TEST(JobSpec, ZeroEpochsAreRefused) {
  JobSpec spec = ValidSpec();
  spec.set_epochs(0);
  EXPECT_THAT(Problems(spec), HasSubstr("epochs: 0"));
}

TEST(JobSpec, NegativeSigmaVIsRefused) {
  JobSpec spec = ValidSpec();
  spec.mutable_noise()->set_sigma_v(-1.0f);
  EXPECT_THAT(Problems(spec), HasSubstr("noise.sigmaV: -1"));
}

TEST(JobSpec, ZeroSigmaVIsRefused) {
  JobSpec spec = ValidSpec();
  spec.mutable_noise()->set_sigma_v(0.0f);
  EXPECT_THAT(Problems(spec), HasSubstr("noise.sigmaV: 0"));
}

TEST(JobSpec, DecayOutOfRangeIsRefused) {
  for (float decay : {0.0f, -0.5f, 1.5f}) {
    JobSpec spec = ValidSpec();
    spec.mutable_noise()->set_decay(decay);
    EXPECT_THAT(Problems(spec), HasSubstr("noise.decay")) << decay;
  }
  JobSpec one = ValidSpec();
  one.mutable_noise()->set_decay(1.0f);
  EXPECT_TRUE(ValidateJobSpec(one).ok()) << ValidateJobSpec(one);
}

TEST(JobSpec, SigmaVMinAboveSigmaVIsRefused) {
  JobSpec spec = ValidSpec();
  spec.mutable_noise()->set_sigma_v_min(2.0f);
  EXPECT_THAT(Problems(spec), HasSubstr("noise.sigmaVMin: 2"));
}

TEST(JobSpec, NonPositiveInitGainIsRefused) {
  JobSpec spec = ValidSpec();
  spec.mutable_init()->set_gain_weight(0.0f);
  spec.mutable_init()->set_gain_bias(-1.0f);
  EXPECT_THAT(Problems(spec), AllOf(HasSubstr("init.gainWeight"), HasSubstr("init.gainBias")));
}

TEST(JobSpec, UnknownInitMethodNumberIsRefused) {
  // proto3 enums are open: a number outside the enum survives parsing and
  // must be caught here rather than silently read as the default.
  JobSpec spec = ValidSpec();
  spec.mutable_init()->set_method(static_cast<tagi::v1::Init::Method>(9));
  EXPECT_THAT(Problems(spec), HasSubstr("init.method"));
}

// The JSON mapping accepts enum numbers, so {"reduction": 9} reaches
// validation; it must not be silently treated as AVERAGE.
TEST(JobSpec, UnknownReductionNumberIsRefused) {
  JobSpec spec = ValidSpec();
  auto patch = ParseJobSpecJson(R"({"reduction": 9})");
  ASSERT_TRUE(patch.ok()) << patch.status();
  spec.MergeFrom(*patch);
  EXPECT_THAT(Problems(spec), HasSubstr("reduction"));
}

TEST(JobSpec, UnknownBackendNumberIsRefused) {
  JobSpec spec = ValidSpec();
  auto patch = ParseJobSpecJson(R"({"backend": 7})");
  ASSERT_TRUE(patch.ok()) << patch.status();
  spec.MergeFrom(*patch);
  EXPECT_THAT(Problems(spec), HasSubstr("backend"));
}

// bucket_kib: from 1 KiB to the model's delta arena; 0, a negative or
// fractional number in JSON, and more than the arena are refused naming the
// field (and the arena's size, which is the value for one all-reduce).
TEST(JobSpec, BucketSizeMustLieBetweenOneKibAndTheDeltaArena) {
  JobSpec spec = ValidSpec();
  ASSERT_TRUE(ValidateJobSpec(spec).ok());
  // 784-32-11: 25,120 + 363 parameters, 8 bytes of deltas each.
  const uint64_t arena = DeltaArenaKib(784 * 32 + 32 + 32 * 11 + 11);
  ASSERT_EQ(arena, 200u);  // 203,864 bytes, rounded up
  EXPECT_EQ(BucketBytes(spec), uint64_t{kDefaultBucketKib} << 10);
  for (const uint64_t kib : {uint64_t{1}, arena}) {
    spec.set_bucket_kib(static_cast<uint32_t>(kib));
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << kib << ": " << ValidateJobSpec(spec);
    EXPECT_EQ(BucketBytes(spec), kib << 10);
  }
  spec.set_bucket_kib(0);
  EXPECT_THAT(Problems(spec), AllOf(HasSubstr("bucketKib: 0"), HasSubstr("expected 1..")));
  spec.set_bucket_kib(static_cast<uint32_t>(arena + 1));
  EXPECT_THAT(Problems(spec), AllOf(HasSubstr("bucketKib"), HasSubstr("larger than the model's"),
                                    HasSubstr(absl::StrCat(arena, " KiB"))));
  for (const char* json : {R"({"bucketKib": -1})", R"({"bucketKib": 1.5})",
                           R"({"bucketKib": "lots"})"}) {
    const auto parsed = ParseJobSpecJson(json);
    EXPECT_FALSE(parsed.ok()) << json;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr("bucketKib")) << json;
  }
}

// wire_precision: 16-bit formats need the TCP ring or NCCL (the cpu and
// cuda defaults); Gloo is refused naming the field; an unknown number is
// refused.
TEST(JobSpec, SixteenBitWiresNeedTheTcpRingOrNccl) {
  for (const auto wire : {JobSpec::BF16, JobSpec::FP16}) {
    JobSpec spec = ValidSpec();
    spec.set_wire_precision(wire);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    spec.set_backend(JobSpec::TCP_RING);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    spec.set_backend(JobSpec::GLOO);
    EXPECT_THAT(Problems(spec), AllOf(HasSubstr("wirePrecision"), HasSubstr("TCP_RING"),
                                      HasSubstr("GLOO")));
    spec.set_backend(JobSpec::BACKEND_UNSPECIFIED);
    spec.set_device("cuda:0");
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    spec.set_backend(JobSpec::NCCL);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  }
  JobSpec spec = ValidSpec();
  auto patch = ParseJobSpecJson(R"({"wirePrecision": 9})");
  ASSERT_TRUE(patch.ok()) << patch.status();
  spec.MergeFrom(*patch);
  EXPECT_THAT(Problems(spec), HasSubstr("wirePrecision: 9 is unknown"));
  EXPECT_FALSE(ParseJobSpecJson(R"({"wirePrecision": "FP8"})").ok());
}

TEST(JobSpec, WorldSizeAboveTheLimitIsRefused) {
  JobSpec spec = ValidSpec();
  spec.set_world_size(kMaxWorldSize + 1);
  EXPECT_THAT(Problems(spec), HasSubstr("worldSize"));
}

TEST(JobSpec, ElasticBoundsAreCheckedAndExcludeAFixedWorld) {
  JobSpec spec = ValidSpec();
  spec.set_world_size(0);
  spec.set_min_world_size(1);
  spec.set_max_world_size(3);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_TRUE(IsElastic(spec));
  spec.set_world_size(2);
  EXPECT_THAT(Problems(spec), HasSubstr("an elastic job"));
  spec.set_world_size(0);
  spec.set_min_world_size(4);
  EXPECT_THAT(Problems(spec), HasSubstr("minWorldSize: 4 exceeds maxWorldSize 3"));
  spec.set_min_world_size(1);
  spec.set_max_world_size(kMaxWorldSize + 1);
  EXPECT_THAT(Problems(spec), HasSubstr("maxWorldSize"));
  EXPECT_FALSE(IsElastic(ValidSpec()));
}

TEST(JobSpec, GeneratedDataSizesAreBounded) {
  auto spec = ParseJobSpecJson(R"({"name": "t",
    "layers": [{"linear": {"inFeatures": 1, "outFeatures": 1}}], "head": {"regression": {}},
    "data": {"kind": "TOY_CUBIC", "toyTrainSize": 4000000000}, "noise": {"sigmaV": 1},
    "batchSize": 1, "epochs": 1})");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(Problems(*spec), HasSubstr("data.toyTrainSize: 4000000000; expected 1..10000000"));
  spec->mutable_data()->set_toy_train_size(kMaxToySamples);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
}

TEST(JobSpec, BadDeviceStringsAreRefused) {
  for (const char* device : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1x", "CPU"}) {
    JobSpec spec = ValidSpec();
    spec.set_device(device);
    EXPECT_THAT(Problems(spec), AllOf(HasSubstr("device"), HasSubstr(device))) << device;
  }
}

TEST(JobSpec, NcclBackendNeedsACudaDevice) {
  JobSpec spec = ValidSpec();
  spec.set_backend(JobSpec::NCCL);
  EXPECT_THAT(Problems(spec), AllOf(HasSubstr("backend"), HasSubstr("NCCL")));
  spec.set_device("cuda:0");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobSpec, ReportsEveryProblemInOneMessage) {
  JobSpec spec = ValidSpec();
  spec.set_batch_size(0);
  spec.set_epochs(0);
  spec.mutable_noise()->set_sigma_v(0.0f);
  spec.mutable_layers(2)->set_in_features(5);
  spec.set_device("gpu");
  const std::string msg = Problems(spec);
  EXPECT_THAT(msg, AllOf(HasSubstr("batchSize"), HasSubstr("epochs"), HasSubstr("noise.sigmaV"),
                         HasSubstr("layers[2].inFeatures"), HasSubstr("device")));
  EXPECT_THAT(msg, HasSubstr("; "));
}

}  // namespace
}  // namespace tagi

namespace tagi {
namespace {

// Heads beside hierarchical softmax (docs/heads.md).
TEST(JobSpecHeads, OneHotRemaxClassifierValidatesWithOneOutputPerClass) {
  auto spec = ParseJobSpecJson(R"json({"name": "r",
      "layers": [{"linear": {"inFeatures": 784, "outFeatures": 32}}, {"relu": {}},
                 {"linear": {"inFeatures": 32, "outFeatures": 10}}, {"remax": {}}],
      "head": {"classification": {"numClasses": 10, "output": "ONE_HOT"}},
      "data": {"kind": "FASHION_MNIST"}, "noise": {"sigmaV": 0.05},
      "batchSize": 16, "epochs": 1})json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(ExpectedOutputWidth(*spec), 10);
  spec->mutable_head()->mutable_classification()->clear_output();
  EXPECT_THAT(ValidateJobSpec(*spec).message(),
              HasSubstr("HIERARCHICAL_SOFTMAX reads the last layer's units as tree nodes, but "
                        "layers[3] (REMAX) is an output activation"));
}

TEST(JobSpecHeads, HeteroscedasticRegressionNeedsTwoOutputsPerTargetAndNoNoise) {
  auto spec = ParseJobSpecJson(R"json({"name": "h",
      "layers": [{"linear": {"inFeatures": 1, "outFeatures": 16}}, {"relu": {}},
                 {"linear": {"inFeatures": 16, "outFeatures": 2}}, {"evenExp": {}}],
      "head": {"regression": {"heteroscedastic": true}},
      "data": {"kind": "TOY_CUBIC"}, "batchSize": 10, "epochs": 1})json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  EXPECT_EQ(ExpectedOutputWidth(*spec), 2);
  // A homoscedastic head still needs its noise.
  spec->mutable_head()->mutable_regression()->set_heteroscedastic(false);
  EXPECT_THAT(ValidateJobSpec(*spec).message(), HasSubstr("noise.sigmaV: 0"));
  // Two targets need four outputs.
  auto csv = ParseJobSpecJson(R"json({"name": "h",
      "layers": [{"linear": {"inFeatures": 3, "outFeatures": 2}}, {"evenExp": {}}],
      "head": {"regression": {"heteroscedastic": true}},
      "data": {"kind": "CSV", "trainCsv": "a", "testCsv": "b", "targetColumns": 2},
      "batchSize": 10, "epochs": 1})json");
  ASSERT_TRUE(csv.ok()) << csv.status();
  EXPECT_THAT(ValidateJobSpec(*csv).message(),
              HasSubstr("the last layer gives 2 outputs but the regression head needs 4 (a mean "
                        "and a noise unit per target)"));
}

TEST(JobSpec, NewDataKindsValidateWithTheirFields) {
  JobSpec numpy = ValidSpec();
  numpy.mutable_data()->Clear();
  numpy.mutable_data()->set_kind(DataSpec::NUMPY);
  numpy.mutable_data()->set_npz("/data/d.npz");
  EXPECT_TRUE(ValidateJobSpec(numpy).ok()) << ValidateJobSpec(numpy);  // the npz may hold a test set
  numpy.mutable_data()->set_train_x_npy("x.npy");
  EXPECT_THAT(Problems(numpy), HasSubstr("give either npz or the .npy paths"));
  numpy.mutable_data()->clear_npz();
  EXPECT_THAT(Problems(numpy), AllOf(HasSubstr("data.trainXNpy / data.trainYNpy: missing"),
                                     HasSubstr("names no test set")));
  numpy.mutable_data()->set_train_y_npy("y.npy");
  numpy.mutable_data()->set_holdout_fraction(1.0f);
  EXPECT_THAT(Problems(numpy), HasSubstr("holdoutFraction: 1; expected a fraction in (0, 1)"));
  numpy.mutable_data()->set_holdout_fraction(0.1f);
  EXPECT_TRUE(ValidateJobSpec(numpy).ok()) << ValidateJobSpec(numpy);
  numpy.mutable_head()->mutable_regression();
  numpy.mutable_layers(2)->set_out_features(1);
  EXPECT_TRUE(ValidateJobSpec(numpy).ok()) << ValidateJobSpec(numpy);  // NUMPY may regress

  JobSpec images = ValidSpec();
  images.mutable_data()->Clear();
  images.mutable_data()->set_kind(DataSpec::IMAGE_FOLDER);
  images.mutable_data()->set_train_dir("/data/pets");
  images.mutable_data()->set_holdout_fraction(0.2f);
  EXPECT_THAT(Problems(images), HasSubstr("input: missing; IMAGE_FOLDER images are fitted to it"));
  images.mutable_input()->set_channels(2);
  images.mutable_input()->set_height(28);
  images.mutable_input()->set_width(28);
  EXPECT_THAT(Problems(images), HasSubstr("input.channels: 2"));
  images.mutable_input()->set_channels(1);
  EXPECT_TRUE(ValidateJobSpec(images).ok()) << ValidateJobSpec(images);
  images.mutable_data()->set_test_dir("/data/pets-test");
  EXPECT_THAT(Problems(images), HasSubstr("names a test set already"));

  JobSpec csv = ValidSpec();
  csv.mutable_data()->Clear();
  csv.mutable_data()->set_kind(DataSpec::CSV_CLASSIFICATION);
  csv.mutable_data()->set_train_csv("t.csv");
  csv.mutable_data()->set_test_csv("u.csv");
  EXPECT_THAT(Problems(csv), HasSubstr("give exactly one"));
  csv.mutable_data()->set_label_column("species");
  EXPECT_TRUE(ValidateJobSpec(csv).ok()) << ValidateJobSpec(csv);
  csv.mutable_head()->mutable_regression();
  EXPECT_THAT(Problems(csv), HasSubstr("regression needs CSV, TOY_CUBIC or NUMPY data"));

  JobSpec fmnist = ValidSpec();
  fmnist.mutable_data()->set_holdout_fraction(0.5f);
  EXPECT_THAT(Problems(fmnist), HasSubstr("only NUMPY, IMAGE_FOLDER and CSV_CLASSIFICATION"));
}

}  // namespace
// Messages name fields as job files write them; words of paths stay.
TEST(JobFileFieldNames, CamelCasesFieldNamesButNotPathsOrOtherWords) {
  EXPECT_EQ(JobFileFieldNames("data.train_images: /data/train_images.gz is missing"),
            "data.trainImages: /data/train_images.gz is missing");
  EXPECT_EQ(JobFileFieldNames("layers[2].in_features: 50; batch_size: 0; noise.sigma_v_min"),
            "layers[2].inFeatures: 50; batchSize: 0; noise.sigmaVMin");
  EXPECT_EQ(JobFileFieldNames("train_images/x.gz, my_own_word, init_from"),
            "train_images/x.gz, my_own_word, initFrom");
  EXPECT_EQ(JobFileFieldNames(""), "");
  // What ValidateJobSpec says is in these words.
  tagi::v1::JobSpec spec;
  spec.set_batch_size(0);
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()), HasSubstr("batchSize: 0"));
}

}  // namespace tagi
