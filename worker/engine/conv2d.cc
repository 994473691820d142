#include "worker/engine/conv2d.h"

#include <algorithm>
#include <cstring>

#include "worker/engine/blas.h"
#include "worker/engine/cpu_layers.h"
#include "worker/engine/direct_conv.h"

namespace tagi::engine {
namespace {

// The output cells [lo, hi) of one axis whose window element `e` reads a
// cell inside the image: 0 <= o s + e - q < size.
struct Range {
  size_t lo = 0;
  size_t hi = 0;
};
Range Valid(size_t out, size_t size, size_t stride, size_t e, size_t offset) {
  // o s + e >= q  <=>  o >= ceil((q - e) / s) when e < q.
  const size_t lo = e >= offset ? 0 : (offset - e + stride - 1) / stride;
  // o s + e - q <= size - 1  <=>  o <= (size - 1 + q - e) / s.
  if (size + offset < e + 1) return {0, 0};
  const size_t hi = std::min(out, (size - 1 + offset - e) / stride + 1);
  return {std::min(lo, hi), hi};
}

// out = in * in over `rows` rows of `ld` columns, the rows split over the team.
void Square(ThreadTeam* team, const float* in, float* out, size_t rows, size_t ld) {
  ParallelFor(team, rows, 2, [&](size_t r0, size_t r1) {
    for (size_t i = r0 * ld; i < r1 * ld; ++i) out[i] = in[i] * in[i];
  });
}

}  // namespace

WindowGeometry WindowGeometry::Of(const spec::PlannedLayer& planned) {
  WindowGeometry g;
  g.channels = planned.in.c;
  g.height = planned.in.h;
  g.width = planned.in.w;
  g.out_height = planned.out.h;
  g.out_width = planned.out.w;
  g.kernel = planned.spec.kernel;
  g.stride = planned.spec.stride;
  g.offset = spec::PaddingOffset(planned.spec);
  return g;
}

void Im2Col(const WindowGeometry& g, const float* image, float* col, size_t ld) {
  const size_t ho = g.out_height, wo = g.out_width, k = g.kernel, s = g.stride;
  for (size_t c = 0; c < g.channels; ++c) {
    const float* plane = image + c * g.in_size();
    for (size_t i = 0; i < k; ++i) {
      const Range ry = Valid(ho, g.height, s, i, g.offset);
      for (size_t j = 0; j < k; ++j) {
        const Range rx = Valid(wo, g.width, s, j, g.offset);
        float* row = col + ((c * k + i) * k + j) * ld;
        std::fill(row, row + ry.lo * wo, 0.0f);
        for (size_t y = ry.lo; y < ry.hi; ++y) {
          float* out = row + y * wo;
          // Rows and columns are inside the image here (x >= lo, y >= lo).
          const float* in = plane + (y * s + i - g.offset) * g.width;
          std::fill(out, out + rx.lo, 0.0f);
          if (s == 1 && rx.hi > rx.lo) {
            std::memcpy(out + rx.lo, in + rx.lo + j - g.offset, (rx.hi - rx.lo) * sizeof(float));
          } else {
            for (size_t x = rx.lo; x < rx.hi; ++x) out[x] = in[x * s + j - g.offset];
          }
          std::fill(out + rx.hi, out + wo, 0.0f);
        }
        std::fill(row + ry.hi * wo, row + ho * wo, 0.0f);
      }
    }
  }
}

void Col2Im(const WindowGeometry& g, const float* col, size_t ld, float* image) {
  const size_t ho = g.out_height, wo = g.out_width, k = g.kernel, s = g.stride;
  std::fill(image, image + g.channels * g.in_size(), 0.0f);
  for (size_t c = 0; c < g.channels; ++c) {
    float* plane = image + c * g.in_size();
    for (size_t i = 0; i < k; ++i) {
      const Range ry = Valid(ho, g.height, s, i, g.offset);
      for (size_t j = 0; j < k; ++j) {
        const Range rx = Valid(wo, g.width, s, j, g.offset);
        const float* row = col + ((c * k + i) * k + j) * ld;
        for (size_t y = ry.lo; y < ry.hi; ++y) {
          const float* in = row + y * wo;
          float* out = plane + (y * s + i - g.offset) * g.width;
          for (size_t x = rx.lo; x < rx.hi; ++x) out[x * s + j - g.offset] += in[x];
        }
      }
    }
  }
}

Conv2d::Conv2d(const spec::PlannedLayer& planned, ConvProducts products)
    : g_(WindowGeometry::Of(planned)),
      out_(planned.spec.out),
      rows_(g_.channels * g_.kernel * g_.kernel),
      bias_(planned.spec.bias) {
  if (products == ConvProducts::kDirect) {
    // The plan's workspace holds at least this layer's need.
    const uint64_t workspace = spec::Conv2dRules().Workspace(planned.spec, planned.in);
    direct_ = DirectConv::Make(g_, out_, bias_, static_cast<size_t>(workspace));
  }
}

Conv2d::~Conv2d() = default;

bool Conv2d::direct() const { return direct_ != nullptr; }

void Conv2d::Refresh(const LayerIo& io) {
  RefreshWeightSquares({io.params[0].mu, io.params[0].var}, weights(), io.derived);
}

void Conv2d::Forward(const LayerIo& io, Mode /*mode*/) {
  if (direct_) {
    direct_->Forward(io);
    return;
  }
  const size_t p = g_.out_size();
  const size_t in_n = g_.channels * g_.in_size();
  const size_t out_n = out_ * p;
  const size_t chunk = std::min(io.batch, static_cast<size_t>(spec::ConvChunk(p)));
  const size_t ld = chunk * p;
  const GaussianView w = io.params[0];
  float* col_mu = io.workspace;
  float* col_sq = col_mu + rows_ * ld;
  float* col_var = col_sq + rows_ * ld;
  float* z_mu = col_var + rows_ * ld;
  float* z_var = z_mu + out_ * ld;
  for (size_t first = 0; first < io.batch; first += chunk) {
    const size_t m = std::min(chunk, io.batch - first);
    const size_t n = m * p;  // columns in use (ld stays the row stride)
    ParallelFor(io.team, m, 2, [&](size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; ++b) {
        Im2Col(g_, io.in.mu + (first + b) * in_n, col_mu + b * p, ld);
        if (!io.input_is_data) Im2Col(g_, io.in.var + (first + b) * in_n, col_var + b * p, ld);
      }
    });
    Square(io.team, col_mu, col_sq, rows_, ld);
    // mu_z = mu_w * mu_a
    Gemm(Trans::kNo, Trans::kNo, out_, n, rows_, w.mu, rows_, col_mu, ld, 0.0f, z_mu, ld, io.team);
    // var_z = (mu_w^2 + var_w) * var_a + var_w * mu_a^2; the data's variance
    // is zero, which skips the first product.
    float beta = 0.0f;
    if (!io.input_is_data) {
      Gemm(Trans::kNo, Trans::kNo, out_, n, rows_, io.derived + weights(), rows_, col_var, ld, 0.0f,
           z_var, ld, io.team);
      beta = 1.0f;
    }
    Gemm(Trans::kNo, Trans::kNo, out_, n, rows_, w.var, rows_, col_sq, ld, beta, z_var, ld,
         io.team);
    // [out][sample, position] -> [sample][out][position], plus the biases.
    ParallelFor(io.team, m, 2, [&](size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; ++b) {
        for (size_t o = 0; o < out_; ++o) {
          const float mb = bias_ ? io.params[1].mu[o] : 0.0f;
          const float vb = bias_ ? io.params[1].var[o] : 0.0f;
          const float* zm = z_mu + o * ld + b * p;
          const float* zv = z_var + o * ld + b * p;
          float* mu_z = io.out.mu + (first + b) * out_n + o * p;
          float* var_z = io.out.var + (first + b) * out_n + o * p;
          for (size_t i = 0; i < p; ++i) {
            mu_z[i] = zm[i] + mb;
            var_z[i] = zv[i] + vb;
          }
        }
      }
    });
  }
}

