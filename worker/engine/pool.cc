#include "worker/engine/pool.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include "worker/engine/cpu_layers.h"

namespace tagi::engine {
namespace {

// The cells of the image inside window (y, x) along one axis: [lo, hi).
struct Span {
  size_t lo = 0;
  size_t hi = 0;
};
Span Cells(size_t o, size_t stride, size_t kernel, size_t offset, size_t size) {
  const size_t start = o * stride;  // in padded coordinates
  const size_t lo = std::max(start, offset) - offset;
  const size_t hi = std::min(start + kernel, size + offset) - offset;
  return {lo, std::max(lo, hi)};
}

// The windows of one (sample, channel) plane.
template <typename F>
void WindowsOfPlane(const WindowGeometry& g, size_t plane, F& f) {
  for (size_t y = 0; y < g.out_height; ++y) {
    const Span rows = Cells(y, g.stride, g.kernel, g.offset, g.height);
    for (size_t x = 0; x < g.out_width; ++x) {
      const Span cols = Cells(x, g.stride, g.kernel, g.offset, g.width);
      f(plane * g.in_size(), plane * g.out_size() + y * g.out_width + x, rows, cols);
    }
  }
}

// Calls f(plane offset of the input plane, output cell index, rows, cols)
// for every window of every (sample, channel) plane, the planes split over
// the team (each window reads and writes only its own plane).
template <typename F>
void ForEachWindow(const WindowGeometry& g, size_t batch, ThreadTeam* team, F&& f) {
  ParallelFor(team, batch * g.channels, 2, [&](size_t first, size_t last) {
    for (size_t plane = first; plane < last; ++plane) {
      WindowsOfPlane(g, plane, f);
    }
  });
}

}  // namespace

void AvgPool2d::Forward(const LayerIo& io, Mode /*mode*/) {
  const float inv_k = 1.0f / static_cast<float>(g_.kernel * g_.kernel);
  ForEachWindow(g_, io.batch, io.team, [&](size_t in, size_t out, Span rows, Span cols) {
    float mu = 0.0f;
    float var = 0.0f;
    for (size_t r = rows.lo; r < rows.hi; ++r) {
      for (size_t t = cols.lo; t < cols.hi; ++t) {
        mu += io.in.mu[in + r * g_.width + t];
        var += io.in.var[in + r * g_.width + t];
      }
    }
    io.out.mu[out] = mu * inv_k;
    io.out.var[out] = var * inv_k * inv_k;
  });
}

void AvgPool2d::Backward(const LayerIo& io) {
  if (io.delta_in.mu == nullptr) return;
  const size_t n = io.batch * g_.channels * g_.in_size();
  std::fill_n(io.delta_in.mu, n, 0.0f);
  std::fill_n(io.delta_in.var, n, 0.0f);
  const float inv_k = 1.0f / static_cast<float>(g_.kernel * g_.kernel);
  ForEachWindow(g_, io.batch, io.team, [&](size_t in, size_t out, Span rows, Span cols) {
    const float dmu = io.delta_out.mu[out] * inv_k;
    const float dvar = io.delta_out.var[out] * inv_k * inv_k;
    for (size_t r = rows.lo; r < rows.hi; ++r) {
      for (size_t t = cols.lo; t < cols.hi; ++t) {
        io.delta_in.mu[in + r * g_.width + t] += dmu;
        io.delta_in.var[in + r * g_.width + t] += dvar;
      }
    }
  });
}

// The scratch holds, per output cell, the index within its input plane of
// the cell it took, as the bits of a float.
void MaxPool2d::Forward(const LayerIo& io, Mode /*mode*/) {
  ForEachWindow(g_, io.batch, io.team, [&](size_t in, size_t out, Span rows, Span cols) {
    size_t best = in + rows.lo * g_.width + cols.lo;
    float best_mu = -std::numeric_limits<float>::infinity();
    for (size_t r = rows.lo; r < rows.hi; ++r) {
      for (size_t t = cols.lo; t < cols.hi; ++t) {
        const size_t i = in + r * g_.width + t;
        if (io.in.mu[i] > best_mu) {  // strictly: ties keep the first
          best_mu = io.in.mu[i];
          best = i;
        }
      }
    }
    io.out.mu[out] = io.in.mu[best];
    io.out.var[out] = io.in.var[best];
    io.scratch[out] = std::bit_cast<float>(static_cast<uint32_t>(best - in));
  });
}

void MaxPool2d::Backward(const LayerIo& io) {
  if (io.delta_in.mu == nullptr) return;
  const size_t n = io.batch * g_.channels * g_.in_size();
  std::fill_n(io.delta_in.mu, n, 0.0f);
  std::fill_n(io.delta_in.var, n, 0.0f);
  ParallelFor(io.team, io.batch * g_.channels, 2, [&](size_t first, size_t last) {
    for (size_t o = first * g_.out_size(); o < last * g_.out_size(); ++o) {
      const size_t i = o / g_.out_size() * g_.in_size() + std::bit_cast<uint32_t>(io.scratch[o]);
      io.delta_in.mu[i] += io.delta_out.mu[o];
      io.delta_in.var[i] += io.delta_out.var[o];
    }
  });
}

using Made = absl::StatusOr<std::unique_ptr<Layer>>;

void RegisterPoolLayers(CpuLayerRegistry& r) {
  r.Add(tagi::v1::Layer::AVG_POOL2D,
        [](const spec::PlannedLayer& p) -> Made { return std::make_unique<AvgPool2d>(p); });
  r.Add(tagi::v1::Layer::MAX_POOL2D,
        [](const spec::PlannedLayer& p) -> Made { return std::make_unique<MaxPool2d>(p); });
}

}  // namespace tagi::engine
