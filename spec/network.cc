#include "spec/network.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "spec/hsm_tree.h"
#include "spec/kinds.h"

namespace tagi::spec {
namespace {

using tagi::v1::Layer;

std::string AllKindNames() {
  std::vector<std::string> names;
  for (int k = Layer::LINEAR; k <= Layer::Kind_MAX; ++k) {
    names.push_back(KindName(static_cast<LayerKind>(k)));
  }
  return absl::StrJoin(names, ", ");
}

int CountLayers(const std::vector<LayerSpec>& layers) {
  int n = 0;
  for (const LayerSpec& l : layers) n += 1 + CountLayers(l.main) + CountLayers(l.shortcut);
  return n;
}

// Sums the parameter and state counts of a (valid) sequence.
void CountBlocks(const std::vector<LayerSpec>& layers, Shape in, uint64_t* params,
                 uint64_t* state) {
  for (const LayerSpec& l : layers) {
    const KindRules* rules = RulesOf(l.kind);
    if (rules == nullptr) return;  // an invalid network has no count
    for (const BlockSpec& b : rules->Parameters(l, in)) *params += b.count;
    for (const StateSpec& s : rules->State(l, in)) *state += s.count;
    CountBlocks(l.main, in, params, state);
    CountBlocks(l.shortcut, in, params, state);
    in = OutputShape({l}, in);
  }
}


// The largest, over the batch norms of a (valid) sequence, of the batch
// that gives each at least two values per statistic; `path` is that layer's.
void MinBatch(const std::vector<LayerSpec>& layers, Shape in, const std::string& at,
              uint32_t* batch, std::string* path) {
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    const std::string here = absl::StrCat(at, "[", i, "]");
    const KindRules* rules = RulesOf(l.kind);
    if (const uint32_t least = rules != nullptr ? rules->MinBatch(l, in) : 1; least > *batch) {
      *batch = least;
      *path = here;
    }
    MinBatch(l.main, in, here + ".residual.main", batch, path);
    MinBatch(l.shortcut, in, here + ".residual.shortcut", batch, path);
    in = OutputShape({l}, in);
  }
}

// Output activations anywhere but the last top-level layer (inside a block,
// or before another layer) are refused with their path.
void CheckOutputActivationPlacement(const std::vector<LayerSpec>& layers, const std::string& at,
                                    bool top, CheckContext& ctx) {
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    const std::string here = absl::StrCat(at, "[", i, "]");
    if (IsOutputActivation(l.kind) && !(top && i + 1 == layers.size())) {
      ctx.Add(absl::StrFormat("%s: %s is an output activation; it may only be the network's "
                              "last layer", here, KindName(l.kind)));
    }
    CheckOutputActivationPlacement(l.main, here + ".residual.main", false, ctx);
    CheckOutputActivationPlacement(l.shortcut, here + ".residual.shortcut", false, ctx);
  }
}

// Whether a layer writes a jcb at its output (an activation).
bool ActivationFeeds(const LayerSpec& l) {
  const KindRules* rules = RulesOf(l.kind);
  return rules != nullptr && rules->produces_jcb();
}

