// LINEAR: the fully connected layer (docs/maths.md sections 1, 3, 6).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spec/kinds.h"

namespace tagi::spec {
namespace {

class Linear final : public KindRules {
 public:
  const char* field() const override { return "linear"; }
  std::string Describe(const LayerSpec& spec) const override {
    return absl::StrCat("-", spec.out);
  }

  void FromProto(const tagi::v1::Layer& layer, const std::string&, CheckContext&,
                 LayerSpec& spec) const override {
    spec.in = layer.linear().in_features();
    spec.out = layer.linear().out_features();
  }
  void ToProto(const LayerSpec& spec, tagi::v1::Layer& layer) const override {
    layer.mutable_linear()->set_in_features(spec.in);
    layer.mutable_linear()->set_out_features(spec.out);
  }

  std::optional<Shape> Infer(const LayerSpec& spec, const Shape& in, const std::string& path,
                             CheckContext& ctx) const override {
    bool ok = true;
    for (const auto& [name, value] : {std::pair{"in_features", spec.in}, {"out_features", spec.out}}) {
      if (value < 1 || value > kMaxLayerWidth) {
        ctx.Add(absl::StrFormat("%s.%s: %d; expected 1..%d", path, name, value, kMaxLayerWidth));
        ok = false;
      }
    }
    if (!ok) return std::nullopt;
    // A mismatch still gives a known output shape: the layers after it
    // (and the head) are checked too, so one answer names every problem.
    if (spec.in != in.size()) {
      ctx.Add(absl::StrFormat("%s.in_features: %d does not match its input, which has %d features "
                              "(shape %s)", path, spec.in, in.size(), in.ToString()));
    }
    return Shape{spec.out, 1, 1};
  }

  std::vector<BlockSpec> Parameters(const LayerSpec& spec, const Shape&) const override {
    return {{uint64_t{spec.in} * spec.out, spec.in, spec.out, InitRule::kWeight},
            {spec.out, spec.in, spec.out, InitRule::kBias}};
  }
  // mu_w^2 and mu_w^2 + var_w, refreshed whenever the parameters change.
  uint64_t Derived(const LayerSpec& spec, const Shape&) const override {
    return 2 * uint64_t{spec.in} * spec.out;
  }
  // mu_a^2 of the batch, for the variance product and the weight deltas.
  uint64_t ScratchPerSample(const LayerSpec& spec, const Shape&) const override { return spec.in; }
};

}  // namespace

const KindRules& LinearRules() {
  static const Linear rules;
  return rules;
}

}  // namespace tagi::spec
