#include "spec/network_proto.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "spec/kinds.h"

namespace tagi::spec {
namespace {

using tagi::v1::Layer;

constexpr float kDefaultLeakySlope = 0.1f;

// The kind whose oneof field is set (found by the rules' field names, so
// a new kind needs no entry here), or KIND_UNSPECIFIED.
LayerKind OneofKind(const Layer& layer) {
  const auto* oneof = Layer::descriptor()->FindOneofByName("layer");
  const auto* field = layer.GetReflection()->GetOneofFieldDescriptor(layer, oneof);
  if (field == nullptr) return Layer::KIND_UNSPECIFIED;
  for (int k = Layer::LINEAR; k <= Layer::Kind_MAX; ++k) {
    const KindRules* rules = RulesOf(static_cast<LayerKind>(k));
    if (rules != nullptr && field->name() == rules->field()) return static_cast<LayerKind>(k);
  }
  return Layer::KIND_UNSPECIFIED;
}

bool HasFirstFormFields(const Layer& layer) {
  return layer.kind() != Layer::KIND_UNSPECIFIED || layer.in_features() != 0 ||
         layer.out_features() != 0 || layer.has_negative_slope();
}

// The first-format migration rule (see the header).
LayerSpec MigrateFirstForm(const Layer& layer, const std::string& at, CheckContext& ctx) {
  LayerSpec spec;
  spec.kind = layer.kind();
  const bool linear = layer.kind() == Layer::LINEAR;
  const bool leaky = layer.kind() == Layer::LEAKY_RELU;
  if (layer.kind() == Layer::RESIDUAL) {
    ctx.Add(absl::StrFormat("%s.kind: RESIDUAL has only the per-kind form; write "
                            "{\"residual\": {\"main\": [...], \"shortcut\": [...]}}", at));
    spec.kind = Layer::KIND_UNSPECIFIED;
    return spec;
  }
  if (linear) {
    spec.in = layer.in_features();
    spec.out = layer.out_features();
  } else if (RulesOf(layer.kind()) != nullptr &&
             (layer.in_features() != 0 || layer.out_features() != 0)) {
    ctx.Add(absl::StrFormat("%s: %s keeps the width of its input and takes no "
                            "in_features or out_features", at, KindName(layer.kind())));
  }
  if (layer.has_negative_slope() && !leaky) {
    ctx.Add(absl::StrFormat("%s.negative_slope: only LEAKY_RELU takes a slope", at));
  }
  if (leaky) spec.slope = layer.has_negative_slope() ? layer.negative_slope() : kDefaultLeakySlope;
  return spec;
}

}  // namespace

std::vector<LayerSpec> LayersFromProto(
    const google::protobuf::RepeatedPtrField<Layer>& layers, const std::string& path,
    CheckContext& ctx) {
  std::vector<LayerSpec> out;
  out.reserve(static_cast<size_t>(layers.size()));
  for (int i = 0; i < layers.size(); ++i) {
    const Layer& layer = layers.Get(i);
    const std::string at = absl::StrCat(path, "[", i, "]");
    const LayerKind oneof = OneofKind(layer);
    if (oneof == Layer::KIND_UNSPECIFIED) {
      out.push_back(MigrateFirstForm(layer, at, ctx));
      continue;
    }
    if (HasFirstFormFields(layer)) {
      ctx.Add(absl::StrFormat("%s: give either the per-kind form ({\"%s\": {...}}) or the first "
                              "format (kind, inFeatures, outFeatures, negativeSlope), not both",
                              at, RulesOf(oneof)->field()));
    }
    LayerSpec spec;
    spec.kind = oneof;
    RulesOf(oneof)->FromProto(layer, at, ctx, spec);
    out.push_back(std::move(spec));
  }
  return out;
}

void LayersToProto(const std::vector<LayerSpec>& layers,
                   google::protobuf::RepeatedPtrField<Layer>* out) {
  for (const LayerSpec& spec : layers) RulesOf(spec.kind)->ToProto(spec, *out->Add());
}

std::vector<LayerSpec> LayersFromProto(const google::protobuf::RepeatedPtrField<Layer>& layers,
                                       std::vector<std::string>* problems) {
  CheckContext ctx{problems};
  return LayersFromProto(layers, "layers", ctx);
}

absl::StatusOr<HeadSpec> HeadFromProto(const tagi::v1::Head& head) {
  if (head.has_classification()) {
    const tagi::v1::Head::ClassOutput output = head.classification().output();
    if (!tagi::v1::Head::ClassOutput_IsValid(output)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "head.classification.output: %d is not a class output; expected HIERARCHICAL_SOFTMAX "
          "or ONE_HOT", static_cast<int>(output)));
    }
    HeadSpec spec{HeadKind::kClassification, head.classification().num_classes()};
    spec.one_hot = output == tagi::v1::Head::ONE_HOT;
    return spec;
  }
  if (head.has_regression()) {
    HeadSpec spec{HeadKind::kRegression, 0};
    spec.heteroscedastic = head.regression().heteroscedastic();
    return spec;
  }
  return absl::InvalidArgumentError(
      "head: missing; expected {\"classification\": {\"numClasses\": K}} or {\"regression\": {}}");
}

absl::StatusOr<Architecture> ArchitectureFromProto(const tagi::v1::Network& network) {
  Architecture arch;
  arch.input = {network.input().channels(), network.input().height(), network.input().width()};
  std::vector<std::string> problems;
  arch.layers = LayersFromProto(network.layers(), &problems);
  auto head = HeadFromProto(network.head());
  if (!head.ok()) {
    problems.push_back(std::string(head.status().message()));
  } else {
    arch.head = *head;
  }
  if (problems.empty()) CheckArchitecture(arch, &problems);
  if (!problems.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid network: ", absl::StrJoin(problems, "; ")));
  }
  return arch;
}

tagi::v1::Network ArchitectureToProto(const Architecture& arch) {
  tagi::v1::Network network;
  network.mutable_input()->set_channels(arch.input.c);
  network.mutable_input()->set_height(arch.input.h);
  network.mutable_input()->set_width(arch.input.w);
  LayersToProto(arch.layers, network.mutable_layers());
  if (arch.head.kind == HeadKind::kClassification) {
    auto* classification = network.mutable_head()->mutable_classification();
    classification->set_num_classes(arch.head.num_classes);
    if (arch.head.one_hot) classification->set_output(tagi::v1::Head::ONE_HOT);
  } else {
    network.mutable_head()->mutable_regression()->set_heteroscedastic(arch.head.heteroscedastic);
  }
  return network;
}

}  // namespace tagi::spec
