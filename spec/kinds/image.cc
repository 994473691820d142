// The windowed image layers (docs/maths.md sections 9-11): CONV2D,
// AVG_POOL2D and MAX_POOL2D over (C, H, W) inputs, non-square included.
//
// Geometry follows the reference library: along each axis the output has
// (size - kernel + pad) / stride + 1 cells, pad = 2p for SYMMETRIC padding
// and p for BOTTOM_RIGHT, and the division must be exact. Unlike the
// reference, a stride larger than the kernel works (B6), a pool's padding
// needs a padding type (B7) and padded cells are skipped everywhere (B5).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "spec/kinds.h"

namespace tagi::spec {
namespace {

using tagi::v1::Layer;

inline constexpr uint32_t kMaxKernel = 64;
inline constexpr uint32_t kMaxStride = 64;
inline constexpr uint64_t kMaxWorkspaceFloats = uint64_t{1} << 28;  // 1 GiB

// The output size along one axis of `size` cells, or nullopt after adding
// the problem.
std::optional<uint32_t> AxisOutput(const LayerSpec& l, uint32_t size, const char* axis,
                                   const std::string& path, CheckContext& ctx) {
  const int64_t pad = l.padding_type == Layer::SYMMETRIC      ? 2 * int64_t{l.padding}
                      : l.padding_type == Layer::BOTTOM_RIGHT ? int64_t{l.padding}
                                                              : 0;
  const int64_t span = int64_t{size} + pad - l.kernel;
  if (span < 0) {
    ctx.Add(absl::StrFormat("%s.kernel_size: %d is larger than its input's %s of %d (%d with "
                            "padding)", path, l.kernel, axis, size, int64_t{size} + pad));
    return std::nullopt;
  }
  if (span % l.stride != 0) {
    ctx.Add(absl::StrFormat(
        "%s.stride: %s %d + padding %d - kernel %d = %d is not a multiple of stride %d; the "
        "output size must divide exactly (change the padding, padding type or stride)",
        path, axis, size, pad, l.kernel, span, l.stride));
    return std::nullopt;
  }
  return static_cast<uint32_t>(span / l.stride + 1);
}

// The window fields shared by convolutions and pools; the output shape
// with `channels` channels, or nullopt after adding the problems.
std::optional<Shape> WindowShape(const LayerSpec& l, const Shape& in, uint32_t channels,
                                 const std::string& path, CheckContext& ctx) {
  bool ok = true;
  auto range = [&](const char* name, uint32_t value, uint32_t lo, uint32_t hi) {
    if (value < lo || value > hi) {
      ctx.Add(absl::StrFormat("%s.%s: %d; expected %d..%d", path, name, value, lo, hi));
      ok = false;
    }
  };
  range("kernel_size", l.kernel, 1, kMaxKernel);
  range("stride", l.stride, 1, kMaxStride);
  if (!ok) return std::nullopt;
  if (l.padding_type != Layer::PADDING_UNSPECIFIED && l.padding_type != Layer::SYMMETRIC &&
      l.padding_type != Layer::BOTTOM_RIGHT) {
    ctx.Add(absl::StrFormat("%s.padding_type: unknown value %d; expected SYMMETRIC or "
                            "BOTTOM_RIGHT", path, static_cast<int>(l.padding_type)));
    return std::nullopt;
  }
  if (l.padding > 0 && l.padding_type == Layer::PADDING_UNSPECIFIED) {
    ctx.Add(absl::StrFormat("%s.padding_type: padding %d needs a padding type (SYMMETRIC: on "
                            "every side; BOTTOM_RIGHT: bottom and right only)", path,
                            l.padding));
    return std::nullopt;
  }
  if (l.padding >= l.kernel) {
    ctx.Add(absl::StrFormat("%s.padding: %d; expected less than the kernel size %d (a window "
                            "of padding alone)", path, l.padding, l.kernel));
    return std::nullopt;
  }
  const std::optional<uint32_t> h = AxisOutput(l, in.h, "height", path, ctx);
  const std::optional<uint32_t> w = AxisOutput(l, in.w, "width", path, ctx);
  if (!h || !w) return std::nullopt;
  return Shape{channels, *h, *w};
}

void WindowFromProto(uint32_t kernel, bool has_stride, uint32_t stride, uint32_t padding,
                     Padding type, LayerSpec& spec) {
  spec.kernel = kernel;
  spec.stride = has_stride ? stride : 0;
  spec.padding = padding;
  spec.padding_type = type;
}

// "-CONV(32,k3,s1,p1)", "-AVG(k2,s2)": the window of a convolution or a pool.
std::string DescribeWindow(const char* name, const LayerSpec& spec, bool channels) {
  std::string s = absl::StrCat("-", name, "(");
  if (channels) absl::StrAppend(&s, spec.out, ",");
  absl::StrAppend(&s, "k", spec.kernel, ",s", spec.stride);
  if (spec.padding > 0) {
    absl::StrAppend(&s, ",p", spec.padding, spec.padding_type == Layer::BOTTOM_RIGHT ? "br" : "");
  }
  return s + ")";
}

class Conv2d final : public KindRules {
 public:
  const char* field() const override { return "conv2d"; }
  std::string Describe(const LayerSpec& spec) const override {
    return DescribeWindow("CONV", spec, /*channels=*/true);
  }