// The head against the last layer (its kind and width `out`).
void CheckHeadFits(const Architecture& arch, uint64_t out, CheckContext& ctx) {
  const LayerSpec& last = arch.layers.back();
  const std::string last_at = absl::StrFormat("layers[%d] (%s)", arch.layers.size() - 1,
                                              KindName(last.kind));
  const HeadSpec& head = arch.head;
  if (head.kind == HeadKind::kClassification) {
    const uint32_t k = head.num_classes;
    if (k < 2 || k > static_cast<uint32_t>(HsmTree::kMaxClasses)) {
      ctx.Add(absl::StrFormat("head.classification.num_classes: %d; expected 2..%d", k,
                              HsmTree::kMaxClasses));
      return;
    }
    if (head.heteroscedastic) ctx.Add("head: a classification head is not heteroscedastic");
    if (head.one_hot) {
      if (last.kind != Layer::REMAX && last.kind != Layer::CLOSED_FORM_SOFTMAX) {
        ctx.Add(absl::StrFormat("head.classification.output: ONE_HOT needs REMAX or "
                                "CLOSED_FORM_SOFTMAX as the last layer, but %s is",
                                last_at));
      } else if (out != k) {
        ctx.Add(absl::StrFormat("layers: the last layer gives %d outputs but %d classes one-hot "
                                "need %d", out, k, k));
      }
      return;
    }
    if (IsOutputActivation(last.kind)) {
      ctx.Add(absl::StrFormat("head.classification.output: HIERARCHICAL_SOFTMAX reads the last "
                              "layer's units as tree nodes, but %s is an output activation "
                              "(use output ONE_HOT with REMAX or CLOSED_FORM_SOFTMAX)",
                              last_at));
    } else if (out != static_cast<uint64_t>(HsmTree::OutputWidth(static_cast<int>(k)))) {
      ctx.Add(absl::StrFormat("layers: the last layer gives %d outputs but %d classes by "
                              "hierarchical softmax need %d", out, k,
                              HsmTree::OutputWidth(static_cast<int>(k))));
    }
    return;
  }
  if (head.kind != HeadKind::kRegression) {
    ctx.Add("head: unknown kind");
    return;
  }
  if (head.num_classes != 0 || head.one_hot) {
    ctx.Add(absl::StrFormat("head: a regression head takes no class count (found %d)",
                            head.num_classes));
  }
  if (head.heteroscedastic) {
    if (last.kind != Layer::EVEN_EXP) {
      ctx.Add(absl::StrFormat("head.regression.heteroscedastic: needs EVEN_EXP as the last "
                              "layer (two outputs per target: mean and noise), but %s is",
                              last_at));
    } else if (arch.layers.size() < 2 || ActivationFeeds(arch.layers[arch.layers.size() - 2])) {
      ctx.Add(absl::StrFormat("%s: EVEN_EXP must follow a layer with parameters (e.g. LINEAR), "
                              "not an activation", last_at));
    }
  } else if (IsOutputActivation(last.kind)) {
    ctx.Add(absl::StrFormat("head.regression: %s needs %s; a homoscedastic regression head "
                            "reads plain outputs",
                            last_at, last.kind == Layer::EVEN_EXP
                                         ? "{\"regression\": {\"heteroscedastic\": true}}"
                                         : "a classification head with output ONE_HOT"));
  }
}

}  // namespace

bool IsOutputActivation(LayerKind kind) {
  return kind == Layer::REMAX || kind == Layer::CLOSED_FORM_SOFTMAX || kind == Layer::EVEN_EXP;
}

std::string Shape::ToString() const {
  if (flat()) return absl::StrCat(c);
  return absl::StrCat(c, "x", h, "x", w);
}

std::string KindName(LayerKind kind) {
  if (kind == Layer::KIND_UNSPECIFIED || !Layer::Kind_IsValid(kind)) {
    return absl::StrCat("KIND_", static_cast<int>(kind));
  }
  return Layer::Kind_Name(kind);
}

std::string KindRules::Describe(const LayerSpec& spec) const {
  return absl::StrCat("-", KindName(spec.kind));
}

std::string DescribeLayers(const std::vector<LayerSpec>& layers) {
  std::string s;
  for (const LayerSpec& l : layers) {
    const KindRules* rules = RulesOf(l.kind);
    absl::StrAppend(&s, rules != nullptr ? rules->Describe(l) : absl::StrCat("-", KindName(l.kind)));
  }
  return s;
}

const KindRules* RulesOf(LayerKind kind) {
  switch (kind) {
    case Layer::LINEAR: return &LinearRules();
    case Layer::RELU:
    case Layer::LEAKY_RELU:
    case Layer::SIGMOID:
    case Layer::TANH:
    case Layer::SOFTPLUS:
    case Layer::MIXTURE_RELU:
    case Layer::REMAX:
    case Layer::CLOSED_FORM_SOFTMAX:
    case Layer::EVEN_EXP: return &ActivationRules(kind);
    case Layer::RESIDUAL: return &ResidualRules();
    case Layer::CONV2D: return &Conv2dRules();
    case Layer::AVG_POOL2D:
    case Layer::MAX_POOL2D: return &PoolRules(kind);
    case Layer::BATCH_NORM: return &BatchNormRules();
    case Layer::LAYER_NORM: return &LayerNormRules();
    default: return nullptr;
  }
}

