// The CUDA image layers of layers.h: CONV2D (the seven convolutions on
// cuDNN, cudnn_conv.h), AVG_POOL2D, MAX_POOL2D, BATCH_NORM and LAYER_NORM
// (image_kernels.h), each the GPU form of its CPU layer (conv2d.cc,
// pool.cc, norm.cc), which cites the equations.
#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/engine/conv2d.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/image_kernels.h"
#include "worker/engine/cuda/kernels.h"
#include "worker/engine/cuda/layers.h"
#if TAGI_HAVE_CUDNN
#include "worker/engine/cuda/cudnn_conv.h"
#endif

namespace tagi::engine::cuda {
namespace {

// Workspace regions are 256-byte aligned, as the arenas are.
constexpr size_t kAlignBytes = 256;
size_t AlignUp(size_t bytes) { return (bytes + kAlignBytes - 1) / kAlignBytes * kAlignBytes; }
size_t FloatBytes(size_t n) { return AlignUp(n * sizeof(float)); }
size_t DoubleBytes(size_t n) { return AlignUp(n * sizeof(double)); }

double* Doubles(const CudaLayerIo& io) { return reinterpret_cast<double*>(io.workspace); }

// The kernels' view of the activation a norm absorbs (none when null):
// its output units are the norm's input.
kernels::AbsorbedActivation Absorbed(const AbsorbedIo* act) {
  if (act == nullptr) return {};
  return {act->kind, act->slope, act->io.in.mu, act->io.in.var, act->io.out.mu, act->io.out_jcb};
}

// Backward of either norm (image_kernels.h): statistics per channel at
// `stats` (BatchNorm's batch statistics) or per sample (LayerNorm's). With
// an absorbed activation the input innovations are its input's.
absl::Status NormBackward(const CudaContext& ctx, const CudaLayerIo& io,
                          const kernels::ChannelLayout& l, bool per_sample, const float* stats,
                          float eps, bool bias, const AbsorbedIo* act) {
  const GaussianView delta_in = act != nullptr ? act->io.delta_in : io.delta_in;
  TAGI_CUDA_RETURN_IF_ERROR(kernels::NormBackward(
      l, per_sample, stats, eps, io.in.mu, io.delta_out.mu, io.delta_out.var, io.params[0].mu,
      io.params[0].var, bias ? io.params[1].var : nullptr, io.deltas[0].mu, io.deltas[0].var,
      bias ? io.deltas[1].mu : nullptr, bias ? io.deltas[1].var : nullptr, delta_in.mu,
      delta_in.var, Doubles(io), ctx.stream, Absorbed(act)));
  return absl::OkStatus();
}

kernels::Window WindowOf(const WindowGeometry& g, size_t batch) {
  return {batch * g.channels, g.height, g.width, g.out_height, g.out_width,
          g.kernel,           g.stride, g.offset};
}

class CudaAvgPool final : public CudaLayer {
 public:
  explicit CudaAvgPool(const spec::PlannedLayer& planned) : g_(WindowGeometry::Of(planned)) {}
  absl::Status Forward(const CudaContext& ctx, const CudaLayerIo& io, Mode) override {
    TAGI_CUDA_RETURN_IF_ERROR(kernels::AvgPoolForward(WindowOf(g_, io.batch), io.in.mu, io.in.var,
                                                      io.out.mu, io.out.var, ctx.stream));
    return absl::OkStatus();
  }
  absl::Status Backward(const CudaContext& ctx, const CudaLayerIo& io) override {
    if (io.delta_in.mu == nullptr) return absl::OkStatus();
    TAGI_CUDA_RETURN_IF_ERROR(kernels::AvgPoolBackward(WindowOf(g_, io.batch), io.delta_out.mu,
                                                       io.delta_out.var, io.delta_in.mu,
                                                       io.delta_in.var, ctx.stream));
    return absl::OkStatus();
  }

