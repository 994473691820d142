#include "worker/engine/head_layers.h"

#include "worker/engine/activation.h"
#include "worker/engine/heads.h"
#include "worker/engine/cpu_layers.h"

namespace tagi::engine {

void SoftmaxActivation::Forward(const LayerIo& io, Mode /*mode*/) {
  const bool remax = kind_ == tagi::v1::Layer::REMAX;
  const size_t k = width_;
  ParallelFor(io.team, io.batch, kParallelMinElements / (k > 0 ? k : 1),
              [&](size_t begin, size_t end) {
                for (size_t b = begin; b < end; ++b) {
                  const size_t row = b * k;
                  if (remax) {
                    heads::RemaxRow(io.in.mu + row, io.in.var + row, k, io.out.mu + row,
                                    io.out.var + row, io.out_jcb + row);
                  } else {
                    heads::ClosedFormSoftmaxRow(io.in.mu + row, io.in.var + row, k,
                                                io.out.mu + row, io.out.var + row,
                                                io.out_jcb + row);
                  }
                }
              });
}

void SoftmaxActivation::Backward(const LayerIo& io) { JcbBackward(io, io.batch * width_); }

void EvenExpActivation::Forward(const LayerIo& io, Mode /*mode*/) {
  const size_t n = io.batch * width_;
  for (size_t i = 0; i < n; ++i) {
    const elementwise::Moments m = heads::EvenExp(i, io.in.mu[i], io.in.var[i]);
    io.out.mu[i] = m.mu;
    io.out.var[i] = m.var;
    io.out_jcb[i] = m.jcb;
  }
}

void EvenExpActivation::Backward(const LayerIo& io) { JcbBackward(io, io.batch * width_); }

using Made = absl::StatusOr<std::unique_ptr<Layer>>;

void RegisterHeadLayers(CpuLayerRegistry& r) {
  for (const spec::LayerKind kind :
       {tagi::v1::Layer::REMAX, tagi::v1::Layer::CLOSED_FORM_SOFTMAX}) {
    r.Add(kind, [](const spec::PlannedLayer& p) -> Made {
      return std::make_unique<SoftmaxActivation>(p.spec.kind, p.in.size());
    });
  }
  r.Add(tagi::v1::Layer::EVEN_EXP, [](const spec::PlannedLayer& p) -> Made {
    return std::make_unique<EvenExpActivation>(p.in.size());
  });
}

}  // namespace tagi::engine
