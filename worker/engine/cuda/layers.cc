// The CUDA layers of layers.h: LINEAR (products on cuBLAS, elementwise
// stages in kernels.h) and the activations, each the GPU form of its CPU
// layer (linear.cc, activation.cc), which cites the equations.
#include "worker/engine/cuda/layers.h"

#include "common/status.h"
#include "worker/engine/architecture.h"
#include "worker/engine/cuda/cublas_gemm.h"
#include "worker/engine/cuda/cuda_check.h"
#include "worker/engine/cuda/kernels.h"

namespace tagi::engine::cuda {
namespace {

// Blocks: weights [out][in] row-major, then biases [out]. Derived: mu_w^2
// then mu_w^2 + var_w. Scratch: mu_a^2 of the batch. The weights' deltas
// are deferred (DefersVarianceFactor): the products leave out var_w.
class CudaLinear final : public CudaLayer {
 public:
  CudaLinear(size_t in, size_t out) : in_(in), out_(out) {}

  absl::Status Forward(const CudaContext& ctx, const CudaLayerIo& io, Mode /*mode*/) override {
    const CublasHandle& h = *ctx.blas;
    const size_t batch = io.batch;
    const GaussianView w = io.params[0];
    const GaussianView b = io.params[1];
    float* sq = io.scratch;
    // Start from the biases, then accumulate the products (beta = 1).
    TAGI_CUDA_RETURN_IF_ERROR(
        kernels::BroadcastBias(b.mu, b.var, batch, out_, io.out.mu, io.out.var, ctx.stream));
    TAGI_CUDA_RETURN_IF_ERROR(kernels::Square(io.in.mu, batch * in_, sq, ctx.stream));
    // mu_z = mu_a mu_w^T + mu_b
    TAGI_RETURN_IF_ERROR(Gemm(h, Trans::kNo, Trans::kYes, batch, out_, in_, io.in.mu, in_, w.mu,
                              in_, 1.0f, io.out.mu, out_));
    // var_z = var_a (mu_w^2 + var_w)^T + mu_a^2 var_w^T + var_b; the data's
    // variance is zero, which skips the first product.
    if (!io.input_is_data) {
      TAGI_RETURN_IF_ERROR(Gemm(h, Trans::kNo, Trans::kYes, batch, out_, in_, io.in.var, in_,
                                io.derived + weights(), in_, 1.0f, io.out.var, out_));
    }
    return Gemm(h, Trans::kNo, Trans::kYes, batch, out_, in_, sq, in_, w.var, in_, 1.0f, io.out.var,
                out_);
  }

  absl::Status Backward(const CudaContext& ctx, const CudaLayerIo& io) override {
    const CublasHandle& h = *ctx.blas;
    const size_t batch = io.batch;
    const float* dmu = io.delta_out.mu;
    const float* dvar = io.delta_out.var;
    const GaussianView dw = io.deltas[0];
    const GaussianView db = io.deltas[1];
    // delta_mu_w = var_w * (dmu^T mu_a), delta_var_w = var_w^2 * (dvar^T
    // mu_a^2), without their var_w factor (deferred).
    TAGI_RETURN_IF_ERROR(Gemm(h, Trans::kYes, Trans::kNo, out_, in_, batch, dmu, out_, io.in.mu,
                              in_, 0.0f, dw.mu, in_));
    TAGI_RETURN_IF_ERROR(Gemm(h, Trans::kYes, Trans::kNo, out_, in_, batch, dvar, out_, io.scratch,
                              in_, 0.0f, dw.var, in_));
    TAGI_CUDA_RETURN_IF_ERROR(
        kernels::BiasDeltas(dmu, dvar, batch, out_, io.params[1].var, db.mu, db.var, ctx.stream));
    if (io.delta_in.mu == nullptr) return absl::OkStatus();
    // delta_mu_a = dmu mu_w, delta_var_a = dvar mu_w^2.
    TAGI_RETURN_IF_ERROR(Gemm(h, Trans::kNo, Trans::kNo, batch, in_, out_, dmu, out_,
                              io.params[0].mu, in_, 0.0f, io.delta_in.mu, in_));
    return Gemm(h, Trans::kNo, Trans::kNo, batch, in_, out_, dvar, out_, io.derived, in_, 0.0f,
                io.delta_in.var, in_);
  }

