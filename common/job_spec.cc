#include "common/job_spec.h"

#include <google/protobuf/util/json_util.h>

#include <charconv>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/file_util.h"
#include "common/hsm_tree.h"

namespace tagi {
namespace {

using tagi::v1::DataSpec;
using tagi::v1::JobSpec;
using tagi::v1::Layer;

constexpr int kImageInputWidth = 28 * 28;
constexpr int kImageClasses = 10;

bool IsActivation(Layer::Kind kind) {
  return kind != Layer::KIND_UNSPECIFIED && kind != Layer::LINEAR &&
         Layer::Kind_IsValid(kind);
}

bool FinitePositive(float v) { return std::isfinite(v) && v > 0.0f; }

// Collects every problem so that one answer names them all.
class Problems {
 public:
  template <typename... Args>
  void Add(const absl::FormatSpec<Args...>& format, const Args&... args) {
    list_.push_back(absl::StrFormat(format, args...));
  }
  absl::Status ToStatus() const {
    if (list_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("invalid job: ", absl::StrJoin(list_, "; ")));
  }

 private:
  std::vector<std::string> list_;
};

std::string AllLayerKinds() {
  std::vector<std::string> names;
  for (int k = Layer::LINEAR; k <= Layer::Kind_MAX; ++k) {
    names.push_back(LayerKindName(static_cast<Layer::Kind>(k)));
  }
  return absl::StrJoin(names, ", ");
}

void CheckLinear(const Layer& layer, int index, int prev_out, Problems& p) {
  if (layer.in_features() < 1 || layer.in_features() > kMaxLayerWidth) {
    p.Add("layers[%d].in_features: %d; expected 1..%d", index,
          layer.in_features(), kMaxLayerWidth);
  }
  if (layer.out_features() < 1 || layer.out_features() > kMaxLayerWidth) {
    p.Add("layers[%d].out_features: %d; expected 1..%d", index,
          layer.out_features(), kMaxLayerWidth);
  }
  if (prev_out > 0 && static_cast<int>(layer.in_features()) != prev_out) {
    p.Add("layers[%d].in_features: %d does not match the previous LINEAR's "
          "out_features %d", index, layer.in_features(), prev_out);
  }
  if (layer.has_negative_slope()) {
    p.Add("layers[%d].negative_slope: only LEAKY_RELU takes a slope", index);
  }
}

void CheckActivation(const Layer& layer, int index, Problems& p) {
  const std::string name = LayerKindName(layer.kind());
  if (layer.in_features() != 0 || layer.out_features() != 0) {
    p.Add("layers[%d]: %s keeps the width of its input and takes no "
          "in_features/out_features", index, name);
  }
  if (layer.has_negative_slope()) {
    if (layer.kind() != Layer::LEAKY_RELU) {
      p.Add("layers[%d].negative_slope: only LEAKY_RELU takes a slope", index);
    } else if (!(layer.negative_slope() > 0.0f && layer.negative_slope() < 1.0f)) {
      p.Add("layers[%d].negative_slope: %g; expected a value in (0, 1)", index,
            layer.negative_slope());
    }
  }
}

// Returns the width of the last LINEAR layer (0 if none).
int CheckLayers(const JobSpec& spec, Problems& p) {
  if (spec.layers().empty()) {
    p.Add("layers: empty; expected at least one LINEAR layer");
    return 0;
  }
  if (spec.layers_size() > kMaxLayers) {
    p.Add("layers: %d layers; at most %d are allowed", spec.layers_size(), kMaxLayers);
    return 0;
  }
  int prev_out = 0;
  uint64_t params = 0;
  for (int i = 0; i < spec.layers_size(); ++i) {
    const Layer& layer = spec.layers(i);
    if (layer.kind() == Layer::LINEAR) {
      CheckLinear(layer, i, prev_out, p);
      prev_out = static_cast<int>(layer.out_features());
      params += (uint64_t{layer.in_features()} + 1) * layer.out_features();
    } else if (IsActivation(layer.kind())) {
      if (i == 0) p.Add("layers[0]: the first layer must be LINEAR, not %s",
                        LayerKindName(layer.kind()));
      CheckActivation(layer, i, p);
    } else {
      p.Add("layers[%d].kind: missing or unknown; expected one of %s", i,
            AllLayerKinds());
    }
  }
  if (params > kMaxParameters) {
    p.Add("layers: %d parameters; at most %d are allowed", params, kMaxParameters);
  }
  return prev_out;
}

void CheckWidths(const JobSpec& spec, int last_out, Problems& p) {
  const int in = ExpectedInputWidth(spec.data());
  if (in > 0 && !spec.layers().empty() && spec.layers(0).kind() == Layer::LINEAR &&
      static_cast<int>(spec.layers(0).in_features()) != in) {
    p.Add("layers[0].in_features: %d does not match the data, which has %d "
          "inputs per sample", spec.layers(0).in_features(), in);
  }
  const int out = ExpectedOutputWidth(spec);
  if (out > 0 && last_out > 0 && last_out != out) {
    if (spec.head().has_classification()) {
      p.Add("layers: the last LINEAR has %d outputs but %d classes by "
            "hierarchical softmax need %d", last_out,
            spec.head().classification().num_classes(), out);
    } else {
      p.Add("layers: the last LINEAR has %d outputs but the regression head "
            "needs %d (one per target)", last_out, out);
    }
  }
}

void CheckHead(const JobSpec& spec, Problems& p) {
  const DataSpec::Kind data = spec.data().kind();
  const bool image_data = data == DataSpec::FASHION_MNIST || data == DataSpec::MNIST;
  if (spec.head().has_classification()) {
    const uint32_t k = spec.head().classification().num_classes();
    if (k < 2 || k > static_cast<uint32_t>(HsmTree::kMaxClasses)) {
      p.Add("head.classification.num_classes: %d; expected 2..%d", k,
            HsmTree::kMaxClasses);
    } else if (image_data && k != kImageClasses) {
      p.Add("head.classification.num_classes: %d; the %s data set has %d classes",
            k, DataSpec::Kind_Name(data), kImageClasses);
    }
    if (data == DataSpec::CSV || data == DataSpec::TOY_CUBIC) {
      p.Add("head: classification needs labelled data (FASHION_MNIST or MNIST), "
            "not %s", DataSpec::Kind_Name(data));
    }
  } else if (spec.head().has_regression()) {
    if (image_data) {
      p.Add("head: regression needs CSV or TOY_CUBIC data, not %s",
            DataSpec::Kind_Name(data));
    }
  } else {
    p.Add("head: missing; expected {\"classification\": {\"numClasses\": K}} "
          "or {\"regression\": {}}");
  }
}

void CheckData(const DataSpec& data, Problems& p) {
  switch (data.kind()) {
    case DataSpec::FASHION_MNIST:
      break;
    case DataSpec::MNIST:
      for (const auto& [field, value] :
           {std::pair<const char*, const std::string*>{"train_images", &data.train_images()},
            {"train_labels", &data.train_labels()},
            {"test_images", &data.test_images()},
            {"test_labels", &data.test_labels()}}) {
        if (value->empty()) p.Add("data.%s: missing; MNIST needs its IDX file paths", field);
      }
      break;
    case DataSpec::CSV:
      if (data.train_csv().empty()) p.Add("data.train_csv: missing; CSV data needs it");
      if (data.test_csv().empty()) p.Add("data.test_csv: missing; CSV data needs it");
      // The last LINEAR has one output per target column.
      if (data.has_target_columns() &&
          (data.target_columns() < 1 || data.target_columns() > kMaxLayerWidth)) {
        p.Add("data.target_columns: %d; expected 1..%d", data.target_columns(), kMaxLayerWidth);
      }
      break;
    case DataSpec::TOY_CUBIC:
      if (data.has_toy_train_size() && data.toy_train_size() < 1) {
        p.Add("data.toy_train_size: 0; expected >= 1");
      }
      if (data.has_toy_test_size() && data.toy_test_size() < 1) {
        p.Add("data.toy_test_size: 0; expected >= 1");
      }
      break;
    default:
      p.Add("data.kind: missing or unknown; expected one of FASHION_MNIST, "
            "MNIST, CSV, TOY_CUBIC");
  }
}

void CheckTraining(const JobSpec& spec, Problems& p) {
  if (spec.batch_size() < 1 || spec.batch_size() > kMaxBatchSize) {
    p.Add("batch_size: %d; expected 1..%d", spec.batch_size(), kMaxBatchSize);
  }
  if (spec.epochs() < 1) p.Add("epochs: %d; expected >= 1", spec.epochs());
  const auto& noise = spec.noise();
  if (!FinitePositive(noise.sigma_v())) {
    p.Add("noise.sigma_v: %g; expected a finite value > 0", noise.sigma_v());
  }
  if (noise.has_decay() && !(noise.decay() > 0.0f && noise.decay() <= 1.0f)) {
    p.Add("noise.decay: %g; expected a value in (0, 1]", noise.decay());
  }
  if (!(noise.sigma_v_min() >= 0.0f) || !std::isfinite(noise.sigma_v_min()) ||
      noise.sigma_v_min() > noise.sigma_v()) {
    p.Add("noise.sigma_v_min: %g; expected 0 <= sigma_v_min <= sigma_v", noise.sigma_v_min());
  }
  const auto& init = spec.init();
  if (init.has_gain_weight() && !FinitePositive(init.gain_weight())) {
    p.Add("init.gain_weight: %g; expected a finite value > 0", init.gain_weight());
  }
  if (init.has_gain_bias() && !FinitePositive(init.gain_bias())) {
    p.Add("init.gain_bias: %g; expected a finite value > 0", init.gain_bias());
  }
  if (!tagi::v1::Init::Method_IsValid(init.method())) p.Add("init.method: unknown");
  if (!JobSpec::Reduction_IsValid(spec.reduction())) {
    p.Add("reduction: %d is unknown; expected SUM or AVERAGE", static_cast<int>(spec.reduction()));
  }
  if (!JobSpec::Backend_IsValid(spec.backend())) {
    p.Add("backend: %d is unknown; expected GLOO or NCCL (or unset for automatic)",
          static_cast<int>(spec.backend()));
  }
  if (spec.world_size() > kMaxWorldSize) {
    p.Add("world_size: %d; expected 0 (the coordinator's --world) or 1..%d",
          spec.world_size(), kMaxWorldSize);
  }
  auto device = ParseDevice(spec.device());
  if (!device.ok()) {
    p.Add("device: %s", device.status().message());
  } else if (*device < 0 && spec.backend() == JobSpec::NCCL) {
    p.Add("backend: NCCL needs a cuda device, but device is \"%s\"", spec.device());
  }
}

}  // namespace

std::string LayerKindName(Layer::Kind kind) {
  if (!Layer::Kind_IsValid(kind)) return absl::StrCat("KIND_", static_cast<int>(kind));
  return Layer::Kind_Name(kind);
}

absl::StatusOr<JobSpec> ParseJobSpecJson(const std::string& json) {
  if (json.size() > kMaxJobSpecBytes) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "job spec is %d bytes; at most %d are accepted", json.size(), kMaxJobSpecBytes));
  }
  JobSpec spec;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &spec, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("job spec is not valid JobSpec JSON: ", status.message().as_string()));
  }
  return spec;
}

absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path) {
  auto text = ReadFile(path, kMaxJobSpecBytes);
  if (!text.ok()) return text.status();
  auto spec = ParseJobSpecJson(*text);
  if (!spec.ok()) {
    return absl::Status(spec.status().code(),
                        absl::StrCat(path, ": ", spec.status().message()));
  }
  return spec;
}

std::string JobSpecToJson(const JobSpec& spec) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = false;
  (void)google::protobuf::util::MessageToJsonString(spec, &out, options);
  return out;
}

absl::Status ValidateJobSpec(const JobSpec& spec) {
  Problems p;
  const int last_out = CheckLayers(spec, p);
  CheckHead(spec, p);
  CheckData(spec.data(), p);
  CheckWidths(spec, last_out, p);
  CheckTraining(spec, p);
  return p.ToStatus();
}

int ExpectedInputWidth(const DataSpec& data) {
  switch (data.kind()) {
    case DataSpec::FASHION_MNIST:
    case DataSpec::MNIST:
      return kImageInputWidth;
    case DataSpec::TOY_CUBIC:
      return 1;
    default:
      return 0;
  }
}

int ExpectedOutputWidth(const JobSpec& spec) {
  if (spec.head().has_classification()) {
    const uint32_t k = spec.head().classification().num_classes();
    if (k < 2 || k > static_cast<uint32_t>(HsmTree::kMaxClasses)) return 0;
    return HsmTree::OutputWidth(static_cast<int>(k));
  }
  if (spec.head().has_regression()) {
    if (spec.data().kind() == DataSpec::TOY_CUBIC) return 1;
    if (spec.data().kind() == DataSpec::CSV) {
      const uint32_t targets = TargetColumns(spec.data());
      return targets > kMaxLayerWidth ? 0 : static_cast<int>(targets);
    }
  }
  return 0;
}