  void FromProto(const Layer& layer, const std::string&, CheckContext&,
                 LayerSpec& spec) const override {
    const Layer::Conv2d& c = layer.conv2d();
    spec.in = c.in_channels();
    spec.out = c.out_channels();
    WindowFromProto(c.kernel_size(), true, c.has_stride() ? c.stride() : 1, c.padding(),
                    c.padding_type() == Layer::PADDING_UNSPECIFIED ? Layer::SYMMETRIC
                                                                   : c.padding_type(),
                    spec);
    spec.bias = c.has_bias() ? c.bias() : true;
  }
  void ToProto(const LayerSpec& spec, Layer& layer) const override {
    Layer::Conv2d* c = layer.mutable_conv2d();
    c->set_in_channels(spec.in);
    c->set_out_channels(spec.out);
    c->set_kernel_size(spec.kernel);
    c->set_stride(spec.stride);
    c->set_padding(spec.padding);
    c->set_padding_type(spec.padding_type);
    c->set_bias(spec.bias);
  }

  std::optional<Shape> Infer(const LayerSpec& spec, const Shape& in, const std::string& path,
                             CheckContext& ctx) const override {
    bool ok = true;
    for (const auto& [name, value] :
         {std::pair{"in_channels", spec.in}, {"out_channels", spec.out}}) {
      if (value < 1 || value > kMaxLayerWidth) {
        ctx.Add(absl::StrFormat("%s.%s: %d; expected 1..%d", path, name, value, kMaxLayerWidth));
        ok = false;
      }
    }
    if (!ok) return std::nullopt;
    if (spec.in != in.c) {
      ctx.Add(absl::StrFormat("%s.in_channels: %d does not match its input, which has %d "
                              "channels (shape %s)", path, spec.in, in.c, in.ToString()));
    }
    const std::optional<Shape> out = WindowShape(spec, in, spec.out, path, ctx);
    if (!out) return std::nullopt;
    // A hostile file could otherwise ask for terabytes of im2col columns or
    // blocked copies.
    if (const uint64_t floats = Workspace(spec, in); floats > kMaxWorkspaceFloats) {
      ctx.Add(absl::StrFormat("%s: its workspace would take %d MiB; at most %d MiB are "
                              "allowed (fewer input channels or a smaller kernel)", path,
                              floats * sizeof(float) >> 20,
                              kMaxWorkspaceFloats * sizeof(float) >> 20));
      return std::nullopt;
    }
    return out;
  }