  absl::Status Refresh(const CudaContext& ctx, const CudaLayerIo& io) override {
    TAGI_CUDA_RETURN_IF_ERROR(kernels::RefreshDerived(io.params[0].mu, io.params[0].var, weights(),
                                                      io.derived, io.derived + weights(),
                                                      ctx.stream));
    return absl::OkStatus();
  }

  bool DefersVarianceFactor(size_t block) const override { return block == 0; }

  // Weights fused with their pending var_w factor, the reduction's scale and
  // the refresh of mu_w^2 and mu_w^2 + var_w; biases (their var_b factor is
  // applied in the backward pass) with the scale.
  absl::Status ApplyStep(const CudaContext& ctx, const CudaLayerIo& io, float inv_cap,
                         float variance_floor, const PendingFactors& pending) override {
    return WeightsAndBiasesStep(ctx, io, weights(), out_, inv_cap, variance_floor, pending);
  }

 private:
  size_t weights() const { return in_ * out_; }
  size_t in_;
  size_t out_;
};

// Backward of a layer that writes a jcb: the innovations of its n output
// units times jcb (means) and jcb^2 (variances), when the input takes any.
absl::Status JcbBackward(const CudaContext& ctx, const CudaLayerIo& io, size_t n) {
  if (io.delta_in.mu == nullptr) return absl::OkStatus();
  TAGI_CUDA_RETURN_IF_ERROR(kernels::ActivationBackward(io.out_jcb, io.delta_out.mu,
                                                        io.delta_out.var, n, io.delta_in.mu,
                                                        io.delta_in.var, ctx.stream));
  return absl::OkStatus();
}

// Elementwise: moments and jcb forward, jcb (jcb^2) on the innovations back.
class CudaActivation final : public CudaLayer {
 public:
  CudaActivation(LayerKind kind, float slope, size_t width)
      : kind_(static_cast<int>(kind)), slope_(slope), width_(width) {}

  absl::Status Forward(const CudaContext& ctx, const CudaLayerIo& io, Mode /*mode*/) override {
    TAGI_CUDA_RETURN_IF_ERROR(kernels::ActivationForward(kind_, slope_, io.in.mu, io.in.var,
                                                         io.batch * width_, io.out.mu, io.out.var,
                                                         io.out_jcb, ctx.stream));
    return absl::OkStatus();
  }

  absl::Status Backward(const CudaContext& ctx, const CudaLayerIo& io) override {
    return JcbBackward(ctx, io, io.batch * width_);
  }

 private:
  int kind_;  // elementwise::ActivationKind (the proto's numbers, asserted in activation.cc)
  float slope_;
  size_t width_;
};

// The output activations of the heads (heads.h): REMAX and
// CLOSED_FORM_SOFTMAX a sample at a time, EVEN_EXP a unit at a time; jcb
// (jcb^2) on the innovations back, as any activation.
class CudaHeadActivation final : public CudaLayer {
 public:
  CudaHeadActivation(LayerKind kind, size_t width) : kind_(kind), width_(width) {}

  absl::Status Forward(const CudaContext& ctx, const CudaLayerIo& io, Mode /*mode*/) override {
    if (kind_ == tagi::v1::Layer::EVEN_EXP) {
      TAGI_CUDA_RETURN_IF_ERROR(kernels::EvenExpForward(io.in.mu, io.in.var, io.batch * width_,
                                                        io.out.mu, io.out.var, io.out_jcb,
                                                        ctx.stream));
    } else {
      TAGI_CUDA_RETURN_IF_ERROR(kernels::SoftmaxForward(
          kind_ == tagi::v1::Layer::REMAX, io.in.mu, io.in.var, io.batch, width_, io.out.mu,
          io.out.var, io.out_jcb, ctx.stream));
    }
    return absl::OkStatus();
  }

  absl::Status Backward(const CudaContext& ctx, const CudaLayerIo& io) override {
    return JcbBackward(ctx, io, io.batch * width_);
  }

