// RESIDUAL: out = main(x) + shortcut(x), the shortcut the identity when it
// is empty (docs/maths.md section 13). Its branches are layer lists,
// nestable up to kMaxNesting; it owns no parameters of its own (those of
// its layers are in the model's arena like any other).
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spec/kinds.h"

namespace tagi::spec {
namespace {

class Residual final : public KindRules {
 public:
  const char* field() const override { return "residual"; }
  std::string Describe(const LayerSpec& spec) const override {
    const std::string main = DescribeLayers(spec.main);
    const std::string shortcut = DescribeLayers(spec.shortcut);
    return absl::StrCat("-RES[", main.empty() ? "" : main.substr(1), "|",
                        shortcut.empty() ? "id" : shortcut.substr(1), "]");
  }

  void FromProto(const tagi::v1::Layer& layer, const std::string& path, CheckContext& ctx,
                 LayerSpec& spec) const override {
    if (ctx.depth >= kMaxNesting) return;  // Infer reports it
    ++ctx.depth;
    spec.main = LayersFromProto(layer.residual().main(), path + ".residual.main", ctx);
    spec.shortcut = LayersFromProto(layer.residual().shortcut(), path + ".residual.shortcut", ctx);
    --ctx.depth;
  }
  void ToProto(const LayerSpec& spec, tagi::v1::Layer& layer) const override {
    auto* r = layer.mutable_residual();
    LayersToProto(spec.main, r->mutable_main());
    LayersToProto(spec.shortcut, r->mutable_shortcut());
  }

  std::optional<Shape> Infer(const LayerSpec& spec, const Shape& in, const std::string& path,
                             CheckContext& ctx) const override {
    if (ctx.depth >= kMaxNesting) {
      ctx.Add(absl::StrFormat("%s: residual blocks nest more than %d deep", path, kMaxNesting));
      return std::nullopt;
    }
    if (spec.main.empty()) {
      ctx.Add(absl::StrFormat("%s.residual.main: empty; a residual block needs at least one "
                              "layer on its main branch", path));
      return std::nullopt;
    }
    ++ctx.depth;
    const std::optional<Shape> m = InferSequence(spec.main, in, path + ".residual.main", ctx);
    const std::optional<Shape> s =
        spec.shortcut.empty() ? std::optional<Shape>(in)
                              : InferSequence(spec.shortcut, in, path + ".residual.shortcut", ctx);
    --ctx.depth;
    if (!m || !s) return std::nullopt;
    if (*m != *s) {
      ctx.Add(absl::StrFormat("%s.residual: the main branch ends in shape %s but the %s in %s; "
                              "the two are added, so they must match", path, m->ToString(),
                              spec.shortcut.empty() ? "identity shortcut" : "shortcut",
                              s->ToString()));
      return std::nullopt;
    }
    return m;
  }
};

}  // namespace

const KindRules& ResidualRules() {
  static const Residual rules;
  return rules;
}

}  // namespace tagi::spec
