#include "worker/engine/architecture.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/hsm_tree.h"
#include "common/job_spec.h"

namespace tagi::engine {

const char* LayerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kLinear: return "LINEAR";
    case LayerKind::kRelu: return "RELU";
    case LayerKind::kLeakyRelu: return "LEAKY_RELU";
    case LayerKind::kSigmoid: return "SIGMOID";
    case LayerKind::kTanh: return "TANH";
    case LayerKind::kSoftplus: return "SOFTPLUS";
    case LayerKind::kMixtureRelu: return "MIXTURE_RELU";
  }
  return "UNKNOWN";
}

uint32_t Architecture::input_width() const {
  return layers.empty() ? 0 : layers.front().in;
}

uint32_t Architecture::output_width() const {
  for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
    if (it->kind == LayerKind::kLinear) return it->out;
  }
  return 0;
}

uint64_t Architecture::num_parameters() const {
  uint64_t n = 0;
  for (const auto& l : layers) {
    if (l.kind == LayerKind::kLinear) n += (uint64_t{l.in} + 1) * l.out;
  }
  return n;
}

std::string Architecture::ToString() const {
  std::string s = absl::StrCat(input_width());
  for (const auto& l : layers) {
    if (l.kind == LayerKind::kLinear) {
      absl::StrAppend(&s, "-", l.out);
    } else if (l.kind == LayerKind::kLeakyRelu) {
      absl::StrAppend(&s, "-", LayerKindName(l.kind), "(", l.slope, ")");
    } else {
      absl::StrAppend(&s, "-", LayerKindName(l.kind));
    }
  }
  if (head.kind == HeadKind::kClassification) {
    absl::StrAppend(&s, " hsm(", head.num_classes, ")");
  } else {
    absl::StrAppend(&s, " regression");
  }
  return s;
}

namespace {

// The fields a layer of this kind does not use must be zero, and a
// LEAKY_RELU's slope must be one ValidateJobSpec accepts: an architecture
// read from a file then compares equal to the one its job describes, and a
// NaN slope (never equal to itself) cannot reach the engine.
absl::Status CheckUnusedFields(const LayerDesc& l, size_t i) {
  if (l.kind == LayerKind::kLinear) {
    if (l.slope != 0.0f) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "architecture: layer %d (LINEAR) has slope %g; only LEAKY_RELU takes one", i, l.slope));
    }
    return absl::OkStatus();
  }
  if (l.in != 0 || l.out != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "architecture: layer %d (%s) has widths %d x %d; only LINEAR layers take widths", i,
        LayerKindName(l.kind), l.in, l.out));
  }
  if (l.kind == LayerKind::kLeakyRelu ? !(l.slope > 0.0f && l.slope < 1.0f) : l.slope != 0.0f) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "architecture: layer %d (%s) has slope %g; expected %s", i, LayerKindName(l.kind),
        l.slope, l.kind == LayerKind::kLeakyRelu ? "a value in (0, 1)" : "none (0)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateArchitecture(const Architecture& arch) {
  if (arch.layers.empty() || arch.layers.front().kind != LayerKind::kLinear) {
    return absl::InvalidArgumentError("architecture: the first layer must be LINEAR");
  }
  if (arch.layers.size() > static_cast<size_t>(kMaxLayers)) {
    return absl::InvalidArgumentError("architecture: too many layers");
  }
  uint32_t width = 0;
  for (size_t i = 0; i < arch.layers.size(); ++i) {
    const LayerDesc& l = arch.layers[i];
    const auto k = static_cast<int>(l.kind);
    if (k < 1 || k > 7) {
      return absl::InvalidArgumentError(absl::StrFormat("architecture: layer %d has unknown kind %d", i, k));
    }
    if (auto st = CheckUnusedFields(l, i); !st.ok()) return st;
    if (l.kind != LayerKind::kLinear) continue;
    if (l.in < 1 || l.out < 1 || l.in > kMaxLayerWidth || l.out > kMaxLayerWidth) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "architecture: layer %d has widths %d x %d; expected 1..%d", i, l.in, l.out, kMaxLayerWidth));
    }
    if (width != 0 && l.in != width) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "architecture: layer %d takes %d inputs but the previous LINEAR gives %d", i, l.in, width));
    }
    width = l.out;
  }
  if (arch.num_parameters() > kMaxParameters) {
    return absl::InvalidArgumentError("architecture: too many parameters");
  }
  if (arch.head.kind == HeadKind::kClassification) {
    const auto k = arch.head.num_classes;
    if (k < 2 || k > static_cast<uint32_t>(HsmTree::kMaxClasses) ||
        static_cast<int>(width) != HsmTree::OutputWidth(static_cast<int>(k))) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "architecture: %d outputs do not fit a hierarchical softmax over %d classes", width, k));
    }
  } else if (arch.head.kind != HeadKind::kRegression) {
    return absl::InvalidArgumentError("architecture: unknown head kind");
  }
  return absl::OkStatus();
}

absl::StatusOr<Architecture> ArchitectureFromJobSpec(const tagi::v1::JobSpec& spec) {
  Architecture arch;
  for (const auto& layer : spec.layers()) {
    LayerDesc d;
    d.kind = static_cast<LayerKind>(layer.kind());
    if (layer.kind() == tagi::v1::Layer::LINEAR) {
      d.in = layer.in_features();
      d.out = layer.out_features();
    } else if (layer.kind() == tagi::v1::Layer::LEAKY_RELU) {
      d.slope = LeakySlope(layer);
    }
    arch.layers.push_back(d);
  }
  if (spec.head().has_classification()) {
    arch.head = {HeadKind::kClassification, spec.head().classification().num_classes()};
  } else {
    arch.head = {HeadKind::kRegression, 0};
  }
  if (auto st = ValidateArchitecture(arch); !st.ok()) return st;
  return arch;
}

}  // namespace tagi::engine