 private:
  LayerKind kind_;
  size_t width_;
};

}  // namespace

absl::Status WeightsAndBiasesStep(const CudaContext& ctx, const CudaLayerIo& io, size_t weights,
                                  size_t biases, float inv_cap, float variance_floor,
                                  const PendingFactors& pending) {
  const GaussianView w = io.params[0];
  const GaussianView dw = io.deltas[0];
  TAGI_CUDA_RETURN_IF_ERROR(kernels::CappedStep(inv_cap, variance_floor, weights, w.mu, w.var,
                                                dw.mu, dw.var, pending.variance ? w.var : nullptr,
                                                pending.scale, io.derived, io.derived + weights,
                                                ctx.stream));
  if (biases == 0) return absl::OkStatus();
  const GaussianView b = io.params[1];
  const GaussianView db = io.deltas[1];
  TAGI_CUDA_RETURN_IF_ERROR(kernels::CappedStep(inv_cap, variance_floor, biases, b.mu, b.var, db.mu,
                                                db.var, nullptr, pending.scale, nullptr, nullptr,
                                                ctx.stream));
  return absl::OkStatus();
}

absl::Status CudaLayer::ForwardAbsorbing(const CudaContext&, const CudaLayerIo&, const AbsorbedIo&,
                                         Mode) {
  return absl::InternalError("this CUDA layer kind does not absorb activations");
}

absl::Status CudaLayer::BackwardAbsorbing(const CudaContext&, const CudaLayerIo&,
                                          const AbsorbedIo&) {
  return absl::InternalError("this CUDA layer kind does not absorb activations");
}

absl::Status CudaLayer::ApplyStep(const CudaContext& ctx, const CudaLayerIo& io, float inv_cap,
                                  float variance_floor, const PendingFactors& pending) {
  for (size_t k = 0; k < io.num_blocks; ++k) {
    const GaussianView p = io.params[k];
    const GaussianView d = io.deltas[k];
    const float* var_scale = pending.variance && DefersVarianceFactor(k) ? p.var : nullptr;
    TAGI_CUDA_RETURN_IF_ERROR(kernels::CappedStep(inv_cap, variance_floor, io.block_size[k], p.mu,
                                                  p.var, d.mu, d.var, var_scale, pending.scale,
                                                  nullptr, nullptr, ctx.stream));
  }
  return Refresh(ctx, io);
}

namespace {
using Made = absl::StatusOr<std::unique_ptr<CudaLayer>>;
}  // namespace

void RegisterCudaLayers(CudaLayerRegistry& r) {
  r.Add(tagi::v1::Layer::LINEAR, [](const spec::PlannedLayer& p) -> Made {
    return std::make_unique<CudaLinear>(p.spec.in, p.spec.out);
  });
  for (const spec::LayerKind kind :
       {tagi::v1::Layer::RELU, tagi::v1::Layer::LEAKY_RELU, tagi::v1::Layer::SIGMOID,
        tagi::v1::Layer::TANH, tagi::v1::Layer::SOFTPLUS, tagi::v1::Layer::MIXTURE_RELU}) {
    r.Add(kind, [](const spec::PlannedLayer& p) -> Made {
      return std::make_unique<CudaActivation>(p.spec.kind, p.spec.slope, p.in.size());
    });
  }
  for (const spec::LayerKind kind : {tagi::v1::Layer::REMAX, tagi::v1::Layer::CLOSED_FORM_SOFTMAX,
                                     tagi::v1::Layer::EVEN_EXP}) {
    r.Add(kind, [](const spec::PlannedLayer& p) -> Made {
      return std::make_unique<CudaHeadActivation>(p.spec.kind, p.in.size());
    });
  }
}

const CudaLayerRegistry& CudaLayers() {
  // Built once, on first use, and never changed.
  static const CudaLayerRegistry* const registry = [] {
    auto* r = new CudaLayerRegistry("CUDA");
    RegisterCudaLayers(*r);
    RegisterCudaImageLayers(*r);
    return r;
  }();
  return *registry;
}

}  // namespace tagi::engine::cuda