 private:
  WindowGeometry g_;
};

// The scratch (one float per output cell) keeps the index of the cell each
// window took, for backward.
class CudaMaxPool final : public CudaLayer {
 public:
  explicit CudaMaxPool(const spec::PlannedLayer& planned) : g_(WindowGeometry::Of(planned)) {}
  absl::Status Forward(const CudaContext& ctx, const CudaLayerIo& io, Mode) override {
    TAGI_CUDA_RETURN_IF_ERROR(kernels::MaxPoolForward(WindowOf(g_, io.batch), io.in.mu, io.in.var,
                                                      io.out.mu, io.out.var, io.scratch,
                                                      ctx.stream));
    return absl::OkStatus();
  }
  absl::Status Backward(const CudaContext& ctx, const CudaLayerIo& io) override {
    if (io.delta_in.mu == nullptr) return absl::OkStatus();
    TAGI_CUDA_RETURN_IF_ERROR(kernels::MaxPoolBackward(WindowOf(g_, io.batch), io.scratch,
                                                       io.delta_out.mu, io.delta_out.var,
                                                       io.delta_in.mu, io.delta_in.var,
                                                       ctx.stream));
    return absl::OkStatus();
  }

 private:
  WindowGeometry g_;
};

// What both norms share: their geometry and four entry points, with or
// without an absorbed activation. `per_sample`: LayerNorm (statistics per
// sample in the scratch), else BatchNorm (per channel in the derived buffer).
class CudaNorm : public CudaLayer {
 public:
  absl::Status Forward(const CudaContext& ctx, const CudaLayerIo& io, Mode mode) override {
    return Run(ctx, io, nullptr, mode);
  }
  absl::Status ForwardAbsorbing(const CudaContext& ctx, const CudaLayerIo& io,
                                const AbsorbedIo& act, Mode mode) override {
    return Run(ctx, io, &act, mode);
  }
  absl::Status Backward(const CudaContext& ctx, const CudaLayerIo& io) override {
    return Back(ctx, io, nullptr);
  }
  absl::Status BackwardAbsorbing(const CudaContext& ctx, const CudaLayerIo& io,
                                 const AbsorbedIo& act) override {
    return Back(ctx, io, &act);
  }

 protected:
  CudaNorm(const spec::PlannedLayer& planned, bool per_sample)
      : channels_(planned.in.c),
        positions_(size_t{planned.in.h} * planned.in.w),
        eps_(planned.spec.eps),
        bias_(planned.spec.bias),
        per_sample_(per_sample) {}

  virtual absl::Status Run(const CudaContext& ctx, const CudaLayerIo& io,
                           const AbsorbedIo* absorbed, Mode mode) const = 0;

  kernels::ChannelLayout Layout(const CudaLayerIo& io) const {
    return {io.batch, channels_, positions_};
  }
  // beta's mean and variance, or null when the layer has no bias.
  const float* BetaMu(const CudaLayerIo& io) const { return bias_ ? io.params[1].mu : nullptr; }
  const float* BetaVar(const CudaLayerIo& io) const { return bias_ ? io.params[1].var : nullptr; }

  size_t channels_;
  size_t positions_;
  float eps_;
  bool bias_;

 private:
  absl::Status Back(const CudaContext& ctx, const CudaLayerIo& io, const AbsorbedIo* act) const {
    return NormBackward(ctx, io, Layout(io), per_sample_, per_sample_ ? io.scratch : io.derived,
                        eps_, bias_, act);
  }

  bool per_sample_;
};

// Blocks: gamma [C], then beta [C] when bias is on. The derived buffer
// holds the batch's (mean, variance) per channel and, synchronised, the
// summed variances; the state the running mean, variance and first-batch
// flag. The workspace holds the sums' partials.
class CudaBatchNorm final : public CudaNorm {
 public:
  explicit CudaBatchNorm(const spec::PlannedLayer& planned)
      : CudaNorm(planned, false), momentum_(planned.spec.momentum) {}

  absl::StatusOr<size_t> Prepare(const CudaContext&, size_t max_batch) override {
    return DoubleBytes(kernels::SumWorkspaceDoubles(channels_, max_batch * positions_));
  }