// The seven products on im2col columns; the weight deltas without their
// prior factors.
void Conv2d::Im2colBackward(const LayerIo& io) {
  const size_t p = g_.out_size();
  const size_t in_n = g_.channels * g_.in_size();
  const size_t out_n = out_ * p;
  const size_t chunk = std::min(io.batch, static_cast<size_t>(spec::ConvChunk(p)));
  const size_t ld = chunk * p;
  const GaussianView w = io.params[0];
  const GaussianView dw = io.deltas[0];
  float* col_a = io.workspace;
  float* col_b = col_a + rows_ * ld;
  float* dz_mu = col_b + 2 * rows_ * ld;
  float* dz_var = dz_mu + out_ * ld;
  for (size_t first = 0; first < io.batch; first += chunk) {
    const size_t m = std::min(chunk, io.batch - first);
    const size_t n = m * p;
    // The output innovations as [out][sample, position], and the columns.
    ParallelFor(io.team, m, 2, [&](size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; ++b) {
        for (size_t o = 0; o < out_; ++o) {
          std::memcpy(dz_mu + o * ld + b * p, io.delta_out.mu + (first + b) * out_n + o * p,
                      p * sizeof(float));
          std::memcpy(dz_var + o * ld + b * p, io.delta_out.var + (first + b) * out_n + o * p,
                      p * sizeof(float));
        }
        Im2Col(g_, io.in.mu + (first + b) * in_n, col_a + b * p, ld);
      }
    });
    // Weight deltas, summed over samples and positions against the same
    // prior: var_w * (delta_mu_z mu_a^T), var_w^2 * (delta_var_z (mu_a^2)^T)
    // (the factors are applied after the sum).
    const float beta = first == 0 ? 0.0f : 1.0f;
    Square(io.team, col_a, col_b, rows_, ld);
    Gemm(Trans::kNo, Trans::kYes, out_, rows_, n, dz_mu, ld, col_a, ld, beta, dw.mu, rows_,
         io.team);
    Gemm(Trans::kNo, Trans::kYes, out_, rows_, n, dz_var, ld, col_b, ld, beta, dw.var, rows_,
         io.team);
    if (io.delta_in.mu == nullptr) continue;
    // Innovations of the input: the transposed convolutions of the output
    // innovations with mu_w and mu_w^2, scattered back by col2im.
    Gemm(Trans::kYes, Trans::kNo, rows_, n, out_, w.mu, rows_, dz_mu, ld, 0.0f, col_a, ld, io.team);
    Gemm(Trans::kYes, Trans::kNo, rows_, n, out_, io.derived, rows_, dz_var, ld, 0.0f, col_b, ld,
         io.team);
    ParallelFor(io.team, m, 2, [&](size_t b0, size_t b1) {
      for (size_t b = b0; b < b1; ++b) {
        Col2Im(g_, col_a + b * p, ld, io.delta_in.mu + (first + b) * in_n);
        Col2Im(g_, col_b + b * p, ld, io.delta_in.var + (first + b) * in_n);
      }
    });
  }
}

