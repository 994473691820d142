// The normalisation layers (docs/maths.md section 12).
//
// BATCH_NORM normalises each channel over the batch (and the positions of
// a feature map), or each feature of a flat input over the batch: the path
// follows the input's shape (the reference's B3 fixed). It keeps running
// statistics in the state arena: mean (C, from 0), variance (C, from 1) and
// a first-batch flag (1 until the first training batch, whose statistics
// replace the initial ones on every path: the reference's B1 fixed).
// LAYER_NORM normalises each sample over all its units. Both have a scale
// gamma (mean 1) and, with bias, a shift beta (mean 0), per channel of a
// feature map or per feature of a flat input, with variance 1/C.
#include <cmath>

#include "absl/strings/str_format.h"
#include "spec/kinds.h"

namespace tagi::spec {
namespace {

using tagi::v1::Layer;

constexpr float kDefaultEps = 1e-5f;
constexpr float kDefaultMomentum = 0.9f;

std::vector<BlockSpec> ScaleAndShift(const LayerSpec& spec, const Shape& in) {
  std::vector<BlockSpec> blocks = {{in.c, in.c, in.c, InitRule::kOne}};
  if (spec.bias) blocks.push_back({in.c, in.c, in.c, InitRule::kZero});
  return blocks;
}

bool CheckEps(const LayerSpec& spec, const std::string& path, CheckContext& ctx) {
  if (!(spec.eps > 0.0f && spec.eps <= 1.0f)) {
    ctx.Add(absl::StrFormat("%s.eps: %g; expected a value in (0, 1]", path, spec.eps));
    return false;
  }
  return true;
}

class BatchNorm final : public KindRules {
 public:
  const char* field() const override { return "batch_norm"; }
  std::string Describe(const LayerSpec&) const override { return "-BN"; }
  bool absorbs_activation() const override { return true; }
  // Over a flat input each statistic sees one value per sample.
  uint32_t MinBatch(const LayerSpec&, const Shape& in) const override {
    return in.h * in.w < 2 ? 2 : 1;
  }

  void FromProto(const Layer& layer, const std::string&, CheckContext&,
                 LayerSpec& spec) const override {
    const Layer::BatchNorm& b = layer.batch_norm();
    spec.in = b.num_features();
    spec.eps = b.has_eps() ? b.eps() : kDefaultEps;
    spec.momentum = b.has_momentum() ? b.momentum() : kDefaultMomentum;
    spec.bias = b.has_bias() ? b.bias() : true;
  }
  void ToProto(const LayerSpec& spec, Layer& layer) const override {
    Layer::BatchNorm* b = layer.mutable_batch_norm();
    b->set_num_features(spec.in);
    b->set_eps(spec.eps);
    b->set_momentum(spec.momentum);
    b->set_bias(spec.bias);
  }

  std::optional<Shape> Infer(const LayerSpec& spec, const Shape& in, const std::string& path,
                             CheckContext& ctx) const override {
    bool ok = CheckEps(spec, path, ctx);
    if (!(spec.momentum >= 0.0f && spec.momentum < 1.0f)) {
      ctx.Add(absl::StrFormat("%s.momentum: %g; expected a value in [0, 1) (the weight of the "
                              "old running value)", path, spec.momentum));
      ok = false;
    }
    if (spec.in != 0 && spec.in != in.c) {
      ctx.Add(absl::StrFormat("%s.num_features: %d does not match its input, which has %d %s "
                              "(shape %s)", path, spec.in, in.c,
                              in.flat() ? "features" : "channels", in.ToString()));
      ok = false;
    }
    if (!ok) return std::nullopt;
    return in;
  }

  std::vector<BlockSpec> Parameters(const LayerSpec& spec, const Shape& in) const override {
    return ScaleAndShift(spec, in);
  }
  std::vector<StateSpec> State(const LayerSpec&, const Shape& in) const override {
    return {{in.c, 0.0f}, {in.c, 1.0f}, {1, 1.0f}};
  }
  // The statistics of the last training batch (mean, variance per
  // channel), which backward uses, and room for the synchronised sums.
  uint64_t Derived(const LayerSpec&, const Shape& in) const override { return 3 * uint64_t{in.c}; }
};

class LayerNorm final : public KindRules {
 public:
  const char* field() const override { return "layer_norm"; }
  std::string Describe(const LayerSpec&) const override { return "-LN"; }
  bool absorbs_activation() const override { return true; }

  void FromProto(const Layer& layer, const std::string&, CheckContext&,
                 LayerSpec& spec) const override {
    const Layer::LayerNorm& n = layer.layer_norm();
    spec.eps = n.has_eps() ? n.eps() : kDefaultEps;
    spec.bias = n.has_bias() ? n.bias() : true;
  }
  void ToProto(const LayerSpec& spec, Layer& layer) const override {
    Layer::LayerNorm* n = layer.mutable_layer_norm();
    n->set_eps(spec.eps);
    n->set_bias(spec.bias);
  }

  std::optional<Shape> Infer(const LayerSpec& spec, const Shape& in, const std::string& path,
                             CheckContext& ctx) const override {
    if (!CheckEps(spec, path, ctx)) return std::nullopt;
    if (in.size() < 2) {
      ctx.Add(absl::StrFormat("%s: its input has %d unit; a layer norm needs at least 2", path,
                              in.size()));
      return std::nullopt;
    }
    return in;
  }

  std::vector<BlockSpec> Parameters(const LayerSpec& spec, const Shape& in) const override {
    return ScaleAndShift(spec, in);
  }
  // Each sample's statistics (mean, variance), which backward uses.
  uint64_t ScratchPerSample(const LayerSpec&, const Shape&) const override { return 2; }
};

}  // namespace

const KindRules& BatchNormRules() {
  static const BatchNorm rules;
  return rules;
}

const KindRules& LayerNormRules() {
  static const LayerNorm rules;
  return rules;
}

}  // namespace tagi::spec