 private:
  // In evaluation the running statistics are used and an absorbed
  // activation's units are computed once, in the normalisation.
  absl::Status Run(const CudaContext& ctx, const CudaLayerIo& io, const AbsorbedIo* absorbed,
                   Mode mode) const override {
    const kernels::ChannelLayout l = Layout(io);
    const kernels::AbsorbedActivation act = Absorbed(absorbed);
    float* running = io.state;  // mean [C], variance [C], first-batch flag
    float* batch_stats = io.derived;
    if (mode == Mode::kTrain) {
      if (io.sync == nullptr) {
        TAGI_CUDA_RETURN_IF_ERROR(kernels::BatchStatistics(l, io.in.mu, io.in.var, batch_stats,
                                                           batch_stats + channels_, Doubles(io),
                                                           ctx.stream, act));
      } else {
        TAGI_RETURN_IF_ERROR(SyncedStatistics(ctx, io, l, act));
      }
      TAGI_CUDA_RETURN_IF_ERROR(kernels::UpdateRunning(
          channels_, batch_stats, batch_stats + channels_, momentum_, running, running + channels_,
          running + 2 * channels_, ctx.stream));
    }
    const float* stats = mode == Mode::kTrain ? batch_stats : running;
    TAGI_CUDA_RETURN_IF_ERROR(kernels::BatchNormForward(
        l, io.in.mu, io.in.var, stats, stats + channels_, eps_, io.params[0].mu, io.params[0].var,
        BetaMu(io), BetaVar(io), io.out.mu, io.out.var, ctx.stream, act));
    return absl::OkStatus();
  }

  // norm.cc's SyncedStatistics: two sums across the replicas (the engine's
  // BatchSync sums device memory in place).
  absl::Status SyncedStatistics(const CudaContext& ctx, const CudaLayerIo& io,
                                const kernels::ChannelLayout& l,
                                const kernels::AbsorbedActivation& act) const {
    float* sums = io.derived;
    float* var_sum = io.derived + 2 * channels_;
    const double total = static_cast<double>(io.sync->world * io.batch * positions_);
    TAGI_CUDA_RETURN_IF_ERROR(
        kernels::SyncedSums(l, io.in.mu, io.in.var, sums, Doubles(io), ctx.stream, act));
    io.sync->sum({sums, 2 * channels_});
    TAGI_CUDA_RETURN_IF_ERROR(
        kernels::SyncedSpread(l, io.in.mu, total, sums, var_sum, Doubles(io), ctx.stream));
    io.sync->sum({sums + channels_, channels_});
    TAGI_CUDA_RETURN_IF_ERROR(kernels::SyncedVariance(channels_, total, var_sum, sums, ctx.stream));
    return absl::OkStatus();
  }

  float momentum_;
};

// Blocks as BatchNorm's; the scratch holds each sample's (mean, variance).
class CudaLayerNorm final : public CudaNorm {
 public:
  explicit CudaLayerNorm(const spec::PlannedLayer& planned) : CudaNorm(planned, true) {}

  absl::StatusOr<size_t> Prepare(const CudaContext&, size_t max_batch) override {
    const size_t sample = channels_ * positions_;
    return DoubleBytes(std::max(kernels::SumWorkspaceDoubles(max_batch, sample),
                                kernels::SumWorkspaceDoubles(channels_, max_batch * positions_)));
  }

 private:
  absl::Status Run(const CudaContext& ctx, const CudaLayerIo& io, const AbsorbedIo* absorbed,
                   Mode /*mode*/) const override {
    const kernels::ChannelLayout l = Layout(io);
    const kernels::AbsorbedActivation act = Absorbed(absorbed);
    TAGI_CUDA_RETURN_IF_ERROR(kernels::SampleStatistics(l, io.in.mu, io.in.var, io.scratch,
                                                        Doubles(io), ctx.stream, act));
    TAGI_CUDA_RETURN_IF_ERROR(kernels::LayerNormForward(
        l, io.in.mu, io.in.var, io.scratch, eps_, io.params[0].mu, io.params[0].var, BetaMu(io),
        BetaVar(io), io.out.mu, io.out.var, ctx.stream, act));
    return absl::OkStatus();
  }
};

#if TAGI_HAVE_CUDNN
// The most workspace one convolution's cuDNN algorithms may take when the
// engine plans (the CPU layer's im2col columns are bounded at 1 GiB).
constexpr size_t kCudnnWorkspaceLimit = size_t{512} << 20;

// Blocks: weights [out][in][k][k], then biases [out] when bias is on.
// Derived: mu_w^2 then mu_w^2 + var_w. The weights' deltas are deferred
// (DefersVarianceFactor), as LINEAR's: the backward-filter calls leave out
// var_w.
//
// cuDNN pads symmetrically; a layer padded at the bottom and right only
// (BOTTOM_RIGHT) runs on a zero-padded copy of its input (and crops its
// input innovations back). Workspace: [squares][padded copies][cuDNN]
// [sum partials], each 256-byte aligned; squares and copies hold one
// input-sized tensor each (one for a symmetric layer, four otherwise: mu,
// var or innovations, squares).
class CudaConv2d final : public CudaLayer {
 public:
  explicit CudaConv2d(const spec::PlannedLayer& planned)
      : g_(WindowGeometry::Of(planned)),
        out_(planned.spec.out),
        bias_(planned.spec.bias),
        asymmetric_(planned.spec.padding_type != tagi::v1::Layer::SYMMETRIC &&
                    planned.spec.padding > 0) {
    // The padded input: exactly the rows and columns the windows reach.
    padded_h_ = asymmetric_ ? (g_.out_height - 1) * g_.stride + g_.kernel : g_.height;
    padded_w_ = asymmetric_ ? (g_.out_width - 1) * g_.stride + g_.kernel : g_.width;
  }