float SigmaVAtEpoch(const tagi::v1::NoiseSchedule& noise, uint64_t epoch) {
  const double decay = noise.has_decay() ? noise.decay() : 1.0;
  const double value = noise.sigma_v() * std::pow(decay, static_cast<double>(epoch));
  return static_cast<float>(std::max<double>(value, noise.sigma_v_min()));
}

bool IsSumReduction(const JobSpec& spec) { return spec.reduction() == JobSpec::SUM; }
float LeakySlope(const Layer& layer) {
  return layer.has_negative_slope() ? layer.negative_slope() : 0.1f;
}
float InitGainWeight(const tagi::v1::Init& init) {
  return init.has_gain_weight() ? init.gain_weight() : 1.0f;
}
float InitGainBias(const tagi::v1::Init& init) {
  return init.has_gain_bias() ? init.gain_bias() : 1.0f;
}
bool StandardizeData(const DataSpec& data) {
  return data.has_standardize() ? data.standardize() : true;
}
uint32_t TargetColumns(const DataSpec& data) {
  return data.has_target_columns() ? data.target_columns() : 1;
}

absl::StatusOr<int> ParseDevice(const std::string& device) {
  if (device.empty() || device == "cpu") return -1;
  constexpr std::string_view kCuda = "cuda:";
  if (device.rfind(kCuda, 0) == 0 && device.size() > kCuda.size()) {
    int ordinal = -1;
    const char* first = device.data() + kCuda.size();
    const char* last = device.data() + device.size();
    auto [ptr, ec] = std::from_chars(first, last, ordinal);
    if (ec == std::errc() && ptr == last && ordinal >= 0 && ordinal < 1024) return ordinal;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "\"", device, "\" is not a device; expected \"cpu\" or \"cuda:N\""));
}

}  // namespace tagi