  std::vector<BlockSpec> Parameters(const LayerSpec& spec, const Shape&) const override {
    const uint32_t k2 = spec.kernel * spec.kernel;
    std::vector<BlockSpec> blocks = {
        {uint64_t{spec.out} * spec.in * k2, k2 * spec.in, k2 * spec.out, InitRule::kWeight}};
    if (spec.bias) blocks.push_back({spec.out, k2 * spec.in, k2 * spec.out, InitRule::kBias});
    return blocks;
  }
  // mu_w^2 and mu_w^2 + var_w, as for LINEAR.
  uint64_t Derived(const LayerSpec& spec, const Shape&) const override {
    return 2 * uint64_t{spec.out} * spec.in * spec.kernel * spec.kernel;
  }
  // For a chunk of ConvChunk samples side by side (the engine's im2col):
  // three column matrices [in * k^2][chunk * output positions] and two
  // output matrices [out][chunk * output positions].
  uint64_t Workspace(const LayerSpec& spec, const Shape& in) const override {
    std::vector<std::string> ignored;
    CheckContext quiet{&ignored};
    const std::optional<Shape> out = WindowShape(spec, in, spec.out, "", quiet);
    if (!out) return 0;
    const uint64_t positions = uint64_t{out->h} * out->w;
    const uint64_t columns = ConvChunk(positions) * positions;
    const uint64_t im2col =
        (3 * uint64_t{spec.in} * spec.kernel * spec.kernel + 2 * uint64_t{spec.out}) * columns;
    // The CPU engine's direct convolutions share it (worker/engine/direct_conv.h).
    return std::max(im2col, DirectConvWorkspace(spec.in, uint64_t{in.h} * in.w, spec.out,
                                                positions, spec.kernel));
  }
};

class Pool final : public KindRules {
 public:
  explicit Pool(LayerKind kind) : kind_(kind) {}
  // AvgPool's backward reads nothing of its input, MaxPool's its scratch.
  bool backward_reads_input() const override { return false; }
  const char* field() const override {
    return kind_ == Layer::AVG_POOL2D ? "avg_pool2d" : "max_pool2d";
  }
  std::string Describe(const LayerSpec& spec) const override {
    return DescribeWindow(kind_ == Layer::AVG_POOL2D ? "AVG" : "MAX", spec, /*channels=*/false);
  }

  void FromProto(const Layer& layer, const std::string&, CheckContext&,
                 LayerSpec& spec) const override {
    const Layer::Pool2d& p = kind_ == Layer::AVG_POOL2D ? layer.avg_pool2d() : layer.max_pool2d();
    WindowFromProto(p.kernel_size(), true, p.has_stride() ? p.stride() : p.kernel_size(),
                    p.padding(), p.padding_type(), spec);
  }
  void ToProto(const LayerSpec& spec, Layer& layer) const override {
    Layer::Pool2d* p =
        kind_ == Layer::AVG_POOL2D ? layer.mutable_avg_pool2d() : layer.mutable_max_pool2d();
    p->set_kernel_size(spec.kernel);
    p->set_stride(spec.stride);
    p->set_padding(spec.padding);
    p->set_padding_type(spec.padding_type);
  }

  std::optional<Shape> Infer(const LayerSpec& spec, const Shape& in, const std::string& path,
                             CheckContext& ctx) const override {
    return WindowShape(spec, in, in.c, path, ctx);
  }
  // MAX_POOL2D: the input cell each output took, for backward.
  uint64_t ScratchPerSample(const LayerSpec& spec, const Shape& in) const override {
    if (kind_ != Layer::MAX_POOL2D) return 0;
    std::vector<std::string> ignored;
    CheckContext quiet{&ignored};
    const std::optional<Shape> out = WindowShape(spec, in, in.c, "", quiet);
    return out ? out->size() : 0;
  }

 private:
  LayerKind kind_;
};

}  // namespace

const KindRules& Conv2dRules() {
  static const Conv2d rules;
  return rules;
}

const KindRules& PoolRules(LayerKind kind) {
  static const Pool avg(Layer::AVG_POOL2D);
  static const Pool max(Layer::MAX_POOL2D);
  return kind == Layer::AVG_POOL2D ? avg : max;
}

}  // namespace tagi::spec