  bool NeedsCudnn() const override { return true; }
  bool DefersVarianceFactor(size_t block) const override { return block == 0; }

  absl::StatusOr<size_t> Prepare(const CudaContext& ctx, size_t max_batch) override {
    if (conv_ == nullptr) {
      if (ctx.dnn == nullptr) return absl::FailedPreconditionError("Conv2d: no cuDNN handle");
      ConvShape shape;
      shape.channels = static_cast<int>(g_.channels);
      shape.height = static_cast<int>(padded_h_);
      shape.width = static_cast<int>(padded_w_);
      shape.out_channels = static_cast<int>(out_);
      shape.kernel = static_cast<int>(g_.kernel);
      shape.stride = static_cast<int>(g_.stride);
      shape.pad = asymmetric_ ? 0 : static_cast<int>(g_.offset);
      TAGI_ASSIGN_OR_RETURN(conv_, CudnnConvolution::Create(*ctx.dnn, shape));
    }
    TAGI_ASSIGN_OR_RETURN(const size_t cudnn, conv_->Prepare(max_batch, kCudnnWorkspaceLimit));
    return Own(max_batch) + AlignUp(cudnn) + Sums(max_batch);
  }

  absl::Status Forward(const CudaContext& ctx, const CudaLayerIo& io, Mode) override {
    TAGI_ASSIGN_OR_RETURN(const Work w, Layout(ctx, io));
    const size_t n = InputFloats(io.batch);
    const float* mu_a = io.in.mu;
    const float* var_a = io.in.var;
    if (asymmetric_) {
      TAGI_RETURN_IF_ERROR(Pad(ctx, io.batch, io.in.mu, w.copy_a));
      if (!io.input_is_data) TAGI_RETURN_IF_ERROR(Pad(ctx, io.batch, io.in.var, w.copy_b));
      mu_a = w.copy_a;
      var_a = w.copy_b;
    }
    TAGI_CUDA_RETURN_IF_ERROR(kernels::Square(mu_a, n, w.squares, ctx.stream));
    const GaussianView wt = io.params[0];
    // mu_z = mu_w * mu_a
    TAGI_RETURN_IF_ERROR(conv_->Forward(mu_a, wt.mu, 0.0f, io.out.mu, w.cudnn, w.cudnn_bytes));
    // var_z = (mu_w^2 + var_w) * var_a + var_w * mu_a^2; the data's
    // variance is zero, which skips the first convolution.
    float beta = 0.0f;
    if (!io.input_is_data) {
      TAGI_RETURN_IF_ERROR(conv_->Forward(var_a, io.derived + weights(), 0.0f, io.out.var,
                                          w.cudnn, w.cudnn_bytes));
      beta = 1.0f;
    }
    TAGI_RETURN_IF_ERROR(
        conv_->Forward(w.squares, wt.var, beta, io.out.var, w.cudnn, w.cudnn_bytes));
    if (bias_) {
      TAGI_CUDA_RETURN_IF_ERROR(kernels::AddChannelBias(Outputs(io.batch), io.params[1].mu,
                                                        io.params[1].var, io.out.mu, io.out.var,
                                                        ctx.stream));
    }
    return absl::OkStatus();
  }