void Conv2d::Backward(const LayerIo& io) {
  if (direct_) {
    direct_->BackwardWeights(io);
    if (io.delta_in.mu != nullptr) direct_->BackwardData(io);
  } else {
    Im2colBackward(io);
  }
  // The weight deltas' prior factors, applied after the sums.
  const GaussianView w = io.params[0];
  const GaussianView dw = io.deltas[0];
  {
    const float* __restrict var_w = w.var;
    float* __restrict dmw = dw.mu;
    float* __restrict dvw = dw.var;
    for (size_t i = 0; i < weights(); ++i) {
      dmw[i] *= var_w[i];
      dvw[i] *= var_w[i] * var_w[i];
    }
  }
  if (!bias_) return;
  const size_t p = g_.out_size();
  const size_t out_n = out_ * p;
  const GaussianView db = io.deltas[1];
  const float* var_b = io.params[1].var;
  for (size_t o = 0; o < out_; ++o) {
    float sum_mu = 0.0f;
    float sum_var = 0.0f;
    for (size_t b = 0; b < io.batch; ++b) {
      const float* dmu = io.delta_out.mu + b * out_n + o * p;
      const float* dvar = io.delta_out.var + b * out_n + o * p;
      for (size_t i = 0; i < p; ++i) {
        sum_mu += dmu[i];
        sum_var += dvar[i];
      }
    }
    db.mu[o] = var_b[o] * sum_mu;
    db.var[o] = var_b[o] * var_b[o] * sum_var;
  }
}

using Made = absl::StatusOr<std::unique_ptr<Layer>>;

void RegisterConv2dLayers(CpuLayerRegistry& r) {
  r.Add(tagi::v1::Layer::CONV2D,
        [](const spec::PlannedLayer& p) -> Made { return std::make_unique<Conv2d>(p); });
}

}  // namespace tagi::engine