std::optional<Shape> InferSequence(const std::vector<LayerSpec>& layers, const Shape& in,
                                   const std::string& path, CheckContext& ctx) {
  Shape shape = in;
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerSpec& l = layers[i];
    const std::string at = absl::StrCat(path, "[", i, "]");
    const KindRules* rules = RulesOf(l.kind);
    if (rules == nullptr) {
      ctx.Add(absl::StrFormat("%s.kind: missing or unknown; expected one of %s", at,
                              AllKindNames()));
      return std::nullopt;
    }
    const std::optional<Shape> out = rules->Infer(l, shape, at, ctx);
    if (!out) return std::nullopt;
    // A kind keeps only its own fields: whatever does not survive its
    // proto form (a width on an activation read from a hostile file) is
    // refused, so equal networks compare equal.
    tagi::v1::Layer proto;
    rules->ToProto(l, proto);
    LayerSpec back;
    back.kind = l.kind;
    std::vector<std::string> ignored;
    CheckContext quiet{&ignored, ctx.depth};
    rules->FromProto(proto, at, quiet, back);
    if (!(back == l)) {
      ctx.Add(absl::StrFormat("%s: holds fields a %s layer does not take", at, KindName(l.kind)));
      return std::nullopt;
    }
    if (out->size() > kMaxUnitsPerSample) {
      ctx.Add(absl::StrFormat("%s: its output has %d units per sample; at most %d are allowed",
                              at, out->size(), kMaxUnitsPerSample));
      return std::nullopt;
    }
    shape = *out;
  }
  return shape;
}

void CheckArchitecture(const Architecture& arch, std::vector<std::string>* problems) {
  CheckContext ctx{problems};
  if (arch.layers.empty()) {
    ctx.Add("layers: empty; expected at least one layer");
    return;
  }
  const Shape& in = arch.input;
  if (in.c < 1 || in.h < 1 || in.w < 1 || in.size() > kMaxUnitsPerSample) {
    ctx.Add(absl::StrFormat("input: shape %dx%dx%d; expected channels, height and width >= 1 "
                            "and at most %d units", in.c, in.h, in.w, kMaxUnitsPerSample));
    return;
  }
  const int count = CountLayers(arch.layers);
  if (count > kMaxLayers) {
    ctx.Add(absl::StrFormat("layers: %d layers (nested ones included); at most %d are allowed",
                            count, kMaxLayers));
    return;
  }
  const size_t before = problems->size();
  const std::optional<Shape> out = InferSequence(arch.layers, in, "layers", ctx);
  if (!out) return;
  // A problem that still let the shapes be inferred (a LINEAR whose
  // in_features is wrong has a known output) leaves the head to check.
  const bool shapes_ok = problems->size() == before;
  uint64_t params = 0;
  uint64_t state = 0;
  if (shapes_ok) CountBlocks(arch.layers, in, &params, &state);
  if (params > kMaxParameters || state > kMaxParameters) {
    ctx.Add(absl::StrFormat("layers: %d parameters and %d state values; at most %d of each are "
                            "allowed", params, state, kMaxParameters));
  }
  CheckOutputActivationPlacement(arch.layers, "layers", true, ctx);
  CheckHeadFits(arch, out->size(), ctx);
}

absl::Status ValidateArchitecture(const Architecture& arch) {
  std::vector<std::string> problems;
  CheckArchitecture(arch, &problems);
  if (problems.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("invalid network: ", absl::StrJoin(problems, "; ")));
}

Shape OutputShape(const std::vector<LayerSpec>& layers, const Shape& input) {
  std::vector<std::string> problems;
  CheckContext ctx{&problems};
  const std::optional<Shape> out = InferSequence(layers, input, "layers", ctx);
  return out.value_or(Shape{0, 1, 1});
}

uint32_t MinTrainBatch(const Architecture& arch, std::string* path) {
  uint32_t batch = 1;
  std::string at;
  MinBatch(arch.layers, arch.input, "layers", &batch, &at);
  if (path != nullptr) *path = at;
  return batch;
}

uint32_t Architecture::output_width() const {
  return static_cast<uint32_t>(OutputShape(layers, input).size());
}

uint64_t Architecture::num_parameters() const {
  uint64_t params = 0, state = 0;
  CountBlocks(layers, input, &params, &state);
  return params;
}

uint64_t Architecture::num_state() const {
  uint64_t params = 0, state = 0;
  CountBlocks(layers, input, &params, &state);
  return state;
}

std::string Architecture::ToString() const {
  std::string s = input.ToString();
  absl::StrAppend(&s, DescribeLayers(layers));
  if (head.kind == HeadKind::kClassification) {
    absl::StrAppend(&s, head.one_hot ? " onehot(" : " hsm(", head.num_classes, ")");
  } else {
    absl::StrAppend(&s, head.heteroscedastic ? " heteroscedastic" : " regression");
  }
  return s;
}

}  // namespace tagi::spec