  absl::Status Backward(const CudaContext& ctx, const CudaLayerIo& io) override {
    TAGI_ASSIGN_OR_RETURN(const Work w, Layout(ctx, io));
    const float* mu_a = io.in.mu;
    if (asymmetric_) {
      TAGI_RETURN_IF_ERROR(Pad(ctx, io.batch, io.in.mu, w.copy_a));
      mu_a = w.copy_a;
    }
    TAGI_CUDA_RETURN_IF_ERROR(
        kernels::Square(mu_a, InputFloats(io.batch), w.squares, ctx.stream));
    const float* dmu = io.delta_out.mu;
    const float* dvar = io.delta_out.var;
    // delta_mu_w = var_w * (dmu (x) mu_a), delta_var_w = var_w^2 * (dvar (x)
    // mu_a^2), without their var_w factor (deferred).
    TAGI_RETURN_IF_ERROR(
        conv_->BackwardFilter(mu_a, dmu, io.deltas[0].mu, w.cudnn, w.cudnn_bytes));
    TAGI_RETURN_IF_ERROR(
        conv_->BackwardFilter(w.squares, dvar, io.deltas[0].var, w.cudnn, w.cudnn_bytes));
    if (bias_) {
      TAGI_CUDA_RETURN_IF_ERROR(kernels::ChannelBiasDeltas(Outputs(io.batch), dmu, dvar,
                                                           io.params[1].var, io.deltas[1].mu,
                                                           io.deltas[1].var, w.sums, ctx.stream));
    }
    if (io.delta_in.mu == nullptr) return absl::OkStatus();
    // The innovations of the input: the transposed convolutions with mu_w
    // and mu_w^2.
    float* dx_mu = asymmetric_ ? w.copy_b : io.delta_in.mu;
    float* dx_var = asymmetric_ ? w.copy_c : io.delta_in.var;
    TAGI_RETURN_IF_ERROR(conv_->BackwardData(io.params[0].mu, dmu, dx_mu, w.cudnn, w.cudnn_bytes));
    TAGI_RETURN_IF_ERROR(conv_->BackwardData(io.derived, dvar, dx_var, w.cudnn, w.cudnn_bytes));
    if (asymmetric_) {
      TAGI_RETURN_IF_ERROR(Crop(ctx, io.batch, dx_mu, io.delta_in.mu));
      TAGI_RETURN_IF_ERROR(Crop(ctx, io.batch, dx_var, io.delta_in.var));
    }
    return absl::OkStatus();
  }

  absl::Status Refresh(const CudaContext& ctx, const CudaLayerIo& io) override {
    TAGI_CUDA_RETURN_IF_ERROR(kernels::RefreshDerived(io.params[0].mu, io.params[0].var, weights(),
                                                      io.derived, io.derived + weights(),
                                                      ctx.stream));
    return absl::OkStatus();
  }

  // Weights fused with their pending var_w factor, the reduction's scale and
  // the refresh of the derived buffers; biases with the scale.
  absl::Status ApplyStep(const CudaContext& ctx, const CudaLayerIo& io, float inv_cap,
                         float variance_floor, const PendingFactors& pending) override {
    return WeightsAndBiasesStep(ctx, io, weights(), bias_ ? out_ : 0, inv_cap, variance_floor,
                                pending);
  }

 private:
  struct Work {
    float* squares = nullptr;
    float* copy_a = nullptr;
    float* copy_b = nullptr;
    float* copy_c = nullptr;
    void* cudnn = nullptr;
    size_t cudnn_bytes = 0;
    double* sums = nullptr;
  };

  size_t weights() const { return out_ * g_.channels * g_.kernel * g_.kernel; }
  // Floats of the (padded) input of `batch` samples.
  size_t InputFloats(size_t batch) const { return batch * g_.channels * padded_h_ * padded_w_; }
  size_t Own(size_t batch) const { return (asymmetric_ ? 4 : 1) * FloatBytes(InputFloats(batch)); }
  size_t Sums(size_t batch) const {
    return bias_ ? DoubleBytes(kernels::SumWorkspaceDoubles(out_, batch * g_.out_size())) : 0;
  }
  kernels::ChannelLayout Outputs(size_t batch) const { return {batch, out_, g_.out_size()}; }

