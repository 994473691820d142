// The activations: the elementwise ones (RELU, LEAKY_RELU, SIGMOID, TANH,
// SOFTPLUS, MIXTURE_RELU) and the output activations of the heads (REMAX and
// CLOSED_FORM_SOFTMAX over each sample's units, EVEN_EXP over [mean,
// log-noise] pairs; docs/heads.md). Each keeps the shape of its input and
// writes a jcb; only LEAKY_RELU has a field (its negative slope). Where an
// output activation may stand (last, under its head) is the network's rule
// (spec/network.cc), not the kind's.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spec/kinds.h"

namespace tagi::spec {
namespace {

using tagi::v1::Layer;

constexpr float kDefaultLeakySlope = 0.1f;

class Activation final : public KindRules {
 public:
  Activation(LayerKind kind, const char* field) : kind_(kind), field_(field) {}
  const char* field() const override { return field_; }
  bool produces_jcb() const override { return true; }
  bool backward_reads_input() const override { return false; }  // only its jcb
  bool elementwise_activation() const override {
    return kind_ != Layer::REMAX && kind_ != Layer::CLOSED_FORM_SOFTMAX &&
           kind_ != Layer::EVEN_EXP;
  }
  std::string Describe(const LayerSpec& spec) const override {
    if (kind_ != Layer::LEAKY_RELU) return KindRules::Describe(spec);
    return absl::StrCat("-", KindName(spec.kind), "(", spec.slope, ")");
  }

  void FromProto(const Layer& layer, const std::string&, CheckContext&,
                 LayerSpec& spec) const override {
    if (kind_ == Layer::LEAKY_RELU) {
      spec.slope = layer.leaky_relu().has_negative_slope() ? layer.leaky_relu().negative_slope()
                                                           : kDefaultLeakySlope;
    }
  }
  void ToProto(const LayerSpec& spec, Layer& layer) const override {
    switch (kind_) {
      case Layer::RELU: layer.mutable_relu(); break;
      case Layer::LEAKY_RELU: layer.mutable_leaky_relu()->set_negative_slope(spec.slope); break;
      case Layer::SIGMOID: layer.mutable_sigmoid(); break;
      case Layer::TANH: layer.mutable_tanh(); break;
      case Layer::SOFTPLUS: layer.mutable_softplus(); break;
      case Layer::REMAX: layer.mutable_remax(); break;
      case Layer::CLOSED_FORM_SOFTMAX: layer.mutable_closed_form_softmax(); break;
      case Layer::EVEN_EXP: layer.mutable_even_exp(); break;
      default: layer.mutable_mixture_relu(); break;
    }
  }

  std::optional<Shape> Infer(const LayerSpec& spec, const Shape& in, const std::string& path,
                             CheckContext& ctx) const override {
    if (kind_ == Layer::LEAKY_RELU && !(spec.slope > 0.0f && spec.slope < 1.0f)) {
      ctx.Add(absl::StrFormat("%s.negative_slope: %g; expected a value in (0, 1)", path,
                              spec.slope));
      return std::nullopt;
    }
    if (kind_ == Layer::EVEN_EXP && in.size() % 2 != 0) {
      ctx.Add(absl::StrFormat("%s: EVEN_EXP takes [mean, log-noise] pairs; its input has %d "
                              "units, an odd number", path, in.size()));
      return std::nullopt;
    }
    return in;
  }

 private:
  LayerKind kind_;
  const char* field_;
};

}  // namespace

const KindRules& ActivationRules(LayerKind kind) {
  static const Activation relu(Layer::RELU, "relu");
  static const Activation leaky(Layer::LEAKY_RELU, "leaky_relu");
  static const Activation sigmoid(Layer::SIGMOID, "sigmoid");
  static const Activation tanh(Layer::TANH, "tanh");
  static const Activation softplus(Layer::SOFTPLUS, "softplus");
  static const Activation mixture(Layer::MIXTURE_RELU, "mixture_relu");
  static const Activation remax(Layer::REMAX, "remax");
  static const Activation cf_softmax(Layer::CLOSED_FORM_SOFTMAX, "closed_form_softmax");
  static const Activation even_exp(Layer::EVEN_EXP, "even_exp");
  switch (kind) {
    case Layer::RELU: return relu;
    case Layer::LEAKY_RELU: return leaky;
    case Layer::SIGMOID: return sigmoid;
    case Layer::TANH: return tanh;
    case Layer::SOFTPLUS: return softplus;
    case Layer::REMAX: return remax;
    case Layer::CLOSED_FORM_SOFTMAX: return cf_softmax;
    case Layer::EVEN_EXP: return even_exp;
    default: return mixture;
  }
}

}  // namespace tagi::spec