  // The workspace of a call over io.batch samples; the cuDNN algorithms
  // for that batch are chosen within what is left.
  absl::StatusOr<Work> Layout(const CudaContext& ctx, const CudaLayerIo& io) {
    const size_t own = Own(io.batch) + Sums(io.batch);
    if (own > ctx.workspace_bytes) {
      return absl::InternalError(absl::StrCat("Conv2d: workspace of ", ctx.workspace_bytes,
                                              " bytes, ", own, " needed"));
    }
    TAGI_ASSIGN_OR_RETURN(const size_t cudnn, conv_->Prepare(io.batch, ctx.workspace_bytes - own));
    auto* base = reinterpret_cast<char*>(io.workspace);
    const size_t tensor = FloatBytes(InputFloats(io.batch));
    Work w;
    w.squares = reinterpret_cast<float*>(base);
    if (asymmetric_) {
      w.copy_a = reinterpret_cast<float*>(base + tensor);
      w.copy_b = reinterpret_cast<float*>(base + 2 * tensor);
      w.copy_c = reinterpret_cast<float*>(base + 3 * tensor);
    }
    w.cudnn = base + Own(io.batch);
    w.cudnn_bytes = ctx.workspace_bytes - own;
    w.sums = reinterpret_cast<double*>(base + Own(io.batch) + AlignUp(cudnn));
    if (Own(io.batch) + AlignUp(cudnn) + Sums(io.batch) > ctx.workspace_bytes) {
      return absl::InternalError("Conv2d: the workspace does not hold cuDNN's share");
    }
    w.cudnn_bytes = cudnn;
    return w;
  }

  absl::Status Pad(const CudaContext& ctx, size_t batch, const float* src, float* dst) const {
    TAGI_CUDA_RETURN_IF_ERROR(kernels::PadOrCrop(src, batch * g_.channels, g_.height, g_.width,
                                                 dst, padded_h_, padded_w_, ctx.stream));
    return absl::OkStatus();
  }
  absl::Status Crop(const CudaContext& ctx, size_t batch, const float* src, float* dst) const {
    TAGI_CUDA_RETURN_IF_ERROR(kernels::PadOrCrop(src, batch * g_.channels, padded_h_, padded_w_,
                                                 dst, g_.height, g_.width, ctx.stream));
    return absl::OkStatus();
  }

  WindowGeometry g_;
  size_t out_;
  bool bias_;
  bool asymmetric_;
  size_t padded_h_ = 0;
  size_t padded_w_ = 0;
  std::unique_ptr<CudnnConvolution> conv_;
};
#endif  // TAGI_HAVE_CUDNN

}  // namespace

void RegisterCudaImageLayers(CudaLayerRegistry& r) {
  using Made = absl::StatusOr<std::unique_ptr<CudaLayer>>;
  r.Add(tagi::v1::Layer::CONV2D, [](const spec::PlannedLayer& p) -> Made {
#if TAGI_HAVE_CUDNN
    return std::make_unique<CudaConv2d>(p);
#else
    return absl::UnimplementedError(absl::StrCat(
        p.path, ": ", spec::KindName(p.spec.kind),
        " layers need cuDNN on CUDA, which this build was made without; run this job with "
        "device \"cpu\" or rebuild where cudnn.h is found"));
#endif
  });
  r.Add(tagi::v1::Layer::AVG_POOL2D,
        [](const spec::PlannedLayer& p) -> Made { return std::make_unique<CudaAvgPool>(p); });
  r.Add(tagi::v1::Layer::MAX_POOL2D,
        [](const spec::PlannedLayer& p) -> Made { return std::make_unique<CudaMaxPool>(p); });
  r.Add(tagi::v1::Layer::BATCH_NORM,
        [](const spec::PlannedLayer& p) -> Made { return std::make_unique<CudaBatchNorm>(p); });
  r.Add(tagi::v1::Layer::LAYER_NORM,
        [](const spec::PlannedLayer& p) -> Made { return std::make_unique<CudaLayerNorm>(p); });
}

}  // namespace tagi::engine::cuda
